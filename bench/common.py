"""What every benchmark script shares: progress lines on stderr and percentiles.

Imports nothing but the standard library, so a benchmark's child process (a floor measured
bare) starts with nothing more than what it measures.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

__all__ = ["PGOUTPUT_OPTIONS", "log", "pct", "recvlogical"]

_T0 = time.perf_counter()


def log(text: str) -> None:
    """A progress line on stderr, stamped with the seconds since the script started, so stdout
    carries only the result tables."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {text}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile of ``values`` (inclusive method); NaN when there are none."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


#: The pgoutput options of the server-side references (what walspark negotiates with PostgreSQL 18).
PGOUTPUT_OPTIONS = {"proto_version": "4", "streaming": "on"}


def recvlogical(pg: Any, dsn: str, slot: str, publication: str, endpos: str) -> float:
    """``pg_recvlogical --start`` into /dev/null up to ``endpos``: seconds from process start to exit."""
    argv = [pg.bin("pg_recvlogical"), "-d", dsn, "--slot", slot, "--start", "--no-loop", "-f", "/dev/null",
            "--endpos", endpos, "-o", f"publication_names={publication}"]  # fmt: skip
    for key, value in PGOUTPUT_OPTIONS.items():
        argv += ["-o", f"{key}={value}"]
    started = time.perf_counter()
    subprocess.run(argv, check=True, timeout=1800, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started
