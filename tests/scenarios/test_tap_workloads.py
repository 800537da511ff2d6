"""PostgreSQL's subscription TAP workloads through ``walspark run --once``, compared with the oracle.

Each workload of :mod:`.tap_workloads` (the publisher SQL of one ``src/test/subscription/t/*.pl``)
runs twice, in a database of its own with one slot:

- **stepwise**: the first run takes the snapshot, then one ``walspark run --once`` at each of the
  test's catch-up points, the oracle after each — what a pipeline that keeps up sees;
- **backlog**: the snapshot, then every step, then one run — what a pipeline that was down sees
  (DDL, identity changes and publication changes all waiting in one batch).

The backlog runs where it differs from the catch-ups in what one batch holds: where a step changes
a table's shape or the publication (ALTER, CREATE, DROP, ATTACH, DETACH) or truncates, so that
those wait in one batch with the changes around them. Elsewhere the backlog only puts the same
row changes in fewer batches, which the apply's own tests cover (tests/spark/test_apply.py: a
random workload in few large batches), and a workload of one step would run the same run twice.
Each scenario costs minutes of the suite's CPU on two cores.

Where the TAP checks the subscriber's rows, the oracle checks the same intent: every published
table's Delta table equals what the publication publishes (its columns, its row filter, ONLY, the
partition root). Tables whose publication does not publish every change (``publish = insert``) are
checked with the TAP's own numbers instead. The files that do not apply are in
``tap_workloads.NOT_APPLICABLE`` with the reason (subscriber-side features, cascades, two-phase in
test_two_phase.py, tables joining the publication in issue 14).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack

import psycopg
import pytest

from .support import canonical, publication_mismatches, run_once
from .tap_workloads import NOT_APPLICABLE, WORKLOADS, Expect, Step, Workload

pytestmark = pytest.mark.spark


class Publisher:
    """The publisher's sessions: ``main`` and, opened on demand, others (interleaved transactions)."""

    def __init__(self, dsn: str, stack: ExitStack) -> None:
        self._dsn = dsn
        self._stack = stack
        self.sessions: dict[str, psycopg.Connection] = {}

    def __getitem__(self, name: str) -> psycopg.Connection:
        if name not in self.sessions:
            self.sessions[name] = self._stack.enter_context(psycopg.connect(self._dsn, autocommit=True))
        return self.sessions[name]

    def run(self, step: Step) -> None:
        for statement in step.sql:
            session, sql = statement if isinstance(statement, tuple) else ("main", statement)
            self[session].execute(sql)


def _walsender_dsn(dsn: str, workload: Workload) -> str:
    """The DSN ``walspark run`` uses: the walsender reads its session settings from it, e.g. the
    small ``logical_decoding_work_mem`` that makes the TAP's transactions stream."""
    return f"{dsn} options='{workload.walsender}'" if workload.walsender else dsn


def _check_expectations(spark, target: str, expectations: Iterator[Expect], context: str) -> None:
    from walspark.storage.layout import TargetLayout

    for expect in expectations:
        schema, table = expect.table.split(".", 1)
        row = spark.read.format("delta").load(TargetLayout(target).table(schema, table)).selectExpr(*expect.select).first()
        got = tuple(canonical(v) for v in row)
        want = tuple(canonical(v) for v in expect.value)
        assert got == want, f"{context}: {expect.table} {', '.join(expect.select)} = {got}, TAP expects {want}"


def _check(conn: psycopg.Connection, spark, target: str, workload: Workload, context: str,
           expectations: tuple[Expect, ...] = (), diverging: tuple[str, ...] = ()) -> None:
    """The oracle on every published table but those the TAP's expectations judge here."""
    skip = set(workload.unmirrored) | set(diverging)
    bad = {t: d for t, d in publication_mismatches(conn, spark, target, workload.publication).items() if t not in skip}
    assert not bad, f"{context}: Delta differs from the publication: " + json.dumps(bad, indent=1, default=str)
    _check_expectations(spark, target, iter(expectations), context)


def _final_expectations(workload: Workload) -> tuple[Expect, ...]:
    """The TAP expectations of the last catch-up point: the backlog's end state. (An earlier
    step's expectation may no longer hold once later steps changed its table: the oracle judges
    every published table at the end anyway.)"""
    return workload.steps[-1].expect if workload.steps else ()


#: Known divergences still open, (workload, mode) → why: each must fail (strict), so fixing it
#: shows. None is left of issue 13.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


#: What makes a backlog differ from the catch-ups: DDL, publication changes, truncates.
_BATCH_CHANGING = re.compile(r"\b(ALTER|CREATE|DROP|ATTACH|DETACH|TRUNCATE)\b", re.IGNORECASE)


def _backlog_differs(workload: Workload) -> bool:
    """More than one step, and a step whose SQL changes a shape, a publication or truncates."""
    statements = [sql if isinstance(sql, str) else sql[1] for step in workload.steps for sql in step.sql]
    return len(workload.steps) > 1 and any(_BATCH_CHANGING.search(sql) for sql in statements)


def _params() -> list:
    out = []
    for workload in WORKLOADS:
        for mode in ("stepwise", "backlog") if _backlog_differs(workload) else ("stepwise",):
            gap = KNOWN_GAPS.get((workload.name, mode))
            marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
            out.append(pytest.param(workload, mode, marks=marks, id=f"{workload.name}-{mode}"))
    return out


@pytest.mark.parametrize(("workload", "mode"), _params())
def test_tap_workload(workload: Workload, mode: str, spark, pg18_dsn: str, tmp_path) -> None:
    target = str(tmp_path / "lake")
    dsn = _walsender_dsn(pg18_dsn, workload)
    with ExitStack() as stack:
        publisher = Publisher(pg18_dsn, stack)
        publisher["main"].execute(workload.setup)
        conn = stack.enter_context(psycopg.connect(pg18_dsn, autocommit=True))
        run_once(dsn, workload.publication, workload.slot, target)  # the snapshot
        _check(conn, spark, target, workload, f"{workload.source} after the snapshot")
        if mode == "stepwise":
            for number, step in enumerate(workload.steps, 1):
                publisher.run(step)
                run_once(dsn, workload.publication, workload.slot, target)
                _check(conn, spark, target, workload, f"{workload.source} catch-up {number}", step.expect,
                       step.diverging)
        else:
            for step in workload.steps:
                publisher.run(step)
            run_once(dsn, workload.publication, workload.slot, target)
            _check(conn, spark, target, workload, f"{workload.source} backlog of {len(workload.steps)} step(s)",
                   _final_expectations(workload), workload.steps[-1].diverging if workload.steps else ())


def test_every_tap_file_is_ported_or_listed() -> None:
    """Each subscription TAP file is either a workload here or listed with the reason it does not
    apply — a file added upstream must be looked at, not silently missed."""
    ported = {w.source for w in WORKLOADS}
    listed = set(NOT_APPLICABLE)
    assert not ported & listed, ported & listed
    known = {
        "001_rep_changes.pl", "002_types.pl", "003_constraints.pl", "004_sync.pl", "005_encoding.pl",
        "006_rewrite.pl", "007_ddl.pl", "008_diff_schema.pl", "009_matviews.pl", "010_truncate.pl",
        "011_generated.pl", "012_collation.pl", "013_partition.pl", "014_binary.pl", "015_stream.pl",
        "016_stream_subxact.pl", "017_stream_ddl.pl", "018_stream_subxact_abort.pl",
        "019_stream_subxact_ddl_abort.pl", "020_messages.pl", "021_twophase.pl", "022_twophase_cascade.pl",
        "023_twophase_stream.pl", "024_add_drop_pub.pl", "025_rep_changes_for_schema.pl", "026_stats.pl",
        "027_nosuperuser.pl", "028_row_filter.pl", "029_on_error.pl", "030_origin.pl", "031_column_list.pl",
        "032_subscribe_use_index.pl", "033_run_as_table_owner.pl", "034_temporal.pl", "035_conflicts.pl",
        "036_sequences.pl", "100_bugs.pl",
    }
    assert known <= ported | listed, sorted(known - ported - listed)
    assert len({w.slot for w in WORKLOADS}) == len(WORKLOADS)
