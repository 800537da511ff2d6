"""Helpers of the reliability suite: the shop, a harsher workload, the oracle, the pipeline process.

The source schema, its seed rows and the canonical per-type comparison are the demo's
(:mod:`walspark.demo`): the demo already proves them on the same pipeline, and a second copy
would drift. What the crash tests add is what the demo's workload never does — truncates, and
updates that *rewrite* a TOASTed value (the demo only leaves its large notes untouched) — and a
comparison that reports the differing rows, not only checksums, so a failure says which key went
wrong.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import walspark_injection_points as injection_points

from walspark.demo import PUBLICATION, TABLES, Workload, create_shop, table_rows

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession

__all__ = ["PUBLICATION", "SLOT", "CrashWorkload", "Pipeline", "commit_notes", "create_shop", "delta_batches",
           "mismatches", "pipeline_state", "repeated_batches"]

SLOT = "crash_slot"

#: Deadlines of the crash suite, not expectations: on a 2-core host shared with other suites a JVM
#: start takes 20-30 s and one micro-batch over a minute's backlog has been seen to take 100 s.
START_TIMEOUT = 600.0
ONCE_TIMEOUT = 900.0


class CrashWorkload(Workload):
    """The demo's shop workload plus truncates and TOAST rewrites.

    Every ``truncate_every``-th transaction (on average) truncates ``order_items`` or both
    ``orders`` and ``order_items`` — the apply step must empty the target at the truncate's position
    in the batch, which the demo never exercises. One transaction in ten rewrites an order's large
    note (a new TOASTed value, so the new value must arrive, not the target's old one), while the
    demo's own status updates keep leaving notes untouched (unchanged-TOAST markers).
    """

    def __init__(self, dsn: str, *, rate: float = 25.0, seed: int = 7, truncate_every: int = 400) -> None:
        super().__init__(dsn, rate=rate, seed=seed)
        self.truncate_every = truncate_every
        self.truncates = 0

    def _one(self, conn: psycopg.Connection, next_order: int) -> int:
        rng = self._rng
        roll = rng.random()
        if roll < 1.0 / self.truncate_every:
            tables = "shop.order_items" if rng.random() < 0.6 else "shop.order_items, shop.orders"
            conn.execute(f"TRUNCATE {tables}")
            self.truncates += 1
            return next_order
        if roll < 0.1 and next_order > 1:  # a TOASTed note rewritten (touched), on an order that may or may not have one
            conn.execute(
                "UPDATE shop.orders SET note = repeat(%s, 3000), total = total + 1 WHERE id = %s",
                (f"rewritten {rng.randrange(1 << 30)} ", rng.randint(max(1, next_order - 500), next_order - 1)),
            )
            return next_order
        return super()._one(conn, next_order)


# -- the oracle -------------------------------------------------------------------------------


def mismatches(conn: psycopg.Connection, spark: SparkSession, target: str) -> dict[str, dict[str, object]]:
    """Per shop table that differs: row counts and a few rows only in the source / only in Delta.

    Empty when every Delta table equals ``SELECT *`` of its source, row by row.
    """
    out: dict[str, dict[str, object]] = {}
    for table in TABLES:
        source, target_rows = table_rows(conn, spark, target, table)
        if source == target_rows:
            continue
        src, tgt = Counter(map(repr, source)), Counter(map(repr, target_rows))
        out[table] = {
            "source_rows": len(source),
            "target_rows": len(target_rows),
            "only_in_source": [r[:300] for r in list((src - tgt).elements())[:3]],
            "only_in_delta": [r[:300] for r in list((tgt - src).elements())[:3]],
        }
    return out


def commit_notes(spark: SparkSession | None, path: str) -> list[dict[str, object]]:
    """The JSON notes (``userMetadata``) of a Delta table's commits that carry a batch id.

    A local table's notes are read from the JSON commit files of its log (no Spark job: a
    ``DESCRIBE HISTORY`` computes the table's snapshot first, seconds on a busy host); other
    locations (``s3a://``) through ``DESCRIBE HISTORY``. The log's JSON files are all there:
    Delta removes them only after ``logRetentionDuration`` (30 days).
    """
    if "://" in path and not path.startswith("file:"):
        assert spark is not None, f"{path}: a remote table's history is read with Spark"
        rows = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("userMetadata").collect()
        metas = [meta for (meta,) in rows if meta]
    else:
        log = Path(path.removeprefix("file:")) / "_delta_log"
        commits = sorted(entry for entry in log.glob("*.json") if entry.stem.isdigit())  # not compacted ranges
        metas = [json.loads(line).get("commitInfo", {}).get("userMetadata") for entry in commits
                 for line in entry.read_text().splitlines() if '"commitInfo"' in line]  # fmt: skip
    notes = [json.loads(meta) for meta in metas if meta]
    return [note for note in notes if "batch_id" in note]


def delta_batches(spark: SparkSession, target: str) -> list[tuple[str, int, str]]:
    """(table, batch_id, commit_lsn) of every Delta commit that carries walspark's batch note."""
    return [(table, int(note["batch_id"]), str(note.get("commit_lsn")))  # type: ignore[arg-type]
            for table in TABLES for note in commit_notes(spark, f"{target}/shop/{table}")]


def repeated_batches(batches: Sequence[tuple[str, int, str]]) -> list[tuple[str, int]]:
    """The (table, batch_id) pairs committed more than once — a batch applied twice."""
    counts = Counter((table, batch) for table, batch, _ in batches)
    return sorted(pair for pair, n in counts.items() if n > 1)


# -- the pipeline as a process ----------------------------------------------------------------


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def _batch_ids(folder: Path) -> set[int]:
    return {int(f.name) for f in folder.iterdir() if f.name.isdigit()} if folder.exists() else set()


def _delta_has_batch(target: Path, batch_id: int) -> bool:
    """Whether any shop table's Delta log already holds a commit noted with ``batch_id``.

    Read from the log files (not Spark): cheap enough to poll while the run is alive.
    """
    needle = f'\\"batch_id\\": {batch_id},'
    for table in TABLES:
        log = target / "shop" / table / "_delta_log"
        if not log.exists():
            continue
        for entry in log.glob("*.json"):
            try:
                if needle in entry.read_text():
                    return True
            except OSError:
                continue
    return False


def pipeline_state(dsn: str, target: Path, slot: str = SLOT) -> str:
    """Where a kill at this instant lands, as far as the files and the slot tell.

    - ``snapshot``: the snapshot record is missing or not complete (copy under way);
    - ``mid-batch``: a batch is planned in the offset log but not in the commit log, none of its
      MERGEs committed yet;
    - ``mid-batch, Delta written``: the same, but at least one table's MERGE of that batch is
      already in Delta — the window between the Delta write and the commit log / slot confirm,
      where a restart must skip the replayed MERGE;
    - ``written, slot behind``: every planned batch is committed but the slot is confirmed below
      the last batch's end (Spark confirms a batch only when it plans the next one) — the window
      between the Delta write and the slot confirm;
    - ``idle``: everything written and confirmed.
    """
    import psycopg

    record = target / "_walspark" / "snapshot.json"
    if not record.exists() or json.loads(record.read_text()).get("state") != "complete":
        return "snapshot"
    checkpoint = target / "_walspark" / "checkpoints" / slot
    offsets, commits = _batch_ids(checkpoint / "offsets"), _batch_ids(checkpoint / "commits")
    if offsets - commits:
        pending = min(offsets - commits)
        return "mid-batch, Delta written" if _delta_has_batch(target, pending) else "mid-batch"
    if not commits:
        return "idle"
    last = max(commits)
    try:
        lines = (checkpoint / "offsets" / str(last)).read_text().splitlines()
        end = max(_lsn(json.loads(line)["lsn"]) for line in lines[2:] if line.startswith("{") and '"lsn"' in line)
    except (OSError, ValueError, KeyError):
        return "written"
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()  # fmt: skip
    return "written, slot behind" if row and _lsn(row[0]) < end else "idle"


def committed_batches(target: Path, slot: str = SLOT) -> int:
    """Batches in the run's checkpoint commit log (progress the pipeline made and recorded)."""
    return len(_batch_ids(target / "_walspark" / "checkpoints" / slot / "commits"))


@dataclass
class Pipeline:
    """``walspark run`` as a child process in its own session, so a SIGKILL takes its JVM too.

    ``python -m walspark.cli run`` starts a Spark JVM (and Python workers) below it; killing only
    the Python process would leave the JVM holding the slot. The child is the leader of a new
    process group, and :meth:`kill` sends SIGKILL to the whole group.
    """

    dsn: str
    target: Path | str
    logs: Path
    trigger_seconds: float = 0.5
    slot: str = SLOT
    #: Where the driver runs: ``local[2]`` here, ``spark://…`` on a standalone cluster.
    master: str = "local[2]"
    #: Variables set for the child on top of this process's environment, and its working dir.
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    #: More ``walspark run`` options, given to every start (e.g. ``("--scd2", "public.t")``).
    extra_args: Sequence[str] = ()
    runs: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self, *, once: bool = False, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a run; ``env``: variables for this run only, on top of :attr:`env` (the tests'
        injection points' actions are installed: their variables, e.g. ``WALSPARK_TEST_CRASH_AT``, act)."""
        self.runs += 1
        args = [sys.executable, "-m", "walspark.cli", "run", "--dsn", self.dsn, "--publication", PUBLICATION,
                "--slot", self.slot, "--target", str(self.target), "--trigger-seconds", str(self.trigger_seconds),
                "--master", self.master, *self.extra_args]  # fmt: skip
        if once:
            args.append("--once")
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            env = {**os.environ, "PYTHONUNBUFFERED": "1", **injection_points.environment(), **self.env, **(env or {})}
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                         cwd=self.cwd)  # fmt: skip
        return self.proc

    @property
    def log_path(self) -> Path:
        """The current (last started) run's output."""
        return self.logs / f"run-{self.runs}.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the run and everything it started (no shutdown hook, no clean stop)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None

    def wait(self, timeout: float) -> int:
        """Wait for a ``--once`` run to exit; its exit code (killed and failed past ``timeout``)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"walspark run did not exit within {timeout:.0f} s; see {self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        path = self.log_path
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"


def wait_for(condition, *, timeout: float, what: str, pipeline: Pipeline | None = None,  # type: ignore[no-untyped-def]
             poll: float = 0.1) -> None:
    """Poll ``condition`` until true; fail with the run's log if the deadline passes or it died."""
    deadline = time.monotonic() + timeout
    while not condition():
        if pipeline is not None and not pipeline.alive():
            raise AssertionError(f"walspark run exited while waiting for {what}:\n{pipeline.log_tail()}")
        if time.monotonic() > deadline:
            tail = pipeline.log_tail() if pipeline is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tail}")
        time.sleep(poll)
