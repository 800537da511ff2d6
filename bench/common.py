"""What every benchmark script shares: progress lines on stderr and percentiles.

Imports nothing but the standard library, so a benchmark's child process (a floor measured
bare) starts with nothing more than what it measures.
"""

from __future__ import annotations

import statistics
import sys
import time

__all__ = ["log", "pct"]

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
