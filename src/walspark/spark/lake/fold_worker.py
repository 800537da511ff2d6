"""Folds change logs into mirrors (SCD1) and histories (SCD2), in the background.

Exactly once, crash-safe at any point: a fold's range is written before it touches the mirror.
See docs/design/applying.md for the steps and why they are exact.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from walspark.spark.lake.apply import ApplyResult
    from walspark.storage.layout import TargetLayout

from walspark import _injection
from walspark.spark.lake.changelog import ChangeLog, FoldPlan, change_log_tables, read_plan, write_plan

log = logging.getLogger(__name__)

__all__ = ["Folder", "fold_app_id"]

Table = tuple[str, str]


#: The Spark local property naming a job's scheduler pool.
_POOL = "spark.scheduler.pool"


def fold_app_id(app_id: str) -> str:
    """The app id of a query's folds (its progress rows and Delta transaction ids)."""
    return f"{app_id}/fold"


class Folder:
    """Folds the change logs of one query's tables into their Delta tables.

    ``options_for(schema, table)`` gives a table's mode and keys (the sink's builder options);
    ``known`` is the sink's cache of target columns. :meth:`start` runs folds in a background
    thread every ``interval`` seconds at most (0: as soon as the last one ended);
    :meth:`drain` folds everything appended so far, in the calling thread.
    """

    def __init__(self, spark: SparkSession, layout: TargetLayout, *, app_id: str,
                 options_for: Callable[[str, str], Any], known: dict[str, Any], interval: float = 0.0,
                 parallelism: int = 4) -> None:  # fmt: skip
        self.spark, self.layout = spark, layout
        self.app_id = fold_app_id(app_id)
        self.options_for, self.known = options_for, known
        self.interval, self.parallelism = interval, parallelism
        self._locks: dict[Table, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        #: The last batch appended to each table's change log by this process (None: unknown).
        self._appended: dict[Table, int] = {}
        #: The last batch folded per table, as far as this process knows.
        self._folded: dict[Table, int] = {}
        self._failure: BaseException | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._disk: list[Table] | None = None

    # ------------------------------------------------------------------------------------------
    # what the sink tells and asks

    def appended(self, table: Table, batch_id: int) -> None:
        """``table``'s change log holds batch ``batch_id`` now (durably)."""
        self._appended[table] = max(batch_id, self._appended.get(table, batch_id))
        self._wake.set()

    def raise_failure(self) -> None:
        """Raise what made a background fold fail (the sink calls this at each batch, so the
        query stops with the reason instead of the mirror silently falling behind)."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def pending(self) -> list[Table]:
        """Tables whose change log holds batches not folded yet (as far as this process knows)."""
        return sorted(t for t, b in self._appended.items() if b > self._folded.get(t, -1))

    # ------------------------------------------------------------------------------------------
    # folding

    def _lock(self, table: Table) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(table, threading.Lock())

    def fold(self, table: Table, session: SparkSession | None = None) -> ApplyResult | None:
        """Fold every batch of ``table``'s change log not folded yet (see the module docstring)."""
        from walspark.spark.session import FOLD_POOL

        context = self.spark.sparkContext
        pool = context.getLocalProperty(_POOL)
        context.setLocalProperty(_POOL, FOLD_POOL)  # behind the stream's micro-batches (fairscheduler.xml)
        try:
            with self._lock(table):
                return self._fold(table, session or self._session())
        finally:
            context.setLocalProperty(_POOL, pool)  # type: ignore[arg-type]  # None unsets it; a drain runs in the stream's thread: give it back

    def _session(self) -> SparkSession:
        """A session of its own: the transaction id of an idempotent write is a session setting."""
        from pyspark.sql import SparkSession

        return SparkSession(self.spark.sparkContext, self.spark._jsparkSession.cloneSession())

    def _fold(self, table: Table, session: SparkSession) -> ApplyResult | None:
        schema, name = table
        changes = ChangeLog(session, self.layout, schema, name)
        plan = read_plan(self.layout, schema, name)
        if plan is None or plan.done:
            after = -1 if plan is None else plan.upto
            upto = self._appended.get(table)
            if upto is None:  # a restart: what the log holds
                upto = changes.last_batch()
                if upto is not None:
                    self._appended[table] = upto
            if upto is None or upto <= after:
                self._folded[table] = after
                return None
            plan = FoldPlan(after, upto, done=False)
            write_plan(self.layout, schema, name, plan)
            _injection.point("fold-planned")
        else:
            log.info(
                "%s.%s: folding batches (%d, %d] again (a fold did not finish)", schema, name, plan.after, plan.upto
            )
        options = self.options_for(schema, name)
        session.sparkContext.setJobGroup(f"walspark-fold-{schema}.{name}", f"walspark fold of {schema}.{name}")
        result = self._apply(session, changes, table, options, plan.after, plan.upto)
        if result is not None and result[1]:
            # Key changes that left TOASTed values unchanged: a chain of them across micro-batches
            # is followed one micro-batch at a time, as the direct apply does (one hop per batch).
            # Decided from the range's rows alone, so a fold done again decides the same.
            for after, upto in zip(result[1], result[1][1:], strict=False):
                self._apply(session, changes, table, options, after, upto, stepwise=False)
        write_plan(self.layout, schema, name, FoldPlan(plan.after, plan.upto, done=True))
        self._folded[table] = plan.upto
        log.info("%s.%s: folded batches (%d, %d]", schema, name, plan.after, plan.upto)
        return None if result is None else result[0]

    def _apply(self, session: SparkSession, changes: ChangeLog, table: Table, options: Any, after: int, upto: int,
               stepwise: bool = True) -> tuple[ApplyResult | None, list[int]] | None:  # fmt: skip
        """Apply batches ``(after, upto]`` as one batch with id ``upto``; or, with ``stepwise`` and
        key changes leaving unchanged TOAST in a range of several batches, apply nothing and return
        the bounds to apply batch by batch (``[after, b1, b2, ..., upto]``)."""
        from walspark.spark.lake.apply import apply_table
        from walspark.spark.lake.facts import batch_facts
        from walspark.spark.lake.progress import ProgressTable

        rows = changes.read(after, upto)
        if rows is None:
            return None
        rows = rows.persist()
        try:
            facts = batch_facts(rows, table, options.keys)
            if facts is None:
                return None
            if stepwise and facts.moved_unchanged:
                batches = changes.batches(after, upto)
                if len(batches) > 1:
                    return None, [after, *batches]
            result, record = apply_table(session, rows, upto, facts, layout=self.layout, mode=options.mode,
                                          app_id=self.app_id, known=self.known)  # fmt: skip
            _injection.point("fold-committed")
            if record is not None:
                ProgressTable(session, self.layout).record_many([record])
            return result, []
        finally:
            rows.unpersist()

    def drain(self, tables: Iterable[Table] | None = None) -> None:
        """Fold everything appended so far (of ``tables``, or of every table with a change log
        this process appended to or that a restart left unfolded)."""
        wanted = list(tables) if tables is not None else sorted(set(self._appended) | set(self._on_disk()))
        for table in wanted:
            self.fold(table)

    def _on_disk(self) -> list[Table]:
        """Every table with a change log: a restarted process folds what an earlier one left."""
        if self._disk is None:
            self._disk = change_log_tables(self.layout)
        return self._disk

    # ------------------------------------------------------------------------------------------
    # the background thread

    def start(self) -> None:
        """Fold in the background until :meth:`stop`."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="walspark-fold", daemon=True)
            self._thread.start()

    def stop(self, drain: bool = True) -> None:
        """Stop the background folds (after the one under way), then fold what is left."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if drain:
            self.drain()
        self.raise_failure()

    def _loop(self) -> None:
        try:  # what an earlier process appended and did not fold: first
            self._fold_all(self._on_disk())
        except BaseException as exc:  # noqa: BLE001 - reported at the next batch
            log.warning("fold of what an earlier run left failed: %s", exc)
            self._failure = exc
        while not self._stop.is_set():
            started = time.monotonic()
            tables = self.pending()
            if tables:
                try:
                    self._fold_all(tables)
                except BaseException as exc:  # noqa: BLE001 - reported at the next batch; the loop goes on
                    log.warning("background fold failed: %s", exc)
                    self._failure = exc
                    if self._stop.wait(max(self.interval, 5.0)):  # never a hot retry loop
                        break
            self._wake.clear()
            wait = max(self.interval - (time.monotonic() - started), 0.0)
            if self._stop.wait(wait):
                break
            if not self.pending():
                self._wake.wait(1.0)

    def _fold_all(self, tables: list[Table]) -> None:
        """One fold of each table, several tables at once (each its own Spark session)."""
        workers = min(self.parallelism, len(tables))
        if workers <= 1:
            for table in tables:
                self.fold(table)
            return
        with ThreadPoolExecutor(workers, thread_name_prefix="walspark-fold") as pool:
            for future in [pool.submit(self.fold, table) for table in tables]:
                future.result()
