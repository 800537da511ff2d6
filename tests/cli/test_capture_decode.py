"""`walspark capture` and `walspark decode` against a real server: capture once, decode anywhere."""

from __future__ import annotations

import base64
import json

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from walspark.capture import CaptureFile, CaptureInfo, write_capture
from walspark.cli import commands  # noqa: F401  (registers the subcommands)
from walspark.cli.main import cli


@pytest.fixture
def source(pg18_dsn):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text, b bytea)")
        conn.execute('CREATE PUBLICATION "my pub" FOR TABLE t')
        conn.execute("SELECT pg_create_logical_replication_slot('cap', 'pgoutput')")
        conn.execute("INSERT INTO t VALUES (1, 'it''s', '\\x00ff'), (2, NULL, NULL)")
        conn.execute("UPDATE t SET v = 'x' WHERE id = 1")
        conn.execute("DELETE FROM t WHERE id = 2")
    return pg18_dsn


def _capture(dsn: str, out, *extra: str):
    result = CliRunner().invoke(
        cli, ["capture", "--dsn", dsn, "--slot", "cap", "--publication", "my pub", *extra, str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


def test_capture_peeks_and_decode_prints_json_lines(source, tmp_path):
    path = _capture(source, tmp_path / "c.parquet", "--proto-version", "2")
    capture = CaptureFile(path)
    assert capture.info.protocol_version == 2 and capture.info.slot == "cap"
    assert capture.num_rows == 11  # 3 transactions: B R I I C, B U C, B D C

    lines = CliRunner().invoke(cli, ["decode", str(path)]).output.splitlines()
    messages = [json.loads(line) for line in lines]
    assert [m["type"] for m in messages] == [
        "Begin", "Relation", "Insert", "Insert", "Commit", "Begin", "Update", "Commit", "Begin", "Delete", "Commit",
    ]  # fmt: skip
    insert = messages[2]
    assert insert["new_tuple"] == [
        {"kind": "t", "value": "1"}, {"kind": "t", "value": "it's"}, {"kind": "t", "value": "\\x00ff"},
    ]  # fmt: skip
    assert "/" in insert["lsn"] and "/" in messages[0]["final_lsn"]
    assert messages[1]["columns"][0] == {"flags": 1, "name": "id", "type_oid": 23, "type_modifier": -1}

    # Peeking did not consume: a second capture sees the same messages.
    again = CaptureFile(_capture(source, tmp_path / "again.parquet", "--proto-version", "2"))
    assert list(again) == list(capture)


def test_binary_values_are_base64_and_text_format_is_readable(source, tmp_path):
    path = _capture(source, tmp_path / "b.arrow", "--binary", "--proto-version", "4")
    messages = [json.loads(line) for line in CliRunner().invoke(cli, ["decode", str(path)]).output.splitlines()]
    values = messages[2]["new_tuple"]
    assert values[0] == {"kind": "b", "value": base64.b64encode(b"\x00\x00\x00\x01").decode()}
    assert base64.b64decode(values[2]["value"]) == b"\x00\xff"

    text = CliRunner().invoke(cli, ["decode", "--format", "text", str(path)]).output
    assert "Insert" in text and "NULL" in text


def test_consume_advances_the_slot(source, tmp_path):
    _capture(source, tmp_path / "1.parquet", "--consume")
    assert CaptureFile(_capture(source, tmp_path / "2.parquet")).num_rows == 0


def test_decode_refuses_a_file_that_is_not_a_capture(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), path)
    result = CliRunner().invoke(cli, ["decode", str(path)])
    assert result.exit_code == 1
    assert "not a capture file" in result.output


def test_decode_reports_malformed_bytes_with_kind_offset_and_lsn(tmp_path):
    path = tmp_path / "bad.parquet"
    write_capture(path, [(0x16B3748, b"B\x00\x00")], CaptureInfo({"proto_version": "1"}))
    result = CliRunner().invoke(cli, ["decode", str(path)])
    assert result.exit_code == 1
    assert "Begin" in result.output and "0/16B3748" in result.output and "offset" in result.output
    assert "Traceback" not in result.output


def test_capture_errors_are_one_line_and_never_show_the_password(tmp_path, pg18):
    dsn = pg18.dsn(password="s3cret-pw", dbname="no_such_db")
    result = CliRunner().invoke(cli, ["capture", "--dsn", dsn, "--slot", "x", "--publication", "p", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "s3cret-pw" not in result.output
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1
    assert "no_such_db" in result.output


def test_capture_refuses_an_invalid_slot_name(source, tmp_path):
    result = CliRunner().invoke(
        cli, ["capture", "--dsn", source, "--slot", "Bad Name", "--publication", "my pub", str(tmp_path / "o")]
    )
    assert result.exit_code == 1 and "invalid slot name" in result.output


# ----------------------------------------------------------------------------- captures without metadata


def _foreign(path, lsns, messages) -> None:
    """A capture as another tool writes it: plain pyarrow, no walspark metadata."""
    pq.write_table(pa.table({"lsn": lsns, "data": messages}), path)


def _streamed_with_both_abort_layouts() -> list[bytes]:
    """A streamed transaction, both Stream Abort layouts, and two-phase messages: protocol 4's whole range."""
    from walspark.protocol import (
        BeginPrepare,
        CommitPrepared,
        Insert,
        Prepare,
        StreamAbort,
        StreamStart,
        StreamStop,
        TupleData,
        encode_message,
    )  # fmt: skip

    return [encode_message(m) for m in (
        StreamStart(700, True), Insert(700, 16384, TupleData("b", (b"\x00\x00\x00\x01",))), StreamStop(),
        StreamAbort(700, 701), StreamAbort(700, 700, 0x16B3800, 757_382_400_000_000),
        BeginPrepare(0x16B3900, 0x16B3950, 757_382_400_000_000, 702, "g"),
        Prepare(0x16B3900, 0x16B3950, 757_382_400_000_000, 702, "g"),
        CommitPrepared(0x16B3A00, 0x16B3A50, 757_382_400_000_000, 702, "g"),
    )]  # fmt: skip


@pytest.mark.parametrize("lsns", [
    ["0/16B3748"] * 8,  # pg_lsn as the SQL function returns it
    pa.array([0x16B3748] * 8, pa.uint64()),
    pa.array([0x16B3748] * 8, pa.int32()),
], ids=["text", "uint64", "int32"])
def test_decode_without_metadata_reads_protocol_4_and_tells_stream_aborts_apart(tmp_path, lsns):
    path = tmp_path / "foreign.parquet"
    _foreign(path, lsns, _streamed_with_both_abort_layouts())
    result = CliRunner().invoke(cli, ["decode", str(path)])
    assert result.exit_code == 0, result.output
    messages = [json.loads(line) for line in result.output.splitlines()]
    assert [m["type"] for m in messages] == ["StreamStart", "Insert", "StreamStop", "StreamAbort", "StreamAbort",
                                             "BeginPrepare", "Prepare", "CommitPrepared"]
    assert {m["lsn"] for m in messages} == {"0/16B3748"}
    assert (messages[3]["abort_lsn"], messages[4]["abort_lsn"]) == (None, "0/16B3800")
    info = CaptureFile(path).info
    assert not info.described and info.protocol_version == 4 and info.streaming_parallel is None and info.binary


def test_an_explicit_protocol_version_is_kept(tmp_path):
    path = tmp_path / "foreign.parquet"
    _foreign(path, ["0/16B3748"] * 8, _streamed_with_both_abort_layouts())
    result = CliRunner().invoke(cli, ["decode", "--proto-version", "4", str(path)])
    assert result.exit_code == 0 and result.output.count("\n") == 8
    result = CliRunner().invoke(cli, ["decode", "--proto-version", "2", str(path)])  # no long Stream Abort below 4
    assert result.exit_code == 1 and "Stream Abort" in result.output and "16 trailing bytes" in result.output
    assert result.output.count("Error:") == 1 and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["decode", "--proto-version", "1", str(path)])
    assert result.exit_code == 1 and "Stream Start is never sent below protocol version 2" in result.output


def test_capture_metadata_says_how_to_decode():
    assert CaptureInfo({"proto_version": "2"}).streaming_parallel is False
    assert CaptureInfo({"proto_version": "4", "streaming": "parallel"}).streaming_parallel is True
    assert CaptureInfo({"proto_version": "1"}).protocol_version == 1
    assert not CaptureInfo({"proto_version": "4"}, seen_binary=True).binary  # described: pgoutput default
    assert CaptureInfo().protocol_version == 4 and CaptureInfo().streaming_parallel is None


@pytest.mark.parametrize(("table", "message"), [
    (pa.table({"lsn": ["0/1", None], "data": [b"E", b"E"]}), "a row has no lsn (null)"),
    (pa.table({"lsn": ["0/1", "0/2"], "data": [b"E", None]}), "a row has no data (null)"),
    (pa.table({"lsn": ["0/1", "nope"], "data": [b"E", b"E"]}), "column lsn"),
    (pa.table({"lsn": [1.5], "data": [b"E"]}), "column lsn is double"),
    (pa.table({"lsn": [1], "data": ["E"]}), "column data is string"),
    (pa.table({"lsn": pa.array([1 << 63], pa.uint64()), "data": [b"E"]}), "column lsn"),
], ids=["null-lsn", "null-data", "bad-lsn-text", "float-lsn", "text-data", "lsn-out-of-range"])
def test_a_foreign_file_that_cannot_be_a_capture_fails_in_one_line(tmp_path, table, message):
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    result = CliRunner().invoke(cli, ["decode", str(path)])
    assert result.exit_code == 1 and message in result.output, result.output
    assert result.output.startswith("Error: ") and "Traceback" not in result.output


# -- a window that starts after a PREPARE ----------------------------------------------------------


@pytest.fixture
def after_prepares(pg18_dsn):
    """A two-phase slot consumed up to two PREPAREs; what is left to read: a plain transaction,
    the COMMIT PREPARED of one and the ROLLBACK PREPARED of the other (whose PREPAREs the reader
    never sees, as a subscriber restarted after applying them)."""
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION p2 FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('tp', 'pgoutput', false, true)")
        conn.execute("BEGIN; INSERT INTO t VALUES (1, 'prepared'); PREPARE TRANSACTION 'c'")
        conn.execute("BEGIN; INSERT INTO t VALUES (2, 'rolled back'); PREPARE TRANSACTION 'r'")
        (upto,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        conn.execute("SELECT count(*) FROM pg_logical_slot_get_binary_changes('tp', %s, NULL, 'proto_version', '3',"
                     " 'publication_names', 'p2', 'two_phase', 'on')", (upto,))
        conn.execute("COMMIT PREPARED 'c'")
        conn.execute("INSERT INTO t VALUES (3, 'plain')")
        conn.execute("ROLLBACK PREPARED 'r'")
    return pg18_dsn


def test_a_window_after_the_prepare_decodes_commit_and_rollback_prepared(after_prepares, tmp_path):
    out = tmp_path / "w.parquet"
    result = CliRunner().invoke(cli, ["capture", "--dsn", after_prepares, "--slot", "tp", "--publication", "p2",
                                      "--proto-version", "3", "--two-phase", str(out)])
    assert result.exit_code == 0, result.output
    decoded = CliRunner().invoke(cli, ["decode", str(out)])
    assert decoded.exit_code == 0, decoded.output
    kinds = [json.loads(line)["type"] for line in decoded.output.splitlines()]
    assert kinds == ["CommitPrepared", "Begin", "Relation", "Insert", "Commit", "RollbackPrepared"], kinds
    assert json.loads(decoded.output.splitlines()[0])["gid"] == "c"


@pytest.mark.spark
def test_a_window_after_the_prepare_reads_as_a_capture_and_as_a_peek(spark, after_prepares, tmp_path):
    """The changes of a prepared transaction are in the window of its PREPARE; a window holding only
    its COMMIT PREPARED (or ROLLBACK PREPARED) has none of them to give, and the rest reads."""
    out = tmp_path / "w.parquet"
    result = CliRunner().invoke(cli, ["capture", "--dsn", after_prepares, "--slot", "tp", "--publication", "p2",
                                      "--proto-version", "3", "--two-phase", str(out)])
    assert result.exit_code == 0, result.output
    capture = spark.read.format("pgoutput").option("path", str(out)).load()
    assert [(r["_op"], r["public.t"]["id"]) for r in capture.collect()] == [("I", 3)]
    peek = spark.read.format("pgoutput").options(dsn=after_prepares, slot="tp", publication="p2", peek="true",
                                                 twoPhase="true").load()
    assert [(r["_op"], r["public.t"]["id"]) for r in peek.collect()] == [("I", 3)]
