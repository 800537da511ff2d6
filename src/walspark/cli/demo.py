"""``walspark demo``: the whole pipeline on an embedded PostgreSQL 18, in one command."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import click

from walspark.cli.group import cli


@cli.command()
@click.option(
    "--target",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("walspark-demo"),
    show_default=True,
    help="Folder for the Delta tables (replaced if it exists).",
)
@click.option("--seconds", type=click.FloatRange(0), default=10.0, show_default=True,
              help="How long to keep streaming while the workload runs, after the snapshot.")  # fmt: skip
@click.option("--rate", type=click.FloatRange(1), default=40.0, show_default=True, help="Workload transactions/s.")
@click.option("--keep-running", is_flag=True, help="Keep streaming until Ctrl-C, then compare.")
def demo(target: Path, seconds: float, rate: float, keep_running: bool) -> None:
    """Mirror a small shop on an embedded PostgreSQL 18 into Delta tables, live.

    Starts a throw-away PostgreSQL 18 (wal_level=logical) with a shop schema (customers,
    products, orders, order items: many types, existing rows), runs a background workload,
    takes the initial snapshot while it writes, streams the changes into Delta tables under
    TARGET, and compares every table with its source at the end.
    """
    import psycopg

    from walspark.demo import PUBLICATION, SLOT, Workload, compare, create_shop
    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.pipeline import Pipeline
    from walspark.spark.session import spark_session

    started = time.monotonic()

    def say(text: str) -> None:
        click.echo(f"[{time.monotonic() - started:5.0f}s] {text}")

    target = target.resolve()
    shutil.rmtree(target, ignore_errors=True)
    with EmbeddedPostgres() as server:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_shop(conn)
        say(f"PostgreSQL {server.major_version} on {server.host}:{server.port}: shop schema with existing rows")
        workload = Workload(dsn, rate=rate).start()
        say(f"workload running (~{rate:.0f} transactions/s); starting Spark with Delta Lake")
        spark = spark_session("walspark-demo", short_lived=True)
        try:
            pipeline = Pipeline(spark, dsn=dsn, publication=PUBLICATION, slot=SLOT, target=str(target)).on_progress(say)
            pipeline.run_once()  # the snapshot (taken while the workload writes), then catch up
            if keep_running:
                say("streaming until Ctrl-C")
                handle = pipeline.trigger_seconds(1.0).start()
                try:
                    handle.await_termination()
                except KeyboardInterrupt:
                    handle.stop()
            else:
                # Micro-batches while the workload goes on: each run applies what was committed
                # when it started and exits cleanly (never interrupted mid-batch).
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    pipeline.run_once()
                    say(f"applied up to now ({workload.transactions} source transactions so far)")
            workload.stop()
            say(f"workload stopped after {workload.transactions} transactions; applying the rest")
            pipeline.run_once()
            with psycopg.connect(dsn) as conn:
                results = compare(conn, spark, str(target))
        finally:
            workload.stop()
            spark.stop()
    click.echo("")
    click.echo(
        f"{'table':<18}{'source rows':>12}{'delta rows':>12}  {'checksum (source)':<18}{'checksum (delta)':<18}match"
    )
    for r in results:
        click.echo(f"{r.table:<18}{r.source_rows:>12}{r.target_rows:>12}  {r.source_checksum:<18}"
                   f"{r.target_checksum:<18}{'yes' if r.matches else 'NO'}")  # fmt: skip
    click.echo(f"\nDelta tables under {target}/shop/ (walspark's checkpoint and progress in {target}/_walspark/)")
    if not all(r.matches for r in results):
        sys.exit(1)
