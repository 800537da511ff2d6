"""Spark's Delta MERGE against delta-rs's on the driver, for pgbench's accounts at scale 10.

Run with ``PYTHONPATH=src:bench .venv/bin/python bench/merge_engines.py`` (``--rows``, default
1,000,000; ``--batches``, default ``2500,43000``; ``--repeats``, default 3; ``--files``, the
delta-rs tables' file counts, default ``1,8,40``; ``--spark-files``, default 8; ``--seed``;
``--filler random`` for 84 random letters a row instead of pgbench's blanks; ``--keep PATH`` to
keep the tables; ``--driver-memory``, default 2g).

The question of cut 5 of docs/design/update-path.md: is delta-rs's MERGE on the driver (the
``deltalake`` package walspark pins) faster than Spark's Delta MERGE for one batch of net updates
of random keys into ``pgbench_accounts`` at scale 10 (``aid int`` primary key, ``bid int``,
``abalance int``, ``filler char(84)``), at the batch sizes the oltp profile saw (2,500 and 43,000
net rows)? delta-rs does not honour deletion vectors on a rewrite, so it can only merge a table
without them, where every file holding an updated key is rewritten (random keys touch them all).
Variants, each on its own copy of a table Spark wrote (``CREATE TABLE ... AS SELECT``, files of
contiguous keys, as walspark's initial copy leaves them):

* **spark, DVs**: ``delta.enableDeletionVectors=true`` (what walspark's ``table_properties`` gives
  a table of 1,000,000 estimated rows), merged by Spark, as walspark does today;
* **spark, no DVs**: the same table without deletion vectors, merged by Spark (copy-on-write);
* **delta-rs, no DVs**: the table without deletion vectors merged by delta-rs
  (``DeltaTable.merge(...).when_matched_update_all().when_not_matched_insert_all()``, the source a
  pyarrow table), written as 1, 8 and 40 files.

The data is generated with pyarrow (no PostgreSQL): pgbench's initial accounts (``bid`` = the
branch of 100,000 accounts, ``abalance`` 0, ``filler`` 84 blanks as ``char(84)`` pads the empty
string). A batch is the net updates of distinct random keys (new ``abalance``), as the driver holds
them after the fold; what is timed is the MERGE of those rows from the driver: for Spark
``createDataFrame`` of the Arrow rows and the SQL ``MERGE`` (a plain MERGE: walspark's own also
folds the batch in Spark first), for delta-rs the table caught up (opened at the first batch,
``update_incremental`` after, as ``driver_merge._open`` does) and its MERGE. Each variant runs
``--repeats`` successive batches on a table path the session has not seen, so the first batch pays
the table's fixed costs (Delta's snapshot of the log) and the later ones show the steady cost. The
Spark session's start and one small warm-up MERGE per engine and table kind (JVM class loading and
JIT) are not counted. Files rewritten, given a deletion vector, added, and the bytes written
(the sizes of the files the batch added to the table's folder: data and deletion-vector files) are
read from each commit of the Delta log; each engine's own metrics are logged. Every variant's final
table is read back (Spark's tables by Spark, delta-rs's by delta-rs, and Spark's count and sum of
those) and compared row by row with the expected content.

Waits while ``/tmp/quiet.lock`` exists before each timed batch. Progress on stderr, the table on
stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import commit_files, log, log_versions, stored_files  # bench/common.py, beside this script

from walspark.spark.lake.tables import properties_clause, quote, table_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

QUIET_LOCK = Path("/tmp/quiet.lock")
SCHEMA = pa.schema([("aid", pa.int32()), ("bid", pa.int32()), ("abalance", pa.int32()), ("filler", pa.string())])
SPARK_SCHEMA = "aid INT, bid INT, abalance INT, filler STRING"
ACCOUNTS_PER_BRANCH = 100_000  # pgbench's naccounts
FILLER = " " * 84
SPARK_MERGE = (
    "MERGE INTO delta.{table} t USING merge_source s ON t.aid = s.aid "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
)


@dataclass(frozen=True, slots=True)
class Variant:
    engine: str  # "spark" or "delta-rs"
    dv: bool
    files: int

    @property
    def name(self) -> str:
        return f"{self.engine}, {'DVs' if self.dv else 'no DVs'}, {self.files} file{'s' if self.files > 1 else ''}"


@dataclass(slots=True)
class Batch:
    seconds: float
    added: int  # new data files
    rewritten: int  # data files removed (their rows written again)
    given_dv: int  # data files given a deletion vector (removed and added back under the same path)
    written: int  # bytes of the files the batch added to the folder
    engine_ms: int | None  # the engine's own execution time


@dataclass(slots=True)
class Run:
    variant: Variant
    rows: int  # batch rows
    batches: list[Batch] = field(default_factory=list)
    files_after: int = 0
    checked: str = ""


def wait_quiet() -> None:
    if QUIET_LOCK.exists():
        log(f"{QUIET_LOCK} exists: waiting")
        while QUIET_LOCK.exists():
            time.sleep(10)
        log(f"{QUIET_LOCK} gone")


def accounts(rows: int, filler: str = "blank") -> pa.Table:
    """pgbench's initial ``pgbench_accounts`` of ``rows`` rows; ``filler`` ``random``: 84 random
    letters a row instead of pgbench's blanks, a table whose files do not compress to nothing."""
    aid = np.arange(1, rows + 1, dtype=np.int32)
    if filler == "random":
        letters = np.random.default_rng(84).integers(97, 123, size=(rows, len(FILLER)), dtype=np.uint8)
        fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(len(FILLER)), rows, [None, pa.py_buffer(letters)])
        fillers = fixed.cast(pa.binary()).cast(pa.string())
    else:
        fillers = pa.array([FILLER] * rows, pa.string())
    return pa.table(
        [
            pa.array(aid),
            pa.array((aid - 1) // ACCOUNTS_PER_BRANCH + 1),
            pa.array(np.zeros(rows, dtype=np.int32)),
            fillers,
        ],
        schema=SCHEMA,
    )


def update_batch(base: pa.Table, balances: np.ndarray, rng: np.random.Generator, n: int) -> pa.Table:
    """Net updates of ``n`` distinct random keys (a new ``abalance`` each), in random order;
    ``balances`` (by ``aid - 1``) takes them."""
    index = rng.choice(len(balances), size=n, replace=False)
    balances[index] += rng.integers(-5000, 5001, size=n, dtype=np.int32)
    taken = base.take(pa.array(index))
    return taken.set_column(2, "abalance", pa.array(balances[index]))


def expected(base: pa.Table, balances: np.ndarray) -> pa.Table:
    return base.set_column(2, "abalance", pa.array(balances))


def spark_template(spark: SparkSession, source: str, path: str, files: int, dv: bool, rows: int) -> None:
    """The accounts as Spark writes them: ``files`` files of contiguous keys, with or without
    deletion vectors (walspark's table properties for a table of ``rows`` estimated rows)."""
    props = table_properties(None, rows, SCHEMA.names)
    if dv != (props.get("delta.enableDeletionVectors") == "true"):  # --rows below walspark's threshold
        props = {**props, "delta.enableDeletionVectors": "true"} if dv else {}
    df = spark.read.parquet(source).repartitionByRange(files, "aid").sortWithinPartitions("aid")
    df.createOrReplaceTempView("accounts_source")
    spark.sql(
        f"CREATE TABLE delta.{quote(path)} USING delta{properties_clause(props)} AS SELECT * FROM accounts_source"
    )


def commit_of(path: str, version: int) -> tuple[int, int, int, dict]:
    """New data files, files rewritten, files given a deletion vector, and the operation metrics
    of the commit ``version`` (see :func:`common.commit_files`)."""
    new, rewritten, given_dv, infos = commit_files(path, [version])
    return new, rewritten, given_dv, (infos[-1].get("operationMetrics") or {}) if infos else {}


def live_files(path: str) -> int:
    """Data files in the table's newest version (adds minus removes over the log)."""
    live: set[str] = set()
    for v in log_versions(path):
        for line in Path(path, "_delta_log", f"{v:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live.add(action["add"]["path"])
            elif "remove" in action:
                live.discard(action["remove"]["path"])
    return len(live)


def spark_merge(spark: SparkSession, path: str, source: pa.Table) -> None:
    spark.createDataFrame(source, schema=SPARK_SCHEMA).createOrReplaceTempView("merge_source")
    spark.sql(SPARK_MERGE.format(table=quote(path)))


class DeltaRs:
    """One table merged by delta-rs, kept open across batches as walspark's driver path keeps it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.table = None
        self.metrics: dict = {}

    def merge(self, source: pa.Table) -> None:
        from deltalake import DeltaTable

        if self.table is None:
            self.table = DeltaTable(self.path)
        else:
            self.table.update_incremental()
        merger = self.table.merge(source, "t.aid = s.aid", source_alias="s", target_alias="t")
        self.metrics = merger.when_matched_update_all().when_not_matched_insert_all().execute()


def same_rows(got: pa.Table, want: pa.Table) -> str:
    """``ok``, or what differs between a table read back and the expected one."""
    if got.num_rows != want.num_rows:
        return f"{got.num_rows:,} rows, expected {want.num_rows:,}"
    got = got.sort_by("aid")
    for name in SCHEMA.names:
        a = got.column(name).combine_chunks().cast(SCHEMA.field(name).type)
        if not a.equals(want.column(name).combine_chunks()):
            return f"column {name} differs"
    return "ok"


def run_variant(spark: SparkSession, variant: Variant, template: str, path: str, base: pa.Table, rows: int,
                repeats: int, seed: int) -> Run:  # fmt: skip
    shutil.copytree(template, path)
    balances = np.zeros(base.num_rows, dtype=np.int32)
    rng = np.random.default_rng(seed)  # the same batches for every variant of a size
    run = Run(variant, rows)
    rs = DeltaRs(path) if variant.engine == "delta-rs" else None
    for i in range(repeats):
        source = update_batch(base, balances, rng, rows)
        before = stored_files(path)
        wait_quiet()
        began = time.perf_counter()
        if rs is not None:
            rs.merge(source)
        else:
            spark_merge(spark, path, source)
        seconds = time.perf_counter() - began
        written = sum(size for name, size in stored_files(path).items() if name not in before)
        added, rewritten, given_dv, metrics = commit_of(path, log_versions(path)[-1])
        if rs is not None:
            engine_ms = rs.metrics.get("execution_time_ms")
            shown = {k: rs.metrics.get(k) for k in ("num_target_files_scanned", "num_target_files_skipped_during_scan",
                                                    "num_target_files_removed", "num_target_files_added",
                                                    "num_target_rows_updated", "scan_time_ms", "rewrite_time_ms")}  # fmt: skip
        else:
            engine_ms = int(metrics["executionTimeMs"]) if "executionTimeMs" in metrics else None
            shown = {k: metrics.get(k) for k in ("numTargetFilesRemoved", "numTargetFilesAdded",
                                                 "numTargetDeletionVectorsAdded", "numTargetBytesAdded",
                                                 "numTargetRowsUpdated", "scanTimeMs", "rewriteTimeMs")}  # fmt: skip
        run.batches.append(Batch(seconds, added, rewritten, given_dv, written, engine_ms))
        log(
            f"{variant.name}, {rows:,} rows, batch {i + 1}: {seconds:.2f}s; {rewritten} files rewritten, "
            f"{given_dv} given a DV, {added} new, {written / 1e6:.2f} MB written; engine {engine_ms} ms {shown}"
        )
    run.files_after = live_files(path)
    want = expected(base, balances)
    if rs is not None:
        from deltalake import DeltaTable

        run.checked = same_rows(DeltaTable(path).to_pyarrow_table(), want)
        row = spark.sql(f"SELECT count(*) AS n, sum(abalance) AS s FROM delta.{quote(path)}").first()
        total = int(balances.sum(dtype=np.int64))
        if run.checked == "ok" and (row["n"] != base.num_rows or row["s"] != total):
            run.checked = f"Spark reads {row['n']:,} rows, sum {row['s']} (expected {base.num_rows:,}, {total})"
    else:
        run.checked = same_rows(spark.read.format("delta").load(path).toArrow(), want)
    log(f"{variant.name}, {rows:,} rows: final table {run.checked} ({run.files_after} files)")
    return run


def warm_up(spark: SparkSession, workdir: Path) -> None:
    """One small MERGE per engine and table kind: the JVM's classes and JIT, paid outside the timings."""
    small = accounts(20_000)
    source = str(workdir / "warm-up.parquet")
    pq.write_table(small, source)
    for dv in (True, False):
        path = str(workdir / f"warm-up-{dv}")
        spark_template(spark, source, path, 2, dv, 1_000_000 if dv else 0)
        began = time.perf_counter()
        spark_merge(spark, path, update_batch(small, np.zeros(20_000, np.int32), np.random.default_rng(0), 500))
        log(f"warm-up: Spark MERGE of 500 rows into 20,000 ({'DVs' if dv else 'no DVs'}): "
            f"{time.perf_counter() - began:.2f}s")  # fmt: skip
    began = time.perf_counter()
    DeltaRs(path).merge(update_batch(small, np.zeros(20_000, np.int32), np.random.default_rng(1), 500))
    log(f"warm-up: delta-rs MERGE of 500 rows into 20,000: {time.perf_counter() - began:.2f}s")


def report(runs: list[Run], table_rows: int, load: tuple[float, float], filler: str) -> None:
    print(f"\npgbench_accounts, {table_rows:,} rows, {filler} filler; successive batches of net updates of random keys; "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f} before, {load[1]:.1f} after\n")  # fmt: skip
    n = max(len(r.batches) for r in runs)
    ordinal = ["1st", "2nd", "3rd", *(f"{i}th" for i in range(4, n + 1))][:n]
    print(f"| variant | batch rows | {' | '.join(f's, {o}' for o in ordinal)} | files rewritten | files given a DV "
          "| new files | MB written | engine's own s | files after | final table |")  # fmt: skip
    print("|---|---:|" + "---:|" * n + "---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        secs = [f"{b.seconds:.2f}" for b in r.batches] + [""] * (n - len(r.batches))

        def each(attr: str, r: Run = r) -> str:
            return "/".join(str(getattr(b, attr)) for b in r.batches)

        mb = "/".join(f"{b.written / 1e6:.2f}" for b in r.batches)
        own = "/".join("?" if b.engine_ms is None else f"{b.engine_ms / 1000:.2f}" for b in r.batches)
        print(f"| {r.variant.name} | {r.rows:,} | {' | '.join(secs)} | {each('rewritten')} | {each('given_dv')} "
              f"| {each('added')} | {mb} | {own} | {r.files_after} | {r.checked} |")  # fmt: skip
    print()
    for rows in sorted({r.rows for r in runs}):
        of = [r for r in runs if r.rows == rows]
        ref = next((r for r in of if r.variant.engine == "spark" and r.variant.dv), None)
        rs = [r for r in of if r.variant.engine == "delta-rs"]
        if ref is None or not rs:
            continue
        best = min(rs, key=lambda r: steady(r))
        print(
            f"{rows:,} rows: Spark with DVs {ref.batches[0].seconds:.2f}s 1st, {steady(ref):.2f}s steady; "
            f"delta-rs' best ({best.variant.name}) {best.batches[0].seconds:.2f}s 1st, {steady(best):.2f}s steady: "
            f"{ref.batches[0].seconds / best.batches[0].seconds:.1f}x and {steady(ref) / steady(best):.1f}x faster"
        )


def steady(run: Run) -> float:
    """The mean of the batches after the first (the first alone if there is one)."""
    later = run.batches[1:] or run.batches
    return statistics.mean(b.seconds for b in later)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the accounts table")
    parser.add_argument("--batches", default="2500,43000", help="batch sizes (net rows), comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="successive batches per variant")
    parser.add_argument("--files", default="1,8,40", help="file counts of the delta-rs tables, comma-separated")
    parser.add_argument("--spark-files", type=int, default=8, help="file count of Spark's tables")
    parser.add_argument("--filler", choices=("blank", "random"), default="blank",
                        help="pgbench's blank filler, or 84 random letters a row (files of ~90 MB per 1M rows)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--driver-memory", default="2g",
                        help="the Spark driver's heap (6g for --rows 10000000: the final tables are read back)")  # fmt: skip
    parser.add_argument("--keep", type=Path, default=None, help="keep the tables here (default: a temp dir)")
    args = parser.parse_args()
    sizes = [int(s.replace("_", "")) for s in args.batches.split(",")]
    if max(sizes) > args.rows:
        parser.error(f"a batch of {max(sizes):,} rows is more than the table's {args.rows:,}")
    variants = [Variant("spark", True, args.spark_files), Variant("spark", False, args.spark_files),
                *(Variant("delta-rs", False, int(f)) for f in args.files.split(","))]  # fmt: skip

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="walspark-bench-merge-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        from walspark.spark.session import spark_session

        began = time.perf_counter()
        conf = {"spark.sql.warehouse.dir": str(workdir / "wh"), "spark.driver.memory": args.driver_memory}
        spark = spark_session("walspark-bench-merge-engines", conf=conf)
        log(f"Spark session: {time.perf_counter() - began:.1f}s (not counted)")
        base = accounts(args.rows, args.filler)
        source = str(workdir / "accounts.parquet")
        pq.write_table(base, source)
        templates: dict[tuple[bool, int], str] = {}
        for v in variants:
            if (v.dv, v.files) not in templates:
                path = str(workdir / f"template-{'dv' if v.dv else 'plain'}-{v.files}")
                began = time.perf_counter()
                spark_template(spark, source, path, v.files, v.dv, args.rows)
                templates[v.dv, v.files] = path
                log(f"template {Path(path).name}: {live_files(path)} files, "
                    f"{sum(stored_files(path).values()) / 1e6:.1f} MB, {time.perf_counter() - began:.1f}s")  # fmt: skip
        wait_quiet()
        warm_up(spark, workdir)
        load_before = os.getloadavg()[0]
        runs = []
        for rows in sizes:
            for v in variants:
                path = str(workdir / f"{v.engine}-{'dv' if v.dv else 'plain'}-{v.files}-{rows}")
                runs.append(run_variant(spark, v, templates[v.dv, v.files], path, base, rows, args.repeats,
                                        args.seed + rows))  # fmt: skip
        load_after = os.getloadavg()[0]
        spark.stop()
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report(runs, args.rows, (load_before, load_after), args.filler)
    bad = [r for r in runs if r.checked != "ok"]
    if bad:
        raise SystemExit(f"{len(bad)} variant(s) ended with a wrong table: " + "; ".join(
            f"{r.variant.name}, {r.rows:,}: {r.checked}" for r in bad))  # fmt: skip


if __name__ == "__main__":
    main()
