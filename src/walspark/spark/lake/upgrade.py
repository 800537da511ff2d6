"""What an older walspark's change-log mode left in a target: changes a run must not pass by.

``walspark run --change-log`` of an older walspark appended each micro-batch to
``<target>/_changes/<schema>/<table>`` and confirmed the slot once those appends were durable;
a background fold then merged them into the tables, recording how far in
``<state>/folds/<schema>/<table>.json``. Rows after that point exist nowhere else: not in the
table, not in the slot. A run of this walspark, which has no folds, would stream on past them,
so it stops first and says how to bring them in. See docs/applying.md, "Upgrading from
change-log mode".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from walspark.spark.lake.tables import is_delta_table
from walspark.storage import location
from walspark.storage.layout import TargetLayout

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["UnfoldedChangeLog", "UnfoldedChangeLogs", "change_logs", "mark_copied", "unfolded_change_logs"]

#: The change log's column of the micro-batch that appended a row.
BATCH_ID = "_batch_id"


@dataclass(frozen=True, slots=True)
class UnfoldedChangeLog:
    """A change log whose batches ``(folded, last]`` are not in its table."""

    schema: str
    table: str
    folded: int
    last: int


class UnfoldedChangeLogs(RuntimeError):
    """The target holds change-log rows an older walspark did not fold into their tables."""

    def __init__(self, layout: TargetLayout, unfolded: list[UnfoldedChangeLog]) -> None:
        names = ", ".join(f"{u.schema}.{u.table} (batches {u.folded + 1}-{u.last})" for u in unfolded)
        first = f"{unfolded[0].schema}.{unfolded[0].table}"
        super().__init__(
            f"{layout.changes} holds changes that walspark run --change-log appended and did not fold into their "
            f"tables, and this walspark has no change-log mode: {names}; fold them with the walspark that wrote "
            f"them (its walspark run --once --change-log ends with every change log folded), or copy those tables "
            f"again (walspark resnapshot --target {layout.target} --table {first}, each), then run again"
        )
        self.unfolded = unfolded


def change_logs(layout: TargetLayout) -> list[tuple[str, str]]:
    """``(schema, table)`` of every change log under ``<target>/_changes`` (two listings deep)."""
    root = location(layout.changes)
    if not root.exists():
        return []
    return sorted((unquote(s.name), unquote(t.name)) for s in root.list() for t in s.list() if is_delta_table(t))


def folded_through(layout: TargetLayout, schema: str, table: str) -> int:
    """The last batch the fold plan says the table holds (-1: none): ``upto`` once done, else ``after``."""
    plan = layout.fold_plan(schema, table).read_json()
    if plan is None:
        return -1
    return int(plan["upto"] if plan["done"] else plan["after"])


def unfolded_change_logs(spark: SparkSession, layout: TargetLayout) -> list[UnfoldedChangeLog]:
    """The change logs holding batches after their fold's position (one small Spark read each)."""
    from pyspark.sql import functions as F

    found = []
    for schema, table in change_logs(layout):
        folded = folded_through(layout, schema, table)
        last = spark.read.format("delta").load(layout.change_log(schema, table)).agg(F.max(BATCH_ID)).first()
        if last is not None and last[0] is not None and last[0] > folded:
            found.append(UnfoldedChangeLog(schema, table, folded, int(last[0])))
    return found


def mark_copied(layout: TargetLayout, log: UnfoldedChangeLog) -> None:
    """Record the change log as folded through its last batch: the table is being copied again
    (the copy holds every change the log has), which the older walspark reads the same way."""
    layout.fold_plan(log.schema, log.table).write_json({"after": log.folded, "upto": log.last, "done": True})
