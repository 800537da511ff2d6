"""The pipeline's ``foreachBatch`` sink: :class:`ApplyChanges`, a builder in the style of Delta's.

It splits a micro-batch by table, applies the tables in parallel (one Spark job group each),
records each table's batch in the progress table (in the background), and hands the tables that
are being copied to the table sync instead.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from walspark.spark.lake.progress import ProgressRow

from walspark.spark.lake.apply import ApplyResult, apply_table
from walspark.spark.lake.columns import Mode
from walspark.spark.lake.driver_merge import collect_small, may_write, row_limit, small, takes
from walspark.spark.lake.evolution import (
    SchemaEvolutionError,
    TargetTable,
    follow_catalog,
)
from walspark.spark.lake.facts import BatchFacts, arrow_tables_facts, tables_facts
from walspark.spark.lake.frames import TableRows, arrow_table_changes, from_arrow, table_changes_schema, table_rows
from walspark.storage.layout import TargetLayout

log = logging.getLogger(__name__)

_T = TypeVar("_T")


# ---------------------------------------------------------------------------------------------
# Builder

_PROGRESS_WRITER: list[ThreadPoolExecutor] = []


class TableSyncHook(Protocol):
    """What the sink asks of the per-table sync (:class:`walspark.spark.tablesync.sync.TableSync`)."""

    def batch(self, batch_id: int) -> AbstractContextManager[None]: ...

    def route(self, table: tuple[str, str], rows: TableRows, facts: BatchFacts, batch_id: int,
              session: SparkSession) -> tuple[TableRows, BatchFacts] | None: ...  # fmt: skip

    def syncing(self, schema: str, table: str) -> bool: ...


class _Appliers:
    """The threads that apply a batch's tables, each writing through a clone of the query's
    session of its own (the transaction id of an idempotent write is a session setting, set and
    unset around each write). Kept from batch to batch: a session clone per table and batch cost
    the JVM ~10 ms each, half a second a batch with fifty tables."""

    _current: _Appliers | None = None
    _lock = threading.Lock()

    def __init__(self, spark: SparkSession, workers: int, key: tuple[str, int]) -> None:
        self.spark, self.key = spark, key
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="walspark-apply")

    @classmethod
    def of(cls, spark: SparkSession, workers: int) -> _Appliers:
        """The threads for this session (a new query's session gets new ones)."""
        key = (spark._jsparkSession.sessionUUID(), workers)
        with cls._lock:
            current = cls._current
            if current is None or current.key != key:
                if current is not None:
                    current._pool.shutdown(wait=False)
                current = cls._current = cls(spark, workers, key)
            return current

    def submit(self, apply: Callable[[tuple[str, str], SparkSession], _T], table: tuple[str, str]) -> Future[_T]:
        return self._pool.submit(lambda: apply(table, self._session()))

    def _session(self) -> SparkSession:
        session = getattr(self._local, "session", None)
        if session is None:
            from pyspark.sql import SparkSession

            clone = self.spark._jsparkSession.cloneSession()
            session = self._local.session = SparkSession(self.spark.sparkContext, clone)
        return session


def _progress_writer() -> ThreadPoolExecutor:
    """The one thread writing progress commits in the background (joined at interpreter exit,
    before PySpark's own exit hooks stop the session)."""
    if not _PROGRESS_WRITER:
        _PROGRESS_WRITER.append(ThreadPoolExecutor(1, thread_name_prefix="walspark-progress"))
    return _PROGRESS_WRITER[0]


@dataclass(frozen=True, slots=True)
class _TableOptions:
    mode: Mode = "scd1"
    keys: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class SinkScope:
    """What the sink's writes are scoped by, for the parts that write beside it (the table sync):
    the target's layout, and the app id of its transaction ids and progress rows."""

    layout: TargetLayout
    app_id: str


@dataclass(frozen=True)
class ApplyChanges:
    """Builder of a ``foreachBatch`` sink, in the spirit of Delta's Python API.

    >>> sink = ApplyChanges("/lake").app_id("orders-query").scd2("public.orders").keys("public.items", "id")
    >>> stream.writeStream.foreachBatch(sink.foreach_batch).start()      # doctest: +SKIP

    Each call returns a new builder; tables default to SCD1 with their replica identity key.
    """

    target: str
    _app_id: str = "walspark"
    #: Where walspark's own files live (``walspark run --state``); None: ``<target>/_walspark``.
    _state: str | None = None
    _tables: dict[str, _TableOptions] = field(default_factory=dict)
    #: The target tables' columns as last seen or changed by this sink (see TargetTable.evolve).
    _known: dict[str, dict[str, DataType | None]] = field(default_factory=dict, compare=False, repr=False)
    #: How many tables of a batch are applied at once.
    _parallelism: int = 4
    #: The last batch's progress commit, written in the background (see :meth:`flush`).
    _progress: list[Future[None]] = field(default_factory=list, compare=False, repr=False)
    #: Per-table sync of tables being copied while the stream runs (:mod:`walspark.spark.tablesync`), or None.
    _sync: TableSyncHook | None = field(default=None, compare=False, repr=False)

    def app_id(self, app_id: str) -> ApplyChanges:
        """The id scoping batch ids (one per streaming query/checkpoint)."""
        return replace(self, _app_id=app_id)

    def state(self, state: str | None) -> ApplyChanges:
        """Keep the progress table under this state location instead of ``<target>/_walspark``."""
        return replace(self, _state=state)

    @property
    def layout(self) -> TargetLayout:
        """Where this sink's tables and bookkeeping live."""
        return TargetLayout(self.target, self._state)

    @property
    def scope(self) -> SinkScope:
        """The layout and app id this sink writes with."""
        return SinkScope(self.layout, self._app_id)

    def forget_table(self, path: str) -> None:
        """Forget what the sink remembers of the table at ``path``: it was replaced (a copy)."""
        from walspark.spark.lake.evolution import forget

        forget(self._known, path)

    def _with(self, table: str, **changes: object) -> ApplyChanges:
        options = replace(self._tables.get(table, _TableOptions()), **changes)  # type: ignore[arg-type]
        return replace(self, _tables={**self._tables, table: options})

    def scd1(self, *tables: str) -> ApplyChanges:
        """Mirror these tables (``schema.table``): the default."""
        return functools.reduce(lambda b, t: b._with(t, mode="scd1"), tables, self)

    def scd2(self, *tables: str) -> ApplyChanges:
        """Keep the history of these tables (``schema.table``) with ``__START_AT``/``__END_AT``."""
        return functools.reduce(lambda b, t: b._with(t, mode="scd2"), tables, self)

    def keys(self, table: str, *columns: str) -> ApplyChanges:
        """Match rows of ``table`` on these columns instead of its replica identity."""
        return self._with(table, keys=tuple(columns))

    def table_sync(self, sync: TableSyncHook | None) -> ApplyChanges:
        """Route the changes of tables being copied through ``sync`` (``walspark run`` does)."""
        return replace(self, _sync=sync)

    def close(self) -> None:
        """End of a run: the last progress rows written. Raises what made them fail."""
        self.flush()

    def options_for(self, schema: str, table: str) -> _TableOptions:
        return self._tables.get(f"{schema}.{table}", _TableOptions())

    def foreach_batch(self, batch_df: DataFrame, batch_id: int, arrow: pa.Table | None = None) -> list[ApplyResult]:
        """Apply a per-table change batch (a ``foreachBatch`` function).

        ``arrow``: the batch's rows already on the driver, as ``batch_df.toArrow()`` would give them
        (a batch the driver decoded itself): no Spark job reads them again, except for a table
        whose rows are merged by Spark (many, and not only inserts; see :func:`.driver_merge.takes`).
        """

        if arrow is not None and arrow.num_rows <= row_limit():
            return self._with_sync(batch_df, batch_id, arrow)  # the batch is read once, as Arrow
        batch_df = batch_df.persist()  # read by Spark once, whatever the number of tables in it
        try:
            return self._with_sync(batch_df, batch_id, arrow)
        finally:
            batch_df.unpersist()

    def _with_sync(self, batch_df: DataFrame, batch_id: int, arrow: pa.Table | None) -> list[ApplyResult]:
        if self._sync is not None:
            with self._sync.batch(batch_id):
                return self._apply_tables(batch_df, batch_id, arrow)
        return self._apply_tables(batch_df, batch_id, arrow)

    def flush(self) -> None:
        """Wait until the last batch's progress rows are written; raise what made them fail.

        A batch's progress commit (one Delta append, about a second) runs in the background
        while the next batch is read and applied, instead of lengthening every batch. That is
        safe because the progress table is a shortcut, not the source of truth: a batch
        replayed after a crash that lost its progress rows is still skipped table by table by
        Delta's transaction id, committed atomically with the data. Each batch waits for the
        previous one's progress before writing its own, so they land in order, one at a time.
        Call this before stopping the Spark session (``walspark run`` does).
        """
        while self._progress:
            self._progress.pop(0).result()

    def follow_catalog(self, spark: SparkSession, declared: Iterable[tuple[str, str, StructType]], *,
                       drained: bool = False) -> None:  # fmt: skip
        """Give the existing target tables the columns the catalog has now: before a query starts,
        and once it has ``drained`` the slot (see :func:`.evolution.follow_catalog`).

        ``declared``: (schema, table, declared struct) of each table the query reads. DDL is not
        streamed, so a table altered and then left alone would otherwise keep its old columns
        until its next change.
        """
        changed = False
        for schema, name, struct in declared:
            if self._sync is not None and self._sync.syncing(schema, name):
                continue  # its copy writes the catalog's shape; the hand-off evolves it further
            tgt = TargetTable(spark, self.layout.table(schema, name), f"{schema}.{name}")
            changed |= follow_catalog(tgt, struct.fields, drained=drained)
        if changed:
            self._known.clear()  # the remembered columns and attnums are stale now

    def parallelism(self, tables: int) -> ApplyChanges:
        """Apply up to this many tables of a batch at once (default 4; 1: one after the other)."""
        if tables < 1:
            raise ValueError("parallelism must be at least 1")
        return replace(self, _parallelism=tables)

    def _apply_tables(self, batch_df: DataFrame, batch_id: int, given: pa.Table | None = None) -> list[ApplyResult]:
        """Apply each table of the batch, recording their progress in one commit at the end.

        Tables are independent (their own Delta table, MERGE and transaction id), so several are
        applied at once from a small thread pool: a micro-batch's cost is mostly fixed per-job
        latency (planning, Delta log, scheduling) that overlaps well. Each thread writes through
        its own clone of the session, because the transaction id of an idempotent write is a
        session setting (see :class:`_Appliers`). An incompatible schema change of one table does
        not stop the others; the batch then fails (after recording the tables that were applied),
        so the stream does not move past the table that could not follow.
        """
        from walspark.spark.lake.progress import ProgressTable

        spark = batch_df.sparkSession
        keys = lambda schema, table: self.options_for(schema, table).keys  # noqa: E731
        # A batch that is small or was read on the driver is Arrow there: its facts need no Spark
        # job, and its plain MERGEs and appends are made from the driver (see .driver_merge); a
        # large batch the driver does not have is read and applied in Spark.
        arrow = given if given is not None else collect_small(batch_df, self.target)
        read_on_driver = given is not None
        facts = tables_facts(batch_df, keys) if arrow is None else arrow_tables_facts(arrow, keys)
        tables = sorted(facts)

        def apply(table: tuple[str, str], session: SparkSession) -> tuple[ApplyResult, ProgressRow | None]:
            schema, name = table
            part = table_rows(batch_df, schema, name, alone=len(tables) == 1)
            table_facts = facts[table]
            given = part
            if self._sync is not None:  # a table being copied: its changes wait in its pending log
                routed = self._sync.route(table, part, table_facts, batch_id, session)
                if routed is None:
                    return ApplyResult(
                        schema, name, self.layout.table(schema, name), table_facts.rows, skipped=True
                    ), None
                part, table_facts = routed
            # the Arrow rows stand for the part only if the table sync kept all of them, and are
            # applied from the driver only where that is cheap: a MERGE of many rows is Spark's
            rows = None
            mode = self.options_for(schema, name).mode
            if part is given and mode == "scd1" and may_write(self.layout.table(schema, name)):
                if arrow is not None:
                    rows = arrow_table_changes(arrow, schema, name)
                elif small(table_facts):
                    rows = part.frame().toArrow()  # a large batch's small table: one job, not a MERGE's ~20
                if rows is not None and not takes(table_facts, rows):
                    rows = None
            if rows is None and part is given and read_on_driver:
                # Spark merges this table: from the rows the driver decoded, not from the query's
                # DataFrame, which Spark's tasks would decode again from the staged segments
                part = from_arrow(session, part, arrow_table_changes(arrow, schema, name),
                                  table_changes_schema(batch_df.schema, schema, name))  # fmt: skip
            result, record = apply_table(session, part, batch_id, table_facts, layout=self.layout,
                                         mode=mode, app_id=self._app_id,
                                         known=self._known, arrow=rows)  # fmt: skip
            return replace(result, ops=table_facts.ops), record  # by operation, for the pipeline's counts

        outcomes: list[tuple[ApplyResult, ProgressRow | None] | BaseException] = []
        workers = min(self._parallelism, len(tables))
        if workers <= 1:
            for table in tables:
                try:
                    outcomes.append(apply(table, spark))
                except SchemaEvolutionError as exc:
                    outcomes.append(exc)
                except BaseException as exc:  # noqa: BLE001 - the table's outcome; reported after the batch
                    outcomes.append(exc)
                    break  # as before: an unexpected failure stops the batch at once
        else:
            pool = _Appliers.of(spark, self._parallelism)
            futures = [pool.submit(apply, table) for table in tables]
            for future in futures:
                try:
                    outcomes.append(future.result())
                except BaseException as exc:  # noqa: BLE001 - the table's outcome; reported after the batch
                    outcomes.append(exc)
        results = [o[0] for o in outcomes if not isinstance(o, BaseException)]
        records = [o[1] for o in outcomes if not isinstance(o, BaseException) and o[1] is not None]
        self.flush()
        if records:
            progress = ProgressTable(spark, self.layout)
            self._progress.append(_progress_writer().submit(progress.record_many, records))
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        unexpected = [e for e in errors if not isinstance(e, SchemaEvolutionError)]
        if unexpected:
            raise unexpected[0]
        if errors:
            raise SchemaEvolutionError("; ".join(str(e) for e in errors))
        return results

    __call__ = foreach_batch
