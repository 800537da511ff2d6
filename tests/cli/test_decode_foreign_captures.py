"""`walspark decode` (and the batch reader) on captures written by other tools: no walspark metadata.

The capture format is "the rows of ``pg_logical_slot_peek_binary_changes``". Here those rows
are fetched with plain SQL and saved with plain pyarrow — the LSN as the ``pg_lsn`` text or as
a bigint, with or without the ``xid`` column — for every option set a server can produce:
protocol 1, 2 and 4 on PostgreSQL 18 (1, 2 and 3 on 15), text and binary, streaming ``on`` and
``parallel``, from a plain slot and from a slot created with two-phase decoding (which sends
the two-phase messages at every protocol version). The workload streams large transactions
(``logical_decoding_work_mem = 64kB``) with a rolled-back subtransaction (Stream Abort), and
prepares transactions that are committed and rolled back, small and streamed.

Each capture must decode whole: one line per row, the kinds counted as the server's kind
bytes say, the kinds the options must produce all there, and the Stream Abort layout
inferred right in both directions (abort LSN and time exactly with ``streaming = parallel``).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import psycopg
import psycopg.sql
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from walspark.cli import commands  # noqa: F401  (registers the subcommands)
from walspark.cli.main import cli
from walspark.protocol import format_lsn

#: The class name `walspark decode` prints for each kind byte the server can send.
KIND_NAMES = {
    "B": "Begin", "C": "Commit", "O": "Origin", "M": "Message", "R": "Relation", "Y": "Type", "I": "Insert",
    "U": "Update", "D": "Delete", "T": "Truncate", "S": "StreamStart", "E": "StreamStop", "c": "StreamCommit",
    "A": "StreamAbort", "b": "BeginPrepare", "P": "Prepare", "K": "CommitPrepared", "r": "RollbackPrepared",
    "p": "StreamPrepare",
}  # fmt: skip
PLAIN = {"Begin", "Commit", "Relation", "Type", "Insert", "Update", "Delete", "Truncate", "Message"}
STREAMED = {"StreamStart", "StreamStop", "StreamCommit", "StreamAbort"}
TWO_PHASE = {"BeginPrepare", "Prepare", "CommitPrepared", "RollbackPrepared"}


def _big(first: int) -> str:
    """~2000 rows of ~250 bytes: far beyond 64kB, so the server streams the transaction."""
    return (f"INSERT INTO t SELECT g, repeat(md5(g::text), 7), NULL, 'ok'"
            f" FROM generate_series({first}, {first + 1999}) g")


SETUP = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok')",
    "CREATE TABLE t (id int PRIMARY KEY, payload text, b bytea, feeling mood)",
    "CREATE TABLE other (id int PRIMARY KEY)",
    "CREATE PUBLICATION pub FOR TABLE t, other",
    "SELECT pg_create_logical_replication_slot('plain', 'pgoutput')",
    "SELECT pg_create_logical_replication_slot('twophase', 'pgoutput', false, true)",
]
WORKLOAD = [
    "INSERT INTO t VALUES (1, 'a', '\\x00ff', 'sad'), (2, 'b', NULL, NULL)",
    "UPDATE t SET payload = 'c' WHERE id = 1",
    "DELETE FROM t WHERE id = 2",
    "INSERT INTO other VALUES (1)",
    "TRUNCATE other",
    "SELECT pg_logical_emit_message(false, 'walspark', 'not transactional')",
    # streamed, committed, with a transactional message and a subtransaction rolled back after it was streamed
    "BEGIN",
    _big(10_000),
    "SELECT pg_logical_emit_message(true, 'walspark', 'in a streamed transaction')",
    "SAVEPOINT s1",
    _big(20_000),
    "ROLLBACK TO SAVEPOINT s1",
    "UPDATE t SET payload = 'after the savepoint' WHERE id = 1",
    "COMMIT",
    # two-phase: small committed, small rolled back, big (streamed) committed
    "BEGIN",
    "INSERT INTO t VALUES (3, 'prepared, committed', NULL, NULL)",
    "PREPARE TRANSACTION 'small_commit'",
    "COMMIT PREPARED 'small_commit'",
    "BEGIN",
    "INSERT INTO t VALUES (4, 'prepared, rolled back', NULL, NULL)",
    "PREPARE TRANSACTION 'small_rollback'",
    "ROLLBACK PREPARED 'small_rollback'",
    "BEGIN",
    _big(30_000),
    "PREPARE TRANSACTION 'big_commit'",
    "COMMIT PREPARED 'big_commit'",
    # a big transaction rolled back as a whole (streamed, then a top-level Stream Abort, on 15)
    "BEGIN",
    _big(40_000),
    "ROLLBACK",
    "INSERT INTO t VALUES (5, 'last', NULL, 'ok')",
]


def _write_workload(dsn: str) -> str:
    """The workload, on a database whose sessions decode with 64kB (so `walspark capture` streams too)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("ALTER DATABASE {} SET logical_decoding_work_mem = '64kB'").format(
            psycopg.sql.Identifier(conn.info.dbname)))
        for statement in SETUP + WORKLOAD:
            conn.execute(statement)
    return dsn


@pytest.fixture
def pg18_source(pg18_dsn: str) -> str:
    return _write_workload(pg18_dsn)


@pytest.fixture
def pg15_source(pg15_dsn: str) -> str:
    return _write_workload(pg15_dsn)


def _peek_to_parquet(dsn: str, slot: str, options: dict[str, str], path: Path, *, lsn_as_text: bool) -> list[Any]:
    """What any tool would do: the SQL function's rows into a Parquet file, no walspark code involved.

    ``lsn_as_text``: keep every column as the server returns it (``pg_lsn`` comes as ``X/Y``
    text, plus the ``xid`` column); otherwise the LSN as a bigint beside the data only.
    Returns the rows, for the checks.
    """
    columns = "*" if lsn_as_text else "(lsn - '0/0'::pg_lsn)::bigint AS lsn, data"
    flat = [item for pair in options.items() for item in pair]
    with psycopg.connect(dsn) as conn:
        cursor = conn.execute(
            f"SELECT {columns} FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, VARIADIC %s::text[])",
            (slot, flat),
        )
        names = [d.name for d in cursor.description]
        rows = cursor.fetchall()
        conn.rollback()
    table = pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)})
    pq.write_table(table, path)
    assert not any(key.startswith(b"walspark") for key in pq.read_schema(path).metadata or {})
    return rows


def _options(version: int, binary: bool, streaming: str | None) -> dict[str, str]:
    options = {"proto_version": str(version), "publication_names": "pub", "messages": "true",
               "binary": "true" if binary else "false"}
    if streaming:
        options["streaming"] = streaming
    return options


def _decode(path: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["decode", str(path)])
    assert result.exit_code == 0, result.output[-2000:]
    return [json.loads(line) for line in result.output.splitlines()]


def _check_decodes_whole(dsn: str, tmp_path: Path, version: int, binary: bool, streaming: str | None) -> None:
    """Both slots, the LSN both ways: every message printed, as the server sent it."""
    for slot, lsn_as_text in (("plain", binary), ("twophase", not binary)):
        path = tmp_path / f"{slot}-v{version}-{binary}-{streaming}.parquet"
        rows = _peek_to_parquet(dsn, slot, _options(version, binary, streaming), path, lsn_as_text=lsn_as_text)
        messages = _decode(path)
        context = f"{slot} slot, protocol {version}, binary={binary}, streaming={streaming}"

        assert len(messages) == len(rows), context
        sent = collections.Counter(KIND_NAMES[chr(row[-1][0])] for row in rows)
        printed = collections.Counter(m["type"] for m in messages)
        assert printed == sent, context
        lsns = [row[0] if isinstance(row[0], str) else format_lsn(row[0]) for row in rows]
        assert [m["lsn"] for m in messages] == lsns, context

        required = PLAIN | (STREAMED if streaming else set())
        if slot == "twophase":
            required |= TWO_PHASE | ({"StreamPrepare"} if streaming else set())
        assert required <= set(printed), f"{context}: missing {required - set(printed)}"
        assert set(printed) == required, context

        aborts = [m for m in messages if m["type"] == "StreamAbort"]
        assert all((m["abort_lsn"] is not None) == (streaming == "parallel") for m in aborts), context
        assert all((m["abort_timestamp"] is None) == (m["abort_lsn"] is None) for m in aborts), context
        assert any(m["xid"] != m["subxid"] for m in aborts) or not streaming, context
        kinds = {column["kind"] for m in messages if m["type"] == "Insert" for column in m["new_tuple"]}
        assert ("b" in kinds) == binary and ("t" in kinds) != binary, context
        prepared = {m["gid"] for m in messages if m["type"] in ("Prepare", "StreamPrepare")}
        if slot == "twophase":
            assert prepared == {"small_commit", "small_rollback", "big_commit"}, context


PG18_OPTION_SETS = [(1, None), (2, "on"), (4, "on"), (4, "parallel")]
PG15_OPTION_SETS = [(1, None), (2, "on"), (3, "on")]


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize(("version", "streaming"), PG18_OPTION_SETS, ids=lambda x: f"{x}")
def test_pg18_foreign_capture_decodes_whole(pg18_source: str, tmp_path: Path, version: int, streaming: str | None,
                                            binary: bool) -> None:
    _check_decodes_whole(pg18_source, tmp_path, version, binary, streaming)


@pytest.mark.pg15
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize(("version", "streaming"), PG15_OPTION_SETS, ids=lambda x: f"{x}")
def test_pg15_foreign_capture_decodes_whole(pg15_source: str, tmp_path: Path, version: int, streaming: str | None,
                                            binary: bool) -> None:
    _check_decodes_whole(pg15_source, tmp_path, version, binary, streaming)


# ----------------------------------------------------------------------------- the batch reader


def _batch_read(path: Path) -> tuple[Any, list[dict[str, Any]], int]:
    """What ``spark.read.format("pgoutput").load(path)`` computes: schema, rows, partitions.

    The data source's own planner and task code, called directly (Spark would only ship the
    partitions to executors and collect the batches).
    """
    from walspark.spark.datasource.options import SourceOptions
    from walspark.spark.datasource.reader import CaptureReader, capture_layout

    options = SourceOptions.parse({"path": str(path), "partitionRows": "300"})
    schema = capture_layout(options).spark_schema()
    reader = CaptureReader(options, schema)
    partitions = reader.partitions()
    rows = [row for partition in partitions for batch in reader.read(partition) for row in batch.to_pylist()]
    return schema, rows, len(partitions)


@pytest.mark.parametrize(("slot", "version", "binary", "streaming"), [
    ("twophase", 4, False, "parallel"),
    ("twophase", 2, True, "on"),  # a two-phase slot at protocol 2: the walspark capture says protocol 2
    ("plain", 2, True, "on"),
    ("plain", 1, False, None),
])
def test_batch_reader_reads_a_foreign_capture_like_a_walspark_capture(
        pg18_source: str, tmp_path: Path, slot: str, version: int, binary: bool, streaming: str | None) -> None:
    """The same slot and options, captured by `walspark capture` and by plain SQL + pyarrow: the same change rows."""
    ours = tmp_path / "walspark.parquet"
    args = ["capture", "--dsn", pg18_source, "--slot", slot, "--publication", "pub", "--proto-version", str(version),
            "--binary" if binary else "--text", "--messages", "--streaming", streaming or "off", str(ours)]
    if slot == "twophase" and version >= 3:  # pgoutput refuses the option below 3 (the slot decides anyway)
        args.insert(-1, "--two-phase")
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    foreign = tmp_path / "foreign.parquet"
    rows = _peek_to_parquet(pg18_source, slot, _options(version, binary, streaming), foreign, lsn_as_text=True)
    assert len(rows) == pq.read_metadata(ours).num_rows

    schema, expected, _ = _batch_read(ours)
    foreign_schema, got, partitions = _batch_read(foreign)
    assert foreign_schema == schema
    assert partitions > 1  # cut at transaction boundaries found in the foreign file too
    assert got == expected
    # committed rows only: the rolled-back savepoint, prepared-then-rolled-back and aborted rows are absent
    inserted = {row["public.t"]["id"] for row in got if row["_op"] == "I" and row["_table"] == "t"}
    assert {1, 2, 3, 5} <= inserted and 4 not in inserted
    assert len([i for i in inserted if 10_000 <= i < 12_000]) == 2000 and not any(i >= 20_000 and i < 22_000
                                                                                  for i in inserted)
    assert not any(i >= 40_000 for i in inserted)
