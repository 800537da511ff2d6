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

__all__ = ["CPU_GROUPS", "PGOUTPUT_OPTIONS", "CpuMeter", "cpu_line", "log", "pct", "recvlogical"]

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


#: Process groups whose CPU the benchmarks report: a name and what a process's command line holds
#: (the first that matches). The JVM's own time is Spark's; the time of the children it reaped
#: (Python workers, the streaming source's process) is the Python workers'.
CPU_GROUPS = (("Spark JVM", "java"), ("Python workers", "pyspark"), ("PostgreSQL", "postgres"))


def _cpu_times() -> dict[str, float]:
    """CPU seconds (user + system, with the reaped children's) of every live process, per group
    of :data:`CPU_GROUPS`, and of this process (``driver``). An exited backend or worker is
    counted in its parent's children's time, so a group's total holds it once its parent reaps it."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    totals = dict.fromkeys([name for name, _ in CPU_GROUPS] + ["driver"], 0.0)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        own = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        reaped = (int(fields[13]) + int(fields[14])) / tick  # cutime, cstime
        if int(pid) == os.getpid():
            totals["driver"] += own + reaped
            continue
        for name, marker in CPU_GROUPS:
            if marker in cmdline:
                if name == "Spark JVM":
                    totals[name] += own
                    totals["Python workers"] += reaped
                else:
                    totals[name] += own + reaped
                break
    return totals


class CpuMeter:
    """Where the CPU went between :meth:`start` and :meth:`stop`: seconds per process group (Linux)."""

    def start(self) -> CpuMeter:
        self._before, self._wall = _cpu_times(), time.perf_counter()
        return self

    def stop(self) -> dict[str, float]:
        after, wall = _cpu_times(), time.perf_counter() - self._wall
        used = {name: max(0.0, after[name] - self._before.get(name, 0.0)) for name in after}
        return {**used, "wall": wall}


def cpu_line(used: dict[str, float]) -> str:
    """``used`` (:meth:`CpuMeter.stop`) as one line: each group's CPU seconds, and the host's share used."""
    import os

    wall = used["wall"]
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in used.items() if name != "wall")
    busy = sum(seconds for name, seconds in used.items() if name != "wall")
    return f"CPU over {wall:.1f} s of wall: {parts} ({busy / (wall * (os.cpu_count() or 1)):.0%} of the host's CPUs)"
