"""``walspark snapshot``: copy every published table into Delta and print where streaming starts.

It ends with the slot's consistent point ``X/Y``; running it again after a failure starts over,
after a success prints the same point. See docs/snapshot.md.
"""

from __future__ import annotations

import json

import click

from walspark.cli.group import cli
from walspark.cli.options import master_option


@cli.command("snapshot")
@click.option(
    "--dsn",
    required=True,
    envvar="WALSPARK_DSN",
    help="libpq connection string or URI of the source database (or $WALSPARK_DSN).",
)
@click.option("--publication", required=True, help="Publication whose tables are copied.")
@click.option("--slot", required=True, help="Slot to create (1-63 of [a-z0-9_]); streaming continues from it.")
@click.option(
    "--target",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder of the Delta tables (<target>/<schema>/<table>).",
)
@click.option(
    "--parallelism",
    type=click.IntRange(1),
    default=None,
    help="Tasks a big table is split into at least (default: Spark's default parallelism).",
)
@click.option(
    "--partition-rows", type=click.IntRange(1), default=None, help="Rows per CTID-range task (default 50,000)."
)
@master_option
@click.option("--redo", is_flag=True, help="Snapshot again even if the target records a complete snapshot.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (progress still on stderr).")
def snapshot(
    dsn: str,
    publication: str,
    slot: str,
    target: str,
    parallelism: int | None,
    partition_rows: int | None,
    master: str | None,
    redo: bool,
    as_json: bool,
) -> None:
    """Copy the publication's tables in one exported snapshot; print the consistent point."""
    from walspark.cli.errors import cli_errors, quiet_spark_errors

    with cli_errors(dsn):
        from walspark.source.preflight import check_source
        from walspark.spark.snapshot.initial import DEFAULT_PARTITION_ROWS, console_progress, run_snapshot

        # Before the JVM starts: names, DSN, server, wal_level, privileges, publication, SELECT.
        check_source(dsn, publications=[publication], slot=slot, snapshot=True)
        from pyspark.sql import SparkSession

        from walspark.spark.session import spark_session

        owned = SparkSession.getActiveSession() is None  # in-process callers (tests) keep their session
        spark = spark_session("walspark-snapshot", master=master, locations=(target,))
        if owned:
            quiet_spark_errors(spark)
        try:
            result = run_snapshot(
                spark,
                dsn,
                publication,
                slot,
                target,
                parallelism=parallelism,
                partition_rows=partition_rows or DEFAULT_PARTITION_ROWS,
                redo=redo,
                progress=console_progress(),
            )
        finally:
            if owned:
                spark.stop()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "slot": result.slot,
                    "consistent_point": result.consistent_point_text,
                    "skipped": result.skipped,
                    "tables": [t.to_dict() for t in result.tables],
                }
            )
        )
        return
    if result.skipped:
        click.echo(f"snapshot already complete in {target}")
    for t in result.tables:
        click.echo(f"{t.schema}.{t.table}: {t.rows:,} rows -> {t.path}")
    click.echo(f"consistent point {result.consistent_point_text} (slot {result.slot})")
