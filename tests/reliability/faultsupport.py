"""Helpers of the fault tests: a TCP proxy that cuts a connection mid-message, a small spill disk.

Two faults the other suites cannot produce with PostgreSQL's own tools:

* **A connection dropped in the middle of a message.** ``pg_terminate_backend`` and server
  restarts end the stream between protocol messages (the walsender finishes its write before it
  exits). A network failure does not: the client holds the first bytes of a CopyData and then
  EOF. :class:`CuttingProxy` is a real TCP proxy (two threads per connection) that follows the
  server→client framing, so it can forward exactly up to a chosen byte *inside* an XLogData
  message — optionally only one large enough, or only one inside a streamed block — and then
  close both sockets.
* **A full spill disk.** :func:`run_spill_consumer` reads a slot through
  :class:`~walspark.changes.live.LiveTransactions` with a small memory budget and a spill
  directory the test made small (a 256 kB tmpfs, or a file size limit in a child process when
  mounting is not allowed); it can run in this process or as ``python faultsupport.py JSON``.

This file is also run as a script (the ``RLIMIT_FSIZE`` child), so it imports nothing relative.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_HEADER = struct.Struct(">cI")  # a backend message: type byte, Int32 length (counting itself)
#: XLogData inside a CopyData: 'd', Int32, 'w', Int64 start, Int64 end, Int64 clock, then pgoutput.
_PGOUTPUT_AT = 5 + 1 + 24


@dataclass(frozen=True)
class CutSpec:
    """Where to cut one proxied connection.

    ``after`` counts server→client bytes from the end of the CopyBothResponse (the start of the
    replication stream of that connection). The cut lands inside the first XLogData message that
    reaches past that count and is at least ``min_size`` bytes long (and, with ``in_stream``,
    lies between a Stream Start and a Stream Stop), at a random byte strictly inside it — never on
    a boundary, so the client always holds a torn message when the sockets close. ``max_size``
    aims at the small messages instead (Begin, Commit, a one-row Insert).
    """

    after: int
    min_size: int = 0
    max_size: int | None = None
    in_stream: bool = False


@dataclass
class CutRecord:
    """What a cut actually hit, for the test's assertions and its printed report."""

    connection: int
    stream_offset: int  # server→client bytes of the replication stream before the torn message
    message_size: int  # the whole CopyData message, type byte and length included
    forwarded: int  # bytes of that message the client received before the cut
    pgoutput_kind: str  # the torn XLogData's pgoutput message kind
    in_stream: bool


@dataclass
class _Conn:
    number: int
    client: socket.socket
    upstream: socket.socket
    spec: CutSpec | None
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def cut(self) -> None:
        """Close both sides; the client gets EOF after whatever was already forwarded."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class CuttingProxy:
    """A loopback TCP proxy in front of PostgreSQL that tears chosen connections mid-message.

    The ``n``-th connection that reaches the replication stream (0-based) is cut per ``cuts[n]``;
    later ones pass through untouched. Counting only connections that got as far as
    START_REPLICATION keeps a plan intact when a reconnect attempt fails before that (the slot
    still held by the walsender of the connection just cut, say). ``down_after_cuts`` makes the proxy stop listening once every cut happened
    (new connections are refused: the "network stays down" case). Only the replication connection
    should use the proxy: the test's own SQL goes to the server directly.

    The server→client side is parsed as a sequence of typed backend messages, which holds from the
    first byte only when the client sends no SSL/GSS request: use :meth:`dsn`, which disables both.
    """

    def __init__(self, upstream_host: str, upstream_port: int, cuts: Sequence[CutSpec] = (), *,
                 seed: int = 0, down_after_cuts: bool = False) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._cuts = list(cuts)
        self._rng = random.Random(seed)
        self.down_after_cuts = down_after_cuts
        self.records: list[CutRecord] = []
        self.connections = 0
        self._streams = 0  # connections that reached the replication stream
        self._lock = threading.Lock()
        self._live: list[_Conn] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self.cuts_done = threading.Event()
        if not self._cuts:
            self.cuts_done.set()
        self._thread = threading.Thread(target=self._accept_loop, name="cutting-proxy", daemon=True)
        self._thread.start()

    def dsn(self, dsn: str, **params: str) -> str:
        """``dsn`` pointed at the proxy: plain TCP (no SSL/GSS negotiation), plus ``params``."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(dsn, host="127.0.0.1", port=str(self.port), sslmode="disable",
                             gssencmode="disable", **params)

    # -- life cycle --------------------------------------------------------------------------

    def go_down(self) -> None:
        """Stop listening (further connects are refused) and cut every live connection."""
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            live = list(self._live)
        for conn in live:
            conn.cut()

    def close(self) -> None:
        self.go_down()
        self._thread.join(5)

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- forwarding --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                number = self.connections
                self.connections += 1
                conn = _Conn(number, client, upstream, None)
                self._live.append(conn)
            threading.Thread(target=self._pump_up, args=(conn,), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(conn,), daemon=True).start()

    def _pump_up(self, conn: _Conn) -> None:
        """client → server, verbatim."""
        try:
            while data := conn.client.recv(65536):
                conn.upstream.sendall(data)
        except OSError:
            pass
        conn.cut()

    def _pump_down(self, conn: _Conn) -> None:
        """server → client, message by message, tearing the chosen one."""
        buf = bytearray()
        copying = False  # past the CopyBothResponse
        offset = 0  # replication-stream bytes forwarded so far
        in_stream = False  # between Stream Start and Stream Stop
        spec: CutSpec | None = None
        try:
            while True:
                data = conn.upstream.recv(65536)
                if not data:
                    break
                buf += data
                out = bytearray()
                while len(buf) >= 5:
                    kind, length = _HEADER.unpack_from(buf)
                    size = 1 + length
                    if len(buf) < size:
                        break
                    message = bytes(buf[:size])
                    del buf[:size]
                    if not copying:
                        copying = kind == b"W"
                        if copying:
                            spec = conn.spec = self._next_spec()
                        out += message
                        continue
                    xlog = kind == b"d" and size > _PGOUTPUT_AT and message[5:6] == b"w"
                    pgkind = chr(message[_PGOUTPUT_AT]) if xlog else ""
                    if (spec is not None and xlog and offset + size > spec.after and size >= max(spec.min_size, 3)
                            and (spec.max_size is None or size <= spec.max_size)
                            and (in_stream or not spec.in_stream)):
                        forwarded = self._rng.randrange(1, size)
                        conn.client.sendall(out + message[:forwarded])
                        self._record(CutRecord(conn.number, offset, size, forwarded, pgkind, in_stream))
                        conn.cut()
                        return
                    if pgkind == "S":
                        in_stream = True
                    elif pgkind == "E":
                        in_stream = False
                    offset += size
                    out += message
                if out:
                    conn.client.sendall(out)
        except OSError:
            pass
        conn.cut()

    def _next_spec(self) -> CutSpec | None:
        with self._lock:
            spec = self._cuts[self._streams] if self._streams < len(self._cuts) else None
            self._streams += 1
        return spec

    def _record(self, record: CutRecord) -> None:
        with self._lock:
            self.records.append(record)
            done = len(self.records) == len(self._cuts)
        if done:
            self.cuts_done.set()
            if self.down_after_cuts:
                self._stop.set()
                try:
                    self._listener.close()
                except OSError:
                    pass


# -- the spill consumer -----------------------------------------------------------------------


@dataclass
class Delivered:
    """One committed transaction as the consumer got it: ids of its inserted rows, in order."""

    xid: int
    commit_lsn: int
    end_lsn: int
    streamed: bool
    ids: list[int]


@dataclass
class SpillRun:
    """What one consumer run saw: the transactions delivered, the error it stopped on, leftovers."""

    delivered: list[Delivered]
    confirmed: int
    error_type: str | None = None
    error_message: str | None = None
    spill_files_left: list[str] = field(default_factory=list)
    spilled_transactions: int = 0
    failed_in: str | None = None  # "feed" (while buffering) or "messages" (reading a commit back)
    failure_sticks: bool | None = None  # after a SpillError in feed: does the assembler refuse more input?


def run_spill_consumer(dsn: str, slot: str, publication: str, spill_dir: str, *, memory_budget: int,
                       streaming: str, until_xid: int, delivered_lsn: int = 0, timeout: float = 60.0) -> SpillRun:
    """Read ``slot`` until transaction ``until_xid`` is delivered or an error stops the read.

    Confirms each transaction once its rows are "written" (here: recorded), as a sink would.
    Any exception ends the run and is reported, not raised: the caller checks its type and text
    (and, as a child process, could not raise it across the pipe anyway). The stream is closed
    before the spill directory is listed, so a leftover file is one the close did not remove.
    """
    from walspark.changes.assembly import CommittedTransaction
    from walspark.changes.live import LiveTransactions
    from walspark.protocol import Insert, decode_message
    from walspark.source import ReconnectPolicy, ReplicationStream, StreamOptions

    stream = ReplicationStream(dsn, slot, StreamOptions((publication,), streaming=streaming), status_interval=0.2,
                               idle_confirm=False, reconnect=ReconnectPolicy(max_attempts=3, initial_delay=0.1))
    live = LiveTransactions(stream, delivered_lsn=delivered_lsn, memory_budget=memory_budget, spill_dir=spill_dir)
    run = SpillRun(delivered=[], confirmed=delivered_lsn)
    deadline = time.monotonic() + timeout
    try:
        while not any(d.xid == until_xid for d in run.delivered):
            if time.monotonic() > deadline:
                raise TimeoutError(f"transaction {until_xid} not delivered within {timeout:.0f} s")
            run.failed_in = "feed"
            events = live.read(0.2) or []
            run.failed_in = "messages"
            for event in events:
                if not isinstance(event, CommittedTransaction):
                    continue
                ids = []
                for lsn, in_stream, data in event.messages():
                    proto = stream.options.proto_version  # type: ignore[union-attr]
                    message = decode_message(data, protocol_version=proto, in_stream=in_stream, lsn=lsn)
                    if isinstance(message, Insert):
                        ids.append(int(message.new_tuple.values[0]))
                event.release()
                run.delivered.append(Delivered(event.xid, event.commit_lsn, event.end_lsn, event.streamed, ids))
                live.confirm(event.end_lsn)
                run.confirmed = event.end_lsn
        run.failed_in = None
    except Exception as exc:  # noqa: BLE001 - reported to the test
        run.error_type = type(exc).__name__
        run.error_message = str(exc)
        if run.error_type == "SpillError" and run.failed_in == "feed" and live.assembler is not None:
            # Whatever comes next (here a Stream Stop), the failed assembler must not take it:
            # the rest of the broken transaction would otherwise be assembled into something.
            try:
                live.assembler.feed(0, b"E")
                run.failure_sticks = False
            except Exception as again:  # noqa: BLE001
                run.failure_sticks = again is exc
    finally:
        if live.assembler is not None:
            run.spilled_transactions = live.assembler.spilled_transactions
        try:
            live.close()
        except Exception as exc:  # noqa: BLE001 - a close that fails is a finding too
            run.error_type = run.error_type or type(exc).__name__
            run.error_message = (run.error_message or "") + f" [close failed: {type(exc).__name__}: {exc}]"
    run.spill_files_left = sorted(p.name for p in Path(spill_dir).rglob("*") if p.is_file())
    return run


def run_spill_consumer_limited(file_size_limit: int, **kwargs: Any) -> SpillRun:
    """:func:`run_spill_consumer` in a child process whose files may not exceed ``file_size_limit``.

    The fallback where a tmpfs cannot be mounted: ``RLIMIT_FSIZE`` makes a write past the limit
    fail with EFBIG — provided SIGXFSZ, which would kill the process first, is ignored. Both are
    set in the child only, so pytest's own files are unaffected.
    """
    import subprocess

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = json.dumps({"limit": file_size_limit, "kwargs": kwargs})
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), args], capture_output=True, env=env,
                          timeout=kwargs.get("timeout", 60.0) + 60)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise AssertionError(f"spill consumer child exited {proc.returncode}:\n"
                             f"{proc.stderr.decode(errors='replace')[-3000:]}")
    raw = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    raw["delivered"] = [Delivered(**d) for d in raw["delivered"]]
    return SpillRun(**raw)


def _child_main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    limit = int(spec["limit"])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    run = run_spill_consumer(**spec["kwargs"])
    print(json.dumps(asdict(run)))


if __name__ == "__main__":
    _child_main(sys.argv)
