"""A big table of the initial snapshot written by its tasks with delta-rs, committed once from the driver.

Spark's ``CREATE TABLE AS SELECT`` moves every row from the tasks' Arrow batches into the JVM and
encodes Parquet there: about two thirds of a big snapshot's CPU. Here each task writes its CTID
range's Arrow rows as Parquet with delta-rs (files and statistics as delta-rs writes them for the
driver's copies and MERGEs) and hands the driver only the files' add actions; the driver makes
the table with Spark first (schema, protocol and properties exactly as Spark's copy has them, no
rows) and commits every file in one delta-rs transaction after. Only where delta-rs writes the table's files
as Spark would (:func:`.driver_copy.tasks_may_write`); everything else is Spark's.
See docs/design/snapshot.md.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from walspark.spark.lake.driver_log import local_path

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["FILE_FIELDS", "TASK_WRITES", "StagedFile", "commit", "file_schema", "write_files"]

#: ``0`` turns task writes off (Spark's ``CREATE TABLE AS SELECT`` writes every big table).
TASK_WRITES = "WALSPARK_SNAPSHOT_TASK_WRITES"

#: Where a task's delta-rs write lands before its files move into the table (one folder per task).
STAGING = "_walspark_staging"

#: What a task returns per file written: its add action's facts (names and whether a string).
FILE_FIELDS = (("path", True), ("size", False), ("modification_time", False), ("stats", True), ("rows", False))

#: One file a task wrote: (path relative to the table, size, modification time in ms, stats JSON, rows).
StagedFile = tuple[str, int, int, str | None, int]


def file_schema() -> StructType:
    """The Spark schema of :data:`FILE_FIELDS` (built without a session: a Python worker asks)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField(name, StringType() if text else LongType()) for name, text in FILE_FIELDS])


def write_files(batches: Iterable[pa.RecordBatch], schema: pa.Schema, path: str) -> list[StagedFile]:
    """Write one task's rows into the table folder at ``path`` as delta-rs writes a table's files;
    returns their add actions' facts (nothing is committed: :func:`commit` does it once).

    delta-rs writes a table of its own in a staging folder inside the table's; its files then move
    into the table folder (a rename) and the staging folder, log included, is removed. A file of
    a task that fails or is retried is never committed, and a later VACUUM removes it.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    local = local_path(path)
    assert local is not None, path
    rows = pa.RecordBatchReader.from_batches(schema, batches)  # streamed: a task holds what delta-rs buffers
    stage = os.path.join(local, STAGING, uuid.uuid4().hex)
    os.makedirs(stage)
    try:
        write_deltalake(stage, rows, mode="error")
        with open(os.path.join(stage, "_delta_log", f"{0:020}.json"), encoding="utf-8") as log:
            adds = [entry["add"] for entry in map(json.loads, log) if "add" in entry]
        files: list[StagedFile] = []
        for add in adds:
            name = add["path"]  # a file name of delta-rs's own (part-<n>-<uuid>-c000.<codec>.parquet)
            if "/" in name or name.startswith((".", "_")):
                raise RuntimeError(f"delta-rs wrote an unexpected file name {name!r}")
            os.replace(os.path.join(stage, name), os.path.join(local, name))
            stats = add.get("stats")
            count = json.loads(stats)["numRecords"] if stats else pq.read_metadata(os.path.join(local, name)).num_rows
            files.append((name, int(add["size"]), int(add["modificationTime"]), stats, int(count)))
        return files
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def commit(path: str, files: Sequence[Any]) -> int:
    """Commit the tasks' ``files`` (rows of :data:`FILE_FIELDS`) to the table Spark made empty,
    in one delta-rs transaction; returns the rows committed."""
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    local = local_path(path)
    assert local is not None, path
    if files:
        table = DeltaTable(local)
        actions: list[AddAction | RemoveAction] = [AddAction(f[0], int(f[1]), {}, int(f[2]), True, f[3]) for f in files]
        table.create_write_transaction(actions, mode="append", schema=table.schema())
    shutil.rmtree(os.path.join(local, STAGING), ignore_errors=True)
    return sum(int(f[4]) for f in files)
