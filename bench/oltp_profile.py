"""Where an UPDATE-heavy pgbench batch's seconds go in ``Pipeline.run_once()``, and a cold idle run's.

pgbench at ``--scale`` (10: 1,000,000 accounts), its four tables published, one walspark target
snapshotted on this process's session; then, each drained by one timed ``run_once()`` sampled by
py-spy (every thread of this process) with walspark's log at DEBUG: a backlog of ``--small``
transactions (2,500: 10,000 changes), then one of ``--large`` (47,500: 190,000 changes); then a
backlog of ``--cold-backlog`` transactions drained by ``walspark -vv run --once`` as a new process,
and last the same with nothing pending, each sampled by py-spy with its subprocesses. Spark's event log (``spark.eventLog.dir`` under ``--out``) holds every job.
Afterwards: ``--out`` has the py-spy samples (``*.raw``), the logs and each table's Delta commits
with their operation metrics (``commits.txt``); the summary goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from common import log  # bench/common.py, beside this script
from oltp import PUBLICATION, TABLES, pgbench, pgbench_database  # bench/oltp.py, beside this script


def sampled(pyspy: str, out: Path, pid: int, *extra: str) -> subprocess.Popen:
    """py-spy recording ``pid`` into ``out`` (raw collapsed stacks, idle samples too) until SIGINT."""
    argv = [pyspy, "record", "--idle", "--threads", "-r", "50", "-f", "raw", "-o", str(out), "--pid", str(pid), *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)


def summarise(raw: Path, top: int = 45) -> list[str]:
    """Inclusive seconds per walspark frame (and a few of PySpark's), per thread name, from py-spy's
    raw output (``--threads``: each stack starts ``thread (tid): name``; ``--subprocesses``: with
    its process before it)."""
    if not raw.exists():
        return [f"(no samples in {raw})"]
    per: dict[str, Counter] = {}
    totals: Counter = Counter()
    wanted = ("toArrow", "createDataFrame", "persist", "getOrCreate", "execute", "collect", "_wait_for")
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, n = stack.split(";"), int(count)
        head = next((i for i, f in enumerate(frames) if f.startswith("thread (")), 0)
        proc = frames[0].split(":")[0] if head else ""
        name = frames[head].split(": ", 1)[1] if ": " in frames[head] else "(unnamed)"
        kind = re.sub(r"_\d+$", "", f"{proc} {name}".strip())
        totals[kind] += n
        seen = set()
        for f in frames[head:]:
            func, _, where = f.partition(" (")
            where = where.rstrip(")")
            if "walspark/" not in where and func.split(".")[-1] not in wanted:
                continue
            key = f"{func} ({where.rsplit(':', 1)[0]})"
            if key not in seen:
                seen.add(key)
                per.setdefault(kind, Counter())[key] += n
    lines = []
    for kind in sorted(totals, key=lambda k: -totals[k]):
        if totals[kind] < 25:
            continue
        lines.append(f"  thread {kind}: {totals[kind] / 50:.1f} s sampled")
        for key, n in per.get(kind, Counter()).most_common(top):
            lines.append(f"    {n / 50:7.2f} s  {key}")
    return lines


def commits(target: str, since: dict[str, int]) -> tuple[list[str], dict[str, int]]:
    """Each table's Delta commits after version ``since[table]``: operation, engine, metrics."""
    lines, now = [], {}
    for t in TABLES:
        logdir = Path(target, "public", t, "_delta_log")
        versions = sorted(int(p.stem) for p in logdir.glob("*.json"))
        now[t] = versions[-1] if versions else -1
        for v in versions:
            if v <= since.get(t, -1):
                continue
            info, adds, removes, dvs = {}, 0, 0, 0
            for entry in (json.loads(x) for x in (logdir / f"{v:020d}.json").read_text().splitlines() if x):
                info = entry.get("commitInfo", info)
                adds += "add" in entry
                removes += "remove" in entry
                dvs += bool(entry.get("add", {}).get("deletionVector"))
            metrics = info.get("operationMetrics", {})
            keep = {k: metrics[k] for k in sorted(metrics) if any(w in k.lower() for w in (
                "time", "files", "rows", "deletion", "bytes", "scanned", "skipped"))}  # fmt: skip
            lines.append(f"  {t} v{v}: {info.get('operation')} ({info.get('engineInfo', info.get('clientVersion', '?'))})"
                         f" adds={adds} removes={removes} dv_adds={dvs} {json.dumps(keep)}")  # fmt: skip
    return lines, now


def event_jobs(eventdir: Path, t0_ms: float, t1_ms: float) -> list[str]:
    """Spark jobs (from the event log) submitted between two wall-clock instants (ms), by description."""
    jobs: dict[int, dict] = {}
    sql: dict[int, dict] = {}
    for path in eventdir.glob("*"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            kind = e.get("Event", "")
            if kind == "SparkListenerJobStart":
                props = e.get("Properties", {})
                jobs[e["Job ID"]] = {"start": e["Submission Time"],
                                     "desc": (props.get("spark.job.description") or props.get("callSite.short") or "?")[:90],
                                     "stages": len(e.get("Stage Infos", []))}  # fmt: skip
            elif kind == "SparkListenerJobEnd" and e["Job ID"] in jobs:
                jobs[e["Job ID"]]["end"] = e["Completion Time"]
            elif kind.endswith("SparkListenerSQLExecutionStart"):
                sql[e["executionId"]] = {"start": e["time"], "desc": e.get("description", "")[:90]}
            elif kind.endswith("SparkListenerSQLExecutionEnd") and e["executionId"] in sql:
                sql[e["executionId"]]["end"] = e["time"]
    lines = []
    chosen = [j for j in jobs.values() if t0_ms <= j["start"] <= t1_ms]
    busy = sum(j.get("end", j["start"]) - j["start"] for j in chosen) / 1000
    lines.append(f"  {len(chosen)} Spark jobs, {busy:.2f} job-seconds (overlapping jobs counted each)")
    by: dict[str, list[float]] = {}
    for j in chosen:
        by.setdefault(j["desc"], []).append((j.get("end", j["start"]) - j["start"]) / 1000)
    for desc, secs in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"    {sum(secs):6.2f} s  {len(secs):3d} job(s)  {desc}")
    execs = [s for s in sql.values() if t0_ms <= s["start"] <= t1_ms]
    lines.append(f"  {len(execs)} SQL executions:")
    for s in sorted(execs, key=lambda s: s["start"]):
        lines.append(
            f"    +{(s['start'] - t0_ms) / 1000:6.2f} s {(s.get('end', s['start']) - s['start']) / 1000:6.2f} s  {s['desc']}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--small", type=int, default=2_500, help="transactions of the small backlog (default 2,500)")
    parser.add_argument("--large", type=int, default=47_500, help="transactions of the large backlog (default 47,500)")
    parser.add_argument("--cold-backlog", type=int, default=47_500,
                        help="transactions of the backlog drained by a new process under py-spy (default 47,500; 0: none)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--out", default="/tmp/oltpprof")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy program (default: on PATH)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    events = out / "events"
    events.mkdir(exist_ok=True)
    conf_dir = out / "conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.rolling.enabled false\nspark.eventLog.compress false\n"
        f"spark.eventLog.dir file://{events}\n"
    )
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    handler = logging.FileHandler(out / "walspark.log", mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(threadName)s %(name)s: %(message)s", "%H:%M:%S"))
    logging.getLogger("walspark").addHandler(handler)
    logging.getLogger("walspark").setLevel(logging.DEBUG)

    from walspark import Pipeline
    from walspark.embedded.postgres import EmbeddedPostgres
    from walspark.spark.session import spark_session

    settings = {
        "max_wal_size": "8GB",
        "shared_buffers": "512MB",
        "max_replication_slots": "20",
        "max_wal_senders": "20",
    }
    report: list[str] = []
    with EmbeddedPostgres(settings=settings) as pg:
        dsn = pgbench_database(pg, args.scale)
        target = str(out / "target")
        shutil.rmtree(target, ignore_errors=True)
        spark = spark_session("walspark-oltp-profile")
        pipe = Pipeline(spark, dsn=dsn, publication=PUBLICATION, slot="oltp_prof", target=target).on_progress(log)
        log("snapshot")
        pipe.run_once()
        _, versions = commits(target, {})
        for name, txns in (("small", args.small), ("large", args.large)):
            per = txns // args.clients
            log(f"{name}: pgbench {per * args.clients:,} transactions")
            pgbench(pg, dsn, "-n", "-c", str(args.clients), "-j", str(max(1, args.clients // 2)), "-t", str(per))
            time.sleep(2)
            spy = sampled(args.py_spy, out / f"{name}.raw", os.getpid())
            handler.stream.write(f"==== {name} run_once begins\n")
            t0 = time.time() * 1000
            started = time.perf_counter()
            pipe.run_once()
            seconds = time.perf_counter() - started
            t1 = time.time() * 1000
            handler.stream.write(f"==== {name} run_once ends ({seconds:.2f} s)\n")
            handler.flush()
            stop(spy)
            log(f"{name}: run_once {seconds:.2f} s")
            lines, versions = commits(target, versions)
            report += [f"## {name}: {4 * per * args.clients:,} changes, run_once {seconds:.2f} s", "commits:", *lines]
            time.sleep(1)
            report += ["spark:", *event_jobs(events, t0, t1), "py-spy (inclusive seconds per frame):",
                       *summarise(out / f"{name}.raw")]  # fmt: skip
        spark.stop()
        env = {**os.environ, "WALSPARK_DSN": dsn}
        argv = [sys.executable, "-m", "walspark.cli", "-vv", "run", "--publication", PUBLICATION, "--slot",
                "oltp_prof", "--target", target, "--once"]  # fmt: skip

        def cold(name: str, attempt: str) -> float:
            """``walspark -vv run --once`` as a new process; ``sampled``: under py-spy with its children."""
            started = time.perf_counter()
            with open(out / f"{name}-{attempt}.log", "w") as err:
                if attempt == "plain":
                    subprocess.run(argv, env=env, stderr=err, stdout=err, check=True, timeout=600)
                else:
                    subprocess.run([args.py_spy, "record", "--idle", "--threads", "--subprocesses", "-r", "50", "-f",
                                    "raw", "-o", str(out / f"{name}.raw"), "--", *argv],
                                   env=env, stderr=err, stdout=err, check=True, timeout=600)  # fmt: skip
            return time.perf_counter() - started

        if args.cold_backlog:
            per = args.cold_backlog // args.clients
            log(f"cold, a backlog: pgbench {per * args.clients:,} transactions, then walspark -vv run --once under py-spy")
            pgbench(pg, dsn, "-n", "-c", str(args.clients), "-j", str(max(1, args.clients // 2)), "-t", str(per))
            seconds = cold("cold-backlog", "sampled")
            log(f"cold, a backlog: {seconds:.2f} s")
            report += [f"## cold, a backlog of {4 * per * args.clients:,} changes (sampled): {seconds:.2f} s",
                       "py-spy (inclusive seconds per frame):", *summarise(out / "cold-backlog.raw")]  # fmt: skip
        log("cold, nothing pending: walspark -vv run --once as a new process under py-spy")
        for attempt in ("plain", "sampled"):
            seconds = cold("cold", attempt)
            log(f"cold {attempt}: {seconds:.2f} s")
            report.append(f"## cold, nothing pending ({attempt}): {seconds:.2f} s")
        report += ["py-spy (inclusive seconds per frame):", *summarise(out / "cold.raw")]
    text = "\n".join(report)
    (out / "summary.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
