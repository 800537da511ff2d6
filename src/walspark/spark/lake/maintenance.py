"""Table maintenance: what keeps a long-running pipeline's tables and bookkeeping from growing.

Compaction, VACUUM and the progress rows folded, table by table, safe while the
pipeline runs. See docs/design/applying.md.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from walspark.spark.lake.tables import is_delta_table
from walspark.storage import Location, location
from walspark.storage.layout import CHANGES, CHECKPOINTS, HOME, STAGING, TargetLayout

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MAINTENANCE_HOURS",
    "Maintained",
    "MaintenanceSchedule",
    "delta_tables",
    "maintain",
]

#: How often a running pipeline maintains its tables unless told otherwise: daily, like the
#: scheduled OPTIMIZE/VACUUM jobs Delta's documentation recommends. VACUUM lists each table's
#: files, which on an object store is the one cost that grows with the table.
DEFAULT_MAINTENANCE_HOURS = 24.0

#: OPTIMIZE's smallest file left alone (Delta's default is 1 GB, which rewrites a table's large
#: files with every few new ones); a session setting the user made wins.
_OPTIMIZE_MIN_FILE = ("spark.databricks.delta.optimize.minFileSize", str(64 << 20))

_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"

#: Delta's guard against a retention shorter than the table's; an explicit ``retain_hours`` is
#: the user's decision (that no reader or writer needs files older than that), so it is lifted
#: for that VACUUM only, in a session of its own.
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


@dataclass(frozen=True, slots=True)
class Maintained:
    """What maintenance did to one Delta table (files counted on disk, the log left out)."""

    name: str
    path: str
    files_before: int
    bytes_before: int
    files_after: int
    bytes_after: int
    seconds: float
    #: What else happened ("12 progress rows folded"), or why the table was left as it was.
    note: str = ""
    failed: bool = False

    def line(self) -> str:
        freed = self.bytes_before - self.bytes_after
        head = (f"{self.name}: {self.files_before} -> {self.files_after} files, {freed:,} bytes freed "
                f"({self.seconds:.1f} s)")  # fmt: skip
        return f"{head}; {self.note}" if self.note else head


def delta_tables(layout: TargetLayout) -> list[tuple[str, Location]]:
    """The Delta tables of a pipeline: ``<target>/<schema>/<table>`` named ``schema.table``, then
    walspark's own under its home, named by their path below the target (``_walspark/progress``)."""
    found: list[tuple[str, Location]] = []
    for schema_dir in location(layout.target).list():
        if schema_dir.name in (HOME, CHANGES):  # walspark's own; an older walspark's change logs
            continue
        for table_dir in schema_dir.list():
            if is_delta_table(table_dir):
                found.append((f"{unquote(schema_dir.name)}.{unquote(table_dir.name)}", table_dir))
    home = layout.home_location()

    def walk(folder: Location, name: str, depth: int) -> None:
        if is_delta_table(folder):
            found.append((name, folder))
            return
        if depth == 0:
            return
        for child in folder.list():
            if child.name not in (CHECKPOINTS, STAGING):  # Spark's and the stager's, not Delta
                walk(child, f"{name}/{child.name}", depth - 1)

    walk(home, HOME if layout.state is None else home.uri, 4)  # pending/<schema>/<table>/g<n> is the deepest
    return found


def _data_files(folder: Location) -> tuple[int, int]:
    files = {k: v for k, v in folder.tree_files().items() if not k.startswith("_delta_log")}
    return len(files), sum(files.values())


def maintain(spark: SparkSession, target: str, *, state: str | None = None, retain_hours: float | None = None,
             optimize: bool = True, stop: threading.Event | None = None,
             say: Callable[[str], None] | None = None) -> list[Maintained]:  # fmt: skip
    """Fold the progress rows, ``OPTIMIZE`` small files (unless ``optimize=False``), then
    ``VACUUM`` every Delta table of a pipeline (see the module
    docstring); returns what was done per table. ``stop`` is checked between tables; ``say``
    gets a line per table."""
    from pyspark.sql import SparkSession

    from walspark.spark.lake.progress import ProgressTable

    layout = TargetLayout(target, state)
    progress_path = ProgressTable(spark, layout).path.rstrip("/")
    if retain_hours is not None and retain_hours < 0:
        raise ValueError(f"retain_hours must be 0 or more, not {retain_hours}")
    session = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())  # settings of its own
    if session.conf.get(_OPTIMIZE_MIN_FILE[0], None) is None:
        session.conf.set(*_OPTIMIZE_MIN_FILE)
    if retain_hours is not None:
        session.conf.set(_RETENTION_CHECK, "false")
    # VACUUM lists a table's folders in a Spark job of this many tasks: Spark's default of 10,000
    # made a tiny table's VACUUM take 40 s; the cluster's cores are as parallel as it gets.
    session.conf.set(_LISTING_PARALLELISM, str(max(spark.sparkContext.defaultParallelism, 1)))
    done: list[Maintained] = []
    for name, folder in delta_tables(layout):
        if stop is not None and stop.is_set():
            break
        started = time.monotonic()
        files_before, bytes_before = _data_files(folder)
        notes: list[str] = []
        failed = False
        try:
            if folder.uri.rstrip("/") == progress_path:
                folded = ProgressTable(session, layout).compact()
                if folded:
                    notes.append(f"{folded} progress rows folded")
            notes += _optimize_and_vacuum(session, folder.uri, retain_hours, optimize)
        except Exception as exc:  # noqa: BLE001 - one table's failure (a conflict with the pipeline) spares the others
            failed = True
            notes.append(f"left as it was: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        files_after, bytes_after = _data_files(folder)
        item = Maintained(name, folder.uri, files_before, bytes_before, files_after, bytes_after,
                          time.monotonic() - started, "; ".join(notes), failed)  # fmt: skip
        done.append(item)
        if say is not None:
            say(item.line())
    return done


def _optimize_and_vacuum(spark: SparkSession, path: str, retain_hours: float | None, optimize: bool) -> list[str]:
    from delta.tables import DeltaTable

    notes = []
    table = DeltaTable.forPath(spark, path)
    if optimize:
        metrics = table.optimize().executeCompaction().first()
        compacted = metrics["metrics"]["numFilesRemoved"] if metrics is not None else 0
        if compacted:
            notes.append(f"OPTIMIZE compacted {compacted} files")
    if retain_hours is None:
        table.vacuum()
    else:
        table.vacuum(float(retain_hours))
    return notes


class MaintenanceSchedule:
    """When a pipeline maintains its tables next: every ``every_hours`` (0: never).

    The time of the last maintenance is kept in the state folder (:meth:`TargetLayout.maintenance_record`), so the rhythm
    survives restarts and a ``walspark run --once`` job scheduled every few minutes maintains
    the tables once a day, not at every run. A pipeline that finds no record starts the clock
    (its tables are new): the first maintenance comes one interval later, never at a first
    start, which would list every table just after the snapshot wrote it.
    """

    def __init__(self, layout: TargetLayout, every_hours: float) -> None:
        self.file = layout.maintenance_record()
        self.every = datetime.timedelta(hours=every_hours)
        self._next: datetime.datetime | None = None

    def due(self, now: datetime.datetime | None = None) -> bool:
        if self.every <= datetime.timedelta(0):
            return False
        now = now or datetime.datetime.now(datetime.UTC)
        if self._next is None:
            record = self.file.read_json(default=None)
            if record is None:
                self.done(now)
                return False
            self._next = datetime.datetime.fromisoformat(record["last"]) + self.every
        return now >= self._next

    def done(self, now: datetime.datetime | None = None) -> None:
        now = now or datetime.datetime.now(datetime.UTC)
        self.file.parent.make_dirs()
        self.file.write_json({"last": now.isoformat()})
        self._next = now + self.every
