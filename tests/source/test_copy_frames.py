"""The replication stream's compiled frame reader against its pure reference: the same frames, the same end.

``CopyBoth.read`` takes one CopyData per ctypes call on the pure path; with ``walspark_c`` it takes
every whole message libpq holds in one call (``read_copy_frames``) and hands them out one by one.
Only ``None`` ("nothing buffered now") may come at other moments; the frames, their order and how
the stream ends (the server's end, a broken connection) are the reference's.
"""

from __future__ import annotations

import ctypes
from collections import deque
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from srcutil import setup_source

from tests.spark.test_copy_loop import _FREE, _GET, _libc  # the libpq stand-in's C types
from walspark import compiled
from walspark.source import ReplicationStream, StreamOptions, _libpq
from walspark.source._libpq import CopyBoth, CopyEnded, LibpqConnectionError

pytestmark = pytest.mark.skipif(
    compiled.speedups is None or not hasattr(compiled.speedups, "read_copy_frames"),
    reason="walspark_c is not built (./dev setup builds it)",
)

_WAIT, _END, _BROKEN = 0, -1, -2  # in a script: what PQgetCopyData returns instead of a message


class _Script:
    """libpq's PQgetCopyData and PQfreemem over a script of messages and return codes."""

    def __init__(self, items: list[bytes | int]) -> None:
        self.queue: deque[bytes | int] = deque(items)
        self.live: set[int] = set()
        self.get = _GET(self._get)
        self.free = _FREE(self._free)

    def address(self, fn: Any) -> int:
        return ctypes.cast(fn, ctypes.c_void_p).value or 0

    def _get(self, conn: int, buffer: Any, async_: int) -> int:
        assert conn == 1 and async_ == 1  # the stream never blocks in libpq
        item = self.queue.popleft() if self.queue else _WAIT
        if isinstance(item, int):
            if item != _WAIT:
                self.queue.appendleft(item)  # the end repeats, as libpq's does
            return item
        address = _libc.malloc(max(len(item), 1))
        ctypes.memmove(address, item, len(item))
        self.live.add(address)
        buffer[0] = address
        return len(item)

    def _free(self, address: int) -> None:
        self.live.remove(address)
        _libc.free(address)


class _Scripted(CopyBoth):
    """CopyBoth on a scripted libpq: the end and the error are named, not fetched from a server."""

    __slots__ = ()

    def _copy_end(self) -> CopyEnded:
        return CopyEnded(None, "the script ended")

    def _error(self) -> str:
        return "the script broke"


def _outcome(items: list[bytes | int], *, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], str]:
    script = _Script(items)
    monkeypatch.setattr(_libpq, "_functions", lambda: (script.address(script.get), script.address(script.free)))
    io = _Scripted(1, speedups=compiled.speedups if fast else None)
    if not fast:  # the pure path's own ctypes calls, on the script
        get = ctypes.cast(script.get, ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int))
        object.__setattr__(io, "_get", get)
        monkeypatch.setattr(io._lib, "PQfreemem", script.free, raising=False)
    frames: list[bytes] = []
    for _ in range(4 * len(items) + 4):
        try:
            data = io.read()
        except (CopyEnded, LibpqConnectionError) as exc:
            ending = type(exc).__name__
            break
        if data is not None:
            frames.append(data)
    else:
        ending = "waiting"
    assert not script.live, "a message libpq handed over was not freed"
    return frames, ending


_messages = st.lists(st.one_of(st.binary(min_size=1, max_size=40), st.just(_WAIT)), max_size=1200)


@settings(max_examples=150, deadline=None)
@given(items=_messages, last=st.sampled_from([_WAIT, _END, _BROKEN]))
def test_compiled_frames_are_the_pure_frames(items: list[bytes | int], last: int) -> None:
    script = [*items, last]
    with pytest.MonkeyPatch.context() as m:
        pure = _outcome(script, fast=False, monkeypatch=m)
    with pytest.MonkeyPatch.context() as m:
        fast = _outcome(script, fast=True, monkeypatch=m)
    assert fast == pure
    assert pure[0] == [i for i in items if isinstance(i, bytes)]


def test_a_live_stream_reads_alike_both_ways(pg18_dsn: str) -> None:
    """A real walsender: more messages than one compiled read takes, then keepalives while idle."""
    setup_source(pg18_dsn, slot="s_fast")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('s_pure', 'pgoutput')")
        conn.execute("INSERT INTO t SELECT g, repeat('x', g % 50) FROM generate_series(1, 3000) g")
        conn.execute("UPDATE t SET v = v || 'y' WHERE id % 3 = 0")
        end = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert end is not None

    def read(slot: str, speedups: Any) -> list[tuple[int, bytes]]:
        got: list[tuple[int, bytes]] = []
        original = CopyBoth.__init__

        def init(self: CopyBoth, ptr: int, speedups_: Any = None) -> None:
            original(self, ptr, speedups)

        CopyBoth.__init__ = init  # type: ignore[method-assign]
        try:
            with ReplicationStream(pg18_dsn, slot, StreamOptions(("pub",))) as stream:
                while not got or got[-1][1][:1] != b"C" or len(got) < 4000:
                    item = stream.read(10)
                    assert item is not None, "the stream stalled"
                    got.append((item.data_start, item.payload))
        finally:
            CopyBoth.__init__ = original  # type: ignore[method-assign]
        return got

    fast, pure = read("s_fast", compiled.speedups), read("s_pure", None)
    assert len(fast) > CopyBoth.BATCH and fast == pure
