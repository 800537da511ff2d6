"""A small SCD1 batch of one table applied from the driver with delta-rs: no Spark job.

The commit carries the transaction id Spark's MERGE would, and anything it does not take goes
through Spark's MERGE. See docs/design/applying.md for what goes this way and why.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from walspark.spark.lake.facts import BatchFacts

from walspark.spark.lake.columns import _P, key_column
from walspark.spark.lake.driver_log import keep, local_path, take

log = logging.getLogger(__name__)

__all__ = [
    "DRIVER_MERGE_ROWS",
    "add_columns",
    "apply",
    "collect_small",
    "fold",
    "may_write",
    "multiset_counts",
    "net_rows",
    "plain",
    "set_properties",
    "small",
    "takes",
    "writable",
]

#: Most change rows a batch may have to be applied from the driver (default 10,000); ``0``: never.
DRIVER_MERGE_ROWS = "WALSPARK_DRIVER_MERGE_ROWS"
_DEFAULT_ROWS = 10_000

#: Protocol features delta-rs writes as Spark does. Deletion vectors are not among them: a
#: rewrite that did not honour a file's vector would bring deleted rows back. The change data
#: feed is: delta-rs (1.6) writes a MERGE's ``_change_data`` files (``insert``, ``delete``,
#: ``update_preimage``/``update_postimage``, a TRUNCATE's ``delete`` of every row) as Spark's
#: MERGE does, and its appends are read as inserts (tests/spark/test_apply.py holds both paths'
#: feeds to the source's changes).
_SAFE_FEATURES = frozenset({"columnMapping", "timestampNtz", "appendOnly", "invariants", "changeDataFeed"})
#: Table properties whose writes delta-rs does not make as Spark would.
_UNSAFE_PROPERTIES = ("delta.enableDeletionVectors", "delta.enableTypeWidening")

_refused: set[str] = set()
_lock = threading.Lock()


def row_limit() -> int:
    try:
        return max(int(os.environ.get(DRIVER_MERGE_ROWS, _DEFAULT_ROWS)), 0)
    except ValueError:
        return _DEFAULT_ROWS


def collect_small(batch_df: DataFrame, target: str) -> pa.Table | None:
    """The batch as Arrow on the driver if it is small enough to be applied from there (one Spark
    job, which stops reading past the limit); None: apply it through Spark."""
    limit = row_limit()
    if not limit or local_path(target) is None:
        return None
    try:
        import deltalake  # noqa: F401
    except ImportError:
        return None
    arrow = batch_df.limit(limit + 1).toArrow()
    return arrow if arrow.num_rows <= limit else None


def plain(facts: BatchFacts, names: Sequence[str]) -> bool:
    """Whether the table's batch needs nothing but the plain MERGE, the multiset MERGE of a table
    matched on whole rows, or only an append (see the module docstring). Inserts under a user's
    key columns are merged: that key may repeat."""
    simple = (facts.replica_keys and facts.identities == 1
              and not any(n.startswith(_P) or '"' in n for n in names))  # fmt: skip
    if _appends(facts) or _multiset(facts, names):
        return simple
    return simple and bool(facts.keys) and not facts.moved_unchanged


#: A table's changes read onto the driver on their own, when its batch as a whole is not, are at
#: most this many times the row limit: enough for a table whose many changes name few keys. The
#: driver merges at most as many net rows.
_COLLECT_FACTOR = 10


def takes(facts: BatchFacts, rows: pa.Table | None = None) -> bool:
    """Whether a table's batch, when the driver has its ``rows``, is applied from there (if
    :func:`plain` too): a small one (:func:`row_limit`), one of only inserts, whatever its size,
    which delta-rs appends as fast as Spark's writer without a job, or one of up to ten times the
    limit in net rows (:func:`net_rows`: pgbench's tellers, 47,500 updates of 100 rows; its
    accounts, 47,500 updates of 46,000). delta-rs rewrites the files those rows are in, where
    Spark's MERGE costs some twenty jobs: 0.1-0.3 s against 3-5 s on a table of a million rows
    (``bench/merge_engines.py``). More net rows are Spark's, whose tasks share the rewrite."""
    limit = row_limit()
    if not limit:
        return False
    if facts.rows <= limit or _appends(facts):
        return True
    return rows is not None and bool(facts.keys) and net_rows(rows, facts.keys) <= _COLLECT_FACTOR * limit


def small(facts: BatchFacts) -> bool:
    """Whether a table's changes are few enough to be read onto the driver on their own when the
    batch as a whole is not (:func:`collect_small` gave up), for :func:`takes` to choose with
    them: one Spark job over rows already cached, where a Spark MERGE is some twenty."""
    limit = row_limit()
    return bool(limit) and facts.rows <= _COLLECT_FACTOR * limit


def net_rows(rows: pa.Table, keys: Sequence[str]) -> int:
    """How many rows the SCD1 fold of ``rows`` (:func:`fold`) has at most: the distinct keys the
    batch's changes name (an insert's or update's new key, any change's old key). Counted by
    Arrow's group-by, without the fold's pass in Python; a key type it cannot group counts as
    every change (the batch is then Spark's)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        new = rows.filter(pc.is_in(rows.column("_op"), pa.array(["I", "U"]))).select(list(keys))
        old_struct = rows.column("_old").combine_chunks()
        old = pa.table([pc.struct_field(old_struct, k) for k in keys], names=list(keys))
        old = old.filter(pc.is_valid(old_struct)).cast(new.schema)
        return pa.concat_tables([new, old]).group_by(list(keys), use_threads=False).aggregate([]).num_rows
    except (KeyError, pa.ArrowException, ValueError):
        return rows.num_rows


def may_write(path: str) -> bool:
    """Whether a table's batches may be merged from the driver at all: a local table not refused
    before (a feature delta-rs does not write as Spark does), with delta-rs installed and the
    driver's row limit not 0."""
    if local_path(path) is None or path in _refused or not row_limit():
        return False
    try:
        import deltalake  # noqa: F401
    except ImportError:
        return False
    return True


def _multiset(facts: BatchFacts, names: Sequence[str]) -> bool:
    """Matched on every column (REPLICA IDENTITY FULL): the table is a multiset of row values."""
    return bool(facts.keys) and set(facts.keys) == set(names)


def _appends(facts: BatchFacts) -> bool:
    """A batch of only inserts (no TRUNCATE either): appended, whatever the replica identity
    (a key, FULL or none)."""
    return facts.inserts == facts.rows and not facts.truncates


def writable(table) -> bool:
    """Whether delta-rs writes this table (a ``deltalake.DeltaTable``) exactly as Spark would."""
    protocol = table.protocol()
    features = set(protocol.writer_features or ()) | set(protocol.reader_features or ())
    if not features <= _SAFE_FEATURES:
        return False
    config = table.metadata().configuration
    return not any(config.get(p, "false").lower() == "true" for p in _UNSAFE_PROPERTIES)


def set_properties(path: str, properties: dict[str, str]) -> bool:
    """Set table properties of a local table that delta-rs writes as Spark does, in one delta-rs
    commit (milliseconds, where Spark's ``ALTER TABLE ... SET TBLPROPERTIES`` costs seconds of
    jobs); False: not done, for Spark to do."""
    return _alter(path, lambda table: table.alter.set_table_properties(properties, raise_if_not_exists=False))


def add_columns(path: str, fields: Sequence[dict]) -> bool:
    """Add nullable columns (Delta schema JSON of each field) to a local table that delta-rs writes
    as Spark does and that names its columns by their names (no column mapping), in one delta-rs
    commit; False: not done, for Spark's ``ALTER TABLE ... ADD COLUMNS``. A type whose column
    would need a protocol feature (``timestamp_ntz``) is left to Spark, which adds the feature."""
    import json

    if any("timestamp_ntz" in json.dumps(f["type"]) for f in fields):
        return False

    def add(table) -> None:
        from deltalake.schema import Field

        table.alter.add_columns([Field.from_json(json.dumps({**f, "nullable": True})) for f in fields])

    return _alter(path, add, plain_names=True)


def _alter(path: str, change: Callable[[Any], None], *, plain_names: bool = False) -> bool:
    """Make a metadata ``change`` to a local table with delta-rs where it writes the table as Spark
    does (and, with ``plain_names``, names its columns without column mapping); False where it is
    not done here (the table is left as it was), for Spark to do."""
    local = local_path(path)
    if local is None or row_limit() == 0:
        return False
    try:
        identity, table = take(local)
    except Exception as exc:  # noqa: BLE001 - not readable here: Spark's to do
        log.debug("delta-rs cannot open %s: %s", path, exc)
        return False
    if not writable(table) or (
        plain_names and table.metadata().configuration.get("delta.columnMapping.mode", "none") != "none"
    ):
        return False
    try:
        change(table)
    except Exception as exc:  # noqa: BLE001 - refused before it committed: Spark's to do
        log.debug("delta-rs leaves a metadata change of %s to Spark: %s", path, exc)
        return False
    keep(local, identity, table)
    return True


def _key_types_ok(rows: pa.Table, keys: Sequence[str]) -> bool:
    """Key types whose Python values compare as Spark's grouping does (no float: NaN, -0.0)."""
    import pyarrow.types as t

    kinds = (t.is_integer, t.is_string, t.is_large_string, t.is_decimal, t.is_date, t.is_timestamp,
             t.is_boolean, t.is_binary, t.is_large_binary)  # fmt: skip
    return all(any(k(rows.schema.field(c).type) for k in kinds) for c in keys)


def fold(rows: pa.Table, keys: Sequence[str], names: Sequence[str]) -> pa.Table:
    """The SCD1 fold of a plain batch (:func:`plain`) on Arrow: the last change per key.

    Changes in commit order (``_commit_lsn``, ``_seq``); a delete's key is in ``_old``; an update
    that changed the key also deletes its old key just before it (so a later insert of the old
    key wins again). An unchanged-TOAST column takes the key's latest earlier value in the batch
    that carried it; where none did, ``__ws_u<i>`` (``i`` its position in ``names``) is true and
    the MERGE keeps the target's value. Output: ``__ws_k<i>`` (the key matched), ``__ws_op``, the
    row's columns, then the ``__ws_u<i>`` of the columns some update left unchanged — what
    :func:`.writes.merge_scd1` gets from :func:`.fold.fold_last_per_key`. Values are taken from
    the rows, never rebuilt through Python.
    """
    quick = _fold_plain(rows, keys, names)
    return quick if quick is not None else _fold_loop(rows, keys, names)


def _fold_loop(rows: pa.Table, keys: Sequence[str], names: Sequence[str]) -> pa.Table:
    """:func:`fold`, change by change in Python: any plain batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ops = rows.column("_op").to_pylist()
    lsns = rows.column("_commit_lsn").to_pylist()
    seqs = rows.column("_seq").to_pylist()
    new = list(zip(*[rows.column(k).to_pylist() for k in keys], strict=True))
    old_struct = rows.column("_old")
    olds = pc.is_valid(old_struct).to_pylist()
    old = list(zip(*[pc.struct_field(old_struct, k).to_pylist() for k in keys], strict=True))
    left = rows.column("_unchanged").to_pylist()
    spots = [n for n in names if any(n in u for u in left if u)]  # columns some update left unchanged
    last: dict[tuple, tuple[tuple, int, bool, str]] = {}  # key → (order, row, key from _old, op)
    carried: dict[tuple, dict[str, tuple[tuple, int]]] = {}  # key → column → (order, row) that carried it
    for i, op in enumerate(ops):
        if op not in ("I", "U", "D"):
            continue
        if op == "U" and olds[i] and old[i] != new[i]:  # the row left its old key
            _last(last, old[i], ((lsns[i], seqs[i], 0), i, True, "D"))
        key, from_old = (old[i], True) if op == "D" else (new[i], False)
        order = (lsns[i], seqs[i], 1)
        _last(last, key, (order, i, from_old, op))
        if op != "D" and spots:
            latest = carried.setdefault(key, {})
            for c in spots:
                if not (left[i] and c in left[i]) and (c not in latest or latest[c][0] < order):
                    latest[c] = (order, i)
    chosen = sorted(last.items(), key=lambda item: item[1])
    index = pa.array([c[1] for _, c in chosen], pa.int64())
    from_old = pa.array([c[2] for _, c in chosen], pa.bool_())
    taken = rows.take(index)
    old_taken = taken.column("_old").combine_chunks()
    columns = {
        key_column(i): pc.if_else(from_old, pc.struct_field(old_taken, k), taken.column(k).combine_chunks())
        for i, k in enumerate(keys)
    }
    columns[f"{_P}op"] = pa.array([c[3] for _, c in chosen], pa.string())
    for n in names:
        columns[n] = taken.column(n)
    for c in spots:  # the latest carried value, or none (the target's is kept)
        at = [carried.get(key, {}).get(c, (None, None))[1] for key, _ in chosen]
        columns[c] = rows.column(c).take(pa.array(at, pa.int64()))
        columns[unchanged_column(names.index(c))] = pa.array([a is None for a in at], pa.bool_())
    return pa.table(columns)


def _fold_plain(rows: pa.Table, keys: Sequence[str], names: Sequence[str]) -> pa.Table | None:
    """:func:`fold` by Arrow's group-by, for a batch where every change's key is its own (no
    update moved a row to another key) and no update left a column unchanged: the last change
    per key in commit order, the same rows in the same order as the loop gives. None: the loop
    (those changes, or key types the group-by does not take). An UPDATE-heavy batch is mostly
    this case; the loop costs ~17 µs a change in Python."""
    import functools

    import pyarrow as pa
    import pyarrow.compute as pc

    if not keys or pc.max(pc.fill_null(pc.list_value_length(rows.column("_unchanged")), 0)).as_py():
        return None  # a TOAST column some update left unchanged
    rows = rows.filter(pc.is_in(rows.column("_op"), pa.array(["I", "U", "D"])))
    op = rows.column("_op").combine_chunks()
    old = rows.column("_old").combine_chunks()
    deleted = pc.equal(op, "D")
    moved = []  # an update whose old key is not its new one
    for k in keys:
        before, after = pc.struct_field(old, k), rows.column(k).combine_chunks()
        differs = pc.or_(
            pc.fill_null(pc.not_equal(before, after), False), pc.xor(pc.is_null(before), pc.is_null(after))
        )
        moved.append(pc.and_(pc.and_(pc.equal(op, "U"), pc.is_valid(old)), differs))
    if pc.any(functools.reduce(pc.or_, moved)).as_py():
        return None
    key_columns = {
        key_column(i): pc.if_else(deleted, pc.struct_field(old, k), rows.column(k).combine_chunks())
        for i, k in enumerate(keys)
    }
    order = pc.sort_indices(rows.select(["_commit_lsn", "_seq"]),
                            sort_keys=[("_commit_lsn", "ascending"), ("_seq", "ascending")])  # fmt: skip
    ranked = pa.table(
        {**{c: v.take(order) for c, v in key_columns.items()}, f"{_P}rank": pa.array(range(len(order)), pa.int64())}
    )
    try:
        last = ranked.group_by(list(key_columns), use_threads=False).aggregate([(f"{_P}rank", "max")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    ranks = last.column(f"{_P}rank_max")
    index = order.take(ranks.take(pc.sort_indices(ranks)))  # the chosen changes, in commit order
    columns = {c: v.take(index) for c, v in key_columns.items()}
    columns[f"{_P}op"] = op.take(index).cast(pa.string())
    taken = rows.select(list(names)).take(index)
    for n in names:
        columns[n] = taken.column(n)
    return pa.table(columns)


def unchanged_column(position: int) -> str:
    """The folded source's flag: the column at ``position`` is the target's to keep."""
    return f"{_P}u{position}"


def _targets_hold(table, source: pa.Table, keys: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether the target (a ``deltalake.DeltaTable``) holds the key of every folded row that
    keeps a value of its own (an update with one of ``flags``, its ``__ws_u<i>``, set): the MERGE
    would otherwise have nothing to keep and insert NULL (see :func:`_matching_rows`)."""
    import functools

    import pyarrow.compute as pc

    if not flags:
        return True
    keeps = functools.reduce(pc.or_, [source.column(c) for c in flags])
    need = source.filter(pc.and_(keeps, pc.not_equal(source.column(f"{_P}op"), "D")))
    if not need.num_rows:
        return True
    wanted = need.select([key_column(i) for i in range(len(keys))]).rename_columns(list(keys))
    held = _matching_rows(table, wanted)
    if held is None:
        return False
    have = set(zip(*[held.column(k).to_pylist() for k in keys], strict=True))
    return all(key in have for key in zip(*[wanted.column(k).to_pylist() for k in keys], strict=True))


#: Most rows a target may have for the driver to read its columns (a check before a delta-rs
#: MERGE); a bigger table's batch goes through Spark, which prunes files by their statistics.
_SCAN_ROWS = 1_000_000


def _matching_rows(table, wanted: pa.Table) -> pa.Table | None:
    """The target's rows (a ``deltalake.DeltaTable``), in ``wanted``'s columns and types, whose
    value of each column is among ``wanted``'s (NULL among them matching NULL); None: not read
    here (partitioned, over :data:`_SCAN_ROWS` rows, a column or type the files do not have),
    Spark's path answers instead.

    Read from the Parquet files by their physical column names (the tables have column mapping,
    no deletion vectors: :func:`writable`), whole columns, then filtered: the files' statistics
    cannot prune here, because delta-rs writes string views, which pyarrow's filters do not take.
    """
    import functools

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    names = wanted.column_names
    if table.metadata().partition_columns:
        return None
    uris = table.file_uris()
    if not uris:
        return wanted.slice(0, 0)
    try:
        records = pa.table(table.get_add_actions(flatten=True)).column("num_records")
        if records.null_count or pc.sum(records).as_py() > _SCAN_ROWS:
            return None
        physical = {f.name: f.metadata.get("delta.columnMapping.physicalName", f.name) for f in table.schema().fields}
        plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
        schema = ds.dataset(uris[0], format="parquet").schema  # a file's: a column added since is missing
        schema = pa.schema([f.with_type(plain.get(f.type, f.type)) for f in schema])
        files = ds.dataset(uris, format="parquet", schema=schema).to_table(columns=[physical[n] for n in names])
        rows = pa.table([files.column(physical[n]).cast(wanted.schema.field(n).type) for n in names], names=names)
        match = functools.reduce(pc.and_, [
            pc.is_in(rows.column(n), value_set=wanted.column(n).combine_chunks().unique(), skip_nulls=False)
            for n in names
        ])  # fmt: skip
        return rows.filter(match)
    except (KeyError, pa.ArrowException) as exc:
        log.debug("target rows not read from the Parquet files (%s): the batch goes to Spark", exc)
        return None


def _last(last: dict, key: tuple, change: tuple) -> None:
    if key not in last or last[key][0] < change[0]:
        last[key] = change


def _quote(name: str) -> str:
    return f'"{name}"'


def apply(path: str, rows: pa.Table, facts: BatchFacts, names: Sequence[str], app_id: str, version: int,
          note: str) -> int | None:  # fmt: skip
    """Apply one table's plain batch (its rows in the per-table layout) from the driver, in one
    commit carrying the transaction (``app_id``, ``version``) and ``note``. Returns the table's
    version after it (the commit that applied the batch; where it was applied before, the table's
    newest); None: nothing was written, the batch is Spark's to apply."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    local = local_path(path)
    if local is None or path in _refused or (not _appends(facts) and not _key_types_ok(rows, facts.keys)):
        return None
    try:
        identity, table = take(local)
        if not writable(table):
            return _refuse(path, "a table feature delta-rs does not write as Spark does")
        done = table.transaction_version(app_id)
        types = {f.name: f.type for f in pa.schema(table.schema().to_arrow())}
        applied = done is not None and done >= version
        dropped = [n for n in types if n not in names]  # dropped in PostgreSQL: NULL from then on, as Spark's
        if applied or not set(names) <= set(types) or (dropped and _multiset(facts, names)):
            keep(local, identity, table)
            return table.version() if applied else None
    except Exception as exc:  # noqa: BLE001 - Spark answers whatever delta-rs cannot
        return _refuse(path, str(exc))
    properties = CommitProperties(app_transactions=[Transaction(app_id, version)],
                                  custom_metadata={"userMetadata": note})  # fmt: skip
    try:
        if _appends(facts):  # only inserts: an append (see .writes.append_inserts)
            columns = list(types)  # the table's order
            inserts = rows.filter(pc.equal(rows.column("_op"), "I")).select(list(names))
            for n in dropped:
                inserts = inserts.append_column(n, pa.nulls(inserts.num_rows, types[n]))
            inserts = inserts.select(columns)
            write_deltalake(local, inserts.cast(pa.schema([(n, types[n]) for n in columns])), mode="append",
                            commit_properties=properties)  # fmt: skip
            table.update_incremental()  # this commit: its version
            keep(local, identity, table)
            return table.version()
        if facts.truncates:  # the changes after the last TRUNCATE, merged into an emptied table
            last = facts.truncates[-1]
            lsn, seq = rows.column("_commit_lsn"), rows.column("_seq")
            rows = rows.filter(pc.or_(pc.greater(lsn, last.commit_lsn),
                                      pc.and_(pc.equal(lsn, last.commit_lsn), pc.greater(seq, last.seq))))  # fmt: skip
        if _multiset(facts, names):
            return _merge_multiset(table, local, identity, rows, names, types, properties, bool(facts.truncates))
        source = fold(rows, facts.keys, names)
        kept = {i: n for i, n in enumerate(names) if unchanged_column(i) in source.column_names}
        if facts.truncates and kept:
            keep(local, identity, table)
            return None  # a value kept from an emptied table: Spark's path answers it
        source = source.cast(pa.schema([*[(key_column(i), types[k]) for i, k in enumerate(facts.keys)],
                                        (f"{_P}op", pa.string()), *[(n, types[n]) for n in names],
                                        *[(unchanged_column(i), pa.bool_()) for i in kept]]))  # fmt: skip
        if not _targets_hold(table, source, facts.keys, [unchanged_column(i) for i in kept]):
            keep(local, identity, table)
            return None  # Spark's path stops the table, naming the key (.unchanged)
        values = {_quote(n): f"s.{_quote(n)}" for n in names}
        update = values | {_quote(n): f"CASE WHEN s.{_quote(unchanged_column(i))} THEN t.{_quote(n)} ELSE s.{_quote(n)} END"
                            for i, n in kept.items()} | {_quote(n): "NULL" for n in dropped}  # fmt: skip
        on = " AND ".join(f"t.{_quote(k)} = s.{_quote(key_column(i))}" for i, k in enumerate(facts.keys))
        op = f"s.{_quote(_P + 'op')}"
        merge = (table.merge(source, on, source_alias="s", target_alias="t", commit_properties=properties)
                 .when_matched_delete(f"{op} = 'D'")
                 .when_matched_update(update, f"{op} <> 'D'")
                 .when_not_matched_insert(values, f"{op} <> 'D'"))  # fmt: skip
        if facts.truncates:  # the rows the TRUNCATE removed and no later change brought back
            merge = merge.when_not_matched_by_source_delete()
        merge.execute()
        keep(local, identity, table)
        return table.version()
    except Exception as exc:  # noqa: BLE001
        try:  # committed before it failed? the transaction says
            now = DeltaTable(local)
            done = now.transaction_version(app_id)
        except Exception:  # noqa: BLE001
            done = None
        if done is not None and done >= version:
            return now.version()
        return _refuse(path, str(exc))


def multiset_counts(rows: pa.Table, names: Sequence[str]) -> pa.Table:
    """Net count change per row value (``names``, then ``__ws_n``): +1 per row inserted (an
    insert, an update's new row), -1 per row removed (an update's or a delete's old row); zeros
    left out. As :func:`.writes.multiset_deltas` on Spark: an update's unchanged-TOAST value is
    its old row's (FULL sends the whole old row), and NULLs are equal to each other."""
    import pyarrow as pa
    import pyarrow.compute as pc

    op = rows.column("_op")
    added = rows.filter(pc.is_in(op, pa.array(["I", "U"])))
    removed = rows.filter(pc.is_in(op, pa.array(["U", "D"])))
    left = added.column("_unchanged").combine_chunks()
    flat, parents = pc.list_flatten(left), pc.list_parent_indices(left)
    new_old = added.column("_old").combine_chunks()
    old = removed.column("_old").combine_chunks()
    columns: dict[str, list] = {n: [] for n in names}
    for n in names:
        value = added.column(n).combine_chunks()
        spots = pc.filter(parents, pc.equal(flat, n))
        if len(spots):  # rows whose value of n is the old row's
            mask = pc.is_in(pa.array(range(added.num_rows), pa.int64()), spots.cast(pa.int64()))
            value = pc.if_else(mask, pc.struct_field(new_old, n).cast(value.type), value)
        columns[n] = [value, pc.struct_field(old, n).cast(value.type)]
    n_col = f"{_P}n"
    signs = pa.array([1] * added.num_rows + [-1] * removed.num_rows, pa.int64())
    both = pa.table({**{n: pa.concat_arrays(columns[n]) for n in names}, n_col: signs})
    grouped = both.group_by(list(names), use_threads=False).aggregate([(n_col, "sum")])  # the sums first, then the keys
    counts = grouped.select([*names, f"{n_col}_sum"]).rename_columns([*names, n_col])
    return counts.filter(pc.not_equal(counts.column(n_col), 0))


def _held_counts(table, counts: pa.Table, names: Sequence[str]) -> dict[tuple, int] | None:
    """How many rows of each value of ``counts`` the target holds (:func:`_matching_rows`)."""
    held = _matching_rows(table, counts.select(list(names)))
    if held is None:
        return None
    found: dict[tuple, int] = {}
    for value in zip(*[held.column(n).to_pylist() for n in names], strict=True):
        found[value] = found.get(value, 0) + 1
    return found


def _merge_multiset(table, local: str, identity, rows: pa.Table, names: Sequence[str], types: dict,
                    properties, truncated: bool) -> int | None:  # fmt: skip
    """A multiset batch (see :func:`multiset_counts`) in one delta-rs MERGE, as
    :func:`.writes.merge_multiset` makes it through Spark: a value that lost rows is deleted and
    inserted again as many times as remain (the target's count plus the net change), a value that
    only gained rows gets that many inserts; after a TRUNCATE every other row is deleted. Returns
    the table's version after it; None: not written here."""
    import pyarrow as pa
    import pyarrow.compute as pc

    counts = multiset_counts(rows, names)
    counts = counts.cast(pa.schema([*[(n, types[n]) for n in names], counts.schema.field(f"{_P}n")]))
    values = list(zip(*[counts.column(n).to_pylist() for n in names], strict=True))
    nets = counts.column(f"{_P}n").to_pylist()
    held: dict[tuple, int] | None = {}
    if not truncated and any(net < 0 for net in nets):
        held = _held_counts(table, counts.filter(pc.less(counts.column(f"{_P}n"), 0)), names)
        if held is None:
            keep(local, identity, table)
            return None
    picks, actions = [], []
    for i, (value, net) in enumerate(zip(values, nets, strict=True)):
        if net < 0:
            picks.append(i)
            actions.append("match")
        final = net if net > 0 else held.get(value, 0) + net  # type: ignore[union-attr]
        picks += [i] * max(final, 0)
        actions += ["insert"] * max(final, 0)
    action = f"{_P}action"
    source = (
        counts.select(list(names))
        .take(pa.array(picks, pa.int64()))
        .append_column(action, pa.array(actions, pa.string()))
    )
    on = " AND ".join(
        [
            f"(s.{_quote(action)} = 'match')",  # (each in parentheses: delta-rs's parser
            *[f"(t.{_quote(n)} IS NOT DISTINCT FROM s.{_quote(n)})" for n in names],
        ]
    )  # binds AND first)
    merge = (
        table.merge(source, on, source_alias="s", target_alias="t", commit_properties=properties)
        .when_matched_delete()
        .when_not_matched_insert({_quote(n): f"s.{_quote(n)}" for n in names}, f"s.{_quote(action)} = 'insert'")
    )
    if truncated:
        merge = merge.when_not_matched_by_source_delete()
    merge.execute()
    keep(local, identity, table)
    return table.version()


def _refuse(path: str, reason: str) -> int | None:
    """Leave ``path``'s batches to Spark's MERGE (said once per table): None, :func:`apply`'s "not written"."""
    with _lock:
        if path in _refused:
            return None
        _refused.add(path)
    log.info("%s: applied through Spark's MERGE (delta-rs: %s)", path, reason.splitlines()[0] if reason else "?")
    return None
