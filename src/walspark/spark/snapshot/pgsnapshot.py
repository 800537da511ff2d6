"""The ``pgsnapshot`` Python data source: one published table read in CTID-range tasks.

Every task imports the slot's exported snapshot and runs a binary ``COPY`` of what the stream
publishes. Users do not call it directly. See docs/design/snapshot.md.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute  # pa.compute
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from walspark import compiled

__all__ = [
    "CtidRange",
    "PgSnapshotDataSource",
    "SnapshotFault",
    "SnapshotSourcePlan",
    "copy_query",
    "read_range",
    "register",
    "source_schema",
]

#: Rows per Arrow batch a task yields: big enough to amortise per-batch costs, small enough that
#: a task's memory stays a few tens of MB whatever the partition size.
BATCH_ROWS = 65_536


#: Types copied as ``::text`` inside the binary COPY: numeric's binary form (base-10000 digits)
#: decodes value by value in Python, its text form in one vectorised, exact Arrow pass — about 70
#: times faster. ``::text`` is numeric's output function, so the text is exactly what text-mode
#: pgoutput would send. (Not a general trick: ``bool::text`` is 'true', not the output 't'.)
TEXT_TRANSFER_TYPES = frozenset({1700})


class SnapshotFault(RuntimeError):
    """Raised on purpose by a task when the plan's test hook ``fail_partition`` names it."""


@dataclass(frozen=True, slots=True)
class CtidRange:
    """One task: pages ``[start, end)`` of relation ``schema.table`` (``end`` None = to the end),
    or — for a table sync's resumable copy — the rows whose ``keys`` lie in ``[lo, hi)``.

    ``start`` 0 and ``end`` None read the whole relation without a CTID condition (small
    tables, empty tables). The last range of a table is always open-ended, so rows that moved
    to pages past the planned size are never missed.

    Key ranges (:mod:`walspark.spark.tablesync.copying`): ``lo``/``hi`` are the bounds' values as
    PostgreSQL's text output, cast back with ``key_types`` (None: unbounded). A row never leaves
    its key range when it is updated (unlike its page), which is what lets chunks copied in
    different snapshots be reconciled with the stream key by key.
    """

    index: int
    schema: str
    table: str
    start: int
    end: int | None
    keys: tuple[str, ...] = ()
    key_types: tuple[str, ...] = ()
    lo: tuple[str, ...] | None = None
    hi: tuple[str, ...] | None = None

    def describe(self) -> str:
        if self.keys:
            return f"key range {self.index} ({self.lo or '-inf'} .. {self.hi or '+inf'})"
        return f"pages {self.start}..{self.end}"


@dataclass(slots=True)
class SnapshotSourcePlan:
    """Everything a task needs, JSON-serialisable (Spark passes data source options as strings)."""

    dsn: str
    snapshot_name: str
    columns: list[tuple[str, int, int]]
    binary: bool
    ranges: list[CtidRange]
    catalog: list[list[Any]] = field(default_factory=list)
    fail_partition: int | None = None
    row_filter: str | None = None

    def to_json(self) -> str:
        data = asdict(self)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> SnapshotSourcePlan:
        data = json.loads(text)
        data["columns"] = [tuple(c) for c in data["columns"]]
        data["ranges"] = [_range(r) for r in data["ranges"]]
        return cls(**data)


def _range(d: dict[str, Any]) -> CtidRange:
    """A range from its JSON form (lists back to tuples)."""
    tuples = {k: tuple(v) for k, v in d.items() if k in ("keys", "key_types", "lo", "hi") and v is not None}
    return CtidRange(**{**d, **tuples})


def copy_query(
    columns: Sequence[str],
    schema: str,
    table: str,
    start: int,
    end: int | None,
    *,
    binary: bool,
    as_text: Sequence[bool] = (),
    row_filter: str | None = None,
    key_range: CtidRange | None = None,
) -> Any:
    """The ``COPY (SELECT ... FROM ONLY ...) TO STDOUT`` of one CTID range, every identifier quoted.

    Columns flagged in ``as_text`` are selected as ``"c"::text`` (see :data:`TEXT_TRANSFER_TYPES`).
    ``row_filter`` is the publication's row filter as the server deparsed it
    (``pg_publication_tables.rowfilter``, already ORed over publications): it is SQL text from the
    catalog, put in parentheses and ANDed with the CTID range, never composed from user input.

    TID range conditions are executed as a TID Range Scan from PostgreSQL 14 on (only the pages
    of the range are read); older servers evaluate them during a sequential scan. A ``key_range``
    adds ``(k1, k2) >= (lo1::t1, lo2::t2) AND (k1, k2) < (hi...)``: a row comparison, which the
    key's btree index answers; bounds are literals, type names come from ``format_type``.
    """
    from psycopg import sql

    flags = list(as_text) or [False] * len(columns)
    cols = sql.SQL(", ").join(
        sql.SQL("{}::text").format(sql.Identifier(c)) if t else sql.Identifier(c) for c, t in zip(columns, flags)
    )
    conds: list[sql.Composable] = []
    if row_filter:
        conds.append(sql.SQL("(") + sql.SQL(row_filter) + sql.SQL(")"))
    if start > 0:
        conds.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({start},0)")))
    if end is not None:
        conds.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({end},0)")))
    if key_range is not None and key_range.keys:
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in key_range.keys)
        for bound, op in ((key_range.lo, ">="), (key_range.hi, "<")):
            if bound is not None:
                values = sql.SQL(", ").join(
                    sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(t))
                    for v, t in zip(bound, key_range.key_types, strict=True)
                )
                conds.append(sql.SQL("({}) " + op + " ({})").format(keys, values))
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds) if conds else sql.SQL("")
    fmt = sql.SQL("binary" if binary else "text")
    return sql.SQL("COPY (SELECT {} FROM ONLY {}{}) TO STDOUT (FORMAT {})").format(
        cols, sql.Identifier(schema, table), where, fmt
    )


def begin_in_snapshot(conn: Any, snapshot_name: str) -> None:
    """Open a REPEATABLE READ transaction on ``conn`` that sees the exported snapshot.

    The session settings the text parsers rely on are set for the transaction only (they do
    not matter for binary values, but keep the text fallback exact).
    """
    from psycopg import sql

    from walspark.values import RECOMMENDED_SESSION_SETTINGS

    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
    for name, value in RECOMMENDED_SESSION_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, true)", (name, value))


COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


class CopyFormatError(ValueError):
    """The binary COPY stream is not what PostgreSQL's format says (a bug, never user data)."""


def strip_copy_header(first: bytes) -> bytes:
    """The first CopyData of a binary COPY minus its header (signature, flags, extension)."""
    if first[:11] != COPY_SIGNATURE or len(first) < 19:
        raise CopyFormatError("binary COPY stream does not start with PostgreSQL's signature")
    flags = int.from_bytes(first[11:15], "big")
    if flags & 0x0001_0000:
        raise CopyFormatError("binary COPY with OIDs is not supported")
    ext = int.from_bytes(first[15:19], "big")
    return first[19 + ext :]


def split_rows(chunks: Sequence[bytes], ncols: int) -> list[pa.BinaryArray]:
    """Rows of a binary COPY (one CopyData per row, as PostgreSQL sends them) -> raw columns.

    Why vectorised: a per-field Python loop costs about a microsecond per field, more than
    everything else a task does. Every row is one message, so row boundaries are known without
    parsing; the fields of one column are then located for all rows at once with numpy (read
    the Int32 length at each row's cursor, advance every cursor), and each column's bytes are
    gathered into an Arrow binary array (NULL where the length is -1). Each row's field count
    and end are checked; any mismatch raises :class:`CopyFormatError` (and the caller falls
    back to :func:`split_rows_slow`).
    """
    import numpy as np

    n = len(chunks)
    if n == 0:
        return [pa.array([], type=pa.binary()) for _ in range(ncols)]
    lengths = np.fromiter((len(c) for c in chunks), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf = np.frombuffer(b"".join(chunks), dtype=np.uint8)

    def be(pos: np.ndarray, width: int) -> np.ndarray:
        if width == 2:
            return ((buf[pos].astype(np.int32) << 8) | buf[pos + 1]).astype(np.int16)
        v = (
            (buf[pos].astype(np.uint32) << 24)
            | (buf[pos + 1].astype(np.uint32) << 16)
            | (buf[pos + 2].astype(np.uint32) << 8)
            | buf[pos + 3]
        )
        return v.view(np.int32)

    if np.any(lengths < 2) or np.any(be(starts, 2) != ncols):
        raise CopyFormatError("a CopyData message is not exactly one row of the expected width")
    pos = starts + 2
    columns = []
    for _ in range(ncols):
        if np.any(pos + 4 > ends):
            raise CopyFormatError("a field runs past its row")
        lens = be(pos, 4).astype(np.int64)
        valid = lens >= 0
        size = np.where(valid, lens, 0)
        first = pos + 4
        pos = first + size
        if np.any(pos > ends):
            raise CopyFormatError("a field runs past its row")
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(size, out=offsets[1:])
        total = int(offsets[-1])
        if total:
            idx = np.arange(total, dtype=np.int64) + np.repeat(first - offsets[:-1], size)
            data = buf[idx]
        else:
            data = np.zeros(0, dtype=np.uint8)
        nulls = n - int(valid.sum())
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
        offset_type, arrow_type = (np.int32, pa.binary()) if total < 2**31 else (np.int64, pa.large_binary())
        columns.append(
            pa.Array.from_buffers(
                arrow_type,
                n,
                [validity, pa.py_buffer(offsets.astype(offset_type)), pa.py_buffer(data)],
                null_count=nulls,
            )
        )
    if np.any(pos != ends):
        raise CopyFormatError("a row has bytes after its last field")
    return columns


def copy_columns(chunks: list[bytes], ncols: int, speedups: Any = compiled.speedups) -> list[pa.Array]:
    """Rows of a binary COPY -> raw columns: compiled (``walspark_c``), else numpy, else field by field.

    All three give the same arrays; the compiled splitter returns None on anything it does not
    take (a message that is not one row, a column past 2 GiB), and the next one decides.
    """
    if speedups is not None:
        split = speedups.split_copy_rows(chunks, ncols)
        if split is not None:
            return raw_columns(len(chunks), split)
    try:
        return split_rows(chunks, ncols)
    except CopyFormatError:
        return split_rows_slow(chunks, ncols)


def raw_columns(n: int, split: list[tuple[int, bytes, bytes, bytes]]) -> list[pa.Array]:
    """The ``(null_count, validity, offsets, data)`` buffers of ``walspark_c``'s splitters as
    Arrow binary arrays of ``n`` rows (no copy)."""
    from walspark.values.codecs import raw_array_from_buffers

    return [raw_array_from_buffers(n, validity, offsets, data, nulls) for nulls, validity, offsets, data in split]


def split_rows_slow(chunks: Sequence[bytes], ncols: int) -> list[pa.BinaryArray]:
    """The same as :func:`split_rows`, one field at a time over the joined bytes (any framing)."""
    data = memoryview(b"".join(chunks))
    cols: list[list[bytes | None]] = [[] for _ in range(ncols)]
    pos, end = 0, len(data)
    while pos < end:
        count = int.from_bytes(data[pos : pos + 2], "big", signed=True)
        pos += 2
        if count == -1:
            break
        if count != ncols:
            raise CopyFormatError(f"row with {count} fields, expected {ncols}")
        for j in range(ncols):
            size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
            pos += 4
            if size < 0:
                cols[j].append(None)
            else:
                cols[j].append(bytes(data[pos : pos + size]))
                pos += size
    return [pa.array(c, type=pa.binary()) for c in cols]


#: Fixed-width binary forms converted straight from the COPY bytes with numpy (type OID ->
#: big-endian dtype, days/microseconds to add to move PostgreSQL's 2000-01-01 epoch to 1970's,
#: and the ±infinity sentinels that send the column to the codec's per-value policy instead).
_DAYS_2000 = 10_957
_FIXED: dict[int, tuple[str, int, tuple[int, ...]]] = {
    16: ("u1", 0, ()),  # bool
    21: (">i2", 0, ()),  # int2
    23: (">i4", 0, ()),  # int4
    20: (">i8", 0, ()),  # int8
    700: (">f4", 0, ()),  # float4
    701: (">f8", 0, ()),  # float8
    1082: (">i4", _DAYS_2000, (-(2**31), 2**31 - 1)),  # date
    1114: (">i8", _DAYS_2000 * 86_400_000_000, (-(2**63), 2**63 - 1)),  # timestamp
    1184: (">i8", _DAYS_2000 * 86_400_000_000, (-(2**63), 2**63 - 1)),  # timestamptz
}


def fixed_width_array(raw: pa.BinaryArray, oid: int, arrow_type: pa.DataType) -> pa.Array | None:
    """A fixed-width column straight from its binary COPY bytes, or None to use the codec.

    Why: the codecs take a Python list of values; for the common fixed-width types the bytes of
    the non-NULL values already sit back to back in the binary array's data buffer, so one
    numpy view does the whole column. Declines (None) on anything unusual — a wrong width,
    ±infinity sentinels, an overflow, an Arrow type the codec chose differently — and the
    codec then applies its exact per-value rules.
    """
    import numpy as np

    spec = _FIXED.get(oid)
    if spec is None:
        return None
    dtype, shift, sentinels = spec
    width = np.dtype(dtype).itemsize
    n = len(raw)
    valid_count = n - raw.null_count
    offsets = np.frombuffer(raw.buffers()[1], dtype=np.int32, count=n + 1, offset=raw.offset * 4)
    if int(offsets[-1] - offsets[0]) != valid_count * width:
        return None
    sizes = np.diff(offsets)
    if raw.null_count:
        valid = raw.is_valid().to_numpy(zero_copy_only=False)
        if np.any(sizes[valid] != width):
            return None
    elif np.any(sizes != width):
        return None
    data = raw.buffers()[2]
    values = (
        np.frombuffer(data, dtype=dtype, count=valid_count, offset=int(offsets[0]))
        if valid_count
        else np.zeros(0, dtype=dtype)
    )
    if sentinels and valid_count and (values.min() in sentinels or values.max() in sentinels):
        return None
    values = values.astype(values.dtype.newbyteorder("="))
    if raw.null_count:
        full = np.zeros(n, dtype=values.dtype)
        full[valid] = values
        mask = ~valid
    else:
        full, mask = values, None
    try:
        if oid == 16:
            arr = pa.array(full != 0, mask=mask, type=pa.bool_())
        elif shift:
            base = pa.array(full, mask=mask)
            arr = pa.compute.add_checked(base, pa.scalar(shift, base.type))
            storage = pa.int32() if oid == 1082 else pa.int64()
            arr = arr.cast(storage).view(arrow_type) if arrow_type.bit_width == storage.bit_width else None
        else:
            arr = pa.array(full, mask=mask)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
        return None
    if arr is None or arr.type != arrow_type:
        return None
    return arr


def _registry(plan: SnapshotSourcePlan) -> Any:
    from walspark.values import registry_of

    return registry_of(plan.catalog)


def source_schema(plan: SnapshotSourcePlan) -> pa.Schema:
    """The Arrow schema of the batches :func:`read_range` yields for ``plan`` (the source's
    Spark schema is :func:`walspark.values.spark_schema` of it)."""
    from walspark.values import arrow_schema

    return arrow_schema(plan.columns, _registry(plan), binary=plan.binary)


class _Decoder:
    """Column-wise decoding of rows of raw field values into Arrow record batches."""

    def __init__(self, plan: SnapshotSourcePlan) -> None:
        from walspark.values import column_codecs

        self.names = [c[0] for c in plan.columns]
        self.binary = plan.binary
        self.codecs = column_codecs(plan.columns, _registry(plan), binary=plan.binary)
        self.schema = source_schema(plan)
        self.as_text = [not plan.binary or oid in TEXT_TRANSFER_TYPES for _, oid, _ in plan.columns]

    def batch_from_copy(self, chunks: list[bytes]) -> pa.RecordBatch:
        """One batch from binary COPY messages (one row each)."""
        return self.batch_from_raw(copy_columns(chunks, len(self.names)))

    def batch_from_raw(self, raw: list[pa.Array]) -> pa.RecordBatch:
        """One batch from the raw binary columns of binary COPY rows."""
        done: dict[int, pa.Array] = {}
        for j, (codec, r) in enumerate(zip(self.codecs, raw)):
            if not self.as_text[j]:
                arr = fixed_width_array(r, codec.oid, codec.arrow_type)
                if arr is not None:
                    done[j] = arr
        # The codecs take a binary array as it is (no Python object per value); a large_binary
        # one (a column past 2 GiB) goes as a list.
        return self.batch(None, columns=[None if j in done else r if pa.types.is_binary(r.type) else r.to_pylist()
                                         for j, r in enumerate(raw)], ready=done)  # fmt: skip

    def batch(
        self,
        rows: list[tuple[Any, ...]] | None,
        *,
        columns: list[Any] | None = None,
        ready: dict[int, pa.Array] | None = None,
    ) -> pa.RecordBatch:
        """Decode rows (text COPY) or columns of raw values (binary COPY) with the codecs."""
        arrays = []
        ready = ready or {}
        cols: list[Any] = columns if columns is not None else list(zip(*rows)) if rows else [[] for _ in self.names]
        for j, (codec, values) in enumerate(zip(self.codecs, cols, strict=True)):
            if j in ready:
                arr = ready[j]
            elif not self.binary:
                arr = codec.arrow_from_text([None if v is None else v.encode() for v in values])
            elif self.as_text[j]:
                arr = codec.arrow_from_text(values)
            else:
                arr = codec.arrow_from_binary(values)
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            if arr.type != self.schema.field(j).type:
                arr = arr.cast(self.schema.field(j).type)
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _binary_batches(
    copy: Any, decoder: _Decoder, batch_rows: int, first: bytes | None = None
) -> Iterator[pa.RecordBatch]:
    """The pure read loop of a binary COPY: psycopg's messages, one ``bytes`` per row, in batches.

    The reference for :func:`_binary_batches_compiled`; ``first`` is a first message already read.
    """
    messages = itertools.chain(() if first is None else (first,), (bytes(chunk) for chunk in copy))
    chunks: list[bytes] = []
    header = True
    for data in messages:
        if header:
            header = False
            data = strip_copy_header(data)
            if not data:
                continue
        if data == b"\xff\xff":  # the trailer; the stream ends right after it
            continue
        chunks.append(data)
        if len(chunks) >= batch_rows:
            yield decoder.batch_from_copy(chunks)
            chunks = []
    if chunks:
        yield decoder.batch_from_copy(chunks)


def libpq_copy_functions(conn: Any) -> tuple[int, int] | None:
    """Addresses of ``PQgetCopyData`` and ``PQfreemem`` in the libpq that made ``conn``, or None.

    The compiled read loop must call the libpq whose ``PGconn`` it is handed (its struct and
    buffers are that library's). psycopg's C implementations (``binary``: the libpq bundled in
    ``psycopg_binary.libs``; ``c``: the system's) are extension modules linked against it, so
    ``dlsym`` on the module that defines the connection's ``PGconn`` class finds exactly that
    library's functions (the way :mod:`walspark.source._libpq` finds psycopg2's); the ``python``
    implementation holds its libpq as a ctypes library.
    """
    return _libpq_copy_functions(type(conn.pgconn).__module__)


@functools.cache
def _libpq_copy_functions(module_name: str) -> tuple[int, int] | None:
    import ctypes
    import sys

    if module_name == "psycopg.pq.pq_ctypes":
        lib = getattr(sys.modules.get("psycopg.pq._pq_ctypes"), "pq", None)
    else:
        path = getattr(sys.modules.get(module_name), "__file__", None)
        lib = ctypes.CDLL(path) if path and not path.endswith(".py") else None
    if lib is None:
        return None
    try:
        get, free = lib.PQgetCopyData, lib.PQfreemem
    except AttributeError:
        return None
    return ctypes.cast(get, ctypes.c_void_p).value or 0, ctypes.cast(free, ctypes.c_void_p).value or 0


def _binary_batches_compiled(conn: Any, copy: Any, decoder: _Decoder, batch_rows: int, speedups: Any,
                             functions: tuple[int, int]) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The read loop of a binary COPY in C (``walspark_c.read_copy_rows``): the same batches as
    :func:`_binary_batches`, without a Python object per row.

    The C loop reads the connection's CopyData with libpq itself, so it also takes the end of the
    stream from psycopg: it then fetches the COPY's result as psycopg's ``Copy`` would (its
    iterator is never used; leaving the ``with`` block reads nothing more once the result is
    taken). Anything the loop does not take goes to the pure path: a first message with another
    header (the rest of the stream then runs there), rows that are not one of the expected width
    (that batch is split by the reference splitter, which raises).
    """
    import psycopg

    get_copy_data, free_mem = functions
    ncols = len(decoder.names)
    first = True
    while True:
        pgconn_ptr = conn.pgconn.pgconn_ptr
        status, n, columns, rows = speedups.read_copy_rows(pgconn_ptr, get_copy_data, free_mem, ncols, batch_rows,
                                                           first)  # fmt: skip
        if status == speedups.COPY_HEADER:
            yield from _binary_batches(copy, decoder, batch_rows, first=rows[0])
            return
        first = False
        if status == speedups.COPY_FAILED:  # psycopg's words for PQgetCopyData's -2
            raise psycopg.OperationalError(f"receiving copy data failed: {psycopg.pq.error_message(conn.pgconn)}")
        if status == speedups.COPY_END:
            _copy_out_result(conn)
        if n:
            yield (
                decoder.batch_from_raw(raw_columns(n, columns))
                if columns is not None
                else decoder.batch_from_copy(rows)
            )
        if status == speedups.COPY_END:
            return


def _copy_out_result(conn: Any) -> None:
    """After ``PQgetCopyData`` returned -1: take the COPY's final result and raise its error, as
    psycopg's ``copy_from`` generator does at the end of its iterator."""
    from psycopg import errors, generators, pq

    results = conn.wait(generators.fetch_many(conn.pgconn))
    if len(results) > 1:
        raise errors.ProgrammingError("you cannot mix COPY with other operations")
    if results[0].status != pq.ExecStatus.COMMAND_OK:
        raise errors.error_from_result(results[0], encoding=conn.info.encoding)


def read_range(plan: SnapshotSourcePlan, rng: CtidRange, *, batch_rows: int = BATCH_ROWS,
               speedups: Any = compiled.speedups) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """Copy one CTID range inside the exported snapshot; yields Arrow batches.

    Also usable without Spark (the benchmark and tests call it directly). ``speedups``: the
    compiled module whose read loop to use (None: the pure loop).
    """
    import psycopg

    from walspark.source.connect import connect_sql, error_from_exception

    if plan.fail_partition is not None and plan.fail_partition == rng.index:
        raise SnapshotFault(f"test hook: partition {rng.index} of {rng.schema}.{rng.table} fails on purpose")
    decoder = _Decoder(plan)
    query = copy_query(
        decoder.names,
        rng.schema,
        rng.table,
        rng.start,
        rng.end,
        binary=plan.binary,
        as_text=decoder.as_text if plan.binary else (),
        row_filter=plan.row_filter,
        key_range=rng,
    )
    conn = connect_sql(plan.dsn)
    try:
        try:
            begin_in_snapshot(conn, plan.snapshot_name)
            with conn.cursor() as cur, cur.copy(query) as copy:
                if plan.binary:
                    functions = libpq_copy_functions(conn) if speedups is not None else None
                    if functions is not None:
                        yield from _binary_batches_compiled(conn, copy, decoder, batch_rows, speedups, functions)
                    else:
                        yield from _binary_batches(copy, decoder, batch_rows)
                else:
                    rows: list[tuple[Any, ...]] = []
                    for row in copy.rows():
                        rows.append(row)
                        if len(rows) >= batch_rows:
                            yield decoder.batch(rows)
                            rows = []
                    if rows:
                        yield decoder.batch(rows)
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            raise error_from_exception(
                exc, dsn=plan.dsn, what=f"cannot copy {rng.schema}.{rng.table} {rng.describe()}"
            ) from None
    finally:
        conn.close()


class _Reader(DataSourceReader):
    def __init__(self, plan: SnapshotSourcePlan, stage: str | None) -> None:
        self.plan, self.stage = plan, stage

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(asdict(r)) for r in self.plan.ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        rows = read_range(self.plan, _range(partition.value))
        if self.stage is None:
            yield from rows
            return
        from walspark.spark.snapshot.task_write import write_files

        yield from write_files(rows, source_schema(self.plan), self.stage)


class PgSnapshotDataSource(DataSource):
    """``format("pgsnapshot")``: rows of one table as of an exported snapshot (option ``plan``).

    With the option ``stage`` (a local table path), each task writes its rows there as Parquet
    files instead and returns the files (:mod:`.task_write`), for the driver to commit."""

    @classmethod
    def name(cls) -> str:
        return "pgsnapshot"

    def _plan(self) -> SnapshotSourcePlan:
        text = self.options.get("plan")
        if not text:
            raise ValueError("the pgsnapshot source needs the 'plan' option (built by walspark.spark.snapshot.initial)")
        return SnapshotSourcePlan.from_json(text)

    def schema(self) -> StructType:
        from walspark.values import spark_schema

        if self.options.get("stage"):
            from walspark.spark.snapshot.task_write import file_schema

            return file_schema()
        return spark_schema(source_schema(self._plan()))

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self._plan(), self.options.get("stage") or None)


def register(spark: Any) -> None:
    """Make ``format("pgsnapshot")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(PgSnapshotDataSource)
