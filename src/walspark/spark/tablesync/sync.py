"""Tables joining, leaving and being re-copied while the stream goes on.

PostgreSQL's table synchronisation, with a durable pending log instead of a held-back slot. See
docs/design/table-sync.md.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from walspark import _injection
from walspark.spark.lake.tables import is_delta_table
from walspark.spark.tablesync.state import COPIED, COPYING, LEFT, READY, SyncState, SyncStore
from walspark.storage import location
from walspark.storage.layout import TargetLayout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from walspark.spark.lake.catalog_tables import CatalogTables
    from walspark.spark.lake.facts import BatchFacts
    from walspark.spark.lake.frames import TableRows
    from walspark.spark.lake.sink import SinkScope

log = logging.getLogger(__name__)

__all__ = ["SyncedSink", "TableSync", "membership"]


class SyncedSink(Protocol):
    """What the table sync asks of the sink it is attached to (``ApplyChanges`` is one)."""

    @property
    def scope(self) -> SinkScope:
        """The layout and app id its writes are scoped by."""

    def options_for(self, schema: str, table: str) -> Any:
        """A table's mode and keys."""

    def forget_table(self, path: str) -> None:
        """Forget the remembered columns of the table at ``path`` (a copy replaced it)."""


Table = tuple[str, str]

#: The batch id column of the pending log (which batch appended the change).
BATCH_COLUMN = "__walspark_batch"


#: Numbers of the copies' temporary slots, unique in this process (slot names are cluster-wide, and a
#: notebook or a test may run several pipelines one after the other in one process).
_SLOT_NUMBERS = itertools.count(1)

#: Default seconds between two checks of the publication and of re-copy requests.
DEFAULT_CHECK_SECONDS = 5.0


def membership(conn: Any, publication: str) -> dict[Table, tuple[str, ...]]:
    """Each published table (as streamed: a partition root under ``publish_via_partition_root``)
    with its membership signature: its oid and the oids of the catalog rows that publish it.

    ``ALTER PUBLICATION … DROP TABLE t`` then ``ADD TABLE t`` creates a new ``pg_publication_rel``
    row, so the signature changes even when both happen between two checks — and the changes
    made in between were never streamed (pgoutput filters by the publication as of each change).
    """
    from walspark.source.catalog import memberships, published_tables

    tables = published_tables(conn, publication)
    rows = memberships(conn, publication, [t.oid for t in tables])
    return {(t.schema, t.table): (f"o{t.oid}", *rows.get(t.oid, ())) for t in tables}


class TableSync:
    """The per-table sync of one ``walspark run`` (see the module docstring).

    Life cycle: :meth:`attach` the sink, :meth:`start` (discovery, resumes unfinished copies,
    starts the checker thread), the sink calls :meth:`batch` around each batch and :meth:`route`
    per table, :meth:`finish` (``--once``: waits for copies and hands them off), :meth:`stop`.
    """

    def __init__(self, spark: SparkSession, dsn: str, publication: str, layout: TargetLayout, *,
                 check_seconds: float = DEFAULT_CHECK_SECONDS, say: Callable[[str], None] = print,
                 parallelism: int | None = None, chunk_rows: int | None = None,
                 catalog: CatalogTables | None = None) -> None:  # fmt: skip
        from pyspark.sql import SparkSession as _Session

        from walspark.spark.snapshot.pgsnapshot import register as register_snapshot_source

        self.dsn, self.publication, self.layout = dsn, publication, layout
        self.check_seconds = check_seconds
        self.say = say
        self.store = SyncStore(layout)
        self.parallelism = parallelism or spark.sparkContext.defaultParallelism
        self.chunk_rows = chunk_rows
        self.catalog = catalog  # the tables' names in Spark's catalog (--catalog-schema), if asked for
        # Own sessions: transaction ids of idempotent writes are session settings, and the copy
        # threads and the hand-off run beside the sink's batches.
        self._copy_session = _Session(spark.sparkContext, spark._jsparkSession.cloneSession())
        self._handoff_session = _Session(spark.sparkContext, spark._jsparkSession.cloneSession())
        register_snapshot_source(self._copy_session)
        self.sink: SyncedSink | None = None
        self.lock = threading.RLock()  # held by the sink for a whole batch
        self._requested: set[Table] = set()
        self._signatures: dict[Table, tuple[str, ...]] = {}
        self._copies: dict[Table, threading.Thread] = {}
        self._failed: dict[Table, BaseException] = {}
        self._position: int | None = None  # highest commit LSN of the batches applied so far
        self._batch_max: int | None = None
        self._max_lock = threading.Lock()
        self._copies_lock = threading.RLock()
        self._stop = threading.Event()
        self._checker: threading.Thread | None = None
        self._spark = spark

    # ------------------------------------------------------------------------------------------
    # life cycle

    def attach(self, sink: SyncedSink) -> None:
        self.sink = sink

    def resume_after(self, end: int | None) -> None:
        """The stream resumes after ``end``, the last batch its checkpoint committed (None: a new
        checkpoint). Every change still to come commits at or after it (a commit record never
        spans another's end), so a table whose copy was taken at or before it takes them all,
        unfiltered, from this run's first batch on (see :meth:`route`)."""
        if end is not None:
            with self._max_lock:
                self._position = max(self._position or 0, end)

    def start(self) -> None:
        """Discover, switch and resume before the query starts; then check every few seconds.
        With a catalog, every table in sync is registered first (a name clash stops the run)."""
        self.check()
        if self.catalog is not None:
            with self.lock:
                ready = [t for t in self.published() if (s := self.store.get(*t)) is not None and s.state == READY]
                self.catalog.register_all(ready, self._signatures)
        self._checker = threading.Thread(target=self._check_loop, name="walspark-tablesync", daemon=True)
        self._checker.start()

    def stop(self) -> None:
        """Stop checking and end running copies (their Spark jobs cancelled; what they committed
        stays, and the next run resumes them). Waits for them: in a process that goes on (a
        notebook, a test), a copy left running would hold its slot and write beside the next run."""
        self._stop.set()
        if self._checker is not None:
            self._checker.join(timeout=60)
        with self._copies_lock:
            copies = [(table, thread) for table, thread in self._copies.items() if thread.is_alive()]
        for table, _ in copies:
            self._spark.sparkContext.cancelJobGroup(_job_group(table))
        for _, thread in copies:
            thread.join(timeout=120)

    def finish(self) -> None:
        """Wait for every copy and hand it off (``--once``: the run ends with every table ready).

        A failed copy fails the run only once the other copies have ended: what they commit is
        kept, and the next run resumes every unfinished copy where it stopped.
        """
        self.check()
        while True:
            with self.lock:
                running = [t for t in self._copies.values() if t.is_alive()]
                if self._failed and not running:
                    table, exc = next(iter(self._failed.items()))
                    raise RuntimeError(f"the copy of {table[0]}.{table[1]} failed: {exc}") from exc
                if not running and not any(s.syncing for s in self.store.all()):
                    return
            for thread in running:
                thread.join()
            self.service()

    def _check_loop(self) -> None:
        while not self._stop.wait(self.check_seconds):
            try:
                self.check()
            except Exception:
                log.warning("table sync check failed", exc_info=True)

    # ------------------------------------------------------------------------------------------
    # discovery and requests

    def check(self) -> None:
        self.discover()
        self.service()

    def discover(self) -> None:
        """Compare the publication with the states (see the module docstring)."""
        from walspark.source.connect import connect_sql

        with connect_sql(self.dsn) as conn:
            published = membership(conn, self.publication)
        with self.lock:
            self._signatures = published
            for table, signature in published.items():
                state = self.store.get(*table)
                if state is None:
                    if is_delta_table(self.layout.table(*table)):
                        self.store.put(SyncState(*table, READY, signature=signature))
                    else:
                        self._request(table, "joined the publication")
                elif state.state == LEFT:
                    self._request(table, "re-joined the publication")
                elif state.state == READY and state.signature and state.signature != signature:
                    self._request(table, "was dropped from the publication and added again")
                elif state.state == READY and not state.signature:
                    self.store.put(
                        SyncState(
                            *table,
                            READY,
                            gen=state.gen,
                            since=state.since,
                            handed_through=state.handed_through,
                            signature=signature,
                        )
                    )
            for state in self.store.all():
                if (state.schema, state.table) not in published and state.state == READY:
                    self.store.update(state.schema, state.table, state=LEFT)
                    self.say(
                        f"table {state.qualified} left the publication: its Delta table is kept and no "
                        "longer changes; adding it again re-copies it"
                    )
                    if self.catalog is not None:
                        self.catalog.forget((state.schema, state.table))

    def _request(self, table: Table, why: str) -> None:
        if table not in self._requested:
            self._requested.add(table)
            self.say(f"table {table[0]}.{table[1]} {why}: copying it while the stream goes on")

    def service(self) -> None:
        """Between batches: take re-copy requests, start copies, hand off finished ones."""
        with self.lock:
            done_files = []
            for path, tables, why in self.store.pending_requests():
                for table in tables:
                    if table not in self._signatures:
                        self.say(
                            f"re-copy of {table[0]}.{table[1]} ignored: not a table of publication {self.publication!r}"
                        )
                    else:
                        self._request(table, why)
                done_files.append(path)
            for table in sorted(self._requested):
                state = self.store.get(*table)
                if state is not None and state.syncing:
                    continue  # a copy is under way already: it replaces the table as well
                self._begin_copy(table, state)
            self._requested.clear()
            for path in done_files:  # only once the states they asked for are durable
                path.delete()
            for state in self.store.all():
                table = (state.schema, state.table)
                running = table in self._copies and self._copies[table].is_alive()
                if state.state == COPYING and not running and table not in self._failed:
                    self._launch(state)  # a copy a previous run did not finish: again, under a new slot
                elif state.state == COPIED and not running:
                    self._hand_off(state)

    # ------------------------------------------------------------------------------------------
    # the sink's hooks

    @contextlib.contextmanager
    def batch(self, batch_id: int) -> Iterator[None]:
        """Around one batch of the sink: nothing else switches or hands off while it runs."""
        with self.lock:
            self.service()
            self._batch_max = None
            yield
            if self._batch_max is not None:
                self._position = max(self._position or 0, self._batch_max)
                for state in self.store.all():  # the stream passed a resumed copy's last snapshot
                    if (
                        state.state == READY
                        and state.cuts
                        and state.since is not None
                        and self._position >= state.since
                    ):
                        self.store.update(state.schema, state.table, cuts=(), cut_keys=())
                        if state.side:
                            location(self._copy_path(state)).delete_tree()

    def published(self) -> list[Table]:
        """The publication's tables as the last check read them (as streamed: partition roots
        under ``publish_via_partition_root``). Not under the lock: a batch may hold it."""
        return sorted(dict(self._signatures))

    def syncing(self, schema: str, table: str) -> bool:
        """The table is being copied: its Delta table belongs to the copy until the hand-off."""
        state = self.store.get(schema, table)
        return state is not None and state.syncing

    def route(self, table: Table, rows: TableRows, facts: BatchFacts, batch_id: int,
              session: SparkSession) -> tuple[TableRows, BatchFacts] | None:  # fmt: skip
        """What the sink applies of this table's batch; None: nothing (kept in the pending log, or
        already applied by a hand-off)."""
        with self._max_lock:  # not self.lock: the batch's thread holds it while the sink's pool runs this
            self._batch_max = max(self._batch_max or 0, facts.max_commit_lsn)
        state = self.store.get(*table)
        if state is None and not is_delta_table(self.layout.table(*table)):
            # A table whose changes arrive before a check saw it join: copy it from here on.
            state = self._begin_copy(table, None, "joined the publication")
        if state is None:
            return rows, facts
        if state.syncing:
            self._append_pending(state, rows.frame(), batch_id, session)
            return None
        if state.handed_through is not None and batch_id <= state.handed_through:
            return None  # a replay of a batch whose changes of this table the hand-off applied
        behind = self._position is None or self._position < (state.since or 0)
        if state.since is not None and behind and (facts.min_commit_lsn or 0) < state.since:
            # The stream may still be behind the copy's consistent point: those changes are in it
            # (none is when every change commits at or after the copy's last snapshot).
            from walspark.spark.lake.facts import batch_facts
            from walspark.spark.lake.frames import TableRows

            copied = self._copied(state, rows.frame(), session)
            if copied is None:
                state = self._begin_copy(table, state, "was truncated between the snapshots of its resumed copy")
                self._append_pending(state, rows.frame(), batch_id, session)
                return None
            keys = self.sink.options_for(*table).keys if self.sink else None
            kept = batch_facts(copied, table, keys)
            return None if kept is None else (TableRows.of(copied), kept)
        return rows, facts

    def _append_pending(self, state: SyncState, rows: DataFrame, batch_id: int, session: SparkSession) -> None:
        from pyspark.sql import functions as F

        from walspark.spark.lake.writes import txn_app_id

        app = self.sink.scope.app_id if self.sink else "walspark"
        options = {"txnAppId": txn_app_id(f"{app}/pending/g{state.gen}", state.schema, state.table),
                   "txnVersion": str(batch_id), "mergeSchema": "true"}  # fmt: skip
        rows = rows.withColumn(BATCH_COLUMN, F.lit(batch_id))
        path = self.layout.pending_log(state.schema, state.table, state.gen)
        if not is_delta_table(path):  # column mapping, like walspark's own tables: any PostgreSQL name fits
            from delta.tables import DeltaTable

            from walspark.spark.lake.tables import TABLE_PROPERTIES

            builder = DeltaTable.createIfNotExists(session).location(path).addColumns(rows.schema)
            for key, value in TABLE_PROPERTIES.items():
                builder = builder.property(key, value)
            builder.execute()
        rows.write.format("delta").mode("append").options(**options).save(path)

    # ------------------------------------------------------------------------------------------
    # copy and hand-off

    def _begin_copy(self, table: Table, previous: SyncState | None, why: str | None = None, *,
                    again: bool = False) -> SyncState:  # fmt: skip
        """Switch the table to copying (durably, before its copy's slot exists) and start the copy.

        Safe at any point of a batch or between batches: every batch before the current one is
        applied, so the copy's consistent point, taken after this, lies beyond all their changes;
        this batch's and later changes of the table go to its pending log.
        """
        with self._copies_lock:
            current = self.store.get(*table)
            if current is not None and current.syncing and not again:
                return current
            if why:
                self.say(f"table {table[0]}.{table[1]} {why}: copying it while the stream goes on")
            state = SyncState(
                *table,
                COPYING,
                gen=(previous.gen + 1) if previous else 1,
                signature=self._signatures.get(table, ()),
                copy_started=time.time(),
            )
            self.store.put(state)
            if previous is not None and previous.side:  # a side copy kept for its cuts, or abandoned
                location(self._copy_path(previous)).delete_tree()
            self._launch(state)
            return state

    def _launch(self, state: SyncState) -> None:
        table = (state.schema, state.table)
        thread = threading.Thread(target=self._copy, args=(state,), name=f"walspark-copy-{state.table}", daemon=True)
        with self._copies_lock:
            self._copies[table] = thread
        thread.start()

    def _copy(self, state: SyncState) -> None:
        try:
            self._spark.sparkContext.setJobGroup(
                _job_group((state.schema, state.table)), f"walspark copy of {state.qualified}", interruptOnCancel=True
            )
            self._copy_table(state)
        except BaseException as exc:
            if self._stop.is_set():
                return
            log.debug("copy failed", exc_info=True)
            self._failed[(state.schema, state.table)] = exc
            self.say(f"copy of {state.qualified} failed: {exc}; the next run copies it again")

    def _copy_table(self, state: SyncState) -> None:
        from walspark.protocol.lsn import format_lsn
        from walspark.source.slots import create_slot_with_snapshot
        from walspark.spark.snapshot.initial import (
            DEFAULT_PARTITION_ROWS,
            SMALL_TABLE_ROWS,
            _plan_in_snapshot,
            plan_partitions,
            write_table,
        )
        from walspark.spark.tablesync.copying import copy_in_chunks

        slot = f"walspark_sync_{os.getpid()}_{next(_SLOT_NUMBERS)}"
        path = self.layout.table(state.schema, state.table)
        with create_slot_with_snapshot(self.dsn, slot, temporary=True) as exported:
            consistent_point = exported.consistent_point
            assert exported.snapshot_name is not None
            plans, catalog = _plan_in_snapshot(self.dsn, exported.snapshot_name, self.publication)
            plan = next((p for p in plans if (p.schema, p.table) == (state.schema, state.table)), None)
            if plan is None:  # left the publication before the copy began: nothing to copy
                self.store.update(state.schema, state.table, state=LEFT)
                return
            _injection.point("copy-started", table=state.qualified, stop=self._stop)
            if plan.columnless_rows is not None:  # a row count: one commit, nothing to resume
                plan_partitions(plan, parallelism=self.parallelism)
                self.say(f"copying {state.qualified} at {format_lsn(consistent_point)} while the stream goes on")
                written = write_table(self._copy_session, self.dsn, exported.snapshot_name, plan, path,
                                      catalog=catalog)  # fmt: skip
                changes: dict[str, object] = {"since": consistent_point, "rows": written.rows}
            else:
                outcome = copy_in_chunks(
                    self._copy_session, dsn=self.dsn, snapshot_name=exported.snapshot_name,
                    consistent_point=consistent_point, plan=plan, catalog=catalog, path=path,
                    side=self.layout.side_copy(state.schema, state.table, state.gen),
                    plan_path=self.layout.copy_plan(state.schema, state.table, state.gen), gen=state.gen,
                    parallelism=self.parallelism, partition_rows=self.chunk_rows or DEFAULT_PARTITION_ROWS,
                    small_rows=min(SMALL_TABLE_ROWS, self.chunk_rows or SMALL_TABLE_ROWS), say=self.say,
                    stop=self._stop)  # fmt: skip
                changes = {"since": outcome.since, "rows": outcome.rows, "cuts": outcome.cuts,
                           "cut_keys": outcome.keys if outcome.cuts else (), "side": outcome.side}  # fmt: skip
        with self.store._lock:
            current = self.store.get(state.schema, state.table)
            if current is None or current.gen != state.gen or current.state != COPYING:
                return  # superseded (should not happen: a syncing table is never re-requested)
            self.store.update(state.schema, state.table, state=COPIED, copy_done=time.time(), **changes)
        _injection.point("copy-committed", stop=self._stop)  # handed off once this thread ends

    def _copied(self, state: SyncState, rows: DataFrame, session: SparkSession) -> DataFrame | None:
        """``rows`` without the changes the copy holds; None: the copy must be made again (a
        TRUNCATE between the snapshots of a resumed copy)."""
        from walspark.spark.tablesync.copying import truncated_within, without_copied

        assert state.since is not None
        path = self._copy_path(state)  # the cuts' versions are those of the table the waves went to
        if state.cuts and truncated_within(rows, min(c for c, _ in state.cuts), state.since):
            return None
        return without_copied(rows, since=state.since, cuts=state.cuts, keys=state.cut_keys, spark=session, path=path)

    def _copy_path(self, state: SyncState) -> str:
        """The Delta table the copy's waves were committed to: the table's own, or its side copy."""
        if state.side:
            return self.layout.side_copy(state.schema, state.table, state.gen)
        return self.layout.table(state.schema, state.table)

    def _hand_off(self, state: SyncState) -> None:
        """A copy made beside the table replaces it (one commit); then the pending changes at or
        after C are applied and the table is ready. Idempotent: a replay after a crash between the
        replace and its record finds the replace as the table's last commit (:func:`replace_from_side`),
        one after it finds it recorded (``swapped``: the MERGE may follow it) and the MERGE's
        transaction id; either skips what is done."""
        from pyspark.sql import functions as F

        from walspark.spark.lake.apply import apply_table
        from walspark.spark.lake.facts import batch_facts

        assert self.sink is not None
        table = (state.schema, state.table)
        pending = self.layout.pending_log(*table, state.gen)
        spark = self._handoff_session
        through = rows = None
        applied = 0
        if is_delta_table(pending):
            log_df = spark.read.format("delta").load(pending)
            through = log_df.agg(F.max(BATCH_COLUMN)).first()[0]  # type: ignore[index]  # an aggregate: one row
            rows = self._copied(state, log_df.drop(BATCH_COLUMN), spark)
            if rows is None:  # its changes so far are in the new copy, later ones in its own log
                self._begin_copy(table, state, "was truncated between the snapshots of its resumed copy", again=True)
                location(pending).delete_tree()
                return
        path = self.layout.table(*table)
        if state.side and not state.swapped:
            from walspark.spark.tablesync.copying import CopyPlan, replace_from_side

            saved = CopyPlan.load(self.layout.copy_plan(*table, state.gen))
            assert saved is not None  # deleted only once the table is ready
            replace_from_side(spark, self._copy_path(state), path, saved)
            _injection.point("copy-swapped", table=state.qualified, stop=self._stop)
            state = self.store.update(*table, swapped=True)  # a replay does not replace it again
        if rows is not None:
            options = self.sink.options_for(*table)
            facts = batch_facts(rows, table, options.keys)
            if facts is not None:
                # The transaction id names the copy by its consistent point: unique for ever, even
                # across a new initial snapshot (Delta may keep transaction ids through REPLACE).
                apply_table(spark, rows, 1, facts, layout=self.layout, mode=options.mode,
                            app_id=f"{self.sink.scope.app_id}/sync/{state.since:X}")  # fmt: skip
                applied = facts.rows
        self.sink.forget_table(path)  # the copy replaced the table
        self.store.update(*table, state=READY, handed_through=through)
        location(pending).delete_tree()
        self.layout.copy_plan(*table, state.gen).parent.delete_tree()
        if state.side and not state.cuts:  # else kept until the stream passes the last C (route's filter)
            location(self._copy_path(state)).delete_tree()
        self.say(
            f"table {state.qualified} is in sync: {state.rows or 0:,} rows copied, {applied:,} changes "
            "made during the copy applied; streaming it from here"
        )
        if self.catalog is not None:  # its first copy, or a re-copy: the name points at it as it is now
            self.catalog.register(table, self._signatures)


def _job_group(table: Table) -> str:
    return f"walspark-copy-{table[0]}.{table[1]}"
