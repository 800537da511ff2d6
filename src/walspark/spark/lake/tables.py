"""What every Delta table walspark creates has in common (snapshot copies and apply targets):
its properties, and how Spark SQL names it. Where it lives is :class:`walspark.storage.layout.TargetLayout`'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.conf import RuntimeConfig

    from walspark.storage import Location

__all__ = [
    "DEFAULT_DELETION_VECTORS_MIN_ROWS",
    "DELETION_VECTORS_MIN_ROWS",
    "TABLE_PROPERTIES",
    "is_delta_table",
    "quote",
    "table_properties",
]

#: The Delta table properties of every target table: column mapping by name, so any PostgreSQL
#: identifier (spaces, commas, parentheses...) is a valid column name. The snapshot's
#: ``CREATE OR REPLACE TABLE`` and the apply step's ``createIfNotExists`` both use them (through
#: :func:`table_properties`), so a table started by either is the same kind of table.
TABLE_PROPERTIES: dict[str, str] = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}

#: The Spark setting of the size from which walspark creates a table with deletion vectors:
#: PostgreSQL's estimate of its rows when it is copied (0 for a table the apply step creates).
DELETION_VECTORS_MIN_ROWS = "spark.walspark.deletionVectors.minRows"
#: Its default. Why a threshold and not always: with deletion vectors a MERGE that updates or
#: deletes rows marks them in a small side file instead of rewriting every Parquet file they sit
#: in, so the bytes a batch writes no longer grow with the table. ``./dev bench scale``, 1,000
#: random-key updates in one batch: 51 KB written into a 1M-row table and 60 KB into a 10M-row
#: one, against 43 MB and 423 MB rewritten without them (which also leaves that much for VACUUM
#: at every batch). But writing the vectors costs a fixed extra Spark job or two per MERGE: on
#: local disk the batch took 9.1 s against 5.6 s at 1M rows, 11.5 s against 13.8 s at 10M, and
#: a scenario of 16 small tables used 17% more CPU. Small tables are cheaper to rewrite; from a
#: million rows the bytes decide, since a table is rewritten at every batch otherwise.
DEFAULT_DELETION_VECTORS_MIN_ROWS = 1_000_000


def table_properties(conf: Mapping[str, str] | RuntimeConfig | None = None, estimated_rows: int | None = 0
                     ) -> dict[str, str]:  # fmt: skip
    """The properties of a new target table of about ``estimated_rows`` rows (None: unknown, as 0).

    ``conf`` is the session's configuration (``spark.conf``), read for
    :data:`DELETION_VECTORS_MIN_ROWS`. With deletion vectors Delta takes the protocol the
    features need (reader 3, writer 7), which delta-rs, DuckDB and Trino read.
    """
    raw = conf.get(DELETION_VECTORS_MIN_ROWS, None) if conf is not None else None
    try:
        threshold = DEFAULT_DELETION_VECTORS_MIN_ROWS if raw is None else int(raw)
    except ValueError:
        raise ValueError(f"{DELETION_VECTORS_MIN_ROWS} must be a number of rows, not {raw!r}") from None
    props = dict(TABLE_PROPERTIES)
    if threshold >= 0 and (estimated_rows or 0) >= threshold:
        props["delta.enableDeletionVectors"] = "true"
    return props


def is_delta_table(path: str | Location) -> bool:
    """Whether a Delta table lives at ``path`` (its ``_delta_log`` folder has entries): one listing."""
    from walspark.storage import location

    return bool((location(path) / "_delta_log").list())


def quote(name: str) -> str:
    """A Spark SQL identifier for any name: backquoted, inner backquotes doubled."""
    return "`" + name.replace("`", "``") + "`"
