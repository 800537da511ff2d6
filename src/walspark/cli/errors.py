"""One place that turns any failure of a ``walspark`` command into one actionable, redacted line.

Whatever failed — walspark, psycopg, click or Spark (a Python error wrapped in a Java one) — the
user gets one line saying what is wrong and what to do; ``-vv`` or ``WALSPARK_DEBUG=1`` adds the
traceback, redacted too.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import click

__all__ = ["CommandError", "cli_errors", "debug_enabled", "describe", "quiet_spark_errors", "set_verbosity"]

#: Longest error line printed; Spark messages can embed whole query plans.
MAX_LINE = 600

_verbosity = 0

# "walspark.source.errors.SlotNotFound: replication slot ..." inside a Spark-wrapped traceback.
_WALSPARK_LINE = re.compile(r"^\s*walspark(?:\.\w+)+\.(?P<cls>\w+): (?P<msg>\S.*)$", re.MULTILINE)
# Any "module.ClassName: message" / "ClassName: message" line of a Python traceback.
_PYTHON_LINE = re.compile(
    r"^\s*(?:[A-Za-z_]\w*\.)*(?P<cls>[A-Za-z_]\w*(?:Error|Exception)): (?P<msg>\S.*)$", re.MULTILINE
)
_SPARK_WRAPPERS = (
    "StreamingQueryException",
    "PythonException",
    "Py4JJavaError",
    "AnalysisException",
    "SparkException",
    "PySparkException",
    "CapturedException",
)


class CommandError(click.ClickException):
    """A one-line CLI error (exit status 1); printed as ``Error: <message>``."""


def set_verbosity(level: int) -> None:
    """Remember the ``-v`` count of this invocation (``-vv`` shows tracebacks)."""
    global _verbosity
    _verbosity = level


def debug_enabled() -> bool:
    """Tracebacks wanted: ``-vv`` or ``WALSPARK_DEBUG`` set to something other than 0/empty."""
    return _verbosity >= 2 or os.environ.get("WALSPARK_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def _is_spark_error(exc: BaseException) -> bool:
    return any(cls.__name__ in _SPARK_WRAPPERS for cls in type(exc).__mro__) or type(exc).__module__.startswith(
        ("pyspark.", "py4j.")
    )


def _spark_cause(text: str) -> str | None:
    """The walspark (else the innermost Python) error line inside a Spark-wrapped failure."""
    found = list(_WALSPARK_LINE.finditer(text))
    if found:
        return found[-1]["msg"]
    found = [m for m in _PYTHON_LINE.finditer(text) if m["cls"] not in _SPARK_WRAPPERS]
    if found:
        return f"{found[-1]['cls']}: {found[-1]['msg']}"
    return None


def describe(exc: BaseException, dsn: str | None = None) -> str:
    """The one line to print for ``exc``: what went wrong and, where known, what to do.

    Every path ends in :func:`walspark.source.dsn.redact_secrets` with the command's DSN, so
    neither the password's ``key=value`` form nor its literal text can reach the terminal.
    """
    from walspark.source.dsn import redact_secrets
    from walspark.source.errors import ConnectionLost, InvalidDsn, SourceError

    text: str
    if isinstance(exc, click.ClickException):
        text = exc.format_message()
    elif isinstance(exc, SourceError):
        text = exc.message
        if isinstance(exc, ConnectionLost) and ";" not in text:
            text += "; check host and port in the connection string and that PostgreSQL is running and reachable"
    elif _is_driver_error(exc):
        from walspark.source.connect import error_from_exception

        return describe(error_from_exception(exc, dsn=dsn, what="database error"), dsn)
    elif _is_spark_error(exc):
        inner = _spark_cause(str(exc))
        text = inner or f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if not inner:
            text += " (run with -vv for the full error)"
    elif isinstance(exc, ValueError) and "connection string" in str(exc):
        text = InvalidDsn(str(exc)).message
    elif type(exc).__module__.startswith("walspark"):
        text = str(exc) or type(exc).__name__  # walspark's own errors are written to be read
    else:
        detail = " ".join(str(exc).split())
        text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
        text += " (unexpected: run with -vv for the traceback and report it)"
    return _one_line(redact_secrets(_one_line(text), dsn))


def _is_driver_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("psycopg.", "psycopg2")) or module == "psycopg"


def print_traceback(exc: BaseException, dsn: str | None = None) -> None:
    """Write ``exc``'s traceback to stderr, redacted (only when :func:`debug_enabled`)."""
    from walspark.source.dsn import redact_secrets

    text = "".join(traceback.format_exception(exc))
    sys.stderr.write(redact_secrets(text, dsn))
    sys.stderr.flush()


#: Spark loggers that print a failed task's or query's whole Java/Python trace at ERROR. The CLI
#: reports the failure itself, as one line; ``-vv`` keeps them.
_SPARK_ERROR_LOGGERS = (
    "org.apache.spark.sql.execution.streaming",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources",
    "org.apache.spark.api.python",
)


def quiet_spark_errors(spark: object) -> None:
    """Silence Spark's own multi-line error logs unless debugging (best effort: log4j 2 only)."""
    if debug_enabled():
        return
    try:
        jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in _SPARK_ERROR_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:  # noqa: BLE001 - a different logging backend: Spark's logs stay as they are
        pass


@contextmanager
def cli_errors(dsn: str | None = None) -> Iterator[None]:
    """Run a command body; any exception leaves as a :class:`CommandError` of one line.

    ``KeyboardInterrupt`` and ``SystemExit`` pass through (Ctrl-C is not an error to explain).
    """
    try:
        yield
    except (KeyboardInterrupt, SystemExit, click.exceptions.Exit, click.Abort):
        raise
    except CommandError:
        raise
    except BaseException as exc:  # noqa: BLE001 - the point is to catch everything the user may see
        if debug_enabled():
            print_traceback(exc, dsn)
        raise CommandError(describe(exc, dsn)) from None
