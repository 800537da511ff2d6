"""``walspark resnapshot``: re-copy tables of a running (or the next) ``walspark run``.

A thin command over :func:`walspark.spark.tablesync.state.request_resnapshot`; nothing here
touches the slot. See docs/design/table-sync.md.
"""

from __future__ import annotations

import click

from walspark.cli.group import cli
from walspark.cli.options import pipeline_target_options


@cli.command("resnapshot")
@pipeline_target_options
@click.option(
    "--table",
    "tables",
    required=True,
    multiple=True,
    metavar="SCHEMA.TABLE",
    help='Table to copy again (repeatable; a bare name means public; quote parts with " as in SQL).',
)
@click.option("--dsn", envvar="WALSPARK_DSN", help="Source database, as given to walspark run (with --publication).")
@click.option(
    "--publication",
    default=None,
    help="The run's publication(s): each table must be published by them (checked at the source, with --dsn).",
)
def resnapshot(
    target: str, state: str | None, tables: tuple[str, ...], dsn: str | None, publication: str | None
) -> None:
    """Ask the pipeline writing TARGET to copy these tables again, without stopping the stream.

    A table the run would only ignore is refused: with --publication (and --dsn), one the
    publication does not publish; without, one the pipeline does not have or that left its
    publication.
    """
    from walspark.cli.errors import cli_errors
    from walspark.source.errors import OptionError
    from walspark.spark.datasource.schema import parse_table_name
    from walspark.spark.tablesync.state import UnknownTable, request_resnapshot
    from walspark.storage import TargetLayout

    if publication and not dsn:
        raise click.UsageError("--publication is checked at the source: give --dsn (or $WALSPARK_DSN) too")
    layout = TargetLayout(target, state)
    if not layout.home_location().list():
        raise click.ClickException(
            f"{target} holds no walspark pipeline (no _walspark folder); give the --target of walspark run"
        )
    try:  # a name that does not parse
        names = [parse_table_name(t) for t in tables]
    except (ValueError, OptionError) as exc:
        raise click.UsageError(str(exc)) from None
    published = None
    if publication and dsn:
        with cli_errors(dsn):  # the source's errors as one line, the DSN redacted
            published = _published(dsn, publication)
    try:
        path = request_resnapshot(layout, names, published, publication or "")
    except UnknownTable as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(
        f"re-copy of {', '.join(f'{s}.{t}' for s, t in names)} requested ({path.name}); "
        "walspark run picks it up at its next check",
        err=True,
    )


def _published(dsn: str, publication: str) -> list[tuple[str, str]]:
    """The tables ``publication`` (a comma-separated list) publishes, after the checks that say in
    one line why the source cannot answer (connection, password, publication missing)."""
    from walspark.source.catalog import published_tables
    from walspark.source.connect import connect_sql
    from walspark.source.preflight import check_source

    check_source(dsn, publications=[publication], replication=False)
    with connect_sql(dsn) as conn:
        return [(t.schema, t.table) for t in published_tables(conn, publication)]
