"""What one pipeline run is given: its settings, and the switch that asks it to stop.

Kept apart from the code that runs the pipeline so that a caller (the CLI, a notebook, a test)
can build and hold them without importing Spark, and so that the stop request has one owner
that every thread can reach: the handle's ``stop()``, a signal handler, the query loop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from walspark.spark.lake.maintenance import DEFAULT_MAINTENANCE_HOURS
from walspark.storage.layout import TargetLayout

__all__ = ["RunSettings", "StopSwitch"]


class StopSwitch:
    """How a running pipeline is asked to stop: :meth:`request` from any thread, or a signal.

    While the pipeline waits on its streaming query, a request only sets a flag; the wait, in
    short steps, sees it and stops the query between batches. Raising ``KeyboardInterrupt`` there
    instead would interrupt a py4j call half-way and break the JVM gateway ("Answer from Java side
    is empty"), so a stop meant for a clean exit ended with an error. The library installs no
    signal handler: the CLI does (:meth:`signal`), and there, outside the streaming wait (the
    initial snapshot, the set-up), a signal still raises ``KeyboardInterrupt`` at once.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.deferred = False  # True while waiting on the query: stop between its batches

    def request(self) -> None:
        self.requested.set()

    def signal(self, signum: int, frame: object) -> None:
        self.requested.set()
        if not self.deferred:
            raise KeyboardInterrupt


@dataclass
class RunSettings:
    """What one run needs (``walspark run``'s options, typed; what :class:`walspark.Pipeline` builds)."""

    dsn: str
    publication: str
    slot: str
    target: str
    once: bool = False
    scd2: tuple[str, ...] = ()
    app_id: str | None = None
    trigger_seconds: float = 1.0
    max_rows_per_batch: int | None = None
    options: dict[str, str] = field(default_factory=dict)
    stop: StopSwitch = field(default_factory=StopSwitch, repr=False)
    #: Seconds between checks of the publication's tables and of ``walspark resnapshot`` requests.
    sync_check_seconds: float = 5.0
    #: Rows per chunk of a table copied while the stream runs: a crash resumes with the chunks not
    #: yet committed (each wave of chunks is one Delta commit).
    sync_chunk_rows: int = 50_000
    #: Where walspark keeps its own files (snapshot record, checkpoint, staging, table-sync state):
    #: a folder or object-store URI; ``<target>/_walspark`` when None.
    state: str | None = None
    #: Spark settings (``--conf KEY=VALUE``), e.g. ``spark.hadoop.fs.s3a.*`` for the object store:
    #: the CLI's session is made with them, and the preflight reads storage credentials from them
    #: before Spark is up.
    conf: dict[str, str] = field(default_factory=dict, repr=False)
    #: Hours between maintenance runs of the pipeline's Delta tables (OPTIMIZE of small files,
    #: VACUUM, progress rows folded; :mod:`walspark.spark.lake.maintenance`); 0: never.
    maintenance_hours: float = DEFAULT_MAINTENANCE_HOURS
    #: VACUUM's retention in hours; None: each table's own (Delta's default, 7 days).
    retain_hours: float | None = None
    #: Change-log mode: each batch is appended to the tables' change logs, folded into the Delta
    #: tables in the background (:mod:`walspark.spark.lake.changelog`); False: MERGE per batch.
    change_log: bool = False
    #: Change-log mode: seconds between background folds at most (0: as soon as one ends).
    fold_seconds: float = 0.0
    #: Change-log mode: maintenance deletes change-log rows folded and committed more than this
    #: many hours ago; None: the change logs keep every change.
    keep_changes_hours: float | None = None

    @property
    def layout(self) -> TargetLayout:
        """Where the tables and walspark's own files of this run live."""
        return TargetLayout(self.target, self.state)

    @property
    def checkpoint(self) -> str:
        return self.layout.checkpoint(self.slot)

    @property
    def staging(self) -> str:
        return self.layout.staging(self.slot)

    @property
    def query_name(self) -> str:
        """The streaming query's name: how this pipeline's progress events are told from others'."""
        return f"walspark-run-{self.slot}"
