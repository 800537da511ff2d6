"""A logical replication stream of raw pgoutput messages, with feedback that never runs ahead.

What walspark reports as flushed never passes what the consumer confirmed, but for an idle
keepalive; reconnects restart from there. See docs/design/source.md for the invariant.
"""

from __future__ import annotations

import logging
import random
import select
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from walspark.protocol.framing import PrimaryKeepalive, StandbyStatusUpdate
from walspark.protocol.lsn import datetime_to_pg_timestamp, format_lsn

from ._libpq import CopyBoth, CopyEnded, LibpqConnectionError
from .connect import classify_error, connect_replication, error_from_exception
from .dsn import redact_dsn, redact_secrets
from .errors import (
    ConnectionLost,
    PublicationNotFound,
    ReconnectExhausted,
    ReplicationError,
    SlotInvalidated,
    SlotNotFound,
    SourceError,
    WalLevelNotLogical,
)
from .names import validate_slot_name
from .options import ResolvedOptions, StreamOptions, start_replication_command
from .reconnect import ReconnectPolicy
from .slots import SlotInfo, _row_to_info, _slot_query, create_slot_command

__all__ = ["RawMessage", "Reconnected", "ReplicationStream", "StreamItem", "StreamPositions"]

log = logging.getLogger(__name__)

_XLOG_HEADER = struct.Struct(">QQq")
_XLOG_PAYLOAD = 1 + _XLOG_HEADER.size

# pgoutput kind bytes that open/close a transaction, for the "nothing pending" test.
_OPENS_TXN = frozenset(b"Bb")  # Begin, Begin Prepare
_CLOSES_TXN = frozenset(b"CP")  # Commit, Prepare
_STREAM_START, _STREAM_COMMIT, _STREAM_PREPARE, _STREAM_ABORT = b"S"[0], b"c"[0], b"p"[0], b"A"[0]


@dataclass(frozen=True, slots=True)
class RawMessage:
    """One XLogData frame: where it starts in the WAL, the server's WAL end and clock, the payload.

    ``payload`` is one pgoutput message, exactly as sent (decode it with
    :class:`walspark.protocol.decoder.Decoder` configured from :attr:`ReplicationStream.options`).
    For a Commit (and Stream Commit, Prepare, Commit Prepared) ``data_start`` is the end LSN of
    the transaction — the value to pass to :meth:`ReplicationStream.confirm` once it is durable.
    """

    data_start: int
    wal_end: int
    send_time: int
    payload: bytes

    @property
    def kind(self) -> str:
        """The pgoutput message kind letter (``"B"``, ``"I"``, ``"C"``...)."""
        return chr(self.payload[0]) if self.payload else ""


@dataclass(frozen=True, slots=True)
class Reconnected:
    """Yielded once after a reconnect, before the first message of the new connection.

    The server restarts at ``start_lsn`` and resends every transaction committed after it:
    a consumer drops any transaction it had only partly received, and filters whole duplicates
    (:class:`walspark.source.dedup.DuplicateFilter` passes this item through and resets itself).
    """

    attempts: int
    start_lsn: int
    cause: str

    def __str__(self) -> str:
        return f"reconnected after {self.attempts} attempt(s), resuming at {format_lsn(self.start_lsn)}: {self.cause}"


StreamItem = RawMessage | Reconnected


@dataclass(frozen=True, slots=True)
class StreamPositions:
    """A consistent snapshot of the stream's positions (LSNs as ints)."""

    received: int
    confirmed: int
    flushed: int
    sent_flush: int
    server_wal_end: int


def _now_pg() -> int:
    return datetime_to_pg_timestamp(datetime.now(UTC))


class ReplicationStream:
    """Stream raw pgoutput messages from a slot; see the module docstring for the guarantees.

    Args:
        dsn: libpq connection string or URI of the slot's database (``replication=database``
            is added by the driver; ``sslmode`` and friends pass through).
        slot: slot name (must exist unless ``create_temporary_slot``).
        options: pgoutput options; unspecified ones are negotiated from the server version.
        start_lsn: the consumer's durable position from its own bookkeeping (0 = the slot's
            ``confirmed_flush_lsn``). The server starts at the later of the two.
        status_interval: seconds between standby status updates (well below
            ``wal_sender_timeout``, 60 s by default on the server).
        heartbeat: send status updates from a background thread while the consumer does not
            read, so a slow consumer does not time out.
        idle_confirm: report keepalive positions as flushed when nothing is pending (see
            module docstring). Off, the slot only moves with :meth:`confirm`.
        before_idle_confirm: called with an idle-confirm position before it is reported, for a
            consumer whose own bookkeeping must know the slot may move there (the Spark
            stager records it durably); if it raises, the position is not reported.
        reconnect: the retry policy, or None to raise on the first dropped connection.
        on_reconnect: called with each :class:`Reconnected` (also yielded by the stream).
        create_temporary_slot: create ``slot`` as a TEMPORARY slot on the stream's own
            connection (for tests and one-off reads); it vanishes with the connection, so a
            reconnect then fails with :class:`~walspark.source.errors.SlotNotFound`.
        retry_on_open: apply ``reconnect`` to the first connection too.

    Use as a context manager or call :meth:`open`/:meth:`close`. Iterating blocks for the next
    item; :meth:`read` takes a timeout.
    """

    def __init__(
        self,
        dsn: str,
        slot: str,
        options: StreamOptions,
        *,
        start_lsn: int = 0,
        status_interval: float = 10.0,
        heartbeat: bool = True,
        idle_confirm: bool = True,
        before_idle_confirm: Callable[[int], None] | None = None,
        reconnect: ReconnectPolicy | None = ReconnectPolicy(),
        on_reconnect: Callable[[Reconnected], None] | None = None,
        create_temporary_slot: bool = False,
        retry_on_open: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        validate_slot_name(slot)
        if status_interval <= 0:
            raise ValueError("status_interval must be > 0")
        self.dsn = dsn
        self.slot = slot
        self.requested_options = options
        self.status_interval = float(status_interval)
        self.idle_confirm = idle_confirm
        self.before_idle_confirm = before_idle_confirm
        self.reconnect_policy = reconnect
        self.on_reconnect = on_reconnect
        self.create_temporary_slot = create_temporary_slot
        self.retry_on_open = retry_on_open
        self._rng = rng or random.Random()
        self._use_heartbeat = heartbeat

        self._lock = threading.RLock()
        self._conn: Any = None
        self._io: CopyBoth | None = None
        self._poll: Any = None
        self._broken: SourceError | None = None
        self._closed = False
        self._fatal: SourceError | None = None
        self._opened = False
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._temp_slot_created = False

        self.options: ResolvedOptions | None = None
        #: The slot as it was just before the last START_REPLICATION (e.g. whether two-phase
        #: decoding was already on: the start may turn it on).
        self.slot_info: SlotInfo | None = None
        self.server_version: int | None = None
        self.backend_pid: int | None = None
        self.start_lsn = start_lsn
        self.reconnects = 0

        self._received = 0
        self._confirmed = start_lsn
        self._flushed = start_lsn
        self._sent_flush = 0
        self._server_wal_end = 0
        self._last_status = 0.0
        self._in_txn = False
        self._open_streams: set[int] = set()

    # ------------------------------------------------------------------ life cycle

    def open(self) -> ReplicationStream:
        """Connect and start streaming.

        Non-retryable problems raise here at once. Retryable ones (server starting up, the slot
        still held by the walsender of a crashed predecessor until that one notices) are retried
        under the reconnect policy, when ``retry_on_open`` is set.
        """
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise ReplicationError("stream is closed")
        if not self._opened:
            try:
                self._connect()
            except SourceError as exc:
                if not (exc.retryable and self.retry_on_open and self.reconnect_policy is not None):
                    raise
                self._retry_connect(exc)
            self._opened = True
            if self._use_heartbeat:
                self._heartbeat = threading.Thread(
                    target=self._heartbeat_loop, name=f"walspark-heartbeat-{self.slot}", daemon=True
                )
                self._heartbeat.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Send a last status update, end the stream cleanly and close the connection.

        Ending with CopyDone (rather than just hanging up) means that when ``close`` returns the
        walsender has released the slot: it can be dropped, or streamed by a new connection,
        right away instead of failing with "slot is active" until the server notices the
        disconnect. Everything is best effort within ``timeout`` seconds.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        with self._lock:
            if self._io is not None and self._broken is None:
                try:
                    self._send_status_locked()
                    if not self._io.end(timeout):
                        log.debug("slot %s: the server did not acknowledge the end of streaming", self.slot)
                except SourceError:
                    pass
            self._teardown_locked()
        if self._heartbeat is not None and self._heartbeat is not threading.current_thread():
            self._heartbeat.join(timeout=5)

    def __enter__(self) -> ReplicationStream:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ consumer API

    def __iter__(self) -> Iterator[StreamItem]:
        while not self._closed:
            item = self.read(None)
            if item is not None:
                yield item

    def read(self, timeout: float | None = None) -> StreamItem | None:
        """The next message (or :class:`Reconnected`), or None if ``timeout`` seconds pass first."""
        if self._fatal is not None:
            raise self._fatal
        if not self._opened:
            self.open()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                if self._fatal is not None:
                    raise self._fatal
                return None
            try:
                return self._read_until(deadline)
            except (LibpqConnectionError, CopyEnded, SourceError) as exc:
                err = self._as_source_error(exc)
                if self._closed:
                    return None
                if not err.retryable or self.reconnect_policy is None:
                    raise self._fail(err) from None
                return self._reconnect(err)

    def confirm(self, lsn: int) -> None:
        """Declare everything up to ``lsn`` durable (monotonic: lower values are ignored).

        ``lsn`` is typically the ``data_start`` of a Commit message (= the transaction's end
        LSN). Confirming beyond what was received is a consumer bug and raises ValueError.
        """
        if not isinstance(lsn, int) or lsn < 0:
            raise ValueError(f"invalid LSN {lsn!r}")
        with self._lock:
            if lsn <= self._confirmed:
                return
            limit = max(self._received, self._flushed)
            if lsn > limit:
                raise ValueError(f"cannot confirm {format_lsn(lsn)}: only received up to {format_lsn(limit)}")
            self._confirmed = lsn
            if lsn > self._flushed:
                self._flushed = lsn

    def send_feedback(self, *, reply_requested: bool = False) -> None:
        """Send a standby status update now (normally automatic)."""
        with self._lock:
            if self._io is None:
                raise ConnectionLost("stream is not connected")
            self._send_status_locked(reply_requested)

    @property
    def positions(self) -> StreamPositions:
        with self._lock:
            return StreamPositions(
                self._received, self._confirmed, self._flushed, self._sent_flush, self._server_wal_end
            )

    @property
    def received_lsn(self) -> int:
        return self._received

    @property
    def confirmed_lsn(self) -> int:
        return self._confirmed

    @property
    def flushed_lsn(self) -> int:
        return self._flushed

    # ------------------------------------------------------------------ reading

    def _read_until(self, deadline: float | None) -> RawMessage | None:
        while True:
            if self._broken is not None:
                raise self._broken
            io = self._io
            # Messages the reader already took from libpq: plain Python objects, no lock needed.
            data = io.buffered() if io is not None else None
            if data is not None:
                item = self._frame(data)
                if item is not None:
                    return item
                continue  # a keepalive
            if time.monotonic() - self._last_status >= self.status_interval:
                with self._lock:
                    self._send_status_locked()
            io, poller = self._io, self._poll
            if io is None or poller is None:
                raise ConnectionLost("stream is not connected")
            with self._lock:
                if self._io is not io:  # closed (or replaced) by another thread meanwhile
                    continue
                data = io.read()
            if data is None:
                now = time.monotonic()
                wait = self._last_status + self.status_interval - now
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait = min(wait, deadline - now)
                poller.poll(max(0.0, wait) * 1000)
                with self._lock:
                    if self._io is io:  # never touch a PGconn that close() already freed
                        io.consume_input()
                continue
            item = self._frame(data)
            if item is not None:
                return item

    def _frame(self, data: bytes) -> RawMessage | None:
        """One frame read: an XLogData's message, or None once a keepalive is handled."""
        kind = data[0]
        if kind == 0x77:  # 'w' XLogData
            data_start, wal_end, send_time = _XLOG_HEADER.unpack_from(data, 1)
            payload = data[_XLOG_PAYLOAD:]
            self._track(data_start, payload)
            return RawMessage(data_start, wal_end, send_time, payload)
        if kind == 0x6B:  # 'k' primary keepalive
            keepalive = PrimaryKeepalive.decode(data)
            with self._lock:
                self._on_keepalive(keepalive.wal_end)
                if keepalive.reply_requested:
                    self._send_status_locked()
            return None
        raise ReplicationError(f"unexpected replication frame kind 0x{kind:02X} on slot {self.slot!r}")

    def _track(self, data_start: int, payload: bytes) -> None:
        """Bookkeeping for the idle-confirm test: one comparison and one kind-byte look-up."""
        if data_start > self._received:
            self._received = data_start
        if not payload:
            return
        k = payload[0]
        if k in _OPENS_TXN:
            self._in_txn = True
        elif k in _CLOSES_TXN:
            self._in_txn = False
        elif k == _STREAM_START:
            self._open_streams.add(int.from_bytes(payload[1:5], "big"))
        elif k == _STREAM_COMMIT or k == _STREAM_PREPARE:
            self._open_streams.discard(int.from_bytes(payload[1:5], "big"))
        elif k == _STREAM_ABORT and payload[1:5] == payload[5:9]:
            self._open_streams.discard(int.from_bytes(payload[1:5], "big"))

    def _on_keepalive(self, wal_end: int) -> None:
        """Idle confirm: see the module docstring for why this is safe exactly under this test."""
        if wal_end > self._server_wal_end:
            self._server_wal_end = wal_end
        if (
            self.idle_confirm
            and not self._in_txn
            and not self._open_streams
            and self._confirmed >= self._received
            and wal_end > self._flushed
        ):
            if self.before_idle_confirm is not None:
                try:
                    self.before_idle_confirm(wal_end)
                except Exception as exc:  # noqa: BLE001 - the consumer said no: keep the slot where it is
                    log.warning("slot %s: idle confirm of %s refused (%s)", self.slot, format_lsn(wal_end), exc)
                    return
            log.debug("slot %s idle: reporting keepalive position %s as flushed", self.slot, format_lsn(wal_end))
            self._flushed = wal_end

    # ------------------------------------------------------------------ feedback

    def _send_status_locked(self, reply_requested: bool = False) -> None:
        io = self._io
        if io is None:
            return
        flushed = self._flushed
        status = StandbyStatusUpdate(
            written=max(self._received, flushed),
            flushed=flushed,
            applied=flushed,
            client_time=_now_pg(),
            reply_requested=reply_requested,
        )
        try:
            io.write(status.encode())
        except LibpqConnectionError as exc:
            self._broken = self._as_source_error(exc)
            raise self._broken from None
        self._sent_flush = flushed
        self._last_status = time.monotonic()
        log.debug("slot %s status: write=%s flush=%s", self.slot, format_lsn(status.written), format_lsn(flushed))

    def _heartbeat_loop(self) -> None:
        """Keep the walsender's timeout at bay while the consumer is busy elsewhere."""
        step = min(self.status_interval, 1.0) / 2
        while not self._stop.wait(step):
            if time.monotonic() - self._last_status < self.status_interval:
                continue
            with self._lock:
                if self._io is None or self._broken is not None or self._closed:
                    continue
                try:
                    self._send_status_locked()
                except SourceError as exc:
                    log.debug("heartbeat: connection of slot %s broke: %s", self.slot, exc)

    # ------------------------------------------------------------------ connecting

    def _connect(self) -> None:
        """Open the connection, check the slot and publications, START_REPLICATION."""
        import psycopg2

        conn = connect_replication(self.dsn)
        try:
            version = conn.server_version
            resolved = self.requested_options.resolve(version)
            cur = conn.cursor()
            cur.execute("SELECT current_setting('wal_level'), current_database()::text")
            wal_level, database = cur.fetchone()
            if wal_level != "logical":
                raise WalLevelNotLogical(
                    f"wal_level is {wal_level!r} on {redact_dsn(self.dsn)}; set wal_level = logical and restart PostgreSQL"
                )
            if self.create_temporary_slot and not self._temp_slot_created:
                cur.execute(
                    create_slot_command(self.slot, server_version_num=version, temporary=True, snapshot="nothing")
                )
                self._temp_slot_created = True
            cur.execute(_slot_query(version) + " WHERE s.slot_name = %s", (self.slot,))
            row = cur.fetchone()
            if row is None:
                hint = " (it was TEMPORARY and died with the previous connection)" if self._temp_slot_created else ""
                raise SlotNotFound(
                    f"replication slot {self.slot!r} does not exist{hint} on {redact_dsn(self.dsn)}; "
                    "create it with `walspark slot create`"
                )
            info = _row_to_info(row)
            if info.slot_type != "logical" or info.plugin != "pgoutput":
                raise ReplicationError(
                    f"slot {self.slot!r} is a {info.slot_type} slot with plugin {info.plugin!r}; "
                    "walspark needs a logical slot using pgoutput"
                )
            if info.database != database:
                raise SlotNotFound(
                    f"slot {self.slot!r} belongs to database {info.database!r}, but the connection is to {database!r}"
                )
            if info.invalidated:
                from .preflight import lost_slot_line

                raise SlotInvalidated(lost_slot_line(info))
            cur.execute(
                "SELECT pubname::text FROM pg_publication WHERE pubname = ANY(%s)", (list(resolved.publication_names),)
            )
            have = {r[0] for r in cur.fetchall()}
            missing = [n for n in resolved.publication_names if n not in have]
            if missing:
                raise PublicationNotFound(
                    f"publication(s) {', '.join(map(repr, missing))} do not exist in database "
                    f"{database!r}; create them (CREATE PUBLICATION) or fix --publication"
                )
            with self._lock:
                if info.confirmed_flush_lsn is not None and info.confirmed_flush_lsn > self._flushed:
                    # Never report less than the server already has: older servers would move
                    # the slot backwards in memory.
                    self._flushed = info.confirmed_flush_lsn
                start = self._flushed
            command = start_replication_command(self.slot, start, resolved)
            log.info("starting replication on %s: %s", redact_dsn(self.dsn), command)
            cur.start_replication_expert(command, decode=False)
        except psycopg2.Error as exc:
            conn.close()
            raise error_from_exception(exc, dsn=self.dsn, what=f"cannot stream from slot {self.slot!r}") from None
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self._conn = conn
            self._io = CopyBoth(conn.pgconn_ptr)
            self._poll = select.poll()
            self._poll.register(self._io.socket(), select.POLLIN | select.POLLERR | select.POLLHUP)
            self._broken = None
            self._in_txn = False
            self._open_streams.clear()
            self.options = resolved
            self.slot_info = info
            self.server_version = version
            self.backend_pid = conn.get_backend_pid()
            self.start_lsn = start
            self._last_status = 0.0  # report our position right away

    def _reconnect(self, cause: SourceError) -> Reconnected:
        with self._lock:
            self._teardown_locked()
        log.warning("replication connection of slot %s lost (%s); reconnecting", self.slot, cause)
        attempts = self._retry_connect(cause)
        self.reconnects += 1
        event = Reconnected(attempts, self.start_lsn, str(cause))
        log.warning("slot %s: %s", self.slot, event)
        if self.on_reconnect is not None:
            self.on_reconnect(event)
        return event

    def _retry_connect(self, cause: SourceError) -> int:
        """Connect under the reconnect policy; returns the attempts it took or raises."""
        policy = self.reconnect_policy
        assert policy is not None
        began = time.monotonic()
        last: SourceError = cause
        attempts = 0
        for delay in policy.delays(self._rng):
            if policy.max_elapsed is not None and time.monotonic() - began + delay > policy.max_elapsed:
                break
            if self._stop.wait(delay):
                raise ReplicationError("stream closed while reconnecting")
            attempts += 1
            try:
                self._connect()
            except SourceError as exc:
                if not exc.retryable:
                    raise self._fail(exc) from None
                last = exc
                log.warning("reconnect attempt %d for slot %s failed: %s", attempts, self.slot, exc)
                continue
            return attempts
        raise self._fail(
            ReconnectExhausted(
                f"gave up reconnecting slot {self.slot!r} after {attempts} attempt(s) in "
                f"{time.monotonic() - began:.0f}s; last error: {last}"
            )
        ) from last

    def _as_source_error(self, exc: BaseException) -> SourceError:
        if isinstance(exc, SourceError):
            return exc
        if isinstance(exc, CopyEnded):
            return classify_error(exc.sqlstate, exc.message, dsn=self.dsn, what=f"stream of slot {self.slot!r} ended")
        if isinstance(exc, LibpqConnectionError):
            return ConnectionLost(
                f"replication connection of slot {self.slot!r} lost: "
                f"{redact_secrets(str(exc), self.dsn)} ({redact_dsn(self.dsn)})"
            )
        return error_from_exception(exc, dsn=self.dsn)

    def _teardown_locked(self) -> None:
        conn, self._conn, self._io, self._poll = self._conn, None, None, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may complain; it is gone either way
                pass

    def _fail(self, error: SourceError) -> SourceError:
        """A fatal error: no more reading, no heartbeat; later reads raise it again."""
        self._fatal = error
        self._closed = True
        self._stop.set()
        with self._lock:
            self._teardown_locked()
        return error

    def __repr__(self) -> str:
        return (
            f"ReplicationStream(slot={self.slot!r}, dsn={redact_dsn(self.dsn)!r}, "
            f"flushed={format_lsn(self._flushed)}, received={format_lsn(self._received)})"
        )
