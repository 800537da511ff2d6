"""The ``walspark`` command.

Subcommands import what they need when they run, so ``walspark --help`` answers at once.
Every failure ends as one line on stderr (:mod:`walspark.cli.errors`; docs/applying.md,
"Errors").
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from walspark.cli.errors import CommandError, debug_enabled, describe, print_traceback
from walspark.cli.group import cli

__all__ = ["cli", "main"]


def _usage_line(exc: click.UsageError) -> str:
    """A usage error as one line that names the help to read (click prints three lines)."""
    command = exc.ctx.command_path if exc.ctx is not None else "walspark"
    return f"{exc.format_message()} (see '{command} --help')"


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: runs the command, prints any error as one line, exits."""
    from walspark.cli import commands  # noqa: F401  (registers the subcommands)

    try:
        rc = cli.main(args=list(argv) if argv is not None else None, prog_name="walspark", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # bare `walspark slot`: the help is the answer
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc), err=True)
        sys.exit(2)
    except click.UsageError as exc:
        click.echo(f"Error: {_usage_line(exc)}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"Error: {exc.format_message() if isinstance(exc, CommandError) else describe(exc)}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - a command without cli_errors: still one line
        if debug_enabled():
            print_traceback(exc)
        click.echo(f"Error: {describe(exc)}", err=True)
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)  # ctx.exit(n) comes back as n
