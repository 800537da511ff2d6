"""The snapshot's binary COPY read loop in C (``walspark_c.read_copy_rows``) against the pure loop.

What is proved here: on a real server both loops yield the same batches (the many-types corpus of
the snapshot tests, NULLs, empty strings, an empty table, wide rows, batch boundaries) and leave
the connection usable; a server error at the end of the stream is raised alike. On any message
sequence from a stand-in for libpq (ctypes functions in place of ``PQgetCopyData`` and
``PQfreemem``: good and bad headers, rows of the wrong width, truncated rows, negative lengths,
trailers, a broken connection) the compiled loop yields what the pure loop yields, raises what
it raises, and frees every message libpq handed it.
"""

from __future__ import annotations

import ctypes
from collections import deque
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")

import psycopg

from walspark.spark.snapshot import pgsnapshot
from walspark.spark.snapshot.initial import _catalog_rows, plan_partitions, publication_tables, source_plan
from walspark.spark.snapshot.pgsnapshot import (
    COPY_SIGNATURE,
    CopyFormatError,
    _binary_batches,
    _binary_batches_compiled,
    copy_columns,
    read_range,
)

from .test_snapshot import MANY_TYPES

walspark_c = pytest.importorskip("walspark_c")


class _Counting:
    """``walspark_c`` with a count of ``read_copy_rows`` calls (so a test knows the C loop ran)."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(walspark_c, name)

    def read_copy_rows(self, *args: Any) -> Any:
        self.calls += 1
        return walspark_c.read_copy_rows(*args)


def _read_both(dsn: str, table: str, batch_rows: int, *, parallelism: int = 1,
               partition_rows: int = 10**9) -> list[pa.RecordBatch]:  # fmt: skip
    """Every range of ``table`` read by both loops in one exported snapshot; the batches must match."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP PUBLICATION IF EXISTS p_read")
        conn.execute(f'CREATE PUBLICATION p_read FOR TABLE "{table}"')
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        [plan] = publication_tables(conn, "p_read")
        plan_partitions(plan, parallelism=parallelism, partition_rows=partition_rows, small_rows=0)
        source = source_plan(dsn, snapshot, plan, _catalog_rows(conn))
        assert source.binary
        compiled, pure = [], []
        for rng in source.ranges:
            counting = _Counting()
            compiled.extend(read_range(source, rng, batch_rows=batch_rows, speedups=counting))
            assert counting.calls >= 1
            pure.extend(read_range(source, rng, batch_rows=batch_rows, speedups=None))
        conn.execute("COMMIT")
    assert [b.num_rows for b in compiled] == [b.num_rows for b in pure]
    for got, expected in zip(compiled, pure, strict=True):
        got.validate(full=True)
        assert got.equals(expected)
    return compiled


@pytest.mark.parametrize("batch_rows", [1, 7, 1000, 3001, 65_536])
def test_compiled_loop_reads_the_many_types_corpus_like_the_pure_loop(pg18_dsn: str, batch_rows: int) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(MANY_TYPES)
    batches = _read_both(pg18_dsn, "Many Types", batch_rows)
    assert sum(b.num_rows for b in batches) == 3001
    if batch_rows == 3001:  # exactly one full batch, then the end of the stream alone
        assert [b.num_rows for b in batches] == [3001]


def test_compiled_loop_nulls_empty_strings_and_empty_table(pg18_dsn: str) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE e (id int, t text, b bytea)")
        conn.execute("CREATE TABLE ne (id int PRIMARY KEY, t text, b bytea, n int)")
        conn.execute("INSERT INTO ne SELECT g, CASE g % 3 WHEN 0 THEN NULL WHEN 1 THEN '' ELSE 'v' || g END,"
                     " CASE WHEN g % 2 = 0 THEN ''::bytea END, NULL FROM generate_series(1, 2000) g")  # fmt: skip
    assert _read_both(pg18_dsn, "e", 10) == []
    batches = _read_both(pg18_dsn, "ne", 500, parallelism=3, partition_rows=700)
    assert sum(b.num_rows for b in batches) == 2000
    table = pa.Table.from_batches(batches)
    assert table["t"].null_count == 666 and table["n"].null_count == 2000
    assert table["t"].to_pylist().count("") == 667


def test_compiled_loop_wide_rows(pg18_dsn: str) -> None:
    """300 columns, and values of a megabyte (a CopyData message far larger than libpq's buffer)."""
    cols = ", ".join(f"c{i} int" for i in range(300))
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE wide (id int, big text, {cols})")
        values = ", ".join(f"CASE WHEN g % {i % 7 + 2} = 0 THEN NULL ELSE g * {i} END" for i in range(300))
        conn.execute(f"INSERT INTO wide SELECT g, repeat(md5(g::text), 32768 * (g % 2)), {values}"
                     " FROM generate_series(1, 40) g")  # fmt: skip
    batches = _read_both(pg18_dsn, "wide", 16)
    assert [b.num_rows for b in batches] == [16, 16, 8]
    assert [len(v) for v in pa.Table.from_batches(batches)["big"][:2].to_pylist()] == [1 << 20, 0]


def test_server_error_at_the_end_is_raised_alike(pg18_dsn: str) -> None:
    """An error that ends the COPY (after rows were sent) is raised by both loops the same way."""
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE z (id int)")
        conn.execute("INSERT INTO z SELECT generate_series(1, 5000)")
        conn.execute("CREATE PUBLICATION pz FOR TABLE z")
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        [plan] = publication_tables(conn, "pz")
        plan_partitions(plan, parallelism=1, small_rows=0)
        plan.row_filter = "1 / (4000 - id) IS NOT NULL"
        source = source_plan(pg18_dsn, snapshot, plan, _catalog_rows(conn))
        errors = []
        for speedups in (_Counting(), None):
            seen = []
            with pytest.raises(Exception) as caught:
                for batch in read_range(source, source.ranges[0], batch_rows=1000, speedups=speedups):
                    seen.append(batch.num_rows)
            errors.append((type(caught.value), str(caught.value), seen))
        conn.execute("COMMIT")
    assert errors[0] == errors[1]
    assert "division by zero" in errors[0][1]


# --------------------------------------------------------------------------- a stand-in for libpq

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_BROKEN = object()  # in a stream: PQgetCopyData's -2 (the connection broke)


class _Stream:
    """Messages handed out once, to whichever reader asks: libpq's functions or psycopg's iterator."""

    def __init__(self, messages: list[Any]) -> None:
        self.queue = deque(messages)
        self.live: set[int] = set()
        self.get = _GET(self._get)
        self.free = _FREE(self._free)

    def functions(self) -> tuple[int, int]:
        return ctypes.cast(self.get, ctypes.c_void_p).value or 0, ctypes.cast(self.free, ctypes.c_void_p).value or 0

    def _get(self, conn: int, buffer: Any, async_: int) -> int:
        assert conn == 1 and async_ == 0
        if not self.queue:
            return -1
        message = self.queue.popleft()
        if message is _BROKEN:
            return -2
        address = _libc.malloc(len(message) + 1)
        ctypes.memmove(address, message + b"\0", len(message) + 1)
        self.live.add(address)
        buffer[0] = address
        return len(message)

    def _free(self, address: int) -> None:
        self.live.remove(address)
        _libc.free(address)

    def __iter__(self) -> Iterator[bytes]:  # psycopg's Copy iterator
        while self.queue:
            message = self.queue.popleft()
            if message is _BROKEN:
                raise psycopg.OperationalError("receiving copy data failed: the stand-in broke")
            yield message


class _PGconn:
    pgconn_ptr = 1

    def get_error_message(self, encoding: str = "") -> str:
        return "the stand-in broke"


class _Conn:
    pgconn = _PGconn()


class _Decoder:
    """The raw columns of each batch as Python lists (what both loops hand the real decoder)."""

    def __init__(self, ncols: int) -> None:
        self.names = [f"c{i}" for i in range(ncols)]

    def batch_from_copy(self, chunks: list[bytes]) -> list[list[Any]]:
        return [a.to_pylist() for a in copy_columns(chunks, len(self.names))]

    def batch_from_raw(self, raw: list[pa.Array]) -> list[list[Any]]:
        for array in raw:
            array.validate(full=True)
        return [a.to_pylist() for a in raw]


def _outcome(batches: Iterator[Any]) -> tuple[list[Any], Any]:
    out = []
    try:
        for batch in batches:
            out.append(batch)
    except (CopyFormatError, psycopg.OperationalError) as exc:
        return out, (type(exc), str(exc))
    return out, None


def _field(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["value", "value", "null", "empty", "negative"]))
    if kind == "null":
        return (-1).to_bytes(4, "big", signed=True)
    if kind == "negative":
        return draw(st.integers(-(2**31), -2)).to_bytes(4, "big", signed=True)
    value = b"" if kind == "empty" else draw(st.binary(min_size=1, max_size=12))
    return len(value).to_bytes(4, "big") + value


@st.composite
def _row(draw: Any, ncols: int) -> bytes:
    width = draw(st.sampled_from([ncols] * 8 + [ncols + 1, max(ncols - 1, 0), 0xFFFF]))
    row = width.to_bytes(2, "big") + b"".join(_field(draw) for _ in range(min(width, ncols + 1)))
    damage = draw(st.sampled_from(["none"] * 10 + ["truncate", "extra", "any"]))
    if damage == "truncate":
        row = row[: draw(st.integers(0, max(len(row) - 1, 0)))]
    elif damage == "extra":
        row += draw(st.binary(min_size=1, max_size=3))
    elif damage == "any":
        row = draw(st.binary(max_size=20))
    return row


@st.composite
def _header(draw: Any) -> bytes:
    ext = draw(st.binary(max_size=4))
    flags = draw(st.sampled_from([0, 0, 0, 0x0001_0000, 0x8000_0000]))
    ext_length = draw(st.sampled_from([len(ext)] * 6 + [len(ext) + 1, 2**32 - 1, 2**31]))
    header = COPY_SIGNATURE + flags.to_bytes(4, "big") + ext_length.to_bytes(4, "big") + ext
    damage = draw(st.sampled_from(["none"] * 8 + ["signature", "short"]))
    if damage == "signature":
        header = b"PGCOPY\n\xff\r\n\x01" + header[11:]
    elif damage == "short":
        header = header[: draw(st.integers(0, 18))]
    return header


@st.composite
def _stream(draw: Any) -> tuple[int, int, list[Any]]:
    ncols = draw(st.integers(0, 3))
    rows = draw(st.lists(_row(ncols), max_size=12))
    header = draw(_header())
    glued = draw(st.booleans())
    messages: list[Any] = []
    if glued and rows:
        messages.append(header + rows.pop(0))
    elif glued:
        messages.append(header + b"\xff\xff")
    else:
        messages.append(header)
    messages.extend(rows)
    if not (glued and not rows) and draw(st.booleans()):
        messages.append(b"\xff\xff")
    messages = [m for m in messages if m]  # libpq drops empty CopyData messages
    if draw(st.integers(0, 9)) == 0:
        messages.insert(draw(st.integers(0, len(messages))), _BROKEN)
    return ncols, draw(st.integers(1, 5)), messages


@given(_stream())
@settings(max_examples=400, deadline=None)
def test_compiled_loop_matches_the_pure_loop_on_any_stream(case: tuple[int, int, list[Any]]) -> None:
    ncols, batch_rows, messages = case
    stream = _Stream(messages)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pgsnapshot, "_copy_out_result", lambda conn: None)  # no server: no result to take
        got = _outcome(_binary_batches_compiled(_Conn(), stream, _Decoder(ncols), batch_rows, walspark_c,
                                                stream.functions()))  # fmt: skip
    assert not stream.live, "a message libpq handed the loop was not freed"
    expected = _outcome(_binary_batches(_Stream(messages), _Decoder(ncols), batch_rows))
    assert got == expected


def test_stand_in_stream_of_plain_rows_takes_the_c_path() -> None:
    """A well-formed stream is read by the C loop alone (no hand-back): batches of raw columns."""
    rows = [b"\x00\x02" + b"\x00\x00\x00\x01" + bytes([i]) + b"\xff\xff\xff\xff" for i in range(10)]
    header = COPY_SIGNATURE + bytes(8)
    stream = _Stream([header + rows[0], *rows[1:], b"\xff\xff"])
    first = walspark_c.read_copy_rows(1, *stream.functions(), 2, 4, True)
    assert first[:2] == (walspark_c.COPY_MORE, 4) and first[2] is not None and first[3] is None
    rest = [walspark_c.read_copy_rows(1, *stream.functions(), 2, 4, False)[:2] for _ in range(2)]
    assert rest == [(walspark_c.COPY_MORE, 4), (walspark_c.COPY_END, 2)]
    assert not stream.live


@given(st.lists(st.binary(max_size=40), max_size=6), st.integers(0, 4))
@settings(max_examples=300, deadline=None)
def test_buffer_splitter_is_the_message_splitter(chunks: list[bytes], ncols: int) -> None:
    """The read loop's splitter (rows in one buffer) gives exactly what ``split_copy_rows`` gives."""
    ends, total = [], 0
    for chunk in chunks:
        total += len(chunk)
        ends.append(total)
    assert walspark_c.split_copy_buffer(b"".join(chunks), ends, ncols) == walspark_c.split_copy_rows(chunks, ncols)
    with pytest.raises(ValueError):
        walspark_c.split_copy_buffer(b"".join(chunks), [total + 1], ncols)
