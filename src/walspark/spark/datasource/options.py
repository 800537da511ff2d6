"""The ``pgoutput`` data source's options: parsed once, validated with messages that say what to do.

Spark hands options over as a case-insensitive map of strings; :class:`SourceOptions` turns them
into typed fields and refuses contradictions (a capture path *and* a DSN, streaming without a
staging path, ...) before anything connects. Unknown keys are refused too: a misspelt
``maxRowsPerBatch`` silently ignored would be a batch-size bug nobody sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from walspark.source.options import StreamOptions
from walspark.source.publications import publication_list
from walspark.spark.datasource.schema import parse_table_name
from walspark.storage import Location, StorageSettings, location
from walspark.storage.settings import HADOOP_KEYS

__all__ = ["OptionsError", "SourceOptions"]


class OptionsError(ValueError):
    """The options of a ``pgoutput`` read are missing, malformed or contradictory."""


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")

# key (lower case) -> documented spelling
_KNOWN = {
    k.lower(): k
    for k in (
        "path",
        "dsn",
        "slot",
        "publication",
        "table",
        "peek",
        "stagingPath",
        "maxRowsPerBatch",
        "maxBytesPerBatch",
        "protoVersion",
        "binary",
        "streaming",
        "segmentMaxRows",
        "segmentMaxBytes",
        "segmentMaxDelayMs",
        "stagingMaxBytes",
        "partitionRows",
        "numPartitions",
        "memoryBudget",
        "batchRows",
        "slotWaitSeconds",
        "availableNowTimeoutSeconds",
        "statusIntervalSeconds",
        "heartbeatSeconds",
        "twoPhase",
    )
}

#: Storage settings passed as options, under Hadoop's names (see :mod:`walspark.storage.settings`).
_STORAGE_KEYS = frozenset(HADOOP_KEYS.values())


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise OptionsError(f"option {key} must be true or false, not {raw!r}")


def _int(options: Mapping[str, str], key: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip().replace("_", ""))
    except ValueError:
        raise OptionsError(f"option {key} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionsError(f"option {key} must be >= {minimum}, not {value}")
    return value


def _float(options: Mapping[str, str], key: str, default: float, *, allow_zero: bool = False) -> float:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionsError(f"option {key} must be a number, not {raw!r}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise OptionsError(f"option {key} must be > 0, not {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Every option of the source, typed (docs/data-source.md says what each one means)."""

    path: str | None = None
    dsn: str | None = None
    slot: str | None = None
    publications: tuple[str, ...] = ()
    table: str | None = None  # qualified "schema.name" as pgoutput reports it
    peek: bool = False
    staging_path: str | None = None
    max_rows_per_batch: int | None = None
    max_bytes_per_batch: int | None = None
    proto_version: int | None = None
    binary: bool = False
    streaming: str | None = None
    segment_max_rows: int = 50_000
    segment_max_bytes: int = 64 << 20
    segment_max_delay_ms: int = 200
    staging_max_bytes: int = 1 << 30
    partition_rows: int = 100_000
    num_partitions: int | None = None
    memory_budget: int = 256 << 20
    batch_rows: int = 32_768
    slot_wait_seconds: float = 60.0
    available_now_timeout_seconds: float = 600.0
    status_interval_seconds: float = 1.0
    heartbeat_seconds: float = 0.0
    two_phase: bool | None = None  # None: on where the server supports it (PostgreSQL 15+)
    #: How the staging path's object store is reached (Hadoop's ``fs.s3a.*`` key names as options;
    #: else the ``AWS_*`` environment): the driver's settings travel to the executors this way.
    storage: StorageSettings = field(default_factory=StorageSettings)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {str(k).lower(): v for k, v in options.items()}
        unknown = sorted(k for k in opts if k not in _KNOWN and k not in _STORAGE_KEYS)
        if unknown:
            raise OptionsError(
                f"unknown option(s) {', '.join(unknown)} for format pgoutput; known: "
                f"{', '.join(sorted(_KNOWN.values()))}"
            )
        g = lambda key: opts.get(key.lower())  # noqa: E731
        table = g("table")
        qualified = None
        if table:
            try:
                qualified = "{}.{}".format(*parse_table_name(table))
            except ValueError as exc:
                raise OptionsError(str(exc)) from None
        try:
            pubs = publication_list(g("publication") or "")
        except ValueError as exc:
            raise OptionsError(f"option publication: {exc}") from None
        parsed = cls(
            path=g("path") or None,
            dsn=g("dsn") or None,
            slot=g("slot") or None,
            publications=pubs,
            table=qualified,
            peek=_bool(opts, "peek", False),
            staging_path=g("stagingPath") or None,
            max_rows_per_batch=_int(opts, "maxrowsperbatch", None),
            max_bytes_per_batch=_int(opts, "maxbytesperbatch", None),
            proto_version=_int(opts, "protoversion", None),
            binary=_bool(opts, "binary", False),
            streaming=(g("streaming") or None),
            segment_max_rows=_int(opts, "segmentmaxrows", 50_000),  # type: ignore[arg-type]
            segment_max_bytes=_int(opts, "segmentmaxbytes", 64 << 20),  # type: ignore[arg-type]
            segment_max_delay_ms=_int(opts, "segmentmaxdelayms", 200, minimum=0),  # type: ignore[arg-type]
            staging_max_bytes=_int(opts, "stagingmaxbytes", 1 << 30),  # type: ignore[arg-type]
            partition_rows=_int(opts, "partitionrows", 100_000),  # type: ignore[arg-type]
            num_partitions=_int(opts, "numpartitions", None),
            memory_budget=_int(opts, "memorybudget", 256 << 20),  # type: ignore[arg-type]
            batch_rows=_int(opts, "batchrows", 32_768),  # type: ignore[arg-type]
            slot_wait_seconds=_float(opts, "slotwaitseconds", 60.0),
            available_now_timeout_seconds=_float(opts, "availablenowtimeoutseconds", 600.0),
            status_interval_seconds=_float(opts, "statusintervalseconds", 1.0),
            heartbeat_seconds=_float(opts, "heartbeatseconds", 0.0, allow_zero=True),
            two_phase=None if g("twoPhase") in (None, "", "auto") else _bool(opts, "twophase", True),
            storage=StorageSettings.resolve({k: v for k, v in opts.items() if k in _STORAGE_KEYS}),
        )
        parsed._validate()
        return parsed

    def staging_location(self) -> Location | None:
        """The staging path, reached with the storage settings (None without a staging path)."""
        return location(self.staging_path, self.storage) if self.staging_path else None

    def _validate(self) -> None:
        if self.path and self.dsn:
            raise OptionsError("give either path (a capture file) or dsn (a live slot), not both")
        if not self.path and not self.dsn:
            raise OptionsError(
                "format pgoutput needs option path (a capture file) or dsn + slot + publication (a live slot)"
            )
        if self.dsn:
            if not self.slot:
                raise OptionsError("option slot is required with dsn (an existing pgoutput slot)")
            if not self.publications:
                raise OptionsError("option publication is required with dsn (comma-separated publication names)")
        if self.streaming not in (None, "off", "on", "parallel"):
            raise OptionsError(f"option streaming must be off, on or parallel, not {self.streaming!r}")

    @property
    def live(self) -> bool:
        return self.dsn is not None

    def stream_options(self) -> StreamOptions:
        """pgoutput options for the slot (unset ones negotiated from the server version)."""
        return StreamOptions(
            self.publications,
            proto_version=self.proto_version,
            binary=self.binary,
            streaming=self.streaming,  # type: ignore[arg-type]
            # a stream keeps prepared transactions (staging); a peek must not turn two-phase
            # on for the slot (PostgreSQL would keep it on for good)
            two_phase=self.two_phase if self.two_phase is not None else (False if self.peek else None),
            messages=self.heartbeat_seconds > 0,
        )  # heartbeats come back as messages

    def require_batch(self) -> None:
        if self.live and not self.peek:
            raise OptionsError(
                "a batch read of a live slot must not consume it: set option peek=true "
                "(or use readStream to consume the slot with checkpointed offsets)"
            )

    def require_stream(self) -> None:
        if not self.live:
            raise OptionsError(
                "readStream of pgoutput needs a live slot (dsn, slot, publication); capture files "
                "are read with spark.read"
            )
        if self.peek:
            raise OptionsError("option peek is for batch reads (spark.read); a stream consumes the slot")
        if not self.staging_path:
            raise OptionsError(
                "readStream of pgoutput needs option stagingPath: a directory (on storage every "
                "executor can read) where the slot's messages are staged in segments; use one per "
                "query, next to its checkpoint"
            )
