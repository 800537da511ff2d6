"""COPY BOTH I/O on psycopg2's own libpq connection, through ctypes.

psycopg2's ``read_message()`` / ``send_feedback()`` advance and report the flush position by
themselves, which can confirm data the consumer never made durable; so walspark moves CopyData
itself on psycopg2's ``PGconn``. See docs/design/source.md for the reasoning.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from walspark import compiled

__all__ = ["CopyBoth", "CopyEnded", "LibpqConnectionError"]

_PGRES_COMMAND_OK = 1
_PGRES_FATAL_ERROR = 7
_PG_DIAG_SQLSTATE = ord("C")


class LibpqConnectionError(Exception):
    """The connection broke (``PQgetCopyData`` -2, ``PQconsumeInput``/``PQputCopyData`` failed)."""


class CopyEnded(Exception):
    """The server ended COPY BOTH; carries its error (``sqlstate``, message) if it sent one."""

    def __init__(self, sqlstate: str | None, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message


@functools.cache
def _functions() -> tuple[int, int]:
    """Addresses of ``PQgetCopyData`` and ``PQfreemem`` (for the compiled reader)."""
    lib = _lib()
    return (
        ctypes.cast(lib.PQgetCopyData, ctypes.c_void_p).value or 0,
        ctypes.cast(lib.PQfreemem, ctypes.c_void_p).value or 0,
    )


@functools.cache
def _lib() -> Any:
    import psycopg2._psycopg as ext

    lib = ctypes.CDLL(ext.__file__)
    vp, i = ctypes.c_void_p, ctypes.c_int
    for name, res, args in (
        ("PQgetCopyData", i, [vp, ctypes.POINTER(vp), i]),
        ("PQputCopyData", i, [vp, ctypes.c_char_p, i]),
        ("PQputCopyEnd", i, [vp, ctypes.c_char_p]),
        ("PQflush", i, [vp]),
        ("PQconsumeInput", i, [vp]),
        ("PQsocket", i, [vp]),
        ("PQgetResult", vp, [vp]),
        ("PQresultStatus", i, [vp]),
        ("PQresultErrorField", ctypes.c_char_p, [vp, i]),
        ("PQresultErrorMessage", ctypes.c_char_p, [vp]),
        ("PQclear", None, [vp]),
        ("PQerrorMessage", ctypes.c_char_p, [vp]),
        ("PQfreemem", None, [vp]),
    ):
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


class CopyBoth:
    """Raw CopyData in and out of one ``PGconn`` already in COPY BOTH mode.

    Not thread-safe by itself: the caller serialises calls (the stream holds a lock).
    """

    __slots__ = ("_at", "_buf", "_buf_ref", "_conn", "_fast", "_frames", "_get", "_lib", "_ptr", "_stopped")

    #: Messages the compiled reader takes from libpq per call.
    BATCH = 512

    def __init__(self, pgconn_ptr: int, speedups: Any = compiled.speedups) -> None:
        self._lib = _lib()
        self._ptr = pgconn_ptr
        self._conn = ctypes.c_void_p(pgconn_ptr)
        self._buf = ctypes.c_void_p()
        # Made once: read() runs once per message, and building these each time showed in profiles.
        self._buf_ref = ctypes.byref(self._buf)
        self._get = self._lib.PQgetCopyData
        # The compiled reader takes every whole message libpq holds in one call; read() then hands
        # them out one by one. What stopped it (the end, a broken connection) waits its turn.
        self._fast = speedups if speedups is not None and hasattr(speedups, "read_copy_frames") else None
        self._frames: list[bytes] = []
        self._at = 0
        self._stopped = 0

    def socket(self) -> int:
        return self._lib.PQsocket(self._conn)

    def buffered(self) -> bytes | None:
        """The next message the compiled reader already took from libpq, else None (no libpq call:
        safe without the caller's lock)."""
        if self._at < len(self._frames):
            self._at += 1
            return self._frames[self._at - 1]
        return None

    def read(self) -> bytes | None:
        """One CopyData payload if a whole one is buffered, else None (never blocks)."""
        data = self.buffered()
        if data is not None:
            return data
        if self._fast is not None:
            return self._read_batch(self._fast)
        n = self._get(self._conn, self._buf_ref, 1)
        if n > 0:
            try:
                return ctypes.string_at(self._buf, n)
            finally:
                self._lib.PQfreemem(self._buf)
        if n == 0:
            return None
        raise self._ended(n)

    def _read_batch(self, fast: Any) -> bytes | None:
        status = self._stopped
        if not status:
            get, free = _functions()
            status, frames = fast.read_copy_frames(self._ptr, get, free, self.BATCH)
            if frames:
                self._frames, self._at = frames, 1
                if status in (fast.COPY_END, fast.COPY_FAILED):
                    self._stopped = status  # raised once the frames before it are handed out
                return frames[0]
        self._frames, self._at, self._stopped = [], 0, 0
        if status == fast.COPY_END:
            raise self._ended(-1)
        if status == fast.COPY_FAILED:
            raise self._ended(-2)
        return None

    def _ended(self, n: int) -> Exception:
        """PQgetCopyData's -1 (the server ended COPY BOTH) or -2 (the connection broke), as an error."""
        return self._copy_end() if n == -1 else LibpqConnectionError(self._error())

    def consume_input(self) -> None:
        """Move whatever the socket holds into libpq's buffer (non-blocking)."""
        if not self._lib.PQconsumeInput(self._conn):
            raise LibpqConnectionError(self._error())

    def write(self, data: bytes) -> None:
        """Queue one CopyData message and flush it to the socket."""
        lib = self._lib
        if lib.PQputCopyData(self._conn, data, len(data)) != 1 or lib.PQflush(self._conn) != 0:
            raise LibpqConnectionError(self._error())

    def end(self, timeout: float) -> bool:
        """End COPY BOTH cleanly: send CopyDone, drain until the server's CopyDone and results.

        When this returns True the walsender has left its streaming loop and released the slot,
        so the slot can be dropped, or streamed by a new connection, at once. False means the
        exchange did not complete in ``timeout`` seconds (or the connection broke); the caller
        then simply closes the connection and the server notices on its own.
        """
        import select
        import time

        lib = self._lib
        deadline = time.monotonic() + timeout
        try:
            if lib.PQputCopyEnd(self._conn, None) != 1 or lib.PQflush(self._conn) != 0:
                return False
            poller = select.poll()
            poller.register(self.socket(), select.POLLIN | select.POLLERR | select.POLLHUP)
            while True:
                n = lib.PQgetCopyData(self._conn, ctypes.byref(self._buf), 1)
                if n > 0:
                    lib.PQfreemem(self._buf)
                    continue
                if n == -1:
                    break
                if n < -1:
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                poller.poll(remaining * 1000)
                if not lib.PQconsumeInput(self._conn):
                    return False
            for _ in range(100):  # CommandComplete of START_REPLICATION, then NULL
                res = lib.PQgetResult(self._conn)
                if not res:
                    return True
                lib.PQclear(res)
            return False
        except OSError:
            return False

    def _error(self) -> str:
        raw = self._lib.PQerrorMessage(self._conn)
        return (raw or b"connection lost").decode(errors="replace").strip() or "connection lost"

    def _copy_end(self) -> CopyEnded:
        lib = self._lib
        sqlstate: str | None = None
        message = ""
        for _ in range(100):  # drain results until NULL (bounded: never spin on a broken conn)
            res = lib.PQgetResult(self._conn)
            if not res:
                break
            try:
                if lib.PQresultStatus(res) == _PGRES_FATAL_ERROR:
                    state = lib.PQresultErrorField(res, _PG_DIAG_SQLSTATE)
                    sqlstate = state.decode() if state else sqlstate
                    msg = lib.PQresultErrorMessage(res)
                    message = (msg or b"").decode(errors="replace").strip() or message
            finally:
                lib.PQclear(res)
        return CopyEnded(sqlstate, message or self._error() or "the server ended the replication stream")
