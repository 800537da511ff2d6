"""What every benchmark script shares: progress lines on stderr and percentiles.

Imports nothing but the standard library, so a benchmark's child process (a floor measured
bare) starts with nothing more than what it measures.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["PGOUTPUT_OPTIONS", "CpuMeter", "cpu_line", "fill_big_table", "log", "pct", "postmaster_pid", "recvlogical"]

_T0 = time.perf_counter()


def log(text: str) -> None:
    """A progress line on stderr, stamped with the seconds since the script started, so stdout
    carries only the result tables."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {text}", file=sys.stderr, flush=True)


def fill_big_table(conn: Any, rows: int, name: str = "big") -> None:
    """The snapshot benchmarks' table (``big``): a bigint key, an int, a short text, a timestamptz, a
    numeric; ``rows`` rows, vacuumed and analyzed."""
    conn.execute(
        f"CREATE TABLE {name} (id bigint PRIMARY KEY, qty int, label text, at timestamptz, amount numeric(12, 2))"
    )
    conn.execute(f"INSERT INTO {name} SELECT g, g %% 1000, 'item-' || g, TIMESTAMPTZ '2024-01-01' + g * INTERVAL '1s',"
                 " (g %% 100000) / 100.0 FROM generate_series(1, %s::bigint) g", (rows,))  # fmt: skip
    conn.execute(f"VACUUM ANALYZE {name}")


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


def postmaster_pid(data_dir: Any) -> int:
    """The PostgreSQL server's own PID, from ``postmaster.pid`` in its data directory."""
    with open(f"{data_dir}/postmaster.pid") as f:
        return int(f.readline())


def _cpu_times(postmaster: int | None) -> dict[str, float]:
    """CPU seconds (user + system, with reaped children's) of this process (``driver``), of what it
    started (``Spark JVM``: the JVM's own; ``Python workers``: the JVM's children, reaped or alive)
    and of the server ``postmaster`` with its backends (``PostgreSQL``). Only these process trees
    count, so other work on the host does not."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    times: dict[int, tuple[float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parent[pid] = int(fields[1])
        times[pid] = ((int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick)

    def under(pid: int, root: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parent.get(pid, 1)
        return False

    me = os.getpid()
    totals = {"PostgreSQL": 0.0, "Spark JVM": 0.0, "Python workers": 0.0, "driver": sum(times.get(me, (0, 0)))}
    for pid, (own, reaped) in times.items():
        if postmaster is not None and under(pid, postmaster):
            totals["PostgreSQL"] += own + reaped
        elif pid != me and under(pid, me):
            if parent.get(pid) == me:  # the JVM; what it reaped were Python workers
                totals["Spark JVM"] += own
                totals["Python workers"] += reaped
            else:
                totals["Python workers"] += own + reaped
    return totals


class CpuMeter:
    """Where the CPU went between :meth:`start` and :meth:`stop`: seconds per process tree (Linux)."""

    def __init__(self, postmaster: int | None = None) -> None:
        self._postmaster = postmaster

    def start(self) -> CpuMeter:
        self._before, self._wall = _cpu_times(self._postmaster), time.perf_counter()
        return self

    def stop(self) -> dict[str, float]:
        after, wall = _cpu_times(self._postmaster), time.perf_counter() - self._wall
        used = {name: max(0.0, after[name] - self._before.get(name, 0.0)) for name in after}
        return {**used, "wall": wall}


def cpu_line(used: dict[str, float]) -> str:
    """``used`` (:meth:`CpuMeter.stop`) as one line: each group's CPU seconds, and the host's share used."""
    import os

    wall = used["wall"]
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in used.items() if name != "wall")
    busy = sum(seconds for name, seconds in used.items() if name != "wall")
    return f"CPU over {wall:.1f} s of wall: {parts} ({busy / (wall * (os.cpu_count() or 1)):.0%} of the host's CPUs)"


class RssMeter:
    """Peak resident memory between :meth:`start` and :meth:`stop`, sampled every ``interval``
    seconds (Linux): of this process (the driver), of the JVM it started, and of the largest of
    the JVM's Python workers (a task, or the source's process where the stager runs)."""

    def __init__(self, interval: float = 0.1) -> None:
        import threading

        self._interval, self._stop = interval, threading.Event()
        self.peaks = {"driver": 0, "Spark JVM": 0, "largest Python worker": 0}
        self._thread = threading.Thread(target=self._run, name="rss-meter", daemon=True)

    def start(self) -> RssMeter:
        import os

        self.baseline = _rss(os.getpid())
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.peaks

    def _run(self) -> None:
        import os

        me = os.getpid()
        while not self._stop.is_set():
            parent: dict[int, int] = {}
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        with open(f"/proc/{entry}/stat", "rb") as f:
                            parent[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
                    except OSError:
                        continue
            self._peak("driver", _rss(me))
            for pid, ppid in parent.items():
                if ppid == me:
                    self._peak("Spark JVM", _rss(pid))
                    continue
                while ppid > 1 and parent.get(ppid, 1) != me:  # a descendant of the JVM?
                    ppid = parent.get(ppid, 1)
                if ppid > 1:
                    self._peak("largest Python worker", _rss(pid))
            self._stop.wait(self._interval)

    def _peak(self, name: str, value: int) -> None:
        self.peaks[name] = max(self.peaks[name], value)

    def line(self) -> str:
        """The peaks as one line, in MiB (the driver's resident memory at the start beside its own)."""
        parts = ", ".join(f"{name} {value / 2**20:,.0f} MiB" for name, value in self.peaks.items())
        return f"peak resident memory: {parts} (the driver held {self.baseline / 2**20:,.0f} MiB at the start)"


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` (0: gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def log_versions(path: str) -> list[int]:
    """The commit versions in a Delta table's ``_delta_log`` (a local path)."""
    return sorted(int(p.stem) for p in Path(path, "_delta_log").glob("*.json") if p.stem.isdigit())


def stored_files(path: str) -> dict[str, int]:
    """Size of every file of the table outside ``_delta_log`` (data and deletion-vector files)."""
    root = Path(path)
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")
            if p.is_file() and "_delta_log" not in p.parts and not p.name.startswith(".")}  # fmt: skip


def commit_files(path: str, versions: list[int]) -> tuple[int, int, int, list[dict]]:
    """New data files, files rewritten, files given a deletion vector, and the ``commitInfo`` of
    each of the table's commits ``versions``.

    A file that gets a deletion vector is removed and added back (same path, now with the
    vector) in the same commit: that is not a file written, so adds and removes are matched
    by path.
    """
    adds: dict[str, bool] = {}  # path -> carries a deletion vector
    removes: set[str] = set()
    infos = []
    for v in versions:
        for line in Path(path, "_delta_log", f"{v:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                adds[action["add"]["path"]] = action["add"].get("deletionVector") is not None
            elif "remove" in action:
                removes.add(action["remove"]["path"])
            elif "commitInfo" in action:
                infos.append(action["commitInfo"])
    new = sum(1 for p in adds if p not in removes)
    given_dv = sum(1 for p, dv in adds.items() if p in removes and dv)
    return new, len(removes - adds.keys()), given_dv, infos
