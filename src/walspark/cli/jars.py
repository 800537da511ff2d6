"""``walspark jars``: where Spark gets Delta Lake's jars, and filling the local cache.

A pip-installed walspark has no ``./dev setup``: the first session fetches Delta's jars with
Spark's package resolution and keeps them in the cache (see :mod:`walspark.spark.jars`). This
command does that ahead of time (``walspark jars``, e.g. while the machine is online), copies
jars from a folder into the cache for a machine that is never online (``--from FOLDER``), and
prints the folder and files a session would use — which is also what ``spark-submit --jars``
needs. ``--warm`` also makes the driver JVM's class archive (:mod:`walspark.spark.cds`).
"""

from __future__ import annotations

from pathlib import Path

import click

from walspark.cli.errors import cli_errors
from walspark.cli.group import cli


@cli.command("jars")
@click.option("--s3a", is_flag=True, help="Also hadoop-aws and the AWS SDK (for s3a:// targets).")
@click.option("--from", "source", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Copy the jars of this folder into the cache (no network needed).")
@click.option("--spark-submit", "submit", is_flag=True,
              help="Print a --jars argument for spark-submit instead of one jar per line.")
@click.option("--warm", is_flag=True,
              help="Also make the JVM's class archive (a minute, once), so that every later session starts sooner.")
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
