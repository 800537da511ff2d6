"""What a running (or finished) pipeline has done so far, readable from any thread.

Recorded by the sink wrapper as batches are applied, and kept in a file for other processes. See
docs/design/pipeline.md §6.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walspark.storage.layout import TargetLayout

__all__ = [
    "ACTIVE_PHASES",
    "PHASES",
    "BatchProgress",
    "PipelineStatus",
    "RunSummary",
    "Tracker",
    "error_kind",
    "read_status_files",
    "status_writer",
]

log = logging.getLogger(__name__)

#: Seconds between two rewrites of the status file for batches (phases and failures: at once).
_PUBLISH_SECONDS = 5.0

#: How many batches' row counts :meth:`Tracker.rows_of` remembers (the progress line of a batch
#: arrives after the batch, from Spark's listener thread).
_RECENT_BATCHES = 64

#: The phases a pipeline goes through, in order (``failed`` can follow any of them).
PHASES = ("created", "starting", "snapshot", "streaming", "stopping", "stopped", "finished", "failed")
#: The phases of a pipeline that is still running.
ACTIVE_PHASES = ("starting", "snapshot", "streaming", "stopping")


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One applied micro-batch, as :attr:`PipelineHandle.last_progress
    <walspark.pipeline.handle.PipelineHandle.last_progress>` reports it."""

    batch_id: int
    #: change rows applied (rows held for a table being copied are not counted)
    rows: int
    rows_by_table: dict[str, int]
    #: when the sink finished the batch (seconds since the Unix epoch)
    timestamp: float
    #: the highest commit LSN the batch applied, if any ("X/Y")
    commit_lsn: str | None
    #: how far the batch's newest change lagged its commit in PostgreSQL, in seconds
    lag_seconds: float | None

    def as_dict(self) -> dict[str, Any]:
        """The keys a Structured Streaming progress uses where they mean the same (``batchId``,
        ``numInputRows``, ``timestamp`` in ISO 8601), and walspark's own."""
        from datetime import datetime

        return {
            "batchId": self.batch_id,
            "numInputRows": self.rows,
            "timestamp": datetime.fromtimestamp(self.timestamp, UTC).isoformat(timespec="milliseconds"),
            "rowsByTable": dict(self.rows_by_table),
            "commitLsn": self.commit_lsn,
            "lagSeconds": self.lag_seconds,
        }


@dataclass(frozen=True, slots=True)
class PipelineStatus:
    """One reading of a pipeline's state.

    ``state``: one of :data:`PHASES`. ``slot_position``: the highest commit LSN applied so far
    (``"X/Y"``), which the slot is confirmed to once Spark's commit log has the batch.
    ``tables_copying``: tables being copied beside the stream (joined the publication, or a
    ``walspark resnapshot``). ``error``: the one-line reason when ``state == "failed"``.
    ``lag_seconds`` and ``slot_lag_bytes``: how far behind the source, in time and in WAL;
    ``slot_retained_bytes``: the WAL the server keeps for the slot (from its ``restart_lsn``).
    ``changes``: change rows applied by table (``schema.table``) and operation (``I``, ``U``, ``D``, ``T``);
    ``errors``: the run's errors by kind (the exception's class), retried ones included.
    """

    state: str
    batches: int = 0
    rows: int = 0
    last_batch_id: int | None = None
    last_batch_rows: int | None = None
    slot_position: str | None = None
    slot_lag_bytes: int | None = None
    #: Seconds behind the source: when the last batch was applied, how long before then its latest
    #: transaction had committed; 0 once the stream found nothing new since (idle, up to date).
    lag_seconds: float | None = None
    query_starts: int = 0
    snapshot_tables: int | None = None
    tables_copying: tuple[str, ...] = ()
    error: str | None = None
    started_at: float | None = None
    updated_at: float | None = None
    #: When the last batch was applied (Unix seconds).
    last_batch_at: float | None = None
    slot_retained_bytes: int | None = None
    changes: dict[str, dict[str, int]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_PHASES


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What one ``run_once`` did: batches and change rows applied, where the slot now stands."""

    batches: int
    rows: int
    last_batch_id: int | None
    slot_position: str | None
    query_starts: int
    snapshot_tables: int | None
    seconds: float
    rows_by_table: dict[str, int] = field(default_factory=dict)


class Tracker:
    """The mutable, lock-guarded record the pipeline thread writes and readers copy out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "created"
        self._batches = 0
        self._rows = 0
        self._recent: dict[int, int] = {}  # batch id → change rows the sink took (applied, or held for a copy)
        self._progress: list[BatchProgress] = []  # the last _RECENT_BATCHES batches applied
        self._recent_times: dict[int, int] = {}  # batch id → its latest commit time applied (µs since the epoch)
        self._lag_seconds: float | None = None
        self._by_table: dict[str, int] = {}
        self._by_op: dict[str, dict[str, int]] = {}  # schema.table → operation → change rows applied
        self._errors: dict[str, int] = {}
        self._retained: int | None = None
        self._took: list[Callable[[float], None]] = []
        self._last_id: int | None = None
        self._last_rows: int | None = None
        self._position: int | None = None
        self._lag: int | None = None
        self._starts = 0
        self._snapshot_tables: int | None = None
        self._error: str | None = None
        self._started: float | None = None
        self._updated: float | None = None
        self._monotonic_start = time.monotonic()
        self._last_batch_at: float | None = None
        self._publish: Callable[[PipelineStatus], None] | None = None
        self._published = 0.0

    def publish_to(self, write: Callable[[PipelineStatus], None] | None) -> None:
        """Hand every change of the status to ``write`` (at once for phases and failures, at most
        every few seconds for batches); a failing ``write`` is logged, never raised."""
        self._publish = write
        self._maybe_publish(force=True)

    def _maybe_publish(self, force: bool = False) -> None:
        write = self._publish
        now = time.monotonic()
        if write is None or (not force and now - self._published < _PUBLISH_SECONDS):
            return
        self._published = now
        try:
            write(self.status())
        except Exception:  # a status file must never stop the pipeline
            log.debug("could not write the pipeline's status file", exc_info=True)

    @property
    def batches(self) -> int:
        """Batches applied so far."""
        with self._lock:
            return self._batches

    @property
    def state(self) -> str:
        return self._state

    def phase(self, state: str) -> None:
        assert state in PHASES, state
        with self._lock:
            if state == "starting":
                self._started = time.time()
                self._monotonic_start = time.monotonic()
            self._state = state
            self._updated = time.time()
        self._maybe_publish(force=True)

    def failed(self, error: str, kind: str | None = None) -> None:
        """The run failed with the one-line ``error``; ``kind``: the exception's class, counted."""
        with self._lock:
            self._state, self._error, self._updated = "failed", error, time.time()
            if kind is not None:
                self._errors[kind] = self._errors.get(kind, 0) + 1
        self._maybe_publish(force=True)

    def error(self, kind: str) -> None:
        """An error the run met and got past (e.g. a query restarted), counted by kind."""
        with self._lock:
            self._errors[kind] = self._errors.get(kind, 0) + 1

    def on_batch_took(self, observe: Callable[[float], None]) -> None:
        """Have ``observe`` called with each batch's duration in seconds (the metrics' histogram)."""
        self._took.append(observe)

    def batch_took(self, seconds: float) -> None:
        """A batch took ``seconds`` (as its progress line says): handed to each observer."""
        for observe in self._took:
            try:
                observe(seconds)
            except Exception:  # metrics must never stop the pipeline
                log.debug("a batch duration observer failed", exc_info=True)

    def snapshot_done(self, tables: int) -> None:
        with self._lock:
            self._snapshot_tables = tables
        self._maybe_publish(force=True)

    def query_started(self) -> None:
        with self._lock:
            self._starts += 1

    def batch_applied(self, batch_id: int, results: Any) -> BatchProgress:
        """Count a batch the sink applied; ``results``: its :class:`ApplyResult` list (or None)."""
        from walspark.protocol import format_lsn

        rows = held = 0
        position = latest = None
        by_table: dict[str, int] = {}
        by_op: list[tuple[str, str, int]] = []
        for result in results or ():
            if getattr(result, "skipped", False):
                held += result.rows  # kept for a table being copied: its hand-off applies them
                continue
            rows += result.rows
            key = f"{result.schema}.{result.table}"
            by_table[key] = by_table.get(key, 0) + result.rows
            by_op.extend((key, op, n) for op, n in getattr(result, "ops", ()))
            if result.commit_lsn is not None:
                position = max(position or 0, result.commit_lsn)
            if getattr(result, "commit_time_us", None) is not None:
                latest = max(latest or 0, result.commit_time_us)
        now = time.time()
        with self._lock:
            if latest is not None:
                self._recent_times[batch_id] = latest
                self._lag_seconds = max(now - latest / 1e6, 0.0)
            self._batches += 1
            self._rows += rows
            for key, n in by_table.items():
                self._by_table[key] = self._by_table.get(key, 0) + n
            for key, op, n in by_op:
                ops = self._by_op.setdefault(key, {})
                ops[op] = ops.get(op, 0) + n
            self._last_id, self._last_rows = batch_id, rows
            self._recent[batch_id] = rows + held
            for recent in (self._recent, self._recent_times):
                while len(recent) > _RECENT_BATCHES:
                    del recent[next(iter(recent))]
            if position is not None:
                self._position = max(self._position or 0, position)
            self._updated = self._last_batch_at = now
            batch = BatchProgress(batch_id, rows, by_table, now, None if position is None else format_lsn(position),
                                  None if latest is None else self._lag_seconds)  # fmt: skip
            self._progress.append(batch)
            del self._progress[:-_RECENT_BATCHES]
        self._maybe_publish()
        return batch

    def recent_progress(self) -> tuple[BatchProgress, ...]:
        """The last batches applied (up to 64), oldest first."""
        with self._lock:
            return tuple(self._progress)

    def rows_of(self, batch_id: int) -> int | None:
        """The change rows the sink took in a recent batch (applied, or held while its table is
        copied); None if it did not see that batch."""
        with self._lock:
            return self._recent.get(batch_id)

    def commit_time_of(self, batch_id: int) -> int | None:
        """The latest commit time a recent batch applied (µs since the Unix epoch), if known."""
        with self._lock:
            return self._recent_times.get(batch_id)

    def lag(self, lag_bytes: int, retained_bytes: int | None = None) -> None:
        """The WAL left to read after a batch, and what the server keeps for the slot (if known)."""
        with self._lock:
            self._lag = lag_bytes
            if retained_bytes is not None:
                self._retained = retained_bytes

    def up_to_date(self, lag_bytes: int | None, retained_bytes: int | None = None) -> None:
        """The stream found nothing new: no time behind the source, ``lag_bytes`` of WAL (if known)."""
        with self._lock:
            changed = self._lag_seconds != 0.0 or (lag_bytes is not None and lag_bytes != self._lag)
            self._lag_seconds = 0.0
            if lag_bytes is not None:
                self._lag = lag_bytes
            if retained_bytes is not None:
                self._retained = retained_bytes
        if changed:  # an idle stream does not rewrite its status file at every idle event
            self._maybe_publish()

    def status(self, tables_copying: tuple[str, ...] = ()) -> PipelineStatus:
        from walspark.protocol import format_lsn

        with self._lock:
            return PipelineStatus(
                state=self._state, batches=self._batches, rows=self._rows, last_batch_id=self._last_id,
                last_batch_rows=self._last_rows,
                slot_position=None if self._position is None else format_lsn(self._position),
                slot_lag_bytes=self._lag, lag_seconds=self._lag_seconds, query_starts=self._starts, snapshot_tables=self._snapshot_tables,
                tables_copying=tables_copying, error=self._error, started_at=self._started,
                updated_at=self._updated, last_batch_at=self._last_batch_at, slot_retained_bytes=self._retained,
                changes={key: dict(ops) for key, ops in self._by_op.items()}, errors=dict(self._errors),
            )  # fmt: skip

    def summary(self) -> RunSummary:
        from walspark.protocol import format_lsn

        with self._lock:
            return RunSummary(
                batches=self._batches, rows=self._rows, last_batch_id=self._last_id,
                slot_position=None if self._position is None else format_lsn(self._position),
                query_starts=self._starts, snapshot_tables=self._snapshot_tables,
                seconds=time.monotonic() - self._monotonic_start, rows_by_table=dict(self._by_table),
            )  # fmt: skip


#: A walspark error's class named in a Spark-wrapped failure's text ("walspark.source.errors.SlotInUse: ...").
_WALSPARK_ERROR = re.compile(r"\bwalspark(?:\.\w+)+\.(\w+): ")


def error_kind(exc: BaseException) -> str:
    """What kind of error ``exc`` is, for counting: its class, or for a failure Spark wrapped (a
    streaming query's), the last walspark error class its text names."""
    kind = type(exc).__name__
    if type(exc).__module__.startswith(("pyspark.", "py4j.")):
        named = _WALSPARK_ERROR.findall(str(exc))
        if named:
            return named[-1]
    return kind


def status_writer(layout: TargetLayout, slot: str) -> Callable[[PipelineStatus], None]:
    """What :meth:`Tracker.publish_to` calls to keep ``slot``'s status document in the state
    folder (local or on an object store): the status, the slot, and which process on which host
    writes it, so a reader tells a pipeline that died from one that runs."""
    from walspark.storage import location

    where = location(layout.status(slot))
    who = {"slot": slot, "pid": os.getpid(), "host": socket.gethostname()}

    def write(status: PipelineStatus) -> None:
        record = {**who, **dataclasses.asdict(status), "written_at": time.time()}
        where.write_text(json.dumps(record, indent=1), durable=False, tmp_name=f".{slot}.json.tmp")

    return write


def read_status_files(layout: TargetLayout) -> list[dict[str, Any]]:
    """The status files of the pipelines that keep their state in ``layout`` (by slot), each with
    ``running``: True or False where this host can tell (the writer's process on this host),
    None where it cannot (another host)."""
    from walspark.storage import location

    out = []
    for entry in sorted(location(layout.status()).list(), key=lambda e: e.name):
        if not entry.name.endswith(".json") or entry.name.startswith("."):
            continue
        try:
            record = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue  # being replaced: the next read has it
        record["running"] = _running(record) if record.get("state") in ACTIVE_PHASES else False
        out.append(record)
    return out


def _running(record: dict[str, Any]) -> bool | None:
    if record.get("host") != socket.gethostname():
        return None
    try:
        os.kill(int(record["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, TypeError, ValueError):
        return None
    return True
