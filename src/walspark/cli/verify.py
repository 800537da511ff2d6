"""``walspark verify``: compare each published table with its Delta table, while the pipeline streams.

A thin command over :meth:`walspark.Pipeline.verify`: prints a line per table (rows on each side,
ranges checked and re-read, differences, keys still changing), then the first differing keys with
their values, and exits 1 on a real difference.
"""

from __future__ import annotations

import time

import click

from walspark.cli.group import cli
from walspark.cli.options import parse_confs, pipeline_target_options, source_options, spark_options
from walspark.pipeline.verify import ATTEMPTS, WAIT_SECONDS, VerifyResult


@cli.command("verify")
@source_options
@pipeline_target_options
@click.option("--table", "tables", multiple=True, metavar="SCHEMA.TABLE",
              help="Verify only this table (repeatable; default: every published table).")  # fmt: skip
@click.option("--attempts", type=click.IntRange(1), default=ATTEMPTS, show_default=True,
              help="Re-reads of a differing range before what still moves is reported as still changing.")  # fmt: skip
@click.option("--wait-seconds", type=click.FloatRange(0), default=WAIT_SECONDS, show_default=True,
              help="How long a re-read waits at most for the lake to apply up to the source's read point.")  # fmt: skip
@spark_options
def verify(dsn: str, publication: str, slot: str, target: str, state: str | None, tables: tuple[str, ...],
           attempts: int, wait_seconds: float, master: str | None, confs: tuple[str, ...]) -> None:  # fmt: skip
    """Compare each published table with its Delta table under TARGET, without stopping walspark run."""
    from pyspark.sql import SparkSession

    from walspark.cli.errors import CommandError, cli_errors, quiet_spark_errors
    from walspark.pipeline import Pipeline
    from walspark.spark.session import spark_session

    conf = parse_confs(confs)
    with cli_errors(dsn):
        pipeline = Pipeline(None, dsn=dsn, publication=publication, slot=slot, target=target).state(state)
        for key, value in conf.items():
            pipeline = pipeline.conf(key, value)
        pipeline = pipeline.on_progress(lambda text: click.echo(text, err=True))
        owned = SparkSession.getActiveSession() is None  # in-process callers (tests) keep their session
        began = time.monotonic()
        spark = spark_session("walspark-verify", master=master, conf=conf, short_lived=True,
                              locations=tuple(loc for loc in (target, state) if loc))  # fmt: skip
        if owned:
            quiet_spark_errors(spark)
            click.echo(f"Spark is up ({time.monotonic() - began:.1f} s)", err=True)
        try:
            result = pipeline.session(spark).verify(*tables, attempts=attempts, wait_seconds=wait_seconds)
        finally:
            if owned:
                spark.stop()
    for line in report_lines(result):
        click.echo(line)
    bad = [t.table for t in result.tables if not t.matches]
    if bad:
        raise CommandError(f"{result.differences} difference(s) in {', '.join(bad)}: the lake differs from the source; "
                           f"re-copy the table(s) with walspark resnapshot --target {target} "
                           + " ".join(f"--table {t}" for t in bad))  # fmt: skip


def report_lines(result: VerifyResult) -> list[str]:
    """The per-table summary, then each table's first differences (one line each, naming the table)."""
    header = ("table", "source rows", "lake rows", "ranges", "re-read", "differences", "still changing")
    rows = [(t.table, f"{t.source_rows:,}", "no table" if t.lake_missing else f"{t.lake_rows:,}", str(t.ranges),
             str(t.rechecked), str(t.difference_count), str(t.still_changing)) for t in result.tables]  # fmt: skip
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in (header, *rows)]  # fmt: skip
    for t in result.tables:
        fix = f"re-copy it: walspark resnapshot --table {t.table}"
        if t.lake_missing:
            lines.append(f"{t.table}: no Delta table in the lake ({t.source_rows:,} source rows); {fix}")
        for difference in t.differences:
            lines.append(f"{t.table}: {'row ' if t.multiset else 'key '}{difference.describe()}; {fix}")
        hidden = t.difference_count - len(t.differences)
        if hidden > 0:
            lines.append(f"{t.table}: {hidden} more difference(s) not shown; {fix}")
    lines.append(f"verified {len(result.tables)} table(s) in {result.seconds:.1f} s")
    return lines
