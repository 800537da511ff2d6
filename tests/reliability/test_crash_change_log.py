"""SIGKILL ``walspark run --change-log`` in the windows of change-log mode: the target still equals the source.

Issue 16's crash line. Change-log mode adds three windows to the direct path's (see
:mod:`walspark.spark.lake.fold_worker`), each reached exactly at its injection point:
with ``WALSPARK_TEST_CRASH_AT`` naming it, the driver SIGKILLs its own process group there
(``tests/support/walspark_injection_points.py``):

- ``changes-appended``: a batch's change logs are durable, Spark has not committed the batch, so
  the slot is not confirmed — the restart replays the batch, whose appends the change log's own
  highest batch id must skip (``changelog.append_batch``: not Delta's transaction id);
- ``fold-planned``: a fold's plan ``{"after": a, "upto": b, "done": false}`` is written, nothing
  folded — the restart must fold the same range;
- ``fold-committed``: the mirror holds the fold, its progress row and plan-done do not — the
  restart folds the same range again, which Delta's transaction id makes a no-op.

By default two rounds run, ``changes-appended`` and ``fold-committed``: together they cover the
issue's three windows, because the folds of a batch's tables run in parallel, so the
``fold-committed`` kill finds some tables folded and others still folding (in the middle of a
fold). The other rounds run on demand (``WALSPARK_CRASH_ROUNDS``): ``fold-planned``, and
``mid-fold``, a kill with no hook, from outside, while a fold's plan is not done (wherever its
MERGE is). Each round costs minutes on a loaded 2-core host, so the default run keeps the two
that reach every window.

Each round runs the pipeline streaming under a live :class:`CrashWorkload` until it dies and
stops the workload; the next round's run is the restart. After the last round (in the soak run,
after every round) ``walspark run --once --change-log`` (no hook) catches up. Then, read with
delta-rs or plain Spark: every mirror equals ``SELECT *`` of its source; no change log holds a change
(``_commit_lsn``, ``_seq``) twice nor a batch appended twice; no fold committed twice to a
mirror (the fold commits' notes, app id ``walspark-run/<slot>/fold``, batch id = the range's end);
and every fold plan is done, up to the last batch of its change log. The next round resumes on
the same data, change logs and checkpoint.

``WALSPARK_CRASH_SEED`` replays a run's workload and kill delay; ``WALSPARK_CRASH_ROUNDS`` (comma
separated, among ``changes-appended, fold-planned, fold-committed, mid-fold``) picks the rounds;
the soak run (``./dev test --soak``) runs all four, each with its catch-up and checks.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from depth import soak, sweep
from walspark_injection_points import CRASH_AT

from walspark.spark.lake.changelog import BATCH_ID, change_log_tables, folded_through
from walspark.spark.lake.fold_worker import fold_app_id
from walspark.storage.layout import TargetLayout

from .support import (
    ONCE_TIMEOUT,
    SLOT,
    START_TIMEOUT,
    CrashWorkload,
    Pipeline,
    commit_notes,
    committed_batches,
    create_shop,
    delta_batches,
    log_stats,
    mismatches,
    repeated_batches,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


#: The rounds: a hook's point, or ``mid-fold`` (a kill from outside while a fold plan is not done).
ALL_ROUNDS = ("changes-appended", "fold-planned", "fold-committed", "mid-fold")
#: The default: the two rounds that reach the three windows (see the module's docstring).
DEFAULT_ROUNDS = ("changes-appended", "fold-committed")
#: Whether every round ends with a catch-up run and the checks (the soak run), or only the last:
#: by default the next round's run is the restart of the previous death, and the last catch-up's
#: checks see what every restart did (a change lost or appended twice stays in the logs and mirrors).
CATCH_UP_EACH_ROUND = soak()
ROUNDS = tuple(sweep("WALSPARK_CRASH_ROUNDS", ",".join(DEFAULT_ROUNDS), ",".join(ALL_ROUNDS)).split(","))

APP_ID = f"walspark-run/{SLOT}"


def _plans(target: Path) -> dict[str, dict[str, object]]:
    """Every fold plan file under the state folder, by table (``schema/table``)."""
    out = {}
    for path in sorted((target / "_walspark" / "folds").glob("*/*.json")):
        try:
            out[f"{path.parent.name}/{path.stem}"] = json.loads(path.read_text())
        except (OSError, ValueError):  # being replaced right now
            continue
    return out


def _unfinished(target: Path) -> dict[str, dict[str, object]]:
    return {t: p for t, p in _plans(target).items() if not p.get("done")}


def _committed_ids(target: Path) -> set[int]:
    folder = target / "_walspark" / "checkpoints" / SLOT / "commits"
    return {int(f.name) for f in folder.iterdir() if f.name.isdigit()} if folder.exists() else set()


def _describe_death(target: Path, point: str) -> str:
    """What the files say about the window the run died in; fails if it is not ``point``'s."""
    unfinished = _unfinished(target)
    if point == "changes-appended":
        # Some change log holds a batch Spark never committed (so the slot was not confirmed past it).
        committed = _committed_ids(target)
        logged = {f"{s}.{t}": max((int(n["batch_id"]) for n in commit_notes(None, TargetLayout(str(target)).change_log(s, t))),
                                  default=-1) for s, t in change_log_tables(TargetLayout(str(target)))}  # fmt: skip
        uncommitted = {t: b for t, b in logged.items() if b >= 0 and b not in committed}
        assert uncommitted, f"no change log holds an uncommitted batch: logged {logged}, committed {sorted(committed)}"
        return f"batches in change logs, not committed by Spark: {uncommitted}"
    assert unfinished, f"no fold plan left not done: {_plans(target)}"
    if point == "fold-planned":
        # Planned, nothing folded: no mirror holds a commit of its unfinished fold yet.
        folded = [name for name, plan in unfinished.items()
                  if any(n["batch_id"] == plan["upto"] for n in commit_notes(None, str(target / name)))]  # fmt: skip
        assert not folded, f"a fold only planned is in its mirror already: {folded}"
    if point == "fold-committed":
        # The mirror already holds one of these folds' commits (its bookkeeping is what is missing).
        in_mirror = [name for name, plan in unfinished.items()
                     if any(n["batch_id"] == plan["upto"] and n["app_id"] == fold_app_id(APP_ID)
                            for n in commit_notes(None, str(target / name)))]  # fmt: skip
        assert in_mirror, f"no unfinished fold is in its mirror: {unfinished}"
        return f"folds in the mirror, bookkeeping missing: {sorted(in_mirror)} (plans not done: {sorted(unfinished)})"
    return f"fold plans not done: {unfinished}"


def _check(spark, dsn: str, target: Path) -> str:  # type: ignore[no-untyped-def]
    """The oracle and the exactly-once checks after a catch-up run; a one-line summary."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        diff = mismatches(conn, spark, str(target))
    assert not diff, f"Delta differs from the source: {diff}"
    tables = change_log_tables(TargetLayout(str(target)))
    assert tables, "no change log under the target: the run was not in change-log mode"
    log_rows, last = 0, {}
    for schema, table in tables:
        path = TargetLayout(str(target)).change_log(schema, table)
        rows, changes, last[(schema, table)] = log_stats(spark, path, ("_commit_lsn", "_seq"), BATCH_ID)
        assert rows == changes, f"{schema}.{table}: {rows - changes} changes twice in the change log"
        log_rows += rows
        appended = Counter(int(n["batch_id"]) for n in commit_notes(spark, path))  # type: ignore[arg-type]
        twice = sorted(b for b, k in appended.items() if k > 1)
        assert not twice, f"{schema}.{table}: batches appended twice to the change log: {twice}"
    # The mirrors' commits: every one noted is a fold (app id <app>/fold, batch id = the range's
    # end), and none twice — a fold done again after a crash committed nothing new.
    batches = delta_batches(spark, str(target))
    assert batches, "no mirror commit carries a batch note: the no-double-fold check would be vacuous"
    assert not repeated_batches(batches), f"folds applied twice: {repeated_batches(batches)}"
    notes = [n for schema, table in tables for n in commit_notes(spark, str(target / schema / table))]
    assert {n["app_id"] for n in notes} == {fold_app_id(APP_ID)}, f"mirror commits not from the folds: {notes}"
    assert len(notes) == len(batches), f"delta_batches saw {len(batches)} of the {len(notes)} fold commits"
    # Every plan done, each up to its change log's last batch: nothing left unfolded.
    assert not _unfinished(target), f"fold plans not done after the catch-up run: {_unfinished(target)}"
    behind = {t: (folded_through(TargetLayout(str(target)), *t), b) for t, b in last.items() if folded_through(TargetLayout(str(target)), *t) != b}
    assert not behind, f"change logs not folded to their end (folded, last): {behind}"
    return (f"{len(tables)} change logs ({log_rows} rows, no duplicate), {len(batches)} fold commits, none twice, "
            f"folded through {sorted(set(last.values()))}")


@pytest.mark.timeout(600 + 400 * len(ROUNDS))
def test_sigkill_in_the_change_log_windows_keeps_the_target_equal(spark, pg18_dsn, tmp_path):
    """Die at each change-log window in turn, restart, compare — after every restart."""
    unknown = set(ROUNDS) - set(ALL_ROUNDS)
    assert not unknown, f"WALSPARK_CRASH_ROUNDS: unknown rounds {sorted(unknown)}; known: {ALL_ROUNDS}"
    seed = int(os.environ.get("WALSPARK_CRASH_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"seed={seed}")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_shop(conn, customers=500, products=100, orders=600)
    target = tmp_path / "lake"
    pipeline = Pipeline(pg18_dsn, target, tmp_path / "logs", extra_args=("--change-log", "--fold-seconds", "0"))
    work: CrashWorkload | None = None
    started = time.monotonic()
    try:
        for i, point in enumerate(ROUNDS):
            round_started = time.monotonic()
            work = CrashWorkload(pg18_dsn, rate=10.0, seed=seed + i).start()
            if point == "mid-fold":
                pipeline.start()
                before = committed_batches(target)
                wait_for(lambda before=before: committed_batches(target) > before, timeout=START_TIMEOUT,
                         what="a new committed batch", pipeline=pipeline)  # fmt: skip
                wait_for(lambda: bool(_unfinished(target)), timeout=START_TIMEOUT, what="a fold under way",
                         pipeline=pipeline, poll=0.02)  # fmt: skip
                time.sleep(rng.uniform(0.0, 0.5))
                unfinished = _unfinished(target)
                pipeline.kill()
                print(f"round {i + 1} ({point}): killed from outside; fold plans not done at the kill: {unfinished}")
            else:
                pipeline.start(env={CRASH_AT: point})
                code = pipeline.wait(START_TIMEOUT)
                log = pipeline.log_path.read_text(errors="replace")
                assert code == -signal.SIGKILL and f"injection point: killed at {point}" in log, \
                    f"the run was meant to die at {point}, exited {code}:\n{pipeline.log_tail()}"
                pipeline.proc = None
                print(f"round {i + 1} ({point}): died by the hook (exit {code}); {_describe_death(target, point)}")
            work.stop()
            print(f"  workload: {work.transactions} txns, {work.truncates} truncates; died after "
                  f"{time.monotonic() - round_started:.0f} s")
            if i < len(ROUNDS) - 1 and not CATCH_UP_EACH_ROUND:
                continue  # the next round's run is this death's restart; the last catch-up checks both
            pipeline.start(once=True)
            once_started = time.monotonic()
            code = pipeline.wait(ONCE_TIMEOUT)
            assert code == 0, f"walspark run --once --change-log exited {code}:\n{pipeline.log_tail()}"
            check_started = time.monotonic()
            summary = _check(spark, pg18_dsn, target)
            print(f"  after the restart ({check_started - once_started:.0f} s): equal; {summary} "
                  f"(checked in {time.monotonic() - check_started:.0f} s)")
    finally:
        pipeline.kill()
        if work is not None:
            work.stop()
    print(f"{len(ROUNDS)} rounds, {pipeline.runs} runs, {time.monotonic() - started:.0f} s")
