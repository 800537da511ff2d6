"""``walspark run``: stream a publication's changes from a slot into Delta tables, exactly once.

A thin wrapper over :class:`walspark.Pipeline`, run in the main thread, where SIGTERM and Ctrl-C
become a clean stop between batches (:class:`walspark.pipeline.StopSwitch`).
"""

from __future__ import annotations

import signal

import click

from walspark.cli.group import cli
from walspark.spark.lake.maintenance import DEFAULT_MAINTENANCE_HOURS


@cli.command("run")
@click.option("--dsn", required=True, envvar="WALSPARK_DSN", help="Source database (libpq DSN or URI, or $WALSPARK_DSN).")
@click.option("--publication", required=True, help="Publication whose tables are replicated.")
@click.option("--slot", required=True, help="pgoutput slot; created (with the initial snapshot) if missing.")
@click.option("--target", required=True, type=click.Path(file_okay=False), help="Folder of the Delta tables.")
@click.option("--once", is_flag=True, help="Apply everything committed up to now, then exit 0 (availableNow).")
@click.option("--scd2", multiple=True, metavar="SCHEMA.TABLE", help="Keep history (SCD2) for this table; repeatable.")
@click.option("--app-id", default=None, help="Idempotence scope of the batches (default walspark-run/<slot>).")
@click.option("--max-rows-per-batch", type=click.IntRange(1), default=None, help="Bound on change rows per batch.")
@click.option("--trigger-seconds", type=click.FloatRange(0.1), default=1.0, show_default=True,
              help="Micro-batch interval when streaming.")
@click.option("--sync-check-seconds", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="How often tables joining or leaving the publication and re-copy requests are checked.")
@click.option("--sync-chunk-rows", type=click.IntRange(1), default=50_000, show_default=True,
              help="Rows per chunk when a table is copied while streaming (a crash resumes by chunk).")
@click.option("--maintenance-hours", type=click.FloatRange(0), default=DEFAULT_MAINTENANCE_HOURS, show_default=True,
              help="Hours between maintenance runs (OPTIMIZE of small files, VACUUM) while running (0: never; "
                   "see walspark maintain).")
@click.option("--retain-hours", type=click.FloatRange(0), default=None,
              help="VACUUM's retention (default: each table's own, Delta's 7 days).")
@click.option("--change-log", is_flag=True,
              help="Append each batch to TARGET/_changes/<schema>/<table> and fold the Delta tables from it in the "
                   "background (fresher, no MERGE per batch; see walspark.read_table).")
@click.option("--fold-seconds", type=click.FloatRange(0), default=0.0, show_default=True,
              help="With --change-log: seconds between background folds at most (0: as soon as one ends).")
@click.option("--keep-changes-hours", type=click.FloatRange(0), default=None,
              help="With --change-log: maintenance deletes change-log rows folded and committed more than this many "
                   "hours ago (default: keep every change).")
@click.option("--master", default=None, help="Spark master (default local[*]; under spark-submit, its --master).")
@click.option("--state", default=None, metavar="LOCATION",
              help="Folder or object-store URI of walspark's own files (default TARGET/_walspark).")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE",
              help="Spark setting, repeatable (as spark-submit's), e.g. spark.hadoop.fs.s3a.endpoint=...")
def run(dsn: str, publication: str, slot: str, target: str, once: bool, scd2: tuple[str, ...], app_id: str | None,
        max_rows_per_batch: int | None, trigger_seconds: float, sync_check_seconds: float,
        sync_chunk_rows: int, maintenance_hours: float, retain_hours: float | None, change_log: bool,
        fold_seconds: float, keep_changes_hours: float | None, master: str | None,
        state: str | None, confs: tuple[str, ...]) -> None:  # fmt: skip
    """Replicate the publication's tables into Delta tables under TARGET, exactly once."""
    from walspark.cli.errors import cli_errors, quiet_spark_errors
    from walspark.pipeline import Pipeline

    with cli_errors(dsn):
        pipeline = (Pipeline(None, dsn=dsn, publication=publication, slot=slot, target=target)
                    .scd2(*scd2).trigger_seconds(trigger_seconds).max_rows_per_batch(max_rows_per_batch)
                    .sync_check_seconds(sync_check_seconds).sync_chunk_rows(sync_chunk_rows).state(state)
                    .maintenance(maintenance_hours, retain_hours).change_log(change_log, fold_seconds, keep_changes_hours)
                    .on_progress(lambda text: click.echo(text, err=True)))  # fmt: skip
        if app_id:
            pipeline.app_id(app_id)
        conf = parse_confs(confs)
        for key, value in conf.items():
            pipeline.conf(key, value)
        pipeline.check()  # before the JVM starts: a wrong DSN or name costs a second, not thirty
        from pyspark.sql import SparkSession

        from walspark.spark.session import spark_session

        owned = SparkSession.getActiveSession() is None  # in-process callers (tests) keep their session
        spark = spark_session("walspark-run", master=master, conf=conf, short_lived=once,
                              locations=tuple(loc for loc in (target, state) if loc))
        if owned:
            quiet_spark_errors(spark)
        try:
            _run_until_done(pipeline.session(spark), once)
        finally:
            if owned:
                spark.stop()


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


def parse_confs(confs: tuple[str, ...]) -> dict[str, str]:
    """``--conf KEY=VALUE`` options as a dict (the last one of a key wins, as in spark-submit)."""
    out: dict[str, str] = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item.split('=')[0]!r}: expected KEY=VALUE", param_hint="--conf")
        out[key.strip()] = value
    return out
