"""What every Delta table walspark creates has in common (snapshot copies and apply targets):
its properties, and how Spark SQL names it. Where it lives is :class:`walspark.storage.layout.TargetLayout`'s."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.conf import RuntimeConfig

    from walspark.storage import Location

__all__ = [
    "CDF_PROPERTY",
    "CHANGE_DATA_FEED",
    "COLUMN_MAPPING",
    "COLUMN_MAPPING_REASON",
    "DEFAULT_DELETION_VECTORS_MIN_ROWS",
    "DEFAULT_LOCAL_DELETION_VECTORS_MIN_BYTES",
    "DEFAULT_LOCAL_DELETION_VECTORS_MIN_ROWS",
    "DELETION_VECTORS_MIN_ROWS",
    "TABLE_PROPERTIES",
    "change_data_feed",
    "field_names",
    "is_delta_table",
    "mapping_reason",
    "properties_clause",
    "quote",
    "sql_string",
    "table_properties",
]

#: The Delta table properties of column mapping by name: a column's name is metadata only, so a
#: column can be renamed or dropped without rewriting the table's files, and any PostgreSQL
#: identifier (spaces, commas, parentheses...) is a valid column name. It is switched on only
#: when a table needs it (:func:`mapping_reason`, ``TargetTable.require_column_mapping``):
#: polars and delta-rs's plain Arrow read do not read such tables (docs/applying.md, "Readers").
#: Under reader 3, not 2: delta-rs's plain Arrow read and polars read a reader-2 table without
#: error and with wrong values (they ignore the files' physical names), and refuse a reader-3 one
#: that lists ``columnMapping``. Delta lists reader features from reader 3 only, and only for a
#: feature that needs it, which column mapping alone does not (Delta makes that reader 2): so
#: the table also supports deletion vectors, without using them (``delta.enableDeletionVectors``
#: stays as the size rule says), which every reader of column mapping reads.
COLUMN_MAPPING: dict[str, str] = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "3",
    "delta.minWriterVersion": "7",
    "delta.feature.deletionVectors": "supported",
}

#: The table property that says why walspark switched column mapping on for a table.
COLUMN_MAPPING_REASON = "walspark.columnMapping"

#: The properties of walspark's own tables (the table sync's pending logs), which keep column
#: mapping whatever the names of the columns they hold.
TABLE_PROPERTIES: dict[str, str] = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}

#: Characters Delta refuses in a column name without column mapping (Parquet's restriction).
_MAPPING_ONLY_CHARACTERS = frozenset(" ,;{}()\n\t=")


def sql_string(text: str) -> str:
    """A Spark SQL string literal for any text (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def properties_clause(properties: Mapping[str, str]) -> str:
    """`` TBLPROPERTIES (...)`` of a ``CREATE TABLE`` with these properties; nothing when there are
    none (a table that needs no feature: Spark refuses an empty list)."""
    if not properties:
        return ""
    return " TBLPROPERTIES (" + ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in properties.items()) + ")"


def mapping_reason(names: Iterable[str]) -> str | None:
    """Why a table with these column names (nested ones included) needs column mapping: the
    first name holding a character Delta refuses without it, as a short reason; None: it does not."""
    for name in names:
        if any(c in _MAPPING_ONLY_CHARACTERS for c in name):
            return f"column name {name!r}"
    return None


def field_names(fields: Iterable[Any]) -> list[str]:
    """Every column name of Spark ``fields`` (StructFields), struct fields at any depth included."""
    out: list[str] = []

    def walk(dtype: Any) -> None:
        inner = getattr(dtype, "fields", None)
        if inner is not None:
            for f in inner:
                out.append(f.name)
                walk(f.dataType)
        elif hasattr(dtype, "elementType"):
            walk(dtype.elementType)
        elif hasattr(dtype, "valueType"):
            walk(dtype.keyType)
            walk(dtype.valueType)

    for f in fields:
        out.append(f.name)
        walk(f.dataType)
    return out


#: The Spark setting of the size from which walspark creates a table with deletion vectors:
#: PostgreSQL's estimate of its rows when it is copied (0 for a table the apply step creates).
DELETION_VECTORS_MIN_ROWS = "spark.walspark.deletionVectors.minRows"
#: Its default where Spark merges the table's large batches (object storage). Why a threshold
#: and not always: with deletion vectors a MERGE that updates or deletes rows marks them in a
#: small side file instead of rewriting every Parquet file they sit in, so the bytes a batch
#: writes no longer grow with the table. ``./dev bench scale``, 1,000
#: random-key updates in one batch: 51 KB written into a 1M-row table and 60 KB into a 10M-row
#: one, against 43 MB and 423 MB rewritten without them (which also leaves that much for VACUUM
#: at every batch). But writing the vectors costs a fixed extra Spark job or two per MERGE: on
#: local disk the batch took 9.1 s against 5.6 s at 1M rows, 11.5 s against 13.8 s at 10M, and
#: a scenario of 16 small tables used 17% more CPU. Small tables are cheaper to rewrite; from a
#: million rows the bytes decide, since a table is rewritten at every batch otherwise.
DEFAULT_DELETION_VECTORS_MIN_ROWS = 1_000_000
#: Its default for a table that delta-rs merges on the driver (a local target: see
#: :mod:`.driver_merge`), which does not write tables with deletion vectors: there a table of
#: fewer rows is made without them, because delta-rs rewrites its files in a fraction of the
#: seconds Spark's MERGE takes to mark them (``bench/merge_engines.py``, docs/design/update-path.md,
#: cut 5). From this size the rewrite of every file a batch touches costs more than Spark's MERGE
#: with vectors.
DEFAULT_LOCAL_DELETION_VECTORS_MIN_ROWS = 10_000_000
#: With it, the size of the source table's pages from which a table that delta-rs merges gets
#: deletion vectors whatever its rows: the rewrite grows with the bytes (~140 MB of Parquet a
#: second measured), so wide rows reach Spark's ~10 s per MERGE with vectors before ten million
#: of them do.
DEFAULT_LOCAL_DELETION_VECTORS_MIN_BYTES = 2 << 30


#: The Spark setting that gives every table walspark creates for a source table, mirror or history,
#: Delta's change data feed (``delta.enableChangeDataFeed``), and turns it on for such a table that
#: lacks it at its next batch (``walspark run --change-data-feed`` sets it). walspark's own tables
#: and change logs never get it. Unset or ``false``: tables are created without it, and a table
#: that has it keeps it (walspark never removes a feature; ``ALTER TABLE ... SET TBLPROPERTIES
#: ('delta.enableChangeDataFeed' = false)`` does).
CHANGE_DATA_FEED = "spark.walspark.changeDataFeed"
#: The Delta table property of the change data feed.
CDF_PROPERTY = "delta.enableChangeDataFeed"


def change_data_feed(conf: Mapping[str, str] | RuntimeConfig | None) -> bool:
    """Whether :data:`CHANGE_DATA_FEED` is on in ``conf`` (the session's ``spark.conf``)."""
    raw = conf.get(CHANGE_DATA_FEED, None) if conf is not None else None
    value = str(raw or "false").strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{CHANGE_DATA_FEED} must be true or false, not {raw!r}")
    return value == "true"


def table_properties(conf: Mapping[str, str] | RuntimeConfig | None = None, estimated_rows: int | None = 0,
                     names: Iterable[str] = (), *, driver_merges: bool = False,
                     estimated_bytes: int = 0) -> dict[str, str]:  # fmt: skip
    """The properties of a new target table of about ``estimated_rows`` rows (None: unknown, as 0)
    and ``estimated_bytes`` (its source's pages) whose columns are named ``names`` (nested ones
    included); ``driver_merges``: its batches may be merged by delta-rs on the driver
    (:func:`.driver_merge.may_write`).

    Only the features the table needs, so that every engine reads it until a change asks for
    more: column mapping when a name needs it (:func:`mapping_reason`, recorded in
    :data:`COLUMN_MAPPING_REASON`), deletion vectors from :data:`DELETION_VECTORS_MIN_ROWS`
    (read from ``conf``, the session's ``spark.conf``; unset, :data:`DEFAULT_DELETION_VECTORS_MIN_ROWS`
    or, with ``driver_merges``, :data:`DEFAULT_LOCAL_DELETION_VECTORS_MIN_ROWS` rows or
    :data:`DEFAULT_LOCAL_DELETION_VECTORS_MIN_BYTES`), the change data feed when
    :data:`CHANGE_DATA_FEED` says so. With deletion vectors Delta takes the protocol the features
    need (reader 3, writer 7), which delta-rs, DuckDB and Trino read.
    """
    raw = conf.get(DELETION_VECTORS_MIN_ROWS, None) if conf is not None else None
    try:
        default = DEFAULT_LOCAL_DELETION_VECTORS_MIN_ROWS if driver_merges else DEFAULT_DELETION_VECTORS_MIN_ROWS
        threshold = default if raw is None else int(raw)
    except ValueError:
        raise ValueError(f"{DELETION_VECTORS_MIN_ROWS} must be a number of rows, not {raw!r}") from None
    props: dict[str, str] = {}
    reason = mapping_reason(names)
    if reason is not None:
        props.update(COLUMN_MAPPING)
        props[COLUMN_MAPPING_REASON] = reason
    wide = raw is None and driver_merges and estimated_bytes >= DEFAULT_LOCAL_DELETION_VECTORS_MIN_BYTES
    if (threshold >= 0 and (estimated_rows or 0) >= threshold) or wide:
        props["delta.enableDeletionVectors"] = "true"
    if change_data_feed(conf):
        props[CDF_PROPERTY] = "true"
    return props


def is_delta_table(path: str | Location) -> bool:
    """Whether a Delta table lives at ``path`` (its ``_delta_log`` folder has entries): one listing."""
    from walspark.storage import location

    return bool((location(path) / "_delta_log").list())


def quote(name: str) -> str:
    """A Spark SQL identifier for any name: backquoted, inner backquotes doubled."""
    return "`" + name.replace("`", "``") + "`"
