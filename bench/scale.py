"""Scale benchmark: one batch of 1,000 random-key updates into tables of 1M and 10M rows.

Run with ``./dev bench scale`` (``--rows``, default ``1000000,10000000``; ``--updates``, default
1,000; ``--file-rows``; ``--seed``; ``--keep PATH`` to keep the tables).

Why: a mirror's cost per batch should follow the batch, not the table. The goal is that the batch
into the largest table takes at most 1.5 × the time of the one into the smallest, and writes
the same bytes. A MERGE that rewrites every data file holding an updated key (copy-on-write)
writes about the whole table once keys are spread over it; with deletion vectors it writes the
new rows and a small bitmap per touched file. So each size is measured on both kinds of table,
in the same run, same data, same keys:

* **deletion vectors**: walspark's ``TABLE_PROPERTIES`` with ``delta.enableDeletionVectors=true``;
* **copy-on-write** (the reference: what walspark did before): the same with it ``false``.

No PostgreSQL: what is timed is walspark's apply step, ``apply_changes`` (fold, MERGE, progress
record), on a change DataFrame in the per-table layout built in Spark — one transaction of
``_op='U'`` rows with the full new row, as pgoutput sends for a key identity. The tables are made
with ``CREATE OR REPLACE TABLE ... AS SELECT`` over ``spark.range`` in files of ``--file-rows``
contiguous keys, default the snapshot's own partition size (``DEFAULT_PARTITION_ROWS``): the
layout a table has after walspark's initial copy.

Bytes written are the sizes of the files the apply added to the table's folder (data and
deletion-vector files; not the log): what landed in storage. The Delta log's commits tell which
data files were new, rewritten (removed) or only given a deletion vector (removed and added back
under the same path, no data written). A small warm-up apply of each kind first pays the JVM's
start-up and JIT. Each result is checked (row count, updated rows) before it is reported.
Progress on stderr, the table on stdout.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common import commit_files, log, log_versions, stored_files  # bench/common.py, beside this script

from walspark.spark.lake.tables import TABLE_PROPERTIES, quote
from walspark.spark.snapshot.initial import DEFAULT_PARTITION_ROWS
from walspark.storage.layout import TargetLayout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KINDS = {"deletion vectors": "true", "copy-on-write": "false"}  # delta.enableDeletionVectors
#: The table's columns: a bigint key and values of the usual types (text of 25-35 characters).
COLUMNS = {
    "id": "id",
    "n": "CAST(id % 1000 AS INT)",
    "label": "concat('row ', id, ' ', substr(md5(CAST(id AS STRING)), 1, 20))",
    "amount": "CAST((id * 7919) % 10000000 / 100 AS DECIMAL(12,2))",
    "at": "timestamp_seconds(1700000000 + id)",
}
OLD_TYPE = "STRUCT<id: BIGINT, n: INT, label: STRING, amount: DECIMAL(12,2), at: TIMESTAMP>"
NEW_N = -1  # the value every update gives ``n`` (the table's own values are >= 0)


@dataclass(frozen=True, slots=True)
class Result:
    """One (table kind, size) measurement."""

    kind: str
    rows: int
    seconds: float
    bytes_written: int
    files_added: int
    files_rewritten: int
    files_given_dv: int
    table_bytes: int
    table_files: int


def create_table(spark: SparkSession, path: str, rows: int, file_rows: int, dv: str) -> None:
    """``rows`` rows in files of ``file_rows`` contiguous keys (one ``spark.range`` partition each)."""
    from walspark.spark.lake.evolution import sql_string

    props = {**TABLE_PROPERTIES, "delta.enableDeletionVectors": dv}
    spark.range(0, rows, 1, max(1, math.ceil(rows / file_rows))).createOrReplaceTempView("scale_source")
    select = ", ".join(f"{expr} AS {name}" for name, expr in COLUMNS.items())
    spark.sql(f"CREATE OR REPLACE TABLE delta.{quote(path)} USING delta TBLPROPERTIES "
              f"({', '.join(f'{sql_string(k)} = {sql_string(v)}' for k, v in props.items())}) "
              f"AS SELECT {select} FROM scale_source")  # fmt: skip


def update_batch(spark: SparkSession, keys: list[int]) -> DataFrame:
    """One transaction updating ``keys``, in the per-table layout (envelope, row, ``_old``, ``_unchanged``).

    Types as the data source gives them (``walspark.changes.rows.ENVELOPE``); ``_old`` is null, as
    for an update that keeps its key under a key replica identity.
    """
    new = {**COLUMNS, "n": str(NEW_N), "label": "concat('updated ', id)"}
    return spark.createDataFrame([(k, i) for i, k in enumerate(keys)], "id BIGINT, seq INT").selectExpr(
        "CAST(1000000 AS BIGINT) AS _commit_lsn", "CAST(999000 + seq AS BIGINT) AS _lsn", "seq AS _seq",
        "CAST(1 AS BIGINT) AS _xid", "TIMESTAMP '2025-01-01 00:00:00' AS _commit_time",
        "CAST(NULL AS STRING) AS _origin", "'U' AS _op", "'public' AS _schema", "'t' AS _table",
        "1 AS _relation_version", "array('id') AS _key",
        *(f"{expr} AS {name}" for name, expr in new.items()),
        f"CAST(NULL AS {OLD_TYPE}) AS _old", "CAST(array() AS ARRAY<STRING>) AS _unchanged",
    )  # fmt: skip


def commits_since(path: str, version: int) -> tuple[int, int, int, tuple[str, ...]]:
    """New data files, files rewritten, files given a deletion vector, and the operations of
    the commits after ``version`` (see :func:`common.commit_files`)."""
    new, rewritten, given_dv, infos = commit_files(path, [v for v in log_versions(path) if v > version])
    return new, rewritten, given_dv, tuple(info["operation"] for info in infos)


def run_one(spark: SparkSession, workdir: Path, kind: str, rows: int, updates: int, file_rows: int,
            seed: int) -> Result:  # fmt: skip
    """Make the table, apply one batch of ``updates`` random-key updates, measure and check it."""
    from walspark.spark.lake.apply import apply_changes

    target = str(workdir / f"{kind.replace(' ', '-')}-{rows}")
    path = TargetLayout(target).table("public", "t")
    log(f"{kind}, {rows:,} rows: creating the table")
    shutil.rmtree(target, ignore_errors=True)  # a kept run's progress table would skip batch 1
    create_table(spark, path, rows, file_rows, KINDS[kind])
    detail = spark.sql(f"DESCRIBE DETAIL delta.{quote(path)}").first()
    batch = update_batch(spark, random.Random(seed).sample(range(rows), updates))
    before, stored = log_versions(path)[-1], stored_files(path)
    began = time.perf_counter()
    apply_changes(batch, 1, target=target, table=("public", "t"))
    seconds = time.perf_counter() - began
    written = sum(size for name, size in stored_files(path).items() if name not in stored)
    added, rewritten, given_dv, ops = commits_since(path, before)
    counts = spark.sql(f"SELECT count(*) AS total, count_if(n = {NEW_N}) AS updated FROM delta.{quote(path)}").first()
    if counts["total"] != rows or counts["updated"] != updates:
        raise SystemExit(f"{kind}, {rows:,} rows: wrong result after the apply: {counts['total']:,} rows "
                         f"(expected {rows:,}), {counts['updated']:,} updated (expected {updates:,})")  # fmt: skip
    log(
        f"{kind}, {rows:,} rows: {seconds:.2f}s, {written:,} bytes written, {added} new files, "
        f"{rewritten} rewritten, {given_dv} given a deletion vector; commits: {', '.join(ops)}"
    )
    return Result(kind, rows, seconds, written, added, rewritten, given_dv, detail["sizeInBytes"], detail["numFiles"])


def ratio(a: float, b: float) -> str:
    return f"{a / b:.3g}" if b else "n/a"


def report(results: list[Result], updates: int, file_rows: int) -> None:
    print(f"\none batch of {updates:,} random-key updates (apply_changes, MERGE); files of {file_rows:,} rows; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print(
        "| table | rows | table size (MB, files) | apply (s) | bytes written | new files | files rewritten "
        "| files given a DV |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.kind} | {r.rows:,} | {r.table_bytes / 1e6:.1f} ({r.table_files}) | {r.seconds:.2f} | "
            f"{r.bytes_written:,} | {r.files_added} | {r.files_rewritten} | {r.files_given_dv} |"
        )
    by = {(r.kind, r.rows): r for r in results}
    sizes = sorted({r.rows for r in results})
    small, large = sizes[0], sizes[-1]
    print()
    if large != small:
        for kind in KINDS:
            a, b = by[kind, large], by[kind, small]
            print(
                f"{kind}: {large:,} rows / {small:,} rows: time {ratio(a.seconds, b.seconds)}x "
                f"(goal <= 1.5), bytes written {ratio(a.bytes_written, b.bytes_written)}x (goal 1.0)"
            )
    for n in sizes:
        dv, cow = by["deletion vectors", n], by["copy-on-write", n]
        print(
            f"{n:,} rows: deletion vectors / copy-on-write: time {ratio(dv.seconds, cow.seconds)}x, "
            f"bytes written {ratio(dv.bytes_written, cow.bytes_written)}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000,10000000", help="table sizes, comma-separated")
    parser.add_argument("--updates", type=int, default=1_000, help="updates in the batch")
    parser.add_argument("--file-rows", type=int, default=DEFAULT_PARTITION_ROWS, help="rows per data file")
    parser.add_argument("--seed", type=int, default=16, help="seed of the updated keys")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--keep", type=Path, default=None, help="keep the tables here (default: a temp dir)")
    args = parser.parse_args()
    sizes = sorted({int(s.replace("_", "")) for s in args.rows.split(",")})
    if args.updates > sizes[0]:
        parser.error(f"--updates {args.updates:,} is more than the smallest table's {sizes[0]:,} rows")

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="walspark-bench-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        from walspark.spark.session import spark_session

        spark = spark_session("walspark-bench-scale", master=args.master,
                              conf={"spark.sql.warehouse.dir": str(workdir / "warehouse")})  # fmt: skip
        log("warm-up")
        for kind in KINDS:
            run_one(spark, workdir / "warm-up", kind, 20_000, min(args.updates, 1_000), args.file_rows, args.seed)
        results = [run_one(spark, workdir, kind, n, args.updates, args.file_rows, args.seed)
                   for n in sizes for kind in KINDS]  # fmt: skip
        spark.stop()
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report(results, args.updates, args.file_rows)


if __name__ == "__main__":
    main()
