"""Change rows from a real server: assembled transactions → Arrow batches equal what was committed."""

from __future__ import annotations

import decimal

import psycopg
import pytest

from walspark.changes.assembly import TransactionAssembler
from walspark.changes.rows import ChangeRowBuilder
from walspark.source.sqlinterface import slot_changes

DDL = """
CREATE TABLE acct (id int PRIMARY KEY, owner text, balance numeric(12,2), note text);
ALTER TABLE acct ALTER COLUMN note SET STORAGE EXTERNAL;
CREATE PUBLICATION pub FOR TABLE acct;
"""


def create_source(conn: psycopg.Connection) -> None:
    conn.execute(DDL)
    conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")


def assemble(dsn: str, options: dict[str, str], *, work_mem: str | None = None, budget: int = 1 << 30):
    asm = TransactionAssembler(int(options["proto_version"]), memory_budget=budget)
    with psycopg.connect(dsn) as conn:
        if work_mem:
            conn.execute(f"SET logical_decoding_work_mem = '{work_mem}'")
        txns = [e for lsn, data in slot_changes(conn, "s", options) for e in asm.feed(lsn, data)]
    return asm, txns


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_rows_follow_commits_with_toast_unchanged_and_savepoint_rollback(pg18_dsn, binary):
    big = "x" * 300_000  # stored out of line (TOAST), so later updates send it as 'u'
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_source(conn)
        conn.execute("INSERT INTO acct VALUES (1, 'ann', 10.50, %s), (2, 'bob', 0, 'short')", (big,))
        with conn.transaction():
            conn.execute("UPDATE acct SET balance = balance + 1 WHERE id = 1")
            conn.execute("SAVEPOINT sp")
            conn.execute("DELETE FROM acct WHERE id = 2")
            conn.execute("ROLLBACK TO SAVEPOINT sp")
            conn.execute("INSERT INTO acct VALUES (3, 'cy', 3.25, NULL)")
        conn.execute("DELETE FROM acct WHERE id = 3")
    options = {"proto_version": "4", "publication_names": "pub", "binary": "true" if binary else "false"}
    _, txns = assemble(pg18_dsn, options)
    assert [t.count for t in txns] == [3, 2, 1]  # Relation + 2 inserts; update + insert; delete

    builder = ChangeRowBuilder(4, binary=binary)
    for txn in txns:
        builder.add_transaction(txn)
    [(version, batch)] = builder.build()
    assert version.qualified_name == "public.acct" and version.key_columns == ("id",)
    rows = batch.to_pylist()
    assert [(r["_op"], (r["_new"] or r["_old"])["id"]) for r in rows] == [("I", 1), ("I", 2), ("U", 1), ("I", 3), ("D", 3)]
    assert rows[0]["_new"]["note"] == big and rows[0]["_new"]["balance"] == decimal.Decimal("10.50")
    # The update did not touch the TOASTed note: it is reported unchanged, not NULL.
    assert rows[2]["_unchanged"] == ["note"] and rows[2]["_new"]["note"] is None
    assert rows[2]["_new"]["balance"] == decimal.Decimal("11.50")
    assert rows[4]["_old"] == {"id": 3, "owner": None, "balance": None, "note": None} and rows[4]["_new"] is None
    assert [r["_commit_lsn"] for r in rows] == sorted(r["_commit_lsn"] for r in rows)
    assert len({r["_xid"] for r in rows}) == 3


def test_large_streamed_transaction_spills_and_keeps_only_committed_work(pg18_dsn):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_source(conn)
        with conn.transaction():
            conn.execute("INSERT INTO acct SELECT g, 'o' || g, g, NULL FROM generate_series(1, 20000) g")
            conn.execute("SAVEPOINT sp")
            conn.execute("INSERT INTO acct SELECT g, 'gone', 0, NULL FROM generate_series(20001, 30000) g")
            conn.execute("ROLLBACK TO SAVEPOINT sp")
            conn.execute("UPDATE acct SET balance = -balance WHERE id <= 100")
        try:  # streamed too, then rolled back as a whole
            with conn.transaction():
                conn.execute("INSERT INTO acct SELECT g, 'aborted', 0, NULL FROM generate_series(40001, 50000) g")
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
    options = {"proto_version": "2", "publication_names": "pub", "streaming": "on"}
    asm, txns = assemble(pg18_dsn, options, work_mem="64kB", budget=256 * 1024)
    assert asm.spilled_transactions >= 1 and asm.peak_memory_bytes <= 256 * 1024 + 64 * 1024
    [txn] = txns
    assert txn.streamed
    builder = ChangeRowBuilder(2)
    builder.add_transaction(txn)
    [(_, batch)] = builder.build()
    ops = batch.column("_op").to_pylist()
    assert ops.count("I") == 20000 and ops.count("U") == 100
    with psycopg.connect(pg18_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM acct").fetchone() == (20000,)
