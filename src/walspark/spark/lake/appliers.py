"""The two ways a table's part of a batch lands: merged into its Delta table, or appended to its change log.

The sink splits a batch by table and routes the tables being copied; what happens to each table's
rows then is an :class:`Applier`'s, chosen once per sink by its mode, so the sink's batch loop
reads the same in both modes and each mode's rules live in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from walspark import _injection
from walspark.spark.lake.apply import ApplyResult, apply_table

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType

    from walspark.spark.lake.facts import BatchFacts
    from walspark.spark.lake.fold_worker import Folder
    from walspark.spark.lake.frames import TableRows
    from walspark.spark.lake.progress import ProgressRow
    from walspark.storage.layout import TargetLayout

__all__ = ["Applier", "ChangeLogApplier", "MergeApplier"]

Outcome = tuple[ApplyResult, "ProgressRow | None"]
Known = dict[str, dict[str, "DataType | None"]]


class Applier(Protocol):
    """What the sink asks of a mode, per batch and per table."""

    #: Whether the whole batch is read once to the driver as Arrow (else only a small one is).
    reads_arrow: bool

    def begin(self) -> None:
        """Before a batch: raise what made background work of an earlier one fail."""

    def apply(self, session: SparkSession, rows: TableRows, batch_id: int, facts: BatchFacts,
              arrow: pa.Table | None) -> Outcome:  # fmt: skip
        """Land one table's rows (``arrow``: the same rows on the driver, if read there)."""

    def applied(self, results: Sequence[ApplyResult], batch_id: int) -> None:
        """After a batch's tables, before its progress rows: what the mode does with them."""


class MergeApplier:
    """MERGE mode: each table's rows merged into its Delta table, exactly once (:mod:`.apply`)."""

    reads_arrow = False

    def __init__(self, layout: TargetLayout, app_id: str, mode_of: Callable[[str, str], Any], known: Known) -> None:
        self.layout, self.app_id, self.mode_of, self.known = layout, app_id, mode_of, known

    def begin(self) -> None:
        pass

    def apply(self, session: SparkSession, rows: TableRows, batch_id: int, facts: BatchFacts,
              arrow: pa.Table | None) -> Outcome:  # fmt: skip
        return apply_table(session, rows, batch_id, facts, layout=self.layout, mode=self.mode_of(facts.schema, facts.table),
                           app_id=self.app_id, known=self.known, arrow=arrow)  # fmt: skip

    def applied(self, results: Sequence[ApplyResult], batch_id: int) -> None:
        pass


class ChangeLogApplier:
    """Change-log mode: each table's rows appended to its change log (:mod:`.changelog`), folded
    into its Delta table in the background by ``folder`` (:mod:`.fold_worker`)."""

    reads_arrow = True

    def __init__(self, layout: TargetLayout, app_id: str, known: Known, folder: Folder) -> None:
        self.layout, self.app_id, self.known, self.folder = layout, app_id, known, folder

    def begin(self) -> None:
        self.folder.raise_failure()  # a background fold failed: stop with its reason

    def apply(self, session: SparkSession, rows: TableRows, batch_id: int, facts: BatchFacts,
              arrow: pa.Table | None) -> Outcome:  # fmt: skip
        from walspark.spark.lake.changelog import append_batch

        table = (facts.schema, facts.table)
        return append_batch(session, rows.frame(), batch_id, facts, layout=self.layout, app_id=self.app_id,
                            known=self.known, before_reshape=lambda: self.folder.drain([table]), arrow=arrow)  # fmt: skip

    def applied(self, results: Sequence[ApplyResult], batch_id: int) -> None:
        appended = [r for r in results if not r.skipped]
        if appended:  # the window is after an append: not at a batch with nothing to append
            _injection.point("changes-appended")
        for result in appended:
            self.folder.appended((result.schema, result.table), batch_id)
