"""The ``walspark`` command.

Subcommands import what they need when they run, so ``walspark --help`` answers at once
instead of waiting for PySpark.
"""

from __future__ import annotations

import logging
import sys

import click

from walspark import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="walspark")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """PostgreSQL change data capture (pgoutput, protocol v1-v4) into Delta Lake, on Spark."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def main() -> None:
    """Console-script entry point."""
    from walspark.cli import commands  # noqa: F401  (registers the subcommands)

    cli(prog_name="walspark")
