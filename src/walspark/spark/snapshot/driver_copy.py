"""A small table of the initial snapshot copied from the driver with delta-rs: no Spark job.

Only where delta-rs writes the table exactly as Spark would; everything else is Spark's. See
docs/design/snapshot.md.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from walspark.spark.lake.driver_log import local_path
from walspark.spark.lake.tables import is_delta_table

if TYPE_CHECKING:
    import pyarrow as pa

    from walspark.spark.snapshot.pgsnapshot import CtidRange, SnapshotSourcePlan

__all__ = [
    "DRIVER_SNAPSHOT",
    "can_create",
    "copy",
    "create",
    "enabled",
    "plain_schema",
    "read",
    "same_schema",
    "tasks_may_write",
]

#: ``0`` turns driver copies off (every table of a snapshot is copied by a Spark query).
DRIVER_SNAPSHOT = "WALSPARK_DRIVER_SNAPSHOT"

#: Delta types delta-rs writes under the protocol Spark gives the table (reader 1, writer 2).
_PLAIN_TYPES = frozenset({"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean",
                          "date", "timestamp"})  # fmt: skip
#: Properties delta-rs must not set itself: Spark turns them into the protocol.
_PROTOCOL_PROPERTIES = ("delta.minReaderVersion", "delta.minWriterVersion")


def _plain_type(t: Any) -> bool:
    if isinstance(t, str):
        return t in _PLAIN_TYPES or t.startswith("decimal(")
    kind = t.get("type")
    if kind == "array":
        return _plain_type(t["elementType"])
    if kind == "map":
        return _plain_type(t["keyType"]) and _plain_type(t["valueType"])
    if kind == "struct":
        return all(_plain_type(f["type"]) for f in t["fields"])
    return False


def same_schema(arrow: pa.Schema, spark_json: Mapping[str, Any]) -> bool:
    """Whether delta-rs makes of ``arrow`` the Delta schema Spark makes of ``spark_json`` (a
    ``StructType.jsonValue()``), in plain types only (see the module docstring)."""
    from deltalake import Schema

    try:
        ours = json.loads(Schema.from_arrow(arrow).to_json())
    except Exception:  # noqa: BLE001 - a type delta-rs does not take (an interval as duration...)
        return False
    return ours == dict(spark_json) and all(_plain_type(f["type"]) for f in ours["fields"])


def enabled(path: str) -> bool:
    """Whether delta-rs may write the table at ``path`` from the driver (local, installed, not
    turned off with :data:`DRIVER_SNAPSHOT`)."""
    if os.environ.get(DRIVER_SNAPSHOT, "1") == "0" or local_path(path) is None:
        return False
    try:
        import deltalake  # noqa: F401
    except ImportError:
        return False
    return True


def plain_schema(schema: pa.Schema) -> bool:
    """Whether delta-rs writes ``schema`` (a source's Arrow schema) as Spark does (:func:`same_schema`)."""
    from walspark.values import spark_schema

    return same_schema(schema, spark_schema(schema).jsonValue())


def can_create(path: str, schema: pa.Schema, properties: Mapping[str, str]) -> bool:
    """Whether :func:`create` makes the new table at ``path`` as Spark's ``CREATE TABLE AS
    SELECT`` would: a table without Delta features (no column mapping, no deletion vectors), a
    plain schema, no table there yet."""
    from walspark.spark.lake.evolution import ATTNUMS_PROPERTY

    plain = set(properties) <= {ATTNUMS_PROPERTY}
    return enabled(path) and plain and plain_schema(schema) and not is_delta_table(path)


def tasks_may_write(path: str, schema: pa.Schema, properties: Mapping[str, str]) -> bool:
    """Whether a table's tasks may write its files (:mod:`.task_write`): local, delta-rs present
    and allowed, a plain schema (:func:`plain_schema`), and no column mapping (whose files hold
    other column names)."""
    from walspark.spark.snapshot.task_write import TASK_WRITES

    return (os.environ.get(TASK_WRITES, "1") != "0" and enabled(path)
            and "delta.columnMapping.mode" not in properties and plain_schema(schema))  # fmt: skip


def create(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch], properties: Mapping[str, str]) -> int:
    """Create the Delta table at ``path`` holding ``batches`` (checked by :func:`can_create`);
    returns its version (1 when walspark's own properties followed the data, else 0)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    local = local_path(path)
    assert local is not None
    delta = {k: v for k, v in properties.items() if k.startswith("delta.") and k not in _PROTOCOL_PROPERTIES}
    own = {k: v for k, v in properties.items() if not k.startswith("delta.")}
    # Read in full before delta-rs writes: a Python-backed reader pulled from delta-rs's runtime
    # in several threads at once hung it (four tables' snapshots, all four writes waiting).
    rows = pa.Table.from_batches(list(batches), schema)
    write_deltalake(local, rows, mode="error", configuration=delta)
    if not own:
        return 0
    table = DeltaTable(local)
    table.alter.set_table_properties(own, raise_if_not_exists=False)
    return table.version()


def read(source: SnapshotSourcePlan, ranges: Sequence[CtidRange] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``ranges`` (default: all of ``source``'s) read on the driver, as the tasks read them."""
    from walspark.spark.snapshot.pgsnapshot import read_range

    return itertools.chain.from_iterable(read_range(source, r) for r in (source.ranges if ranges is None else ranges))


def copy(source: SnapshotSourcePlan, path: str, properties: Mapping[str, str]) -> int | None:
    """Copy the table of ``source`` into a new Delta table at ``path`` from the driver; returns
    the rows written, or None when the table is Spark's to copy (nothing was written)."""
    from walspark.spark.snapshot.pgsnapshot import source_schema

    schema = source_schema(source)
    whole = all(r.start == 0 and r.end is None and not r.keys for r in source.ranges)
    if not whole or not can_create(path, schema, properties):
        return None
    batches = list(read(source))
    create(path, schema, batches, properties)
    return sum(b.num_rows for b in batches)
