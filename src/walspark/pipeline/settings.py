"""What one pipeline run is given: its settings, and the switch that asks it to stop.

Kept apart from the code that runs the pipeline so that a caller (the CLI, a notebook, a test)
can build and hold them without importing Spark, and so that the stop request has one owner
that every thread can reach: the handle's ``stop()``, a signal handler, the query loop.
"""

from __future__ import annotations

import threading
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from walspark.spark.lake.maintenance import DEFAULT_MAINTENANCE_HOURS
from walspark.storage.layout import TargetLayout

__all__ = ["Option", "RunSettings", "StopSwitch", "check_options", "run_options"]


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


@dataclass(frozen=True, slots=True)
class Option:
    """How a setting is given to ``walspark run`` and what it accepts: declared once, beside its
    field and default in :class:`RunSettings`; the CLI's options and the checks are made from it."""

    help: str
    #: The smallest value accepted (None: no bound); with ``above``, values must be greater.
    minimum: float | None = None
    above: bool = False
    #: The largest value accepted (None: no bound).
    maximum: float | None = None
    metavar: str | None = None
    envvar: str | None = None
    #: The values accepted, when only some are (None: any of the field's type).
    choices: tuple[str, ...] | None = None

    @staticmethod
    def flag(name: str) -> str:
        """``trigger_seconds`` → ``--trigger-seconds``."""
        return "--" + name.replace("_", "-")


def _option(help: str, default: Any = MISSING, **spec: Any) -> Any:
    return field(default=default, metadata={"option": Option(help, **spec)})


@dataclass
class RunSettings:
    """What one run needs: ``walspark run``'s options, typed, each declared once (:class:`Option`),
    and what :class:`walspark.Pipeline` builds."""

    dsn: str = _option("Source database (libpq DSN or URI, or $WALSPARK_DSN).", envvar="WALSPARK_DSN")
    publication: str = _option("Publication whose tables are replicated (several: comma-separated).")
    slot: str = _option("pgoutput slot; created (with the initial snapshot) if missing.")
    target: str = _option("Folder or object-store URI of the Delta tables.")
    once: bool = _option("Apply everything committed up to now, then exit 0 (availableNow).", False)
    scd2: tuple[str, ...] = _option("Keep history (SCD2) for this table; repeatable.", (), metavar="SCHEMA.TABLE")
    app_id: str | None = _option("Idempotence scope of the batches (default walspark-run/<slot>).", None)
    trigger_seconds: float = _option("Micro-batch interval when streaming.", 1.0, minimum=0.1)
    max_rows_per_batch: int | None = _option("Bound on change rows per batch.", None, minimum=1)
    #: Options of the ``pgoutput`` data source (``Pipeline.option``).
    options: dict[str, str] = field(default_factory=dict)
    stop: StopSwitch = field(default_factory=StopSwitch, repr=False, compare=False)
    sync_check_seconds: float = _option(
        "How often tables joining or leaving the publication and re-copy requests are checked.", 5.0, minimum=0.1
    )
    sync_chunk_rows: int = _option(
        "Rows per chunk when a table is copied while streaming (a crash resumes by chunk; each wave of "
        "chunks is one Delta commit).",
        50_000,
        minimum=1,
    )
    state: str | None = _option(
        "Folder or object-store URI of walspark's own files: snapshot record, checkpoint, staging, table-sync "
        "state (default TARGET/_walspark).",
        None,
        metavar="LOCATION",
    )
    #: Spark settings (``--conf KEY=VALUE``), e.g. ``spark.hadoop.fs.s3a.*`` for the object store:
    #: the CLI's session is made with them, and the preflight reads storage credentials from them
    #: before Spark is up.
    conf: dict[str, str] = field(default_factory=dict, repr=False)
    maintenance_hours: float = _option(
        "Hours between maintenance runs (OPTIMIZE of small files, VACUUM, progress rows folded) while running "
        "(0: never; see walspark maintain).",
        DEFAULT_MAINTENANCE_HOURS,
        minimum=0,
    )
    retain_hours: float | None = _option(
        "VACUUM's retention (default: each table's own, Delta's 7 days).", None, minimum=0
    )
    change_data_feed: bool = _option(
        "Give the Delta tables of the source's tables Delta's change data feed (delta.enableChangeDataFeed; "
        "turned on for existing ones at their next batch): each batch's changes readable with readChangeFeed.",
        False,
    )
    failover_slot: bool = _option(
        "Create the slot as a failover slot, one the standbys synchronize (PostgreSQL 17+; "
        "--no-failover-slot: a plain slot).",
        True,
    )
    on_slot_loss: str = _option(
        "What a run does when its slot was lost (invalidated, or gone while the target holds its tables): stop "
        "with the fix, or resnapshot: create the slot again and copy every table again into this target, each "
        'replaced in one Delta commit (docs/deploying.md, "Failover and lost slots").',
        "stop",
        choices=("stop", "resnapshot"),
    )
    metrics_port: int | None = _option(
        "Serve Prometheus metrics at http://HOST:PORT/metrics while running (see docs/monitoring.md).",
        None,
        minimum=1,
        maximum=65535,
        metavar="PORT",
    )
    metrics_host: str = _option(
        "Address the metrics are served on (0.0.0.0: every interface, for a Prometheus on another host).",
        "127.0.0.1",
        metavar="HOST",
    )

    catalog_schema: str | None = _option(
        "Register every mirror and SCD2 history by name in Spark's catalog as NAME.<table> (NAME.<schema>_<table> "
        "outside schema public); a Hive metastore in the state folder unless --conf configures one.",
        None,
        metavar="NAME",
    )

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


def run_options() -> list[tuple[Field[Any], Option]]:
    """The settings given as ``walspark run`` options, in declaration order."""
    return [(f, f.metadata["option"]) for f in fields(RunSettings) if "option" in f.metadata]


def check_options(settings: RunSettings) -> None:
    """Each numeric setting within its declared bound; raises
    :class:`walspark.source.errors.OptionError` naming the setting and its ``walspark run`` flag."""
    from walspark.source.errors import OptionError

    for f, option in run_options():
        value = getattr(settings, f.name)
        if value is None:
            continue
        if option.choices is not None and value not in option.choices:
            raise OptionError(f"{f.name} ({Option.flag(f.name)}) must be one of {', '.join(option.choices)}, "
                              f"not {value!r}")  # fmt: skip
        if option.minimum is not None and (value < option.minimum or (option.above and value == option.minimum)):
            bound = f"{'more than' if option.above else 'at least'} {option.minimum:g}"
            raise OptionError(f"{f.name} ({Option.flag(f.name)}) must be {bound}, not {value!r}")
        if option.maximum is not None and value > option.maximum:
            raise OptionError(f"{f.name} ({Option.flag(f.name)}) must be at most {option.maximum:g}, not {value!r}")
