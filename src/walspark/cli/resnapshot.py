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
def resnapshot(target: str, state: str | None, tables: tuple[str, ...]) -> None:
    """Ask the pipeline writing TARGET to copy these tables again, without stopping the stream."""
    from walspark.source.errors import OptionError
    from walspark.spark.datasource.schema import parse_table_name
    from walspark.spark.tablesync.state import request_resnapshot
    from walspark.storage import TargetLayout

    layout = TargetLayout(target, state)
    if not layout.home_location().list():
        raise click.ClickException(
            f"{target} holds no walspark pipeline (no _walspark folder); give the --target of walspark run"
        )
    try:  # a name that does not parse, or is not one of the pipeline's tables
        names = [parse_table_name(t) for t in tables]
        path = request_resnapshot(layout, names)
    except (ValueError, OptionError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(
        f"re-copy of {', '.join(f'{s}.{t}' for s, t in names)} requested ({path.name}); "
        "walspark run picks it up at its next check",
        err=True,
    )
