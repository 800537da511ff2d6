"""``walspark maintain``: compact and VACUUM a pipeline's Delta tables and fold its progress rows, now.

A thin command over :func:`walspark.maintain` (:mod:`walspark.spark.lake.maintenance`), for
pipelines run as ``walspark run --once`` jobs or with ``--maintenance-hours 0``, and for a
shorter retention than the tables' own. Safe while the pipeline runs.
"""

from __future__ import annotations

import click

from walspark.cli.group import cli
from walspark.cli.options import parse_confs, pipeline_target_options, spark_options


@cli.command("maintain")
@pipeline_target_options
@click.option(
    "--retain-hours",
    type=click.FloatRange(0),
    default=None,
    help="VACUUM files removed longer ago than this (default: each table's retention, Delta's 7 days). "
    "Readers of older versions, time travel included, need the files this keeps.",
)
@click.option(
    "--optimize/--no-optimize",
    default=True,
    show_default=True,
    help="Bin-pack files under 64 MB (OPTIMIZE) before the VACUUM.",
)
@spark_options
def maintain_command(target: str, state: str | None, retain_hours: float | None, optimize: bool, master: str | None,
                     confs: tuple[str, ...]) -> None:  # fmt: skip
    """OPTIMIZE small files and VACUUM every Delta table of the pipeline writing TARGET; fold its progress rows."""
    from pyspark.sql import SparkSession

    from walspark.cli.errors import cli_errors, quiet_spark_errors
    from walspark.spark.lake.maintenance import maintain
    from walspark.spark.session import spark_session

    conf = parse_confs(confs)
    with cli_errors():  # one line, credentials redacted, whatever fails
        owned = SparkSession.getActiveSession() is None  # in-process callers (tests) keep their session
        spark = spark_session("walspark-maintain", master=master, conf=conf,
                              locations=tuple(loc for loc in (target, state) if loc))  # fmt: skip
        if owned:
            quiet_spark_errors(spark)
        try:
            done = maintain(spark, target, state=state, retain_hours=retain_hours, optimize=optimize,
                            say=lambda line: click.echo(line, err=True))  # fmt: skip
        finally:
            if owned:
                spark.stop()
    if not done:
        raise click.ClickException(f"no Delta tables under {target}; give the --target of walspark run")
    freed = sum(m.bytes_before - m.bytes_after for m in done)
    click.echo(f"{len(done)} table(s) maintained, {freed:,} bytes freed", err=True)
    failed = [m.name for m in done if m.failed]
    if failed:
        raise click.ClickException(f"{len(failed)} table(s) left as they were: {', '.join(failed)} "
                                   "(see above; run walspark maintain again)")  # fmt: skip
