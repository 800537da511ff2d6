"""Replica identity changes (with column lists) and tables without columns, through ``walspark run``.

Each change is matched on the replica identity in force when it was made: the Relation message
before it (its key flags, the change row's ``_key``). The workloads come from PostgreSQL's own
subscription tests — ``031_column_list.pl`` (tab6, tab7: the primary key moves to other columns
of the column list, with writes while the table has no identity), ``032_subscribe_use_index.pl``
(REPLICA IDENTITY FULL with duplicate rows), ``100_bugs.pl`` (``tab_replidentity_index``: the
identity index switches to another unique index; ``dropped_cols``: FULL and a dropped column)
— plus FULL ↔ DEFAULT switches, a primary key added to a table without one, and an identity
dropped to NOTHING. Every scenario runs twice: with a ``walspark run --once`` after each step,
and as one backlog (snapshot, then every step in one run), so changes made under several
identities arrive in one batch. The zero-column table comes from ``001_rep_changes.pl``
(``tab_no_col``); on PostgreSQL 18 it runs in the same pipeline as the identity changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import zip_longest

import psycopg
import pytest

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark


@dataclass(frozen=True, slots=True)
class Workload:
    """Setup SQL (tables, publication, initial rows: before the snapshot), then steps."""

    setup: tuple[str, ...]
    steps: tuple[str, ...]
    scd2: tuple[str, ...] = ()
    #: The publication(s) the oracle compares (default: the pipeline's ``pub``).
    oracle: str = "pub"
    #: Tables without columns, compared by row count here (see :func:`_assert_row_counts`).
    columnless: tuple[str, ...] = ()


IDENTITY = Workload(
    setup=(
        # 100_bugs.pl: the REPLICA IDENTITY INDEX changes to another unique index
        "CREATE TABLE tab_replidentity_index (a int NOT NULL, b int NOT NULL, v text)",
        "CREATE UNIQUE INDEX idx_replidentity_index_a ON tab_replidentity_index (a)",
        "CREATE UNIQUE INDEX idx_replidentity_index_b ON tab_replidentity_index (b)",
        "ALTER TABLE tab_replidentity_index REPLICA IDENTITY USING INDEX idx_replidentity_index_a",
        "INSERT INTO tab_replidentity_index VALUES (1, 1, 'x'), (2, 2, 'x'), (3, 3, 'x'), (4, 4, 'x')",
        # 031_column_list.pl tab6: column list (a, b), the primary key moves from a to b
        "CREATE TABLE tab6 (a int PRIMARY KEY, b int, c int, d int)",
        "INSERT INTO tab6 VALUES (1, 22, 333, 4444)",
        # 031_column_list.pl tab7: primary key a, then (a, b), then none, then (b, a)
        "CREATE TABLE tab7 (a int PRIMARY KEY, b int, c int, d int)",
        "INSERT INTO tab7 VALUES (1, 22, 333, 4444)",
        # FULL <-> DEFAULT (and back), with updates of the key and deletes under each
        "CREATE TABLE full_default (id int PRIMARY KEY, v text, w int)",
        "ALTER TABLE full_default REPLICA IDENTITY FULL",
        "INSERT INTO full_default SELECT g, 'v' || g, g FROM generate_series(1, 8) g",
        # 032_subscribe_use_index.pl: FULL, duplicate rows; later a primary key (DEFAULT)
        "CREATE TABLE test_replica_id_full (x int, y text)",
        "ALTER TABLE test_replica_id_full REPLICA IDENTITY FULL",
        "INSERT INTO test_replica_id_full SELECT (i % 10), (i % 10)::text FROM generate_series(0, 10) i",
        # DEFAULT without a primary key (no identity: inserts only), then a primary key
        "CREATE TABLE pk_added (id int NOT NULL, v text)",
        "INSERT INTO pk_added VALUES (1, 'a'), (2, 'b')",
        # a primary key, then REPLICA IDENTITY NOTHING (inserts only from then on)
        "CREATE TABLE to_nothing (id int PRIMARY KEY, v text)",
        "INSERT INTO to_nothing SELECT g, 'v' || g FROM generate_series(1, 5) g",
        "CREATE PUBLICATION pub FOR TABLE tab_replidentity_index, tab6 (a, b), tab7 (a, b), full_default,"
        " test_replica_id_full, pk_added, to_nothing",
    ),
    steps=(
        # under the first identities
        "UPDATE tab_replidentity_index SET v = 'y' WHERE a IN (1, 3);"
        " UPDATE tab_replidentity_index SET b = 30 WHERE a = 3;"
        " DELETE FROM tab_replidentity_index WHERE a = 4;"
        " INSERT INTO tab6 VALUES (2, 33, 444, 5555); UPDATE tab6 SET b = b * 2, c = c * 3, d = d * 4;"
        " INSERT INTO tab7 VALUES (2, 33, 444, 5555); UPDATE tab7 SET b = b * 2, c = c * 3, d = d * 4;"
        " UPDATE full_default SET v = 'full' WHERE id <= 3; UPDATE full_default SET id = 100 WHERE id = 4;"
        " DELETE FROM full_default WHERE id = 5;"
        " DELETE FROM test_replica_id_full WHERE x IN (5, 6);"
        " UPDATE test_replica_id_full SET x = 100, y = '200' WHERE x IN (1, 2);"
        " INSERT INTO pk_added VALUES (3, 'c');"
        " UPDATE to_nothing SET v = 'u' WHERE id = 1; DELETE FROM to_nothing WHERE id = 2;",
        # the identities change; rows changed above are changed again under the new ones
        "ALTER TABLE tab_replidentity_index REPLICA IDENTITY USING INDEX idx_replidentity_index_b;"
        " UPDATE tab_replidentity_index SET a = -a WHERE a = 1;"
        " UPDATE tab_replidentity_index SET v = 'z' WHERE b = 30;"
        " DELETE FROM tab_replidentity_index WHERE a = 2;"
        " ALTER TABLE tab6 DROP CONSTRAINT tab6_pkey; ALTER TABLE tab6 ADD PRIMARY KEY (b);"
        " INSERT INTO tab6 VALUES (3, 55, 666, 8888); UPDATE tab6 SET b = b * 2, c = c * 3, d = d * 4;"
        " ALTER TABLE tab7 DROP CONSTRAINT tab7_pkey; ALTER TABLE tab7 ADD PRIMARY KEY (a, b);"
        " INSERT INTO tab7 VALUES (3, 55, 666, 7777); UPDATE tab7 SET b = b * 2, c = c * 3, d = d * 4;"
        " ALTER TABLE full_default REPLICA IDENTITY DEFAULT;"
        " UPDATE full_default SET v = 'default' WHERE id IN (1, 6); UPDATE full_default SET id = 200 WHERE id = 2;"
        " DELETE FROM full_default WHERE id IN (3, 100);"
        " DELETE FROM test_replica_id_full WHERE x = 0;"  # both copies
        " DELETE FROM test_replica_id_full WHERE ctid = (SELECT min(ctid) FROM test_replica_id_full WHERE x = 100);"
        " UPDATE test_replica_id_full SET x = 101 WHERE x = 100;"
        " ALTER TABLE pk_added ADD PRIMARY KEY (id);"
        " UPDATE pk_added SET v = 'u' WHERE id IN (1, 3); UPDATE pk_added SET id = 20 WHERE id = 2;"
        " ALTER TABLE to_nothing REPLICA IDENTITY NOTHING; INSERT INTO to_nothing VALUES (6, 'n');",
        # 031 tab7 again: no identity while rows are inserted, then a new primary key; FULL again
        "ALTER TABLE tab7 DROP CONSTRAINT tab7_pkey; INSERT INTO tab7 VALUES (4, 77, 888, 9999);"
        " ALTER TABLE tab7 ADD PRIMARY KEY (b, a);"
        " UPDATE tab7 SET b = b * 2, c = c * 3, d = d * 4; DELETE FROM tab7 WHERE a = 1;"
        " ALTER TABLE full_default REPLICA IDENTITY FULL;"
        " UPDATE full_default SET w = -w WHERE id IN (1, 200); DELETE FROM full_default WHERE id = 6;"
        " INSERT INTO full_default VALUES (7000, 'new', 1);"
        " UPDATE tab_replidentity_index SET b = -b;"
        " ALTER TABLE test_replica_id_full ADD PRIMARY KEY (x);"  # x is unique by now
        " ALTER TABLE test_replica_id_full REPLICA IDENTITY DEFAULT;"
        " UPDATE test_replica_id_full SET y = 'pk' WHERE x IN (3, 101); DELETE FROM test_replica_id_full WHERE x = 4;",
    ),
    scd2=("public.tab_replidentity_index", "public.full_default"),
)


def _assert_row_counts(conn: psycopg.Connection, spark, target: str, tables: tuple[str, ...], context: str) -> None:
    """A table without columns matches when its Delta table has as many rows (current versions,
    for a history) as ``SELECT 1 FROM ONLY t``.

    Done here because the oracle cannot read such a table yet: ``pg_publication_tables.attnames``
    is NULL for it (not an empty array), which ``support.published_tables`` does not expect — so
    the oracle is given a publication of the other tables (``Workload.oracle``).
    """
    from walspark.storage.layout import TargetLayout

    for name in tables:
        (source,) = conn.execute(f"SELECT count(*) FROM ONLY public.{name}").fetchone()
        frame = spark.read.format("delta").load(TargetLayout(target).table("public", name))
        if "__END_AT" in frame.columns:
            frame = frame.where("__END_AT IS NULL")
        assert frame.count() == source, f"{context}: {name} has {frame.count()} rows in Delta, {source} in PostgreSQL"


def _run(dsn: str, conn: psycopg.Connection, spark, target: str, workload: Workload, context: str) -> None:
    run_once(dsn, "pub", "s", target, *[arg for t in workload.scd2 for arg in ("--scd2", t)])
    assert_matches_publication(conn, spark, target, workload.oracle, context=context)
    _assert_row_counts(conn, spark, target, workload.columnless, context)


def _play(dsn: str, spark, target: str, workload: Workload, *, backlog: bool) -> None:
    """Setup, snapshot, then the steps: a run after each, or one run after all (the backlog)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for sql in workload.setup:
            conn.execute(sql)
        _run(dsn, conn, spark, target, workload, "after the snapshot")
        for i, sql in enumerate(workload.steps):
            conn.execute(sql)
            if not backlog:
                _run(dsn, conn, spark, target, workload, f"after step {i}")
        if backlog:
            _run(dsn, conn, spark, target, workload, "after the backlog")


@pytest.mark.parametrize("backlog", [True, False], ids=["backlog", "stepwise"])
def test_identity_changes_pg15(spark, pg15_dsn, tmp_path, backlog):
    _play(pg15_dsn, spark, str(tmp_path / "lake"), IDENTITY, backlog=backlog)


NO_COLUMNS = Workload(
    setup=(
        # 001_rep_changes.pl: a published table without columns
        "CREATE TABLE tab_no_col ()",
        "CREATE TABLE tab_no_col_hist ()",  # the same, as a history (--scd2)
        "INSERT INTO tab_no_col_hist DEFAULT VALUES",
        "CREATE TABLE tab_ins (a int PRIMARY KEY, b text)",
        "INSERT INTO tab_no_col DEFAULT VALUES",
        "INSERT INTO tab_no_col DEFAULT VALUES",
        "INSERT INTO tab_ins SELECT g, 'b' || g FROM generate_series(1, 5) g",
        "CREATE PUBLICATION pub FOR TABLE tab_no_col, tab_no_col_hist, tab_ins",
        "CREATE PUBLICATION oracle FOR TABLE tab_ins",
    ),
    steps=(
        "INSERT INTO tab_no_col DEFAULT VALUES; INSERT INTO tab_ins VALUES (6, 'b6'); UPDATE tab_ins SET b = 'u' WHERE a = 1;"
        " INSERT INTO tab_no_col_hist SELECT FROM generate_series(1, 2)",
        "TRUNCATE tab_no_col; INSERT INTO tab_no_col DEFAULT VALUES; DELETE FROM tab_ins WHERE a = 2;"
        " INSERT INTO tab_no_col_hist DEFAULT VALUES; TRUNCATE tab_no_col_hist; INSERT INTO tab_no_col_hist DEFAULT VALUES",
        "INSERT INTO tab_no_col SELECT FROM generate_series(1, 3); INSERT INTO tab_ins VALUES (7, 'b7')",
        # FULL identity: a delete of a row without columns removes one of the rows
        "ALTER TABLE tab_no_col REPLICA IDENTITY FULL; DELETE FROM tab_no_col WHERE ctid = (SELECT min(ctid) FROM tab_no_col);"
        " INSERT INTO tab_ins VALUES (8, 'b8')",
        "TRUNCATE tab_no_col, tab_ins; INSERT INTO tab_ins VALUES (9, 'b9')",
    ),
    scd2=("public.tab_ins", "public.tab_no_col_hist"),
    oracle="oracle",
    columnless=("tab_no_col", "tab_no_col_hist"),
)


def _side_by_side(one: Workload, other: Workload, oracle: str) -> Workload:
    """Both workloads in one pipeline: both setups (``oracle``, the publication the oracle compares,
    replacing theirs), then step i of each together."""
    steps = [";".join(s for s in pair if s) for pair in zip_longest(one.steps, other.steps, fillvalue="")]
    return Workload(setup=(*one.setup, *other.setup, oracle), steps=tuple(steps), scd2=(*one.scd2, *other.scd2),
                    oracle="oracle", columnless=(*one.columnless, *other.columnless))  # fmt: skip


#: On PostgreSQL 18, the identity changes and the tables without columns run in one pipeline
#: (``pub``, both publications' tables); the oracle compares every table with columns.
IDENTITY_AND_NO_COLUMNS = _side_by_side(
    IDENTITY,
    replace(NO_COLUMNS, setup=tuple(sql.replace("CREATE PUBLICATION pub FOR TABLE", "ALTER PUBLICATION pub ADD TABLE")
                                    for sql in NO_COLUMNS.setup if not sql.startswith("CREATE PUBLICATION oracle"))),
    "CREATE PUBLICATION oracle FOR TABLE tab_replidentity_index, tab6 (a, b), tab7 (a, b), full_default,"
    " test_replica_id_full, pk_added, to_nothing, tab_ins",
)


@pytest.mark.parametrize("backlog", [True, False], ids=["backlog", "stepwise"])
def test_identity_changes_and_tables_without_columns_pg18(spark, pg18_dsn, tmp_path, backlog):
    _play(pg18_dsn, spark, str(tmp_path / "lake"), IDENTITY_AND_NO_COLUMNS, backlog=backlog)


@pytest.mark.parametrize("server", ["pg18_dsn", "pg15_dsn"])
def test_column_list_must_cover_the_identity(spark, request, tmp_path, server):
    """031_column_list.pl / the publication regression tests: PostgreSQL 15+ refuses UPDATE and
    DELETE of a table whose published column list does not cover its replica identity, so an
    update or delete always carries its identity's columns. Inserts are still published then,
    under a Relation with no key column: applied as a run without identity between the runs of
    the primary key before and after."""
    dsn = request.getfixturevalue(server)
    target = str(tmp_path / "lake")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE uncovered (a int PRIMARY KEY, b int, c int NOT NULL)")
        conn.execute("CREATE UNIQUE INDEX uncovered_c ON uncovered (c)")
        conn.execute("INSERT INTO uncovered SELECT g, g, g FROM generate_series(1, 4) g")
        conn.execute("CREATE PUBLICATION pub FOR TABLE uncovered (a, b)")
        run_once(dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="after the snapshot")
        conn.execute("UPDATE uncovered SET b = 10 WHERE a = 1; DELETE FROM uncovered WHERE a = 2")
        conn.execute("ALTER TABLE uncovered REPLICA IDENTITY USING INDEX uncovered_c")
        for sql in ("UPDATE uncovered SET b = 20 WHERE a = 3", "DELETE FROM uncovered WHERE a = 3"):
            with pytest.raises(psycopg.errors.InvalidColumnReference, match="cannot (update|delete)") as refused:
                conn.execute(sql)
            assert "does not cover the replica identity" in (refused.value.diag.message_detail or "")
        conn.execute("INSERT INTO uncovered VALUES (5, 5, 5), (6, 6, 6)")  # published, no key
        conn.execute("ALTER TABLE uncovered REPLICA IDENTITY DEFAULT")
        conn.execute("UPDATE uncovered SET b = 30 WHERE a IN (3, 5); DELETE FROM uncovered WHERE a IN (4, 6)")
        conn.execute("UPDATE uncovered SET a = 50 WHERE a = 5")
        run_once(dsn, "pub", "s", target)
        assert_matches_publication(conn, spark, target, "pub", context="after the backlog")


def test_identity_runs_replay_after_a_crash_between_runs(spark, pg18_dsn, tmp_path):
    """A batch of two identity runs is two Delta commits, each with its own transaction id: a
    crash after the first (before the progress row) replays the batch, which skips the committed
    run and applies the other — no change lost or doubled; a full replay changes nothing."""
    import shutil

    from walspark.changes.assembly import TransactionAssembler
    from walspark.changes.rows import ChangeRowBuilder
    from walspark.source.sqlinterface import slot_changes
    from walspark.spark.lake.apply import apply_changes
    from walspark.spark.lake.frames import change_dataframe
    from walspark.spark.lake.progress import ProgressTable
    from walspark.storage.layout import TargetLayout

    target = str(tmp_path / "lake")
    path = TargetLayout(target).table("public", "t")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (a int NOT NULL, b int NOT NULL, v text)")
        conn.execute("CREATE UNIQUE INDEX t_a ON t (a); CREATE UNIQUE INDEX t_b ON t (b)")
        conn.execute("ALTER TABLE t REPLICA IDENTITY USING INDEX t_a")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        conn.execute("INSERT INTO t SELECT g, g, 'x' FROM generate_series(1, 6) g")
        conn.execute("UPDATE t SET a = -a WHERE a = 1; DELETE FROM t WHERE a = 2; UPDATE t SET v = 'a' WHERE a = 3")
        conn.execute("ALTER TABLE t REPLICA IDENTITY USING INDEX t_b")
        conn.execute("UPDATE t SET b = -b WHERE b = 3; DELETE FROM t WHERE b = 4; UPDATE t SET v = 'b' WHERE b = 5")
        assembler, builder = TransactionAssembler(4, memory_budget=1 << 30), ChangeRowBuilder(4, binary=True)
        options = {"proto_version": "4", "publication_names": "pub", "binary": "true"}
        for lsn, data in slot_changes(conn, "s", options, consume=True):
            for txn in assembler.feed(lsn, data):
                builder.add_transaction(txn)
        batches = sorted((b for _, b in builder.build()), key=lambda b: b.column("_commit_lsn")[0].as_py())
        assert len(batches) == 2  # one per relation version: the identity changed
        first, both = change_dataframe(spark, batches[:1]), change_dataframe(spark, batches)
        expected = sorted(conn.execute("SELECT a, b, v FROM t").fetchall())

    def delta() -> list[tuple]:
        return sorted(tuple(r) for r in spark.read.format("delta").load(path).select("a", "b", "v").collect())

    def versions() -> int:
        return spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count()

    def crash() -> None:
        """Lose the progress rows (the crash came before them) and what the process remembers."""
        shutil.rmtree(tmp_path / "lake" / "_walspark")
        ProgressTable.forget()

    apply_changes(first, 0, target=target)  # what the first run of batch 0 commits, then a crash
    crash()
    apply_changes(both, 0, target=target)  # the replay: the first run is skipped, the second applied
    assert delta() == expected
    before = versions()
    crash()
    apply_changes(both, 0, target=target)  # replayed again: both runs skipped by their transaction ids
    assert delta() == expected and versions() == before
