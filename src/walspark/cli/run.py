"""``walspark run``: stream a publication's changes from a slot into Delta tables, exactly once.

A thin wrapper over :class:`walspark.Pipeline`, run in the main thread, where SIGTERM and Ctrl-C
become a clean stop between batches (:class:`walspark.pipeline.StopSwitch`).
"""

from __future__ import annotations

import signal
import time
from dataclasses import replace
from typing import Any

import click

from walspark.cli.group import cli
from walspark.cli.options import parse_confs, settings_options, spark_options


@cli.command("run")
@settings_options
@spark_options
def run(master: str | None, confs: tuple[str, ...], **options: Any) -> None:
    """Replicate the publication's tables into Delta tables under TARGET, exactly once."""
    from walspark.cli.errors import cli_errors, quiet_spark_errors
    from walspark.pipeline import Pipeline, RunSettings

    dsn, once, state = options["dsn"], options["once"], options["state"]
    with cli_errors(dsn):
        conf = parse_confs(confs)
        pipeline = Pipeline.from_settings(replace(RunSettings(**options), conf=conf)).on_progress(
            lambda text: click.echo(text, err=True)
        )
        pipeline.check()  # before the JVM starts: a wrong DSN or name costs a second, not thirty
        from pyspark.sql import SparkSession

        from walspark.pipeline.head_start import begin
        from walspark.spark.session import spark_session

        head = begin(pipeline.settings(once=once))  # a --once run's backlog staged while Spark starts
        try:
            owned = SparkSession.getActiveSession() is None  # in-process callers (tests) keep their session
            began = time.monotonic()
            spark = spark_session(
                "walspark-run",
                master=master,
                conf=conf,
                short_lived=once,
                locations=tuple(loc for loc in (options["target"], state) if loc),
                metastore=pipeline.settings().layout.metastore if options["catalog_schema"] else None,
                catalog_schema=options["catalog_schema"] or "",
            )
            if owned:
                quiet_spark_errors(spark)
                click.echo(f"Spark is up ({time.monotonic() - began:.1f} s)", err=True)
            try:
                _run_until_done(pipeline.session(spark), once)
            finally:
                if owned:
                    spark.stop()
        finally:
            if head is not None:
                head.close()  # unclaimed (the run failed before it): its stager stopped


def _run_until_done(pipeline, once: bool) -> None:
    """Run the pipeline in this, the main thread; SIGTERM and Ctrl-C ask it to stop (between
    batches while the query runs; elsewhere they interrupt at once).

    In the main thread rather than a handle's: the thread that waits on the query is the one the
    signal reaches, and the process (with its JVM) lives exactly as long as the pipeline.
    """
    from walspark.pipeline import StopSwitch

    stop = StopSwitch()
    previous = {sig: signal.signal(sig, stop.signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        pipeline.run(once=once, stop=stop, check=False)  # run() checked the source before the JVM started
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
