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
from walspark.cli.main import cli
from walspark.cli import commands  # noqa: F401  (registers the subcommands)


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
