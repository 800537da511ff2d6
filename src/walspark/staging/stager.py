"""The stager: one thread holds the slot and writes what it sends into immutable segments.

It does as little as possible per message, so that decoding runs in Spark tasks. See
docs/design/staging.md for its guarantees and how they hold.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from walspark.changes.assembly import (
    CommittedTransaction,
    PreparedOutcome,
    PreparedTransaction,
    TransactionAssembler,
)
from walspark.changes.relations import RelationCache
from walspark.protocol import Relation, RelationColumn, Type, decode_message, format_lsn, parse_lsn
from walspark.protocol.decoder import relation_ids
from walspark.source.dsn import redact_secrets
from walspark.source.errors import ConnectionLost, SlotInUse
from walspark.source.options import StreamOptions
from walspark.source.stream import Reconnected, ReplicationStream
from walspark.staging.barrier import Columns, SchemaChangedError, record_barrier
from walspark.staging.offsets import TxnEntry
from walspark.staging.prepared import PreparedStore
from walspark.staging.segments import (
    SegmentBuilder,
    SegmentMeta,
    SegmentName,
    iter_entries,
    remove_incomplete_tail,
    write_segment,
)
from walspark.staging.two_phase import TwoPhaseStaging
from walspark.storage import Location, location
from walspark.values import TypeRegistry

__all__ = ["ShapeCheck", "Stager", "StagingError", "note_committed_end", "record_idle_mark"]

log = logging.getLogger(__name__)

_I, _U, _D, _T, _R, _Y, _M = (ord(c) for c in "IUDTRYM")
_CHANGE_KINDS = frozenset((_I, _U, _D, _T))
_ROW_KINDS = frozenset((_I, _U, _D))
_MARKER = "walspark-staging.json"
#: The highest idle keepalive position the stream reported as flushed (see _record_idle_confirm).
_IDLE_MARK = "idle-confirmed"
#: The end offset of the last batch in the query's commit log, as seen by the driver (see
#: :func:`note_committed_end`).
_COMMITTED = "committed-end"


def note_committed_end(directory: str | Path | Location, end_lsn: int) -> None:
    """Tell the stager under ``directory`` that Spark's commit log holds a batch ending at ``end_lsn``.

    Spark calls the source's ``commit(end)`` for batch N only when it plans batch N+1, so after
    the last batch of a burst the slot stays behind it until new changes arrive — WAL stays
    pinned, and a *fast* shutdown of the server waits for walspark's confirmation forever. The
    driver learns that a batch is in the commit log from the query's progress events (posted
    after the commit log is written) and writes its end here; the stager, which runs in
    Spark's source process, picks it up and confirms it like a ``commit(end)``. ``walspark run``
    does this; with the data source alone, call it from a ``StreamingQueryListener``.
    """
    (location(directory) / _COMMITTED).write_text(format_lsn(end_lsn), durable=False)


def record_idle_mark(directory: str | Path | Location, lsn: int) -> None:
    """Write down that the slot is being confirmed to ``lsn`` while nothing is pending (the
    stream's idle keepalive, or a ``--once`` run that found nothing: :mod:`walspark.pipeline.idle`),
    before it is. A restarted query tells such a slot, ahead of its checkpoint with nothing in
    between, from one moved by another consumer (:meth:`Stager.expect_start`)."""
    (location(directory) / _IDLE_MARK).write_text(format_lsn(lsn))


class StagingError(RuntimeError):
    """The staging directory cannot serve this query (another slot's, or a batch's segments are gone)."""


class _Stop(Exception):
    """Internal: staging ends (schema barrier)."""


class ShapeCheck(Protocol):
    """What the stager asks of the query's declared schema (the data source's ``OutputLayout``)."""

    @property
    def table(self) -> str | None:
        """The one table a per-table query reads (None: every published table)."""
        ...

    def wants(self, qualified_name: str) -> bool:
        """Whether the query reads this table's changes."""
        ...

    def misfit(
        self, qualified_name: str, columns: Sequence[RelationColumn], registry: TypeRegistry, *, binary: bool
    ) -> str | None:
        """Why rows of this Relation do not fit the declared schema (None when they fit)."""
        ...


# A prelude entry: (lsn, in_stream, data, version)
_PreludeRow = tuple[int, bool, bytes, "int | None"]


class Stager(TwoPhaseStaging):
    """Stages a slot's committed transactions into segments under ``directory/segments``.

    Call :meth:`start` (loads what is already staged, then streams in a thread), read with
    :meth:`entries_after` / :meth:`segments_for`, confirm with :meth:`commit`, end with
    :meth:`stop`. Thread-safe: the Spark-facing methods run on the reader's main thread.
    """

    def __init__(
        self,
        *,
        dsn: str,
        slot: str,
        stream_options: StreamOptions,
        directory: str | Path | Location,
        layout: ShapeCheck,
        registry: TypeRegistry | None = None,
        segment_max_rows: int = 50_000,
        segment_max_bytes: int = 64 << 20,
        segment_max_delay: float = 0.2,
        staging_max_bytes: int = 1 << 30,
        memory_budget: int = 256 << 20,
        slot_wait_seconds: float = 60.0,
        status_interval: float = 1.0,
        heartbeat_seconds: float = 0.0,
        stream_factory: Callable[..., ReplicationStream] = ReplicationStream,
    ) -> None:
        self.dsn = dsn
        self.slot = slot
        self.stream_options = stream_options
        self.directory = location(directory)
        self.segment_dir = self.directory / "segments"
        self.layout = layout
        self.registry = registry if registry is not None else TypeRegistry()
        self.segment_max_rows = segment_max_rows
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_delay = segment_max_delay
        self.staging_max_bytes = staging_max_bytes
        self.memory_budget = memory_budget
        self.slot_wait_seconds = slot_wait_seconds
        self.status_interval = status_interval
        self.heartbeat_seconds = heartbeat_seconds
        self._heartbeat_conn: object | None = None
        self._last_activity = time.monotonic()
        self._stream_factory = stream_factory

        self._cond = threading.Condition()
        # shared state (under _cond)
        self._entries: list[TxnEntry] = []
        self._entry_ends: list[int] = []
        self._segments: list[SegmentName] = []
        self._staged_bytes = 0
        self._staged_end = 0
        self._offered = 0
        self._expected_start: int | None = None
        self._idle_mark = 0  # loaded from the staging directory (see _record_idle_confirm)
        self._committed_read = 0.0  # when the driver's committed-end note was last read
        self._stream_start: int | None = None
        self._caught_up_to = 0
        self._failure: BaseException | None = None
        self._barrier: SchemaChangedError | None = None
        self._confirm_request = 0
        self._target: int | None = None
        self._streaming = False

        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

        # stager-thread state
        self._next_seq = 0
        self._last_end = 0
        self._seen = 0
        self._confirmed = 0
        self._binary = stream_options.binary
        self._proto = 1
        self._parallel = False
        self._cache = RelationCache()
        self._verdicts: dict[int, tuple[int, str | None]] = {}  # relation id -> (version, misfit reason)
        self._rels: dict[int, _PreludeRow] = {}  # copy-on-write: snapshots are references
        self._types: dict[int, _PreludeRow] = {}
        self._wanted: set[int] = set()
        self._pending = SegmentBuilder()
        self._pending_entries: list[TxnEntry] = []
        self._pending_touched: set[int] = set()
        self._pending_snapshot: tuple[dict, dict] = ({}, {})
        self._pending_since = 0.0
        self._prepared = PreparedStore(self.directory / "prepared")
        # Spilled transactions are this process's scratch: beside the segments on a local disk,
        # in a temporary folder when the staging path is on an object store.
        self._spill_dir = (
            Path(self.directory.path) / "spill"
            if self.directory.is_local
            else Path(tempfile.gettempdir()) / f"walspark-spill-{os.getpid()}-{slot}"
        )
        self.stats = {
            "transactions": 0,
            "duplicates": 0,
            "segments": 0,
            "prepared": 0,
            "rolled_back": 0,
            "empty_prepared": 0,
        }

    # ------------------------------------------------------------------ life cycle

    def start(self) -> Stager:
        """Load the staged segments (synchronously: a replay can be served at once), then stream."""
        self._load_directory()
        self._thread = threading.Thread(target=self._run, name=f"walspark-stager-{self.slot}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop streaming and release the slot (the stream's connection is closed by the thread)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if not self.directory.is_local and not (self._thread is not None and self._thread.is_alive()):
            shutil.rmtree(self._spill_dir, ignore_errors=True)  # this process's scratch, under the temp folder

    def _load_directory(self) -> None:
        self.segment_dir.make_dirs()
        marker = self.directory / _MARKER
        # per-table mode stages one table only: its segments cannot serve another layout
        identity = {
            "slot": self.slot,
            "publications": list(self.stream_options.publication_names),
            "table": self.layout.table,
        }
        have = marker.read_json()
        if have is not None:
            if have != identity:
                raise StagingError(
                    f"staging path {self.directory} belongs to another source ({have}); use one "
                    f"staging path per query (slot {self.slot!r})"
                )
        else:
            marker.write_json(identity)
        # A note of the previous process's driver: this query's commits will say it again.
        (self.directory / _COMMITTED).delete()
        try:
            self._idle_mark = parse_lsn((self.directory / _IDLE_MARK).read_text().strip())
        except FileNotFoundError:
            self._idle_mark = 0
        shutil.rmtree(self._spill_dir, ignore_errors=True)
        self._prepared.load()
        segments = remove_incomplete_tail(self.segment_dir)
        entries = list(iter_entries(segments))
        with self._cond:
            self._segments = segments
            self._staged_bytes = sum(seg.path.size() for seg in segments)
            self._set_entries(entries)
            self._staged_end = entries[-1].end_lsn if entries else 0
        self._next_seq = segments[-1].seq + 1 if segments else 0
        self._last_end = self._staged_end
        if segments:
            log.info("staging %s: %d segments up to %s", self.directory, len(segments), format_lsn(self._staged_end))

    def _set_entries(self, entries: list[TxnEntry]) -> None:
        self._entries = entries
        self._entry_ends = [e.end_lsn for e in entries]

    # ------------------------------------------------------------------ Spark-facing (main thread)

    def check(self) -> None:
        """Raise the stager's failure, if it failed."""
        with self._cond:
            failure = self._failure
        if failure is not None:
            raise failure

    @property
    def staged_end(self) -> int:
        with self._cond:
            return self._staged_end

    def entries_after(self, start: int) -> list[TxnEntry]:
        """The complete staged transactions ending after ``start``, in order."""
        with self._cond:
            i = bisect.bisect_right(self._entry_ends, start)
            return self._entries[i:]

    def segments_for(self, start: int, end: int) -> list[SegmentName]:
        """The segments that may hold transactions ending in ``(start, end]``."""
        with self._cond:
            return [s for s in self._segments if s.overlaps(start, end)]

    def schema_barrier(self) -> SchemaChangedError | None:
        with self._cond:
            return self._barrier

    def wait_staged(self, end: int, timeout: float) -> None:
        """Block until every transaction ending at or before ``end`` is staged."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._staged_end < end:
                if self._failure is not None:
                    raise self._failure
                if self._barrier is not None:
                    raise self._barrier
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StagingError(
                        f"the batch up to {format_lsn(end)} is not staged (staged up to "
                        f"{format_lsn(self._staged_end)}) and the slot did not deliver it within {timeout:g}s"
                    )
                self._cond.wait(min(left, 1.0))

    def expect_start(self, start: int) -> None:
        """The query resumes after ``start``: fail if the slot was moved past it by someone else.

        walspark confirms the slot only up to committed offsets, so a slot beyond the
        checkpoint's position (and beyond what is staged) means another consumer advanced it
        (``pg_logical_slot_get_changes``, a second stream): the changes in between are gone
        and the query must not silently skip them.
        """
        with self._cond:
            if self._expected_start is None:
                self._expected_start = start
            self._check_start_locked()

    def _check_start_locked(self) -> None:
        expected, slot = self._expected_start, self._stream_start
        if expected is None or slot is None or self._failure is not None:
            return
        if slot > max(expected, self._idle_mark) and self._staged_end < slot:
            self._failure = StagingError(
                f"slot {self.slot!r} was advanced to {format_lsn(slot)} by another consumer while this query's "
                f"checkpoint is at {format_lsn(expected)}: the changes in between are lost to this query; "
                "start it with a new checkpoint (and a new snapshot of the tables)"
            )
            self._cond.notify_all()

    def offered(self, end: int) -> None:
        """Spark planned a batch up to ``end`` (lets a paused stager go on once all is taken)."""
        with self._cond:
            if end > self._offered:
                self._offered = end

    def set_target(self, target: int) -> None:
        """Trigger.AvailableNow: stage up to ``target`` promptly (segments flushed once it is passed)."""
        with self._cond:
            self._target = target

    def wait_caught_up(self, target: int, timeout: float, *, start: int | None = None,
                       max_rows: int | None = None, max_bytes: int | None = None) -> None:  # fmt: skip
        """Block until everything committed at or before ``target`` is staged (or staging stopped).

        With ``start``, return sooner once the transactions staged after ``start`` fill a batch of
        ``max_rows`` changes or ``max_bytes`` (a larger one could not be planned), or staging has
        paused at its byte budget until Spark consumes a batch. A backlog is then one batch where
        it fits one: a MERGE's cost is mostly fixed, and a first batch of what happened to be
        staged when the query asked would pay it twice.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._caught_up_to < target and self._barrier is None:
                if start is not None and self._batch_ready(start, max_rows, max_bytes):
                    return
                if self._failure is not None:
                    raise self._failure
                left = deadline - time.monotonic()
                if left <= 0 and start is not None and self._entry_ends and self._entry_ends[-1] > start:
                    return  # slow to stage: what there is makes a batch meanwhile
                if left <= 0:
                    raise StagingError(
                        f"Trigger.AvailableNow: the slot did not reach {format_lsn(target)} within "
                        f"{timeout:g}s (reached {format_lsn(self._caught_up_to)})"
                    )
                self._cond.wait(min(left, 1.0))

    def _batch_ready(self, start: int, max_rows: int | None, max_bytes: int | None) -> bool:
        """Under the lock: whether a batch after ``start`` is as large now as it can be."""
        if not self._entry_ends or self._entry_ends[-1] <= start:
            return False
        if self._staged_bytes > self.staging_max_bytes:
            return True  # paused (or about to): only Spark's consuming a batch moves it on
        if max_rows is None and max_bytes is None:
            return False
        rows = size = 0
        for entry in self._entries[bisect.bisect_right(self._entry_ends, start) :]:
            rows, size = rows + entry.changes, size + entry.bytes
            if (max_rows is not None and rows > max_rows) or (max_bytes is not None and size > max_bytes):
                return True
        return False

    def commit(self, end: int) -> None:
        """Spark committed everything up to ``end``: confirm the slot, delete segments wholly at or below it."""
        with self._cond:
            if end > self._confirm_request:
                self._confirm_request = end
            doomed = [s for s in self._segments if s.last_end <= end]
            self._segments = [s for s in self._segments if s.last_end > end]
            i = bisect.bisect_right(self._entry_ends, end)
            self._set_entries(self._entries[i:])
        freed = 0
        for seg in doomed:
            try:
                freed += seg.path.size()
                seg.path.delete(missing_ok=False)
            except FileNotFoundError:
                pass
        with self._cond:
            self._staged_bytes = max(0, self._staged_bytes - freed)
        self._prepared.release_through(end)  # committed prepared transactions Spark now has

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        stream: ReplicationStream | None = None
        assembler: TransactionAssembler | None = None
        try:
            stream = self._open_stream()
            if stream is None:
                return
            resolved = stream.options
            assert resolved is not None
            self._proto, self._parallel, self._binary = (
                resolved.proto_version,
                resolved.streaming_parallel,
                resolved.binary,
            )
            self._prepared.begin(
                slot_had_two_phase=bool(stream.slot_info and stream.slot_info.two_phase), start_lsn=stream.start_lsn
            )
            assembler = self._assembler()
            with self._cond:
                self._streaming = True
                self._stream_start = stream.start_lsn
                self._check_start_locked()
                if self._failure is not None:
                    return
            last_ping = last_housekeeping = 0.0
            clock = time.monotonic
            while not self._stop.is_set():
                if self._backlogged():
                    last_ping = self._housekeeping(stream, last_ping)
                    self._stop.wait(0.05)  # Spark has work staged; the slot waits (heartbeats go on)
                    continue
                item = stream.read(0.05)
                if item is None:
                    pass
                elif item.__class__ is Reconnected:
                    log.warning("stager of slot %s: %s", self.slot, item)
                    assembler.close()
                    assembler = self._assembler()
                else:
                    data_start = item.data_start  # type: ignore[union-attr]
                    if data_start > self._seen:
                        self._seen = data_start
                    for event in assembler.feed(data_start, item.payload):  # type: ignore[union-attr]
                        if event.__class__ is CommittedTransaction:
                            self._stage(event)
                        elif event.__class__ is PreparedTransaction:
                            self._store_prepared(event)
                        elif event.__class__ is PreparedOutcome:
                            self._prepared_outcome(event)
                    if clock() - last_housekeeping < 0.05:
                        continue  # busy: housekeeping at most every 50 ms
                last_ping = self._housekeeping(stream, last_ping)
                last_housekeeping = clock()
        except _Stop:
            pass
        except BaseException as exc:  # reported to the Spark-facing side
            # One line: the failure itself reaches the user through the query's error; the
            # traceback is for debugging (-vv).
            log.error(
                "stager of slot %s failed: %s", self.slot, redact_secrets(str(exc), self.dsn) or type(exc).__name__
            )
            log.debug("stager of slot %s failed", self.slot, exc_info=True)
            with self._cond:
                self._failure = exc
                self._cond.notify_all()
        finally:
            if self._heartbeat_conn is not None:
                self._heartbeat_conn.close()  # type: ignore[attr-defined]
            if assembler is not None:
                assembler.close()
            if stream is not None:
                try:
                    if self._failure is None:
                        self._apply_confirm(stream)
                finally:
                    stream.close()
            with self._cond:
                self._streaming = False
                self._cond.notify_all()

    def _backlogged(self) -> bool:
        """Staging is over its disk budget *and* Spark has staged transactions it has not taken yet.

        "Not taken" rather than "not committed": Spark commits a batch only when it plans the
        next one, so waiting for commits while Spark waits for data would deadlock. And never
        pause while nothing is left to take: a transaction larger than the budget must still be
        staged whole, or no batch could ever include it. The budget is therefore soft (it can be
        exceeded by the last batch taken plus one transaction).

        Asked once per message read, so the budget is first compared without the lock: only
        this thread adds staged bytes, and a stale figure from a concurrent commit (which only
        lowers it) at worst pauses one message late or takes the lock once for nothing.
        """
        if self._staged_bytes <= self.staging_max_bytes:
            return False
        with self._cond:
            return (
                self._staged_bytes > self.staging_max_bytes
                and bool(self._entry_ends)
                and self._entry_ends[-1] > self._offered
            )

    def _assembler(self) -> TransactionAssembler:
        return TransactionAssembler(
            self._proto,
            streaming_parallel=self._parallel,
            memory_budget=self.memory_budget,
            spill_dir=self._spill_dir,
            hand_over_prepared=True,
        )

    def _open_stream(self) -> ReplicationStream | None:
        """Open the stream; a slot still held by a previous (killed) run is waited for."""
        deadline = time.monotonic() + self.slot_wait_seconds
        while True:
            stream = self._stream_factory(
                self.dsn,
                self.slot,
                self.stream_options,
                idle_confirm=True,
                before_idle_confirm=self._record_idle_confirm,
                status_interval=self.status_interval,
            )
            try:
                return stream.open()
            except (SlotInUse, ConnectionLost) as exc:
                stream.close()
                if time.monotonic() > deadline:
                    raise
                log.info("slot %s not available yet (%s); retrying", self.slot, exc)
                if self._stop.wait(0.5):
                    return None

    def _read_committed_end(self) -> None:
        """Pick up the driver's note of the last committed batch (see :func:`note_committed_end`)."""
        try:
            end = parse_lsn((self.directory / _COMMITTED).read_text().strip())
        except (OSError, ValueError):
            return
        with self._cond:
            known = self._confirm_request
        if end > known and end <= self._last_end:  # never beyond what this stager staged
            self.commit(end)

    def _housekeeping(self, stream: ReplicationStream, last_ping: float) -> float:
        now = time.monotonic()
        # a local read is free; on an object store every look is a request (a GET each 2 s)
        if now - self._committed_read >= (0.25 if self.directory.is_local else 2.0):
            self._committed_read = now
            self._read_committed_end()
        self._apply_confirm(stream)
        wal_end = stream.positions.server_wal_end
        if wal_end > self._seen:
            self._seen = wal_end
        with self._cond:
            target = self._target
        due = self._pending_entries and now - self._pending_since >= self.segment_max_delay
        if due or (target is not None and self._seen >= target and self._pending_entries):
            self._flush_pending()
        if not self._pending_entries:
            with self._cond:
                if self._seen > self._caught_up_to:
                    self._caught_up_to = self._seen
                    self._cond.notify_all()
        if self.heartbeat_seconds and now - self._last_activity >= self.heartbeat_seconds and not self._pending_entries:
            self._heartbeat()
        if target is not None and self._seen < target and now - last_ping >= 0.2:
            stream.send_feedback(reply_requested=True)  # the server answers with a keepalive: its position
            last_ping = now
        return last_ping

    def _heartbeat(self) -> None:
        """Write a tiny transaction (a logical message) so that a quiet slot still moves.

        While no published table changes, nothing reaches the stager and the slot cannot be
        confirmed past the checkpoint's last offset — PostgreSQL then keeps all WAL written since
        (by other tables, other databases). A transactional ``pg_logical_emit_message`` comes
        back through the stream as an empty transaction: it gets an offset like any other, and
        Spark's commit of it confirms the slot. Off by default (it writes to the source).
        """
        import psycopg

        self._last_activity = time.monotonic()
        try:
            if self._heartbeat_conn is None:
                self._heartbeat_conn = psycopg.connect(self.dsn, autocommit=True)
            self._heartbeat_conn.execute(  # type: ignore[attr-defined]
                "SELECT pg_logical_emit_message(true, 'walspark.heartbeat', '')"
            )
        except psycopg.Error as exc:
            log.warning("heartbeat on slot %s failed (%s); retrying in %gs", self.slot, exc, self.heartbeat_seconds)
            if self._heartbeat_conn is not None:
                self._heartbeat_conn.close()  # type: ignore[attr-defined]
                self._heartbeat_conn = None

    def _record_idle_confirm(self, lsn: int) -> None:
        """The stream is about to confirm an idle keepalive position: write it down first.

        When everything received is committed by Spark and no transaction is open, the stream
        reports the server's keepalive position as flushed (see :mod:`walspark.source.stream`):
        a quiet publication then stops pinning WAL, and a *fast* shutdown of the server is not
        held up by walspark (PostgreSQL waits for its walsenders' clients to confirm what was
        sent). The slot may then be ahead of the checkpoint with nothing in between; this mark,
        written before the position is reported, is how a restarted query tells that apart from
        a slot moved by another consumer (``expect_start``).
        """
        if lsn <= self._idle_mark:
            return
        record_idle_mark(self.directory, lsn)
        with self._cond:
            self._idle_mark = lsn

    def _apply_confirm(self, stream: ReplicationStream) -> None:
        with self._cond:
            request = self._confirm_request
        if request > self._confirmed and request <= max(stream.received_lsn, stream.flushed_lsn):
            stream.confirm(request)
            self._confirmed = request
            try:
                stream.send_feedback()
            except ConnectionLost:
                pass  # the next status update (after the reconnect) carries it

    # ------------------------------------------------------------------ staging

    def _stage(self, txn: CommittedTransaction) -> None:
        end = txn.end_lsn
        if end <= self._last_end:
            self.stats["duplicates"] += 1
            try:
                changed = self._absorb(txn)
            finally:
                txn.release()
            if changed and self._pending_entries:
                self._flush_pending()
            return
        self.stats["transactions"] += 1
        snapshot = (self._rels, self._types)
        touched: set[int] = set()
        dedicated = False
        written: list[SegmentName] = []
        changes = nbytes = 0
        table_mode = self.layout.table is not None
        misfits: dict[tuple[str, Columns], str] = {}
        commit_lsn, xid, ts, origin = txn.commit_lsn, txn.xid, txn.commit_timestamp, txn.origin
        max_rows, max_bytes = self.segment_max_rows, self.segment_max_bytes
        # the piece's rows, column by column (SegmentBuilder.add_run takes them at once)
        lsns: list[int] = []
        seqs: list[int] = []
        streams: list[bool] = []
        datas: list[bytes] = []
        piece_start = 0  # nbytes when the piece began
        checked: set[int] = set()  # relations whose shape in force is checked (until a Relation message)
        wanted = self._wanted
        try:
            for seq, (lsn, in_stream, data) in enumerate(txn.messages()):
                kind = data[0]
                if kind in _ROW_KINDS:  # one relation, its id after the kind (and a streamed block's xid)
                    rid = int.from_bytes(data[5:9] if in_stream else data[1:5], "big")
                    if table_mode and rid not in wanted:
                        continue
                    if rid not in checked:
                        self._check_change(rid, misfits)
                        checked.add(rid)
                    touched.add(rid)
                    changes += 1
                elif kind == _T:
                    rids = relation_ids(data, in_stream)
                    if table_mode and wanted.isdisjoint(rids):
                        continue
                    for rid in rids:
                        self._check_change(rid, misfits)
                    touched.update(rids)
                    changes += 1
                elif kind == _R:
                    self._relation(lsn, in_stream, data)
                    checked.clear()
                elif kind == _Y:
                    self._type(lsn, in_stream, data)
                elif kind == _M:
                    continue  # transactional logical messages carry no rows
                if misfits:
                    continue  # the transaction is not staged; its Relations and changes are still checked
                lsns.append(lsn)
                seqs.append(seq)
                streams.append(in_stream)
                datas.append(data)
                nbytes += len(data)
                if len(datas) >= max_rows or nbytes - piece_start >= max_bytes:
                    piece = SegmentBuilder()  # a segment of this transaction alone
                    piece.add_run(end, commit_lsn, xid, ts, origin, lsns, seqs, streams, datas, nbytes - piece_start)
                    if not dedicated:
                        self._flush_pending()
                        dedicated = True
                    written.append(self._write(piece, snapshot, touched, ()))
                    snapshot, touched = (self._rels, self._types), set()
                    lsns, seqs, streams, datas, piece_start = [], [], [], [], nbytes
        finally:
            txn.release()
        if misfits:
            for seg in written:  # pieces of this transaction: never offered, remove them
                seg.path.delete()
                with self._cond:
                    self._segments = [s for s in self._segments if s.path != seg.path]
            self._flush_pending()
            self._stop_at(end, misfits)
        entry = TxnEntry(end, changes, nbytes)
        self._last_end = end
        self._last_activity = time.monotonic()
        if dedicated:
            piece = SegmentBuilder()
            piece.add_run(end, commit_lsn, xid, ts, origin, lsns, seqs, streams, datas, nbytes - piece_start)
            self._write(piece, snapshot, touched, (entry,))
            return
        if not self._pending_entries:
            self._pending_snapshot = snapshot
            self._pending_since = time.monotonic()
        # a small transaction's rows straight into the next segment's columns
        self._pending.add_run(end, commit_lsn, xid, ts, origin, lsns, seqs, streams, datas, nbytes - piece_start)
        self._pending_touched |= touched
        self._pending_entries.append(entry)
        if self._pending.rows >= self.segment_max_rows or self._pending.bytes >= self.segment_max_bytes:
            self._flush_pending()

    def _absorb(self, txn: CommittedTransaction) -> bool:
        """A resent transaction: keep only what it says about schemas. Returns whether that changed."""
        rels, types = self._rels, self._types
        for lsn, in_stream, data in txn.messages():
            if data[0] == _R:
                self._relation(lsn, in_stream, data)
            elif data[0] == _Y:
                self._type(lsn, in_stream, data)
        return rels is not self._rels or types is not self._types  # copy-on-write: identity tells

    def _check_change(self, rid: int, misfits: dict[tuple[str, Columns], str]) -> None:
        """Note in ``misfits`` the relation of a change if its shape in force does not fit the schema.

        Checked once per relation shape (the verdict is kept per version). Only changes are
        checked, never a Relation alone: with ``publish_via_partition_root`` pgoutput describes
        the leaf partition after its root although every change names the root.
        """
        version = self._cache.get(rid)
        if version is None:
            return  # a change without its Relation: the decoder reports it
        have = self._verdicts.get(rid)
        if have is not None and have[0] == version.version:
            reason = have[1]
        else:
            reason = self.layout.misfit(version.qualified_name, version.columns, self.registry, binary=self._binary)
            self._verdicts[rid] = (version.version, reason)
        if reason is not None:
            columns = tuple((c.name, c.type_oid, c.type_modifier) for c in version.columns)
            misfits.setdefault((version.qualified_name, columns), reason)

    def _stop_at(self, end: int, misfits: dict[tuple[str, Columns], str]) -> None:
        """Staging ends before the transaction ending at ``end``: record its shapes, raise the barrier."""
        shapes: dict[str, list[Columns]] = {}
        reasons: dict[str, str] = {}
        for (table, columns), reason in misfits.items():
            shapes.setdefault(table, []).append(columns)
            reasons.setdefault(table, reason)
        record_barrier(self.directory, end, shapes, list(reasons.items()))
        exc = SchemaChangedError(
            "; ".join(f"table {t}: {r}" for t, r in reasons.items())
            + f" (transaction ending at {format_lsn(end)}); restart the query to pick up the new "
            "shape (walspark run does it itself)"
        )
        log.warning("stager of slot %s: %s", self.slot, exc)
        with self._cond:
            self._barrier = exc
            self._caught_up_to = max(self._caught_up_to, self._staged_end)
            self._cond.notify_all()
        raise _Stop from exc

    def _relation(self, lsn: int, in_stream: bool, data: bytes) -> None:
        message = decode_message(data, protocol_version=self._proto, in_stream=in_stream, parallel_abort=None, lsn=lsn)
        assert isinstance(message, Relation)
        name = f"{message.schema}.{message.relation_name}"
        if self.layout.wants(name):
            self._wanted.add(message.relation_id)
        version = self._cache.apply(message)
        have = self._rels.get(message.relation_id)
        if have is None or have[3] != version.version:
            self._rels = {**self._rels, message.relation_id: (lsn, in_stream, data, version.version)}

    def _type(self, lsn: int, in_stream: bool, data: bytes) -> None:
        message = decode_message(data, protocol_version=self._proto, in_stream=in_stream, parallel_abort=None, lsn=lsn)
        assert isinstance(message, Type)
        self.registry.note_type(message.type_oid, message.namespace, message.type_name)
        have = self._types.get(message.type_oid)
        if have is None or have[2] != data:
            self._types = {**self._types, message.type_oid: (lsn, in_stream, data, None)}

    def _flush_pending(self) -> None:
        if not self._pending_entries:
            return
        self._write(self._pending, self._pending_snapshot, self._pending_touched, tuple(self._pending_entries))
        self._pending = SegmentBuilder()
        self._pending_entries = []
        self._pending_touched = set()

    def _write(
        self, builder: SegmentBuilder, snapshot: tuple[dict, dict], touched: set[int], entries: tuple[TxnEntry, ...]
    ) -> SegmentName:
        rels, types = snapshot
        prelude = [row for row in types.values()] + [rels[r] for r in sorted(touched) if r in rels]
        batch = builder.to_batch(prelude)
        first = builder.first_end if builder.first_end is not None else entries[0].end_lsn
        last = builder.last_end if builder.last_end is not None else entries[-1].end_lsn
        meta = SegmentMeta(self._proto, self._parallel, self._binary, entries)
        name = write_segment(self.segment_dir, self._next_seq, batch, meta, first_end=first, last_end=last)
        self._next_seq += 1
        self.stats["segments"] += 1
        size = name.path.size()
        with self._cond:
            self._segments.append(name)
            self._staged_bytes += size
            if entries:
                self._entries.extend(entries)
                self._entry_ends.extend(e.end_lsn for e in entries)
                self._staged_end = entries[-1].end_lsn
            self._cond.notify_all()
        return name
