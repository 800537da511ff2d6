"""The subscriber-parity oracle: every Delta table equals what its publication publishes.

PostgreSQL's own subscriber is the reference (``worker.c``, ``tablesync.c``): a subscribed table
holds exactly what the publication publishes — the published columns
(``pg_publication_tables.attnames``: column lists, generated columns where published), the rows
that pass the row filter (``pg_publication_tables.rowfilter``), of the table itself and not of
its inheritance children (``ONLY``), and for a partitioned table published through its root,
the rows of every partition. So the oracle reads the publication from the catalog and asks
the source exactly that, never ``SELECT *``:

    SELECT <published columns> FROM [ONLY] <table> WHERE <row filter>

The Delta side is read without walspark code, the same columns, and both sides are compared as
multisets of canonical rows. A local table is read with delta-rs (``deltalake``), a second
implementation of the Delta protocol: no Spark job per read (a Spark read of a changed table
costs a snapshot computation and a scan, about a second on two cores), and every check also
proves that a non-Spark reader reads walspark's tables (column mapping, nested types, the
infinity sentinels). Other locations (``s3a://``), and tables with a feature delta-rs cannot
read yet (type widening, after an ``int`` became ``bigint``), are read with
``spark.read.format("delta")``.

``run_once`` runs ``walspark run --once`` through the CLI in this process (with the suite's
Spark session), as a user would at a catch-up point.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg.adapt import Loader

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession

__all__ = ["PublishedTable", "assert_matches_publication", "canonical", "oracle_cursor", "publication_mismatches",
           "published_tables", "run_once"]


@dataclass(frozen=True, slots=True)
class PublishedTable:
    """One row of ``pg_publication_tables`` as the oracle needs it."""

    schema: str
    table: str
    columns: tuple[str, ...]
    rowfilter: str | None
    partitioned: bool  # relkind 'p': its rows are its partitions' (no ONLY)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    def source_query(self) -> str:
        cols = ", ".join(_quote(c) for c in self.columns)  # none: rows of no columns, like Delta's side
        only = "" if self.partitioned else "ONLY "
        where = f" WHERE ({self.rowfilter})" if self.rowfilter else ""
        return f"SELECT {cols} FROM {only}{_quote(self.schema)}.{_quote(self.table)}{where}"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def published_tables(conn: psycopg.Connection, publications: str | Sequence[str]) -> list[PublishedTable]:
    """What the publication(s) publish, per table, from ``pg_publication_tables`` (PostgreSQL 15+ has
    ``attnames`` and ``rowfilter``; before, every non-generated column and no filter)."""
    pubs = [publications] if isinstance(publications, str) else list(publications)
    major = conn.info.server_version // 10000
    if major >= 15:
        # Before PostgreSQL 18, pgoutput never sends generated columns, although 15-17 list them
        # in attnames of a publication without a column list.
        cols_expr = "t.attnames::text[]" if major >= 18 else (
            "ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = ANY(t.attnames)"
            " AND a.attgenerated = '' ORDER BY a.attnum)")
        rows = conn.execute(
            f"SELECT t.schemaname::text, t.tablename::text, {cols_expr}, t.rowfilter, c.relkind::text,"
            # a partition whose ancestor is published too is published through that ancestor
            # (publish_via_partition_root in any of the publications: pgoutput, pg_publication.c)
            " EXISTS (SELECT FROM pg_publication_tables u JOIN pg_namespace un ON un.nspname = u.schemaname"
            "  JOIN pg_class uc ON uc.relnamespace = un.oid AND uc.relname = u.tablename"
            "  WHERE u.pubname = ANY(%s) AND uc.oid <> c.oid AND c.relispartition"
            "  AND uc.oid IN (SELECT pg_partition_ancestors(c.oid)))"
            " FROM pg_publication_tables t"
            " JOIN pg_namespace n ON n.nspname = t.schemaname"
            " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename"
            " WHERE t.pubname = ANY(%s) ORDER BY 1, 2", (pubs, pubs)).fetchall()
        out: dict[tuple[str, str], PublishedTable] = {}
        for schema, table, attnames, rowfilter, relkind, via_ancestor in rows:
            if via_ancestor:
                continue
            have = out.get((schema, table))
            # attnames is NULL for a table without columns. A table in several publications:
            # the union of columns (PostgreSQL refuses differing lists), and no filter if any
            # publication has none (pgoutput ORs the filters).
            if have is not None:
                cols = tuple(dict.fromkeys([*have.columns, *(attnames or ())]))
                flt = None if have.rowfilter is None or rowfilter is None else f"({have.rowfilter}) OR ({rowfilter})"
                out[(schema, table)] = PublishedTable(schema, table, cols, flt, relkind == "p")
            else:
                out[(schema, table)] = PublishedTable(schema, table, tuple(attnames or ()), rowfilter, relkind == "p")
        return list(out.values())
    rows = conn.execute(
        "SELECT DISTINCT t.schemaname::text, t.tablename::text, c.oid, c.relkind::text FROM pg_publication_tables t"
        " JOIN pg_namespace n ON n.nspname = t.schemaname"
        " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename"
        " WHERE t.pubname = ANY(%s) ORDER BY 1, 2", (pubs,)).fetchall()
    generated = "AND attgenerated = ''" if major >= 12 else ""
    result = []
    for schema, table, oid, relkind in rows:
        cols = [c for (c,) in conn.execute(
            f"SELECT attname::text FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped {generated}"
            " ORDER BY attnum", (oid,)).fetchall()]
        result.append(PublishedTable(schema, table, tuple(cols), None, relkind == "p"))
    return result


def canonical(value: Any) -> Any:
    """One comparable form for a value read from PostgreSQL (psycopg) or from Delta (Spark)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return str(value.normalize()) if value == value else "NaN"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:  # Spark's session runs in UTC and returns naive datetimes
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time, dt.timedelta)):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items())}
    if hasattr(value, "asDict"):  # a Spark Row (composite)
        return canonical(value.asDict())
    return str(value)


def _key(row: Sequence[Any]) -> str:
    return json.dumps([canonical(v) for v in row], sort_keys=True, default=str)


#: Rows last read per (Delta table, columns), with the Delta version they were read at.
_READ: dict[tuple[str, tuple[str, ...]], tuple[tuple[object, ...], list[tuple]]] = {}


def _delta_version(path: str) -> tuple[object, ...] | None:
    """The Delta table's latest commit as the file system shows it (no Spark): its number and the
    identity of its first and last commit files, so a table dropped and made again never looks
    unchanged. None where that cannot be told (not a local table)."""
    import os

    log_dir = os.path.join(path, "_delta_log")
    try:
        commits = [name for name in os.listdir(log_dir) if name.endswith(".json") and name[:-5].isdigit()]
    except OSError:
        return None
    if not commits:
        return None
    first, last = min(commits), max(commits)
    try:
        stats = [os.stat(os.path.join(log_dir, name)) for name in (first, last)]
    except OSError:
        return None
    return (last, first, *((st.st_ino, st.st_mtime_ns, st.st_size) for st in stats))


def _delta_rows(spark: SparkSession, target: str, table: PublishedTable) -> list[tuple] | None:
    """The Delta table's rows (the published columns), or None if it does not exist. A table
    whose version has not moved since the last read is not read again: a catch-up point
    changes a few of a workload's tables, and each read is a Spark job or two."""
    from walspark.storage.layout import TargetLayout

    path = TargetLayout(target).table(table.schema, table.table)
    for stale in [key for key in _READ if not key[0].startswith(target)]:  # another test's target
        del _READ[stale]
    version = _delta_version(path)
    cached = _READ.get((path, table.columns))
    if version is not None and cached is not None and cached[0] == version:
        return list(cached[1])
    rows = _read_delta_rows(spark, path, table)
    if version is not None and rows is not None and _delta_version(path) == version:
        _READ[(path, table.columns)] = (version, rows)
    return rows


def _read_delta_rows(spark: SparkSession, path: str, table: PublishedTable) -> list[tuple] | None:
    if "://" in path and not path.startswith("file:"):
        return _spark_delta_rows(spark, path, table)
    from deltalake.exceptions import DeltaError

    try:
        return _delta_rs_rows(path.removeprefix("file://").removeprefix("file:"), table)
    except DeltaError as exc:  # a feature delta-rs cannot read yet (type widening: int -> bigint)
        if "Unsupported table features" not in str(exc):
            raise
        return _spark_delta_rows(spark, path, table)


def _delta_rs_rows(path: str, table: PublishedTable) -> list[tuple] | None:
    """The rows through delta-rs's SQL engine (its plain Arrow path ignores column mapping), with
    timestamps and dates read as numbers exactly as :func:`_spark_delta_rows` reads them."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = DeltaTable(path)
    except TableNotFoundError:
        return None
    names = [field.name for field in delta.schema().fields]
    missing = [c for c in table.columns if c not in names]
    if missing:
        raise AssertionError(f"Delta table {table.qualified} lacks published column(s) {missing}; has {names}")
    current = ' WHERE "__END_AT" IS NULL' if "__END_AT" in names else ""  # an SCD2 history: its current versions
    select = ", ".join(_quote(c) for c in table.columns) or "count(*)"
    reader = QueryBuilder().register("t", delta).execute(f"SELECT {select} FROM t{current}")
    result = pa.RecordBatchReader.from_stream(reader).read_all()
    if not table.columns:
        return [() for _ in range(result.column(0)[0].as_py() if result.num_rows else 0)]
    columns = []
    for column in result.columns:
        plain = _integer_temporals(column.type)
        values = (column if plain == column.type else column.cast(plain)).to_pylist()
        columns.append(values if plain == column.type and not pa.types.is_nested(column.type)
                       else [_from_arrow(v, column.type) for v in values])
    return list(zip(*columns, strict=True))


def _integer_temporals(dtype: Any) -> Any:
    """``dtype`` with every timestamp as int64 (µs) and every date as int32 (days), at any depth."""
    import pyarrow as pa

    if pa.types.is_timestamp(dtype):
        return pa.int64()
    if pa.types.is_date32(dtype):
        return pa.int32()
    if isinstance(dtype, pa.MapType):
        return pa.map_(dtype.key_field, dtype.item_field.with_type(_integer_temporals(dtype.item_type)))
    if isinstance(dtype, (pa.ListType, pa.LargeListType)):
        return pa.list_(dtype.value_field.with_type(_integer_temporals(dtype.value_type)))
    if isinstance(dtype, pa.StructType):
        return pa.struct([field.with_type(_integer_temporals(field.type)) for field in dtype])
    return dtype


def _from_arrow(value: Any, dtype: Any) -> Any:
    """One value of a column read with :func:`_integer_temporals`, in the form Spark's collect gives
    (a struct as its fields in order, a map as a dict)."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_timestamp(dtype):
        return _timestamp_from_micros(value)
    if pa.types.is_date32(dtype):
        return _date_from_days(value)
    if isinstance(dtype, pa.MapType):
        return {k: _from_arrow(v, dtype.item_type) for k, v in value}
    if isinstance(dtype, (pa.ListType, pa.LargeListType)):
        return [_from_arrow(v, dtype.value_type) for v in value]
    if isinstance(dtype, pa.StructType):
        return tuple(_from_arrow(value[field.name], field.type) for field in dtype)
    return value


def _spark_delta_rows(spark: SparkSession, path: str, table: PublishedTable) -> list[tuple] | None:
    try:
        frame = spark.read.format("delta").load(path)
    except Exception as exc:  # a missing table is reported, not raised
        if "is not a Delta table" in str(exc) or "PATH_NOT_FOUND" in str(exc) or "doesn't exist" in str(exc):
            return None
        raise
    if "__END_AT" in frame.columns:  # an SCD2 history: its current versions are the mirror
        frame = frame.where("__END_AT IS NULL")
    missing = [c for c in table.columns if c not in frame.columns]
    if missing:
        raise AssertionError(f"Delta table {table.qualified} lacks published column(s) {missing}; has {frame.columns}")
    if not table.columns:
        return [() for _ in range(frame.count())]
    exprs, readers = [], []
    for name in table.columns:
        quoted = f"`{name.replace('`', '``')}`"
        numeric = _temporal_as_numbers(quoted, frame.schema[name].dataType)
        exprs.append(numeric[0] if numeric else quoted)
        readers.append(numeric[1] if numeric else None)
    return [tuple(v if read is None else read(v) for v, read in zip(r, readers, strict=True))
            for r in frame.selectExpr(*exprs).collect()]


Reader = Callable[[Any], Any]


def _temporal_as_numbers(expr: str, dtype: Any, depth: int = 0) -> tuple[str, Reader] | None:
    """``expr`` with every timestamp and date in it — top level or nested in arrays, structs (ranges,
    composites) and maps — read as µs / days since the epoch, and the reader that turns those back
    into what the oracle compares; None when ``dtype`` holds no timestamp or date. Why: Spark's
    collect() makes Python datetimes, which end at year 9999, so walspark's ±infinity sentinels
    (docs/types.md) would fail the read instead of comparing as PostgreSQL's words."""
    kind = dtype.typeName()
    if kind in ("timestamp", "timestamp_ntz"):
        return f"unix_micros(CAST({expr} AS TIMESTAMP))", _timestamp_from_micros
    if kind == "date":
        return f"unix_date({expr})", _date_from_days
    var = f"_oracle{depth}"
    if kind in ("array", "map"):  # their elements, or their values (map keys are never temporal here)
        inner = _temporal_as_numbers(var, dtype.elementType if kind == "array" else dtype.valueType, depth + 1)
        if inner is None:
            return None
        convert, read = inner
        if kind == "array":
            return f"transform({expr}, {var} -> {convert})", lambda v: None if v is None else [read(e) for e in v]
        return (f"transform_values({expr}, (_key{depth}, {var}) -> {convert})",
                lambda v: None if v is None else {k: read(e) for k, e in v.items()})
    if kind == "struct":
        fields = [(f.name, _temporal_as_numbers(f"{expr}.`{f.name.replace('`', '``')}`", f.dataType, depth + 1))
                  for f in dtype.fields]
        if all(inner is None for _, inner in fields):
            return None
        parts = ", ".join(f"'{name.replace(chr(39), chr(39) * 2)}', "
                          f"{inner[0] if inner else expr + '.`' + name.replace('`', '``') + '`'}"
                          for name, inner in fields)
        field_readers = [inner[1] if inner else None for _, inner in fields]
        return (f"IF({expr} IS NULL, NULL, named_struct({parts}))",
                lambda v: None if v is None else tuple(
                    e if read is None else read(e) for e, read in zip(v, field_readers, strict=True)))
    return None


_INT64_MAX, _INT32_MAX = 2**63 - 1, 2**31 - 1


def _timestamp_from_micros(micros: int | None) -> object:
    """walspark's timestamp as the oracle compares it: a naive UTC datetime, or PostgreSQL's word for
    ±infinity (stored as the int64 sentinels, docs/types.md)."""
    if micros is None or abs(micros) == _INT64_MAX or micros == -_INT64_MAX - 1:
        return None if micros is None else ("infinity" if micros > 0 else "-infinity")
    try:
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
    except OverflowError:
        return micros


def _date_from_days(days: int | None) -> object:
    if days is None or abs(days) < _INT32_MAX:
        try:
            return None if days is None else dt.date(1970, 1, 1) + dt.timedelta(days=days)
        except OverflowError:
            return days
    return "infinity" if days > 0 else "-infinity"


# ----------------------------------------------------------------------------- the publisher side
#
# psycopg's default Python forms of some types cannot equal any Delta value (an interval's months
# become 30-day timedeltas, an unregistered composite or enum array is one string, a range a
# psycopg Range, an infinite timestamp an error). The oracle's cursor therefore loads each such
# value as its parts — an interval as (months, days, microseconds), a range as (lower, upper,
# lower_inc, upper_inc, empty), a composite as its fields, an enum as its label, ±infinity as that
# word — which are PostgreSQL's own decompositions of the value and walspark's Delta layout
# (docs/types.md). The loaders live on a cursor of its own: the caller's connection keeps its forms.

_INTERVAL_PART = re.compile(r"([+-]?\d+) (year|mon|day)s?")
_INTERVAL_TIME = re.compile(r"([+-]?)(\d+):(\d+):(\d+(?:\.\d+)?)")


class _IntervalPartsLoader(Loader):
    """``interval`` (IntervalStyle postgres) as (months, days, microseconds), exactly."""

    def load(self, data: Any) -> tuple[int, int, int]:
        text = bytes(data).decode()
        months = days = 0
        for number, unit in _INTERVAL_PART.findall(text):
            if unit == "year":
                months += 12 * int(number)
            elif unit == "mon":
                months += int(number)
            else:
                days += int(number)
        micros = 0
        match = _INTERVAL_TIME.search(text)
        if match:
            sign, hours, minutes, seconds = match.groups()
            whole, _, frac = seconds.partition(".")
            micros = ((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1_000_000 + int((frac + "000000")[:6])
            micros = -micros if sign == "-" else micros
        return months, days, micros


def _infinity_aware(base: type[Loader]) -> type[Loader]:
    """A date/timestamp loader that gives ``infinity``/``-infinity`` as the word instead of failing."""

    class InfinityAware(Loader):
        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._base = base(oid, context)

        def load(self, data: Any) -> Any:
            raw = bytes(data)
            return raw.decode() if raw in (b"infinity", b"-infinity") else self._base.load(data)

    return InfinityAware


def _range_parts(base: type[Loader]) -> type[Loader]:
    """A range loader giving (lower, upper, lower_inc, upper_inc, empty)."""

    class RangeParts(Loader):
        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._base = base(oid, context)

        def load(self, data: Any) -> tuple[Any, ...]:
            rng = self._base.load(data)
            return rng.lower, rng.upper, rng.lower_inc, rng.upper_inc, rng.isempty

    return RangeParts


def oracle_cursor(conn: psycopg.Connection) -> psycopg.Cursor:
    """A cursor of ``conn`` that loads every value in the form the oracle compares (see above)."""
    from psycopg.pq import Format
    from psycopg.types import TypeInfo
    from psycopg.types.array import register_array
    from psycopg.types.composite import CompositeInfo, register_composite
    from psycopg.types.string import TextLoader

    cur = conn.cursor()
    adapters = cur.adapters
    adapters.register_loader("interval", _IntervalPartsLoader)
    for name in ("json", "jsonb"):  # the server's text, as walspark keeps them
        adapters.register_loader(name, TextLoader)
    for name in ("date", "timestamp", "timestamptz"):
        adapters.register_loader(name, _infinity_aware(adapters.get_loader(adapters.types[name].oid, Format.TEXT)))
    user_types = conn.execute(
        "SELECT t.oid::regtype::text, t.typtype::text FROM pg_type t"
        " LEFT JOIN pg_class c ON c.oid = t.typrelid"
        " WHERE t.typtype = 'e' OR t.typtype = 'r' OR (t.typtype = 'c' AND c.relkind = 'c')"
        " ORDER BY t.typtype DESC").fetchall()
    for name, kind in user_types:  # enums and ranges first: composites hold them
        info = adapters.types.get(name) or TypeInfo.fetch(conn, name)
        if info is None:
            continue
        if kind == "e":
            adapters.register_loader(info.oid, TextLoader)
        elif kind == "r":
            base = adapters.get_loader(info.oid, Format.TEXT)
            if base is not None:
                adapters.register_loader(info.oid, _range_parts(base))
        if kind in "er":
            register_array(info, cur)
    for name, kind in user_types:
        if kind == "c":
            register_composite(CompositeInfo.fetch(conn, name), cur)
    hstore = TypeInfo.fetch(conn, "hstore")
    if hstore is not None:  # hstore -> dict (and its arrays), as Spark reads a map
        from psycopg.types.hstore import register_hstore

        register_hstore(hstore, cur)
    return cur


def publication_mismatches(conn: psycopg.Connection, spark: SparkSession, target: str,
                           publications: str | Sequence[str]) -> dict[str, dict[str, object]]:
    """Per published table whose Delta table differs from what the publication publishes: counts and
    a few rows on each side. Empty when every table matches."""
    out: dict[str, dict[str, object]] = {}
    cur = oracle_cursor(conn)
    for table in published_tables(conn, publications):
        source = Counter(_key(r) for r in cur.execute(table.source_query()).fetchall())
        rows = _delta_rows(spark, target, table)
        delta = Counter(_key(r) for r in rows) if rows is not None else Counter()
        if source == delta and (rows is not None or not source):
            continue
        out[table.qualified] = {
            "query": table.source_query(),
            "source_rows": sum(source.values()),
            "delta_rows": None if rows is None else sum(delta.values()),
            "only_in_source": list((source - delta).elements())[:5],
            "only_in_delta": list((delta - source).elements())[:5],
        }
    return out


def assert_matches_publication(conn: psycopg.Connection, spark: SparkSession, target: str,
                               publications: str | Sequence[str], *, context: str = "") -> None:
    """Fail with the differing rows unless every published table's Delta table matches the publication."""
    bad = publication_mismatches(conn, spark, target, publications)
    assert not bad, f"{context}: Delta differs from the publication: " + json.dumps(bad, indent=1, default=str)


def run_once(dsn: str, publication: str, slot: str, target: str, *extra: str, expect_exit: int = 0) -> str:
    """``walspark run --once`` through the CLI, in this process (the active Spark session is reused);
    returns its output. Fails unless it exits with ``expect_exit``."""
    from click.testing import CliRunner

    from walspark.cli import commands  # noqa: F401  (registers the subcommands)
    from walspark.cli.main import cli

    result = CliRunner().invoke(cli, ["run", "--dsn", dsn, "--publication", publication, "--slot", slot,
                                      "--target", target, "--once", *extra])
    assert result.exit_code == expect_exit, (result.output, repr(result.exception))
    return result.output
