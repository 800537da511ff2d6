"""The ``walspark`` click group: the command every subcommand module adds itself to."""

from __future__ import annotations

import logging
import sys

import click

from walspark import __version__
from walspark.cli.errors import set_verbosity

__all__ = ["cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="walspark")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug and tracebacks of errors).")
def cli(verbose: int) -> None:
    """PostgreSQL change data capture (pgoutput, protocol v1-v4) into Delta Lake, on Spark."""
    set_verbosity(verbose)
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # py4j's debug log echoes every call into the JVM with its arguments (a DSN option among
    # them) and thousands of lines of noise: never wanted on a terminal.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if verbose < 2:
        # psycopg's "error ignored in rollback" and similar notes are not something to act on.
        logging.getLogger("psycopg").setLevel(logging.ERROR)
