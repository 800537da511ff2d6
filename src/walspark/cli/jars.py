"""``walspark jars``: where Spark gets Delta Lake's jars, and filling the local cache.

Fills the cache ahead of time or ``--from FOLDER``, prints what a session (or ``spark-submit
--jars``) would use; ``--warm`` also makes the class archive. See docs/deploying.md.
"""

from __future__ import annotations

from pathlib import Path

import click

from walspark.cli.errors import cli_errors
from walspark.cli.group import cli


@cli.command("jars")
@click.option("--s3a", is_flag=True, help="Also hadoop-aws and the AWS SDK (for s3a:// targets).")
@click.option(
    "--from",
    "source",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Copy the jars of this folder into the cache (no network needed).",
)
@click.option(
    "--spark-submit",
    "submit",
    is_flag=True,
    help="Print a --jars argument for spark-submit instead of one jar per line.",
)
@click.option(
    "--warm",
    is_flag=True,
    help="Also make the JVM's class archive (a minute, once), so that every later session starts sooner.",
)
def jars(s3a: bool, source: Path | None, submit: bool, warm: bool) -> None:
    """Find (or fetch once into the local cache) the jars walspark's Spark sessions use."""
    with cli_errors():
        from walspark.spark.jars import delta_jars, fill_cache

        if warm:
            from walspark.spark.cds import build

            made = build(say=lambda line: click.echo(line, err=True))
            if made is not None:
                click.echo(f"JVM class archive: {made}", err=True)

        if source is not None:
            files = sorted(source.glob("*.jar"))
            if not files:
                raise click.ClickException(f"no jar in {source}")
            folder = fill_cache(files)
            click.echo(f"copied {len(files)} jar(s) into {folder}", err=True)
        found = delta_jars(s3a=s3a)
        if submit:
            click.echo("--jars " + ",".join(str(f) for f in found.files))
            return
        click.echo(f"{found.folder} ({found.origin})", err=True)
        for file in found.files:
            click.echo(str(file))
