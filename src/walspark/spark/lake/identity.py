"""Which columns match a change to its target row: the replica identity in force when it was made.

A table's batch is split into identity runs, each applied on its own identity, one commit each.
See docs/design/applying.md for why that is exact.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

    from walspark.spark.lake.facts import BatchFacts

log = logging.getLogger(__name__)


def run_step(index: int) -> str:
    """The transaction-id step of the ``index``-th identity run of a batch ("" for the first, so a
    batch of one identity keeps the table's plain transaction id)."""
    return f"identity{index}" if index else ""


def _at_or_after(commit_lsn: int, seq: int) -> Column:
    from pyspark.sql import functions as F

    c, s = F.col("_commit_lsn"), F.col("_seq")
    return (c > commit_lsn) | ((c == commit_lsn) & (s >= seq))


def _say_runs(facts: BatchFacts, runs: int) -> None:
    log.info("%s.%s: the batch holds %d replica identity runs, applied one after the other",
             facts.schema, facts.table, runs)  # fmt: skip


def run_starts(rows: DataFrame) -> list[tuple[int, int]]:
    """``(_commit_lsn, _seq)`` of the first change of each identity run, in order.

    A window over the table's whole batch (one partition): run only for the rare batch that holds
    more than one identity (:attr:`BatchFacts.identities`), on three narrow columns.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.orderBy("_commit_lsn", "_seq")
    prev = F.lag("_key").over(order)
    starts = (
        rows.select("_commit_lsn", "_seq", "_key", prev.alias("__ws_prev"))
        .where(~F.col("_key").eqNullSafe(F.col("__ws_prev")))
        .select("_commit_lsn", "_seq")
        .collect()
    )
    return sorted((r[0], r[1]) for r in starts)


def identity_runs(rows: DataFrame, facts: BatchFacts) -> list[tuple[DataFrame, BatchFacts]]:
    """The batch split into identity runs, each with its own facts (keys, truncates, counts)."""
    from walspark.spark.lake.facts import batch_facts

    if facts.identities <= 1:
        return [(rows, facts)]
    starts = run_starts(rows)
    out = []
    table = (facts.schema, facts.table)
    for i in range(len(starts)):
        part = run_rows(rows, starts, i)
        part_facts = batch_facts(part, table, facts.user_keys)
        if part_facts is not None:
            out.append((part, replace(part_facts, identities=1)))
    _say_runs(facts, len(out))
    return out


def arrow_identity_runs(rows: pa.Table, facts: BatchFacts) -> list[tuple[tuple[int, int], pa.Table, BatchFacts]]:
    """:func:`identity_runs` of a batch already on the driver as Arrow, no Spark job: each run's
    first ``(_commit_lsn, _seq)``, its rows (in change order) and its facts — the same runs, so
    the same transaction ids, whichever path applies each run."""
    import pyarrow.compute as pc

    from walspark.spark.lake.facts import arrow_tables_facts

    table = (facts.schema, facts.table)
    if facts.identities <= 1:
        first = pc.min_max(rows.column("_commit_lsn"))["min"].as_py()
        return [((first, 0), rows, facts)]
    ordered = rows.take(pc.sort_indices(rows, [("_commit_lsn", "ascending"), ("_seq", "ascending")]))
    keys = ordered.column("_key").to_pylist()
    starts = [i for i, key in enumerate(keys) if i == 0 or key != keys[i - 1]]
    lsns, seqs = ordered.column("_commit_lsn"), ordered.column("_seq")
    out = []
    for start, end in zip(starts, [*starts[1:], len(keys)], strict=True):
        part = ordered.slice(start, end - start)
        part_facts = arrow_tables_facts(part, lambda schema, name: facts.user_keys)[table]
        out.append(((lsns[start].as_py(), seqs[start].as_py()), part, replace(part_facts, identities=1)))
    _say_runs(facts, len(out))
    return out


def run_rows(rows: DataFrame, starts: list[tuple[int, int]], index: int) -> DataFrame:
    """The ``index``-th identity run of ``rows``, given every run's first ``(_commit_lsn, _seq)``."""
    part = rows.where(_at_or_after(*starts[index])) if index else rows
    if index + 1 < len(starts):
        part = part.where(~_at_or_after(*starts[index + 1]))
    return part
