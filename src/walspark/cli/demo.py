"""``walspark demo``: the whole pipeline on an embedded PostgreSQL 18, in one command."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from walspark.cli.main import cli


@cli.command()
@click.option(
    "--target",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("walspark-demo"),
    show_default=True,
    help="Folder for the Delta tables (replaced if it exists).",
)
@click.option("--rows", type=click.IntRange(1, 10_000_000), default=5000, show_default=True, help="Rows to insert.")
def demo(target: Path, rows: int) -> None:
    """Run the pipeline on an embedded PostgreSQL 18 and compare source and target.

    Starts a throw-away PostgreSQL 18 (wal_level=logical), creates a table, a publication and a
    pgoutput slot, writes a workload, decodes the slot's changes, writes them to Delta Lake
    with Spark, reads the table back and compares it with the source.
    """
    import shutil

    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.smoke import checksum, run_smoke_pipeline
    from walspark.spark.session import spark_session

    started = time.monotonic()

    def say(text: str) -> None:
        click.echo(f"[{time.monotonic() - started:6.1f}s] {text}")

    target = target.resolve()
    shutil.rmtree(target, ignore_errors=True)
    with EmbeddedPostgres() as server:
        say(f"PostgreSQL {server.major_version} running on {server.host}:{server.port}")
        say("starting Spark with Delta Lake")
        spark = spark_session("walspark-demo")
        try:
            result = run_smoke_pipeline(server.dsn(), spark, target, rows=rows, progress=say)
        finally:
            spark.stop()
    click.echo("")
    click.echo(f"{'table':<14}{'source rows':>12}{'target rows':>12}  {'source checksum':<18}{'target checksum':<18}match")
    click.echo(
        f"{'shop.orders':<14}{len(result.source_rows):>12}{len(result.target_rows):>12}  "
        f"{checksum(result.source_rows):<18}{checksum(result.target_rows):<18}{'yes' if result.matches else 'NO'}"
    )
    click.echo(f"\nDelta tables under {target}")
    if not result.matches:
        sys.exit(1)
