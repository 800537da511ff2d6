"""``Pipeline.verify()``: each published table compared with its Delta table while the pipeline streams.

The method (docs/design/verify.md): both sides are split into the same key ranges (or hash
buckets of the key, or of the whole row for tables compared as multisets), each range reduced to a
row count and an order-independent sum of an md5 prefix of the row's canonical text, computed by
PostgreSQL and by Spark from the same text. A range that differs is read again as a sandwich:
the source at a snapshot whose WAL position is P, the lake once it has applied everything up to
P (the slot's confirmed position), the source again. A range or key equal in both source reads
and different in the lake is a difference; one that moved between the source reads is read again,
at most ``attempts`` times, then reported as still changing, never as a difference.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from walspark.protocol.lsn import format_lsn
from walspark.spark.lake.tables import quote as spark_quote

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession

    from walspark.pipeline.settings import RunSettings
    from walspark.source.catalog import PublishedTable

__all__ = [
    "ATTEMPTS",
    "WAIT_SECONDS",
    "RowDifference",
    "TableVerification",
    "VerifyResult",
    "verify_tables",
]

log = logging.getLogger(__name__)

#: Re-reads of a range that differs before what still moves is reported as still changing.
ATTEMPTS = 5
#: How long one re-check waits at most for the lake to apply up to the source's read point.
WAIT_SECONDS = 120.0
#: Rows per range aimed at, and the ranges of a table at most.
RANGE_ROWS = 20_000
MAX_RANGES = 256
#: Rows (per side) a re-check reads row by row at most; beyond, ranges are re-checked by checksum.
ROW_LIMIT = 200_000
#: Differences kept per table with their values (the count covers them all).
KEEP_DIFFERENCES = 20

_SEP, _NULL = 31, 30  # the unit and record separators: between columns, and for NULL

# -- canonical text, the same on both sides ---------------------------------------------------------

_INTEGERS = {20, 21, 23, 26}  # int8, int2, int4, oid
_TEXTS = {25, 1043, 19, 2950, 114, 3802}  # text, varchar, name, uuid, json, jsonb
_BOOL, _BPCHAR, _NUMERIC, _DATE, _TIME, _TIMESTAMP, _TIMESTAMPTZ = 16, 1042, 1700, 1082, 1083, 1114, 1184
_INT32_SENTINEL, _INT64_MAX = 2**31 - 1, 2**63 - 1


def _pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def canonical_exprs(name: str, type_oid: int, enum: bool) -> tuple[str, str] | None:
    """(PostgreSQL, Spark SQL) expressions giving column ``name``'s canonical text, identical for
    the same value on both sides (walspark's Delta layout, docs/types.md); None for a type whose
    text forms differ (floats, intervals, arrays, composites, …): not compared."""
    pg, sp = _pg_ident(name), spark_quote(name)
    if type_oid in _INTEGERS or type_oid in (_BOOL, _NUMERIC):
        return f"{pg}::text", f"CAST({sp} AS STRING)"
    if type_oid in _TEXTS or enum:
        return f"{pg}::text", sp
    if type_oid == _BPCHAR:  # walspark keeps the padding; PostgreSQL's text cast drops it
        return f"{pg}::text", f"rtrim({sp})"
    if type_oid == _DATE:  # days since 1970; ±infinity as the word (the Delta side's sentinels)
        days = f"unix_date({sp})"
        return (f"CASE WHEN isfinite({pg}) THEN ({pg} - DATE '1970-01-01')::text ELSE {pg}::text END",
                f"CASE WHEN {days} >= {_INT32_SENTINEL} THEN 'infinity' WHEN {days} <= -{_INT32_SENTINEL}"
                f" THEN '-infinity' ELSE CAST({days} AS STRING) END")  # fmt: skip
    if type_oid in (_TIMESTAMP, _TIMESTAMPTZ):  # µs since 1970 (walspark's session is in UTC)
        micros = f"unix_micros(CAST({sp} AS TIMESTAMP))"
        return (f"CASE WHEN isfinite({pg}) THEN (extract(epoch FROM {pg}) * 1000000)::bigint::text"
                f" ELSE {pg}::text END",
                f"CASE WHEN {micros} = {_INT64_MAX} THEN 'infinity' WHEN {micros} = {-_INT64_MAX - 1}"
                f" THEN '-infinity' ELSE CAST({micros} AS STRING) END")  # fmt: skip
    if type_oid == _TIME:  # µs since midnight
        return f"(extract(epoch FROM {pg}) * 1000000)::bigint::text", f"CAST({sp} AS STRING)"
    return None


def _joined(exprs: Sequence[str], pg: bool) -> str:
    """The columns' texts as one text: separated, NULL as its own mark."""
    sep, null = (f"chr({_SEP})", f"chr({_NULL})") if pg else (f"char({_SEP})", f"char({_NULL})")
    return f"concat_ws({sep}, {', '.join(f'coalesce({e}, {null})' for e in exprs)})"


def _hash(text: str, pg: bool, hex_digits: int = 15) -> str:
    """A non-negative integer from the first ``hex_digits`` of the text's md5, on either side."""
    if pg:
        return f"('x' || substr(md5({text}), 1, {hex_digits}))::bit({4 * hex_digits})::bigint"
    return f"CAST(conv(substr(md5({text}), 1, {hex_digits}), 16, 10) AS BIGINT)"


# -- results ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowDifference:
    """One key (or, in a multiset, one row) whose rows differ after the lake passed the source's read.

    Values are the canonical texts both sides were compared by (timestamps in µs since 1970, dates
    in days); ``None`` on a side where the row is absent.
    """

    key: tuple[tuple[str, str | None], ...]  # (column, value); a multiset's: the whole row
    source: tuple[tuple[str, str | None], ...] | None
    lake: tuple[tuple[str, str | None], ...] | None
    source_count: int = 1  # a multiset's: how many times the row is on each side
    lake_count: int = 1

    @property
    def kind(self) -> str:
        if self.source is None or self.source_count == 0:
            return "only in the lake"
        if self.lake is None or self.lake_count == 0:
            return "missing from the lake"
        if self.source_count != self.lake_count:
            return f"{self.source_count} time(s) in the source, {self.lake_count} in the lake"
        return "differs"

    def describe(self) -> str:
        """``id=5: differs: note source 'a' lake 'b'`` — one line's worth."""
        key = ", ".join(f"{c}={_show(v)}" for c, v in self.key)
        if self.source is not None and self.lake is not None and self.source_count == self.lake_count:
            lake = dict(self.lake)
            cols = "; ".join(f"{c}: source {_show(v)}, lake {_show(lake.get(c))}"
                             for c, v in self.source if lake.get(c) != v)  # fmt: skip
            return f"{key}: differs ({cols})"
        row = self.source if self.source is not None else self.lake
        values = "" if row is None or row == self.key else " (" + ", ".join(f"{c}={_show(v)}" for c, v in row) + ")"
        return f"{key}: {self.kind}{values}"


def _show(value: str | None, width: int = 60) -> str:
    if value is None:
        return "NULL"
    text = repr(value)
    return text if len(text) <= width else text[: width - 4] + "...'"


@dataclass(frozen=True, slots=True)
class TableVerification:
    """One published table against its Delta table."""

    table: str
    source_rows: int
    lake_rows: int
    ranges: int
    rechecked: int  # ranges read again because they differed at first
    key: tuple[str, ...]  # () for a table compared as a multiset
    differences: tuple[RowDifference, ...]  # the first KEEP_DIFFERENCES, by key
    difference_count: int  # keys or rows that differ (ranges too large to read row by row count once)
    still_changing: int  # keys, rows or ranges still moving after the last re-read
    not_compared: tuple[str, ...] = ()  # "column (type)": values whose text forms differ between the engines
    lake_missing: bool = False
    seconds: float = 0.0

    @property
    def multiset(self) -> bool:
        return not self.key

    @property
    def matches(self) -> bool:
        return self.difference_count == 0 and not self.lake_missing


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Every compared table; :attr:`matches` is False on a real difference (not on still-changing rows)."""

    tables: tuple[TableVerification, ...]
    seconds: float

    @property
    def matches(self) -> bool:
        return all(t.matches for t in self.tables)

    @property
    def differences(self) -> int:
        return sum(t.difference_count + t.lake_missing for t in self.tables)


# -- one table's plan -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one table is read on both sides: its columns' texts, its key, its ranges."""

    table: PublishedTable
    columns: tuple[str, ...]
    pg_exprs: tuple[str, ...]
    spark_exprs: tuple[str, ...]
    key: tuple[str, ...]  # () : a multiset
    not_compared: tuple[str, ...]
    #: Lower bounds of ranges 1.. of the leading integer key column (range 0 is below the first),
    #: or None: ranges are hash buckets of the key's (or row's) text.
    bounds: tuple[int, ...] | None
    buckets: int
    estimate: int

    @property
    def ranges(self) -> int:
        return len(self.bounds) + 1 if self.bounds is not None else self.buckets

    @property
    def source_from(self) -> str:
        t = self.table
        where = f" WHERE ({t.row_filter})" if t.row_filter else ""
        return f"FROM {'ONLY ' if t.only else ''}{_pg_ident(t.schema)}.{_pg_ident(t.table)}{where}"

    def _key_positions(self) -> list[int]:
        return [self.columns.index(k) for k in self.key] if self.key else list(range(len(self.columns)))

    def range_expr(self, pg: bool) -> str:
        """The range number of a row, the same expression shape on both sides."""
        exprs = self.pg_exprs if pg else self.spark_exprs
        if self.bounds is None:
            text = _joined([exprs[i] for i in self._key_positions()], pg)
            return f"({_hash(text, pg, 8)} % {self.buckets})"
        column = _pg_ident(self.key[0]) if pg else spark_quote(self.key[0])
        return _case_tree(column, self.bounds, 0, len(self.bounds))

    def range_filter(self, ranges: Iterable[int], pg: bool) -> str:
        """A predicate selecting ``ranges``: key bounds where the ranges are key ranges (an index
        scan on the source), else the bucket expression."""
        chosen = sorted(set(ranges))
        if self.bounds is None:
            return f"{self.range_expr(pg)} IN ({', '.join(map(str, chosen))})"
        column = _pg_ident(self.key[0]) if pg else spark_quote(self.key[0])
        parts = []
        for r in chosen:
            low = f"{column} >= {self.bounds[r - 1]}" if r > 0 else None
            high = f"{column} < {self.bounds[r]}" if r < len(self.bounds) else None
            parts.append(" AND ".join(p for p in (low, high) if p) or "TRUE")
        return " OR ".join(f"({p})" for p in parts)

    def unit(self, values: Sequence[str | None]) -> tuple[str | None, ...]:
        """The key of a fetched row (a multiset's: the row itself)."""
        return tuple(values[i] for i in self._key_positions())


def _case_tree(column: str, bounds: Sequence[int], lo: int, hi: int) -> str:
    """Range number ``lo..hi`` of ``column`` by binary search over ``bounds`` (a CASE both engines run)."""
    if lo == hi:
        return str(lo)
    mid = (lo + hi + 1) // 2
    return f"CASE WHEN {column} < {bounds[mid - 1]} THEN {_case_tree(column, bounds, lo, mid - 1)}" \
           f" ELSE {_case_tree(column, bounds, mid, hi)} END"  # fmt: skip


_TYPES_QUERY = """
SELECT t.oid::int8, format_type(t.oid, NULL), t.typtype::text,
       coalesce(nullif(t.typbasetype, 0), t.oid)::int8, bt.typtype::text
  FROM pg_type t LEFT JOIN pg_type bt ON bt.oid = t.typbasetype
 WHERE t.oid = ANY(%s::oid[])
"""

_KEY_QUERY = """
SELECT c.relreplident::text,
       (SELECT array_agg(a.attname::text ORDER BY k.ord)
          FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE i.indrelid = c.oid
           AND CASE c.relreplident WHEN 'i' THEN i.indisreplident WHEN 'd' THEN i.indisprimary ELSE false END),
       (SELECT sum(greatest(l.reltuples, 0))::int8 FROM pg_class l
         WHERE l.oid = c.oid OR l.oid IN (SELECT relid FROM pg_partition_tree(c.oid)))
  FROM pg_class c WHERE c.oid = %s
"""


def _plan(conn: psycopg.Connection, table: PublishedTable) -> _Plan:
    oids = sorted({c.type_oid for c in table.columns})
    types = {int(r[0]): r for r in conn.execute(_TYPES_QUERY, (oids,)).fetchall()}
    columns, pg_exprs, spark_exprs, skipped = [], [], [], []
    for column in table.columns:
        _, type_name, kind, base, base_kind = types[column.type_oid]
        exprs = canonical_exprs(column.name, int(base), "e" in (kind, base_kind))
        if exprs is None:
            skipped.append(f"{column.name} ({type_name})")
            continue
        columns.append(column.name)
        pg_exprs.append(exprs[0])
        spark_exprs.append(exprs[1])
    identity, key_columns, estimate = conn.execute(_KEY_QUERY, (table.oid,)).fetchone()  # type: ignore[misc]
    key = tuple(key_columns or ()) if identity in ("d", "i") else ()  # FULL, NOTHING: a multiset
    if any(k not in columns for k in key):
        key = ()  # a key column whose text forms differ: compared as a multiset of the other columns
    estimate = int(estimate or 0)
    if estimate <= 0:
        from_ = f"FROM {'ONLY ' if table.only else ''}{_pg_ident(table.schema)}.{_pg_ident(table.table)}"
        estimate = int(conn.execute(f"SELECT count(*) {from_}").fetchone()[0])  # type: ignore[index]
    ranges = max(1, min(MAX_RANGES, math.ceil(estimate / RANGE_ROWS)))
    leading = next((c for c in table.columns if key and c.name == key[0]), None)
    bounds: tuple[int, ...] | None = None
    if leading is not None and int(types[leading.type_oid][3]) in _INTEGERS:
        bounds = _bounds(conn, table, key[0], ranges, estimate) if ranges > 1 else ()
    return _Plan(table, tuple(columns), tuple(pg_exprs), tuple(spark_exprs), key, tuple(skipped), bounds,
                 ranges, estimate)  # fmt: skip


def _bounds(
    conn: psycopg.Connection, table: PublishedTable, column: str, ranges: int, estimate: int
) -> tuple[int, ...]:
    """Quantiles of the leading key column, from a sample of about 200 rows per range."""
    sample = min(100.0, 100.0 * 200 * ranges / max(estimate, 1))
    tablesample = f" TABLESAMPLE SYSTEM ({sample:.6f})" if sample < 100 else ""
    fractions = [i / ranges for i in range(1, ranges)]
    only = "ONLY " if table.only else ""
    row = conn.execute(
        f"SELECT percentile_disc(%s::float8[]) WITHIN GROUP (ORDER BY {_pg_ident(column)})"
        f" FROM {only}{_pg_ident(table.schema)}.{_pg_ident(table.table)}{tablesample}",
        (fractions,),
    ).fetchone()
    values = [v for v in (row[0] if row and row[0] else []) if v is not None]
    return tuple(sorted(set(int(v) for v in values)))


# -- the two sides ----------------------------------------------------------------------------------

Checksums = dict[int, tuple[int, int]]  # range -> (rows, sum of row hashes)
Rows = dict[tuple[str | None, ...], Any]  # key -> row texts (a multiset: row -> count)


class _Source:
    """Reads of the source, each in a REPEATABLE READ transaction; each returns its read point P,
    the WAL insert position just after its snapshot was taken (every commit it sees ends at or before P)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def _read(self, query: str) -> tuple[list[tuple[Any, ...]], int]:
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            point = int(self.conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0])  # type: ignore[index]
            return self.conn.execute(query).fetchall(), point

    def checksums(self, plan: _Plan, ranges: Iterable[int] | None = None) -> tuple[Checksums, int]:
        where = (
            ""
            if ranges is None
            else f"{' AND' if plan.table.row_filter else ' WHERE'} ({plan.range_filter(ranges, True)})"
        )
        query = (f"SELECT {plan.range_expr(True)} AS r, count(*), sum({_hash(_joined(plan.pg_exprs, True), True)})"
                 f" {plan.source_from}{where} GROUP BY 1")  # fmt: skip
        rows, point = self._read(query)
        return {int(r): (int(n), int(h or 0)) for r, n, h in rows}, point

    def rows(self, plan: _Plan, ranges: Iterable[int]) -> tuple[Rows, int]:
        glue = " AND" if plan.table.row_filter else " WHERE"
        query = f"SELECT {', '.join(plan.pg_exprs)} {plan.source_from}{glue} ({plan.range_filter(ranges, True)})"
        rows, point = self._read(query)
        return _keyed(plan, rows), point


def _keyed(plan: _Plan, rows: Iterable[Sequence[str | None]]) -> Rows:
    if plan.key:
        return {plan.unit(r): tuple(r) for r in rows}
    return dict(Counter(tuple(r) for r in rows))


class _Lake:
    """Reads of a Delta table with Spark: its mirror (an SCD2 history's current rows; with a change
    log, the rows not folded yet too, :func:`walspark.read_table`)."""

    def __init__(self, spark: SparkSession, settings: RunSettings) -> None:
        self.spark = spark
        self.settings = settings

    def frame(self, plan: _Plan) -> DataFrame | None:
        from walspark.spark.lake.fresh import read_table
        from walspark.spark.lake.tables import is_delta_table

        t = plan.table
        path = self.settings.layout.table(t.schema, t.table)
        if is_delta_table(path):
            mirror = self.spark.read.format("delta").load(path)
            if "__END_AT" in mirror.columns:  # an SCD2 history: its current versions are the mirror
                return mirror.where("`__END_AT` IS NULL")
        try:
            return read_table(self.spark, self.settings.target, (t.schema, t.table), state=self.settings.state)
        except ValueError:  # no table and no change log
            return None

    def checksums(self, plan: _Plan, frame: DataFrame, ranges: Iterable[int] | None = None) -> Checksums:
        from pyspark.sql import functions as F

        if ranges is not None:
            frame = frame.where(plan.range_filter(ranges, False))
        rows = (
            frame.selectExpr(
                f"{plan.range_expr(False)} AS r",
                f"CAST({_hash(_joined(plan.spark_exprs, False), False)} AS DECIMAL(38, 0)) AS h",
            )
            .groupBy("r")
            .agg(F.count(F.lit(1)), F.sum("h"))
            .collect()
        )
        return {int(r[0]): (int(r[1]), int(r[2] or 0)) for r in rows}

    def rows(self, plan: _Plan, frame: DataFrame, ranges: Iterable[int]) -> Rows:
        picked = frame.where(plan.range_filter(ranges, False)).selectExpr(*plan.spark_exprs)
        return _keyed(plan, (tuple(r) for r in picked.collect()))


# -- the lake's applied position --------------------------------------------------------------------


def lake_applied(conn: psycopg.Connection, settings: RunSettings, point: int) -> tuple[bool, int | None]:
    """Whether the lake holds every transaction committed up to ``point``, and the slot's confirmed position.

    The slot is confirmed only up to the end of a batch whose every table commit is durable, and
    an idle stream confirms the server's keepalive position: a confirmed position at or past
    ``point`` answers yes. A slot no pipeline streams from (stopped, or between restarts) is
    peeked instead: nothing it would send commits before ``point``.
    """
    from walspark.source.errors import SlotNotFound
    from walspark.source.names import publication_names_value
    from walspark.source.publications import publication_list
    from walspark.source.sqlinterface import slot_changes

    row = conn.execute("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::int8, active FROM pg_replication_slots"
                       " WHERE slot_name = %s", (settings.slot,)).fetchone()  # fmt: skip
    if row is None:
        raise SlotNotFound(f"replication slot {settings.slot!r} does not exist: verify compares the lake of a "
                           "pipeline's slot; give the --slot of walspark run")  # fmt: skip
    confirmed, active = (None if row[0] is None else int(row[0])), bool(row[1])
    if confirmed is not None and confirmed >= point:
        return True, confirmed
    if active:
        return False, confirmed
    options = {"proto_version": "1",
               "publication_names": publication_names_value(publication_list(settings.publication))}  # fmt: skip
    for _, data in slot_changes(conn, settings.slot, options, upto_lsn=point, upto_nchanges=1000):
        if data[:1] in (b"I", b"U", b"D", b"T"):
            return False, confirmed
    return True, confirmed


# -- the sandwich -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Outcome:
    """What the re-reads of some units (ranges or keys) concluded."""

    differing: dict[Any, tuple[Any, Any]]  # unit -> (source value, lake value)
    moving: set[Any]


def _sandwich(units: set[Any] | None, read_source: Callable[[], tuple[Mapping[Any, Any], int]],
              read_lake: Callable[[], Mapping[Any, Any]], wait: Callable[[int, int], None],
              attempts: int, said: Callable[[int, int, int], None] = lambda attempt, moving, differing: None,
              ) -> _Outcome:  # fmt: skip
    """Source at P, lake once applied up to P, source again: a unit equal in both source reads is
    settled (a difference if the lake differs from it); one that moved is read again, with the
    second source read as the next first, at most ``attempts`` times. ``units`` None: every unit
    any read sees."""
    differing: dict[Any, tuple[Any, Any]] = {}
    before, point = read_source()
    moving = units
    for attempt in range(1, attempts + 1):
        wait(point, attempt)
        lake = read_lake()
        after, point = read_source()
        seen = set(before) | set(lake) | set(after) if moving is None else moving
        still = set()
        for unit in seen:
            was, now = before.get(unit), after.get(unit)
            if was != now:
                still.add(unit)
            elif lake.get(unit) != now:
                differing[unit] = (now, lake.get(unit))
        moving, before = still, after
        said(attempt, len(moving), len(differing))
        if not moving:
            break
    return _Outcome(differing, moving or set())


# -- verifying --------------------------------------------------------------------------------------


def verify_tables(spark: SparkSession, settings: RunSettings, say: Callable[[str], None], *,
                  tables: Sequence[str] = (), attempts: int = ATTEMPTS,
                  wait_seconds: float = WAIT_SECONDS) -> VerifyResult:  # fmt: skip
    """Compare every published table (or ``tables``, ``schema.table``) with its Delta table."""
    from walspark.source.catalog import published_tables
    from walspark.source.connect import connect_sql
    from walspark.spark.lake.fresh import table_name

    began = time.monotonic()
    wanted = {table_name(t) for t in tables}
    with connect_sql(settings.dsn) as conn, connect_sql(settings.dsn) as lake_conn:
        published = [t for t in published_tables(conn, settings.publication)
                     if not wanted or (t.schema, t.table) in wanted]  # fmt: skip
        missing = wanted - {(t.schema, t.table) for t in published}
        if missing:
            from walspark.source.errors import OptionError

            names = ", ".join(sorted(f"{s}.{t}" for s, t in missing))
            raise OptionError(f"{names}: not published by {settings.publication}; give a table the publication "
                              "publishes (walspark verify without --table checks them all)")  # fmt: skip
        out = []
        for table in published:
            verifier = _TableVerifier(spark, settings, conn, lake_conn, say, attempts, wait_seconds)
            out.append(verifier.verify(table))
    return VerifyResult(tuple(out), time.monotonic() - began)


class _TableVerifier:
    def __init__(self, spark: SparkSession, settings: RunSettings, conn: psycopg.Connection,
                 lake_conn: psycopg.Connection, say: Callable[[str], None], attempts: int,
                 wait_seconds: float) -> None:  # fmt: skip
        self.settings = settings
        self.source = _Source(conn)
        self.lake = _Lake(spark, settings)
        self.lake_conn = lake_conn  # the applied position is asked beside the source's reads
        self.say = say
        self.attempts = attempts
        self.wait_seconds = wait_seconds

    def verify(self, table: PublishedTable) -> TableVerification:
        began = time.monotonic()
        plan = _plan(self.source.conn, table)
        if plan.not_compared:
            self.say(f"verify {table.qualified}: column(s) {', '.join(plan.not_compared)} not compared (their text "
                     "forms differ between PostgreSQL and Spark); every other column is")  # fmt: skip
        frame = self.lake.frame(plan)
        if frame is None:
            count = int(self.source.conn.execute(f"SELECT count(*) {plan.source_from}").fetchone()[0])  # type: ignore[index]
            return TableVerification(table.qualified, count, 0, plan.ranges, 0, plan.key, (), count, 0,
                                     plan.not_compared, True, time.monotonic() - began)  # fmt: skip
        with ThreadPoolExecutor(1, thread_name_prefix="walspark-verify") as pool:
            source_future = pool.submit(self.source.checksums, plan)
            lake_sums = self.lake.checksums(plan, frame)
            source_sums, _ = source_future.result()
        source_rows = sum(n for n, _ in source_sums.values())
        lake_rows = sum(n for n, _ in lake_sums.values())
        differing = {r for r in set(source_sums) | set(lake_sums) if source_sums.get(r) != lake_sums.get(r)}
        differences: list[RowDifference] = []
        count = still = 0
        if differing:
            self.say(f"verify {table.qualified}: {len(differing)} of {plan.ranges} range(s) differ at first, re-read "
                     "once the lake has applied past the source's read point")  # fmt: skip
            differences, count, still = self._recheck(plan, differing, source_sums, lake_sums)
        return TableVerification(table.qualified, source_rows, lake_rows, plan.ranges, len(differing), plan.key,
                                 tuple(differences[:KEEP_DIFFERENCES]), count, still, plan.not_compared, False,
                                 time.monotonic() - began)  # fmt: skip

    def _recheck(self, plan: _Plan, differing: set[int], source_sums: Checksums,
                 lake_sums: Checksums) -> tuple[list[RowDifference], int, int]:  # fmt: skip
        """Differing ranges re-read: by checksum while they hold too many rows, then row by row."""

        def size(r: int) -> int:
            return max(source_sums.get(r, (0, 0))[0], lake_sums.get(r, (0, 0))[0])

        ranges, still, unread = set(differing), 0, 0
        if sum(size(r) for r in ranges) > ROW_LIMIT:
            outcome = self._sandwich(plan, ranges, lambda: self.source.checksums(plan, ranges),
                                     lambda frame: self.lake.checksums(plan, frame, ranges))  # fmt: skip
            still += len(outcome.moving)
            ranges, budget = set(), ROW_LIMIT
            for r in sorted(outcome.differing, key=size):
                if size(r) <= budget:
                    ranges.add(r)
                    budget -= size(r)
                else:
                    unread += 1
            if unread:
                self.say(f"verify {plan.table.qualified}: {unread} range(s) differ with too many rows to read row by "
                         f"row (over {ROW_LIMIT:,}); re-copy the table: walspark resnapshot --table "
                         f"{plan.table.qualified}")  # fmt: skip
        differences: list[RowDifference] = []
        if ranges:
            outcome = self._sandwich(plan, None, lambda: self.source.rows(plan, ranges),
                                     lambda frame: self.lake.rows(plan, frame, ranges))  # fmt: skip
            still += len(outcome.moving)
            differences = [self._difference(plan, unit, src, lake)
                           for unit, (src, lake) in sorted(outcome.differing.items(), key=lambda kv: _order(kv[0]))]  # fmt: skip
        if still:
            self.say(f"verify {plan.table.qualified}: {still} key(s) or range(s) still changing after "
                     f"{self.attempts} re-read(s): not counted as differences; run walspark verify again "
                     "when the table is quieter")  # fmt: skip
        return differences, len(differences) + unread, still

    def _sandwich(self, plan: _Plan, units: set[Any] | None, read_source: Callable[[], tuple[Mapping[Any, Any], int]],
                  read_lake: Callable[[DataFrame], Mapping[Any, Any]]) -> _Outcome:  # fmt: skip
        def lake() -> Mapping[Any, Any]:
            frame = self.lake.frame(plan)
            return {} if frame is None else read_lake(frame)

        what = "range(s)" if units is not None else "row(s)" if not plan.key else "key(s)"
        began = time.monotonic()

        def said(attempt: int, moving: int, differing: int) -> None:
            self.say(f"verify {plan.table.qualified}: re-read {attempt} of {self.attempts} ({time.monotonic() - began:.1f} s):"
                     f" {differing} {what} differ, {moving} moved between the source's reads")  # fmt: skip

        return _sandwich(units, read_source, lake, lambda point, attempt: self._wait(plan, point, attempt),
                         self.attempts, said)  # fmt: skip

    def _wait(self, plan: _Plan, point: int, attempt: int) -> None:
        """Until the lake has applied everything committed up to ``point`` (bounded, with progress lines)."""
        from walspark.source.errors import SourceError

        began = last_line = time.monotonic()
        while True:
            applied, confirmed = lake_applied(self.lake_conn, self.settings, point)
            if applied:
                return
            now = time.monotonic()
            where = "nothing confirmed" if confirmed is None else f"at {format_lsn(confirmed)}"
            if now - began > self.wait_seconds:
                raise SourceError(
                    f"verify {plan.table.qualified}: the lake did not apply up to {format_lsn(point)} within "
                    f"{self.wait_seconds:g} s (slot {self.settings.slot} {where}): keep walspark run streaming "
                    "(or run walspark run --once) while verifying, or give more --wait-seconds"
                )
            if now - last_line >= 10:
                self.say(f"verify {plan.table.qualified}: re-read {attempt}: waiting for the lake to apply up to "
                         f"{format_lsn(point)} (slot {self.settings.slot} {where}, {now - began:.0f} s); "
                         "is walspark run streaming?")  # fmt: skip
                last_line = now
            time.sleep(0.2)

    @staticmethod
    def _difference(plan: _Plan, unit: tuple[str | None, ...], source: Any, lake: Any) -> RowDifference:
        if plan.key:
            names = plan.key
            return RowDifference(tuple(zip(names, unit, strict=True)),
                                 None if source is None else tuple(zip(plan.columns, source, strict=True)),
                                 None if lake is None else tuple(zip(plan.columns, lake, strict=True)))  # fmt: skip
        row = tuple(zip(plan.columns, unit, strict=True))
        return RowDifference(row, row if source else None, row if lake else None, source or 0, lake or 0)


def _order(unit: tuple[str | None, ...]) -> tuple[Any, ...]:
    """Keys in order, numbers as numbers."""
    return tuple((0, int(v), "") if v is not None and v.lstrip("-").isdigit() else (1, 0, v or "") for v in unit)
