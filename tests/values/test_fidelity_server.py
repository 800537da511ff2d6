"""Fidelity against a real PostgreSQL 18: every decoder against the server's own output.

For each type a table is filled with ordinary and edge values; each value is fetched in
text format (the type's output function, exactly what pgoutput sends in text mode) and
in binary format (its send function, what pgoutput sends with ``binary = true``), both
as raw bytes. The decoders must agree with each other and, for types kept as strings,
reproduce the server's canonical text from the binary form.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from walspark.values import (
    TYPE_CATALOG_QUERY,
    Codec,
    ColumnOptions,
    NumericPolicy,
    TypeRegistry,
    UnknownTypeWarning,
    ValueConversionError,
    register_catalog_rows,
)
from walspark.values.datetimes import PgDate, PgTimestamp
from walspark.values.interval import format_interval

psycopg = pytest.importorskip("psycopg")
from psycopg.adapt import Loader  # noqa: E402
from psycopg.pq import Format  # noqa: E402


class _RawText(Loader):
    format = Format.TEXT

    def load(self, data: Any) -> bytes:
        return bytes(data)


class _RawBinary(Loader):
    format = Format.BINARY

    def load(self, data: Any) -> bytes:
        return bytes(data)


# (column type, literals). Typmods come from the table column, as in a Relation message.
CASES: list[tuple[str, list[str]]] = [
    ("bool", ["true", "false"]),
    ("int2", ["0", "-32768", "32767"]),
    ("int4", ["-2147483648", "2147483647"]),
    ("int8", ["-9223372036854775808", "9223372036854775807"]),
    ("oid", ["0", "4294967295"]),
    ("xid8", ["12345"]),
    ("float4", ["0", "-0", "1.1", "3.4e38", "1e-45", "NaN", "Infinity", "-Infinity", "123456", "1e6"]),
    ("float8", ["0.1", "-0", "1e308", "5e-324", "NaN", "Infinity", "-Infinity", "123456789012345678", "1e15",
                "0.00001"]),
    ("numeric", ["0", "1.50", "-123456789012345678901234567890.123456789", "0.00000000000000000001", "NaN",
                 "Infinity", "-Infinity", "10000", "9999.9999", "1e100"]),
    ("numeric(10,2)", ["1.5", "-99999999.99", "0"]),
    ("numeric(3,-2)", ["12345", "-99900"]),
    ("numeric(4,6)", ["0.001234"]),
    ("money", ["0", "12.34", "-1234567.89", "92233720368547758.07"]),
    ("text", ["", "héllo wörld", 'a"b\\c', "tab\there", "NULL", "{1,2}", "emoji 😀"]),
    ("varchar(5)", ["ab", "abcde"]),
    ("bpchar(5)", ["ab", ""]),
    ("name", ["pg_class"]),
    ('"char"', ["a", "\\300", ""]),
    ("bytea", ["\\x00ff5c", "", "abc"]),
    ("uuid", ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "00000000-0000-0000-0000-000000000000"]),
    ("json", ['{"a":  [1, 2.50]}', "null"]),
    ("jsonb", ['{"b": 1, "a": [1, 2.50, "é"]}', "[]"]),
    ("jsonpath", ["$.a[*] ? (@ > 1)"]),
    ("date", ["2024-02-29", "0001-01-01", "9999-12-31", "10000-01-01", "4714-11-24 BC", "0044-03-15 BC",
              "infinity", "-infinity", "5874897-12-31"]),
    ("time", ["00:00", "23:59:59.999999", "24:00:00", "12:34:56.5"]),
    ("time(2)", ["12:34:56.789"]),
    ("timetz", ["12:00+05:30", "00:00:00-15:59", "24:00:00+00", "13:14:15.123456-03:00:15"]),
    ("timestamp", ["2024-01-02 03:04:05.123456", "0001-01-01 00:00", "9999-12-31 23:59:59.999999",
                   "10000-01-01 00:00", "0044-03-15 12:00 BC", "294276-12-31 23:59:59.999999",
                   "4713-11-24 00:00 BC", "infinity", "-infinity"]),
    ("timestamptz", ["2024-01-02 03:04:05.123456+00", "2024-06-01 12:00:00+05:30", "0044-03-15 12:00+00 BC",
                     "1900-01-01 00:00:00+00", "infinity"]),
    ("interval", ["1 year 2 mons -3 days 04:05:06.5", "-1 year -2 mons +3 days -04:05:06", "0", "1 day",
                  "-00:00:00.000001", "178956970 years 7 mons 2147483646 days 2562047788:00:54.775807",
                  "infinity", "-infinity", "1 mon -1 day"]),
    ("inet", ["::2", "::1.2.3.4", "10.1.2.3", "10.1.2.3/8", "1:0:0:1:0:0:0:1", "::ffff:1.2.3.4", "fe80::1/64"]),
    ("cidr", ["10.0.0.0/8", "2001:db8::/32", "::/0", "192.168.1.0/24"]),
    ("macaddr", ["08:00:2b:01:02:03"]),
    ("macaddr8", ["08:00:2b:01:02:03:04:05"]),
    ("bit(4)", ["1010"]),
    ("varbit", ["", "1", "101010101"]),
    ("tsvector", ["a:1A b:2,3 c 'x y'", "", "'it''s':5C"]),
    ("tsquery", ["a & !b <2> (c | d:*AB)", "!(a|b)", "a <-> (b <-> c)", "(a <-> b) <-> c", "'x y' & z:A"]),
    ("point", ["(1,2)", "(1.5,-0)", "(1e20,0.1)", "(NaN,Infinity)"]),
    ("line", ["{1,-1,0.5}"]),
    ("lseg", ["[(1,2),(3,4)]"]),
    ("box", ["(1,2),(3,4)"]),
    ("path", ["[(1,2),(3,4)]", "((0,0),(1,1),(2,0))"]),
    ("polygon", ["((0,0),(1,1),(2,0))"]),
    ("circle", ["<(1,2),3.5>"]),
    ("pg_lsn", ["16/B374D848", "0/1"]),
    ("tid", ["(0,1)"]),
    ("int4[]", ["{1,NULL,3}", "{}"]),
    ("text[]", ['{"a b",NULL,"NULL","","\\"q\\"","back\\\\slash",é," lead"}']),
    ("numeric(6,2)[]", ["{1.5,NULL,-2}"]),
    ("date[]", ["{2024-01-01,infinity,NULL}"]),
    ("box[]", ["{(1,2),(3,4);(0,0),(1,1)}"]),
    ("int4range", ["[1,5)", "empty", "(,5]", "(,)"]),
    ("numrange", ["[1.5,2.25]"]),
    ("daterange", ["[2020-01-01,infinity)"]),
    ("tsrange", ['["2020-01-01 00:00","2020-01-02 00:00")']),
    ("tstzrange", ['["2020-01-01 00:00+00",)']),
    ("int8range", ["[1,10)"]),
    ("int4multirange", ["{}", "{[1,3),[5,7)}"]),
    ("datemultirange", ["{[2020-01-01,2020-02-01)}"]),
]

_MULTIDIM = [("int4[]", "{{1,2},{3,4}}", 2), ("int4[]", "[2:3]={1,2}", 1)]


def _eq(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN and -0.0 differs from 0.0 (bit-exactness)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, Decimal) and isinstance(b, Decimal) and a.is_nan():
        return b.is_nan()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_eq(a[k], b[k]) for k in a)
    return bool(a == b)


def _same(a: Any, b: Any) -> bool:
    """Arrow arrays equal; NaN-aware for floats. (to_pylist cannot hold dates past 9999.)"""
    if a.equals(b):
        return True
    return a.type == b.type and _eq(a.to_pylist(), b.to_pylist())


@pytest.fixture
def conn(pg18_dsn: str) -> Iterator[Any]:
    with psycopg.connect(pg18_dsn, autocommit=True) as c:
        yield c


def _raw_rows(conn: Any, table: str, column: str = "v") -> tuple[int, int, list[tuple[bytes | None, bytes | None]]]:
    """The column's type OID and typmod, and its values as raw text and binary bytes, by ``i``."""
    cur = conn.cursor()
    cur.execute(f"SELECT {column} FROM {table} ORDER BY i")
    oid, typmod = cur.description[0].type_code, cur.pgresult.fmod(0)
    for loader in (_RawText, _RawBinary):
        conn.adapters.register_loader(oid, loader)
    text = [r[0] for r in conn.execute(f"SELECT {column} FROM {table} ORDER BY i").fetchall()]
    binary = [r[0] for r in conn.cursor().execute(f"SELECT {column} FROM {table} ORDER BY i", binary=True).fetchall()]
    return oid, typmod, list(zip(text, binary))


def _load(conn: Any, n: int, sql_type: str, literals: list[str]) -> str:
    table = f"fid_{n}"
    conn.execute(f"CREATE TABLE {table} (i int, v {sql_type})")
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s::{sql_type})", list(enumerate(literals)))
    return table


def _check_value(codec: Codec, t: bytes, b: bytes) -> None:
    py_t, py_b = codec.decode_text(t), codec.decode_binary(b)
    assert _eq(py_t, py_b), (t, py_t, py_b)
    try:
        arr_t = codec.arrow_from_text([t])
    except ValueConversionError:
        with pytest.raises(ValueConversionError):
            codec.arrow_from_binary([b])
        return
    arr_b = codec.arrow_from_binary([b])
    assert _same(arr_t, arr_b), (t, arr_t, arr_b)
    if codec.arrow_type == "string" and codec.name not in ("regclass",):
        assert arr_b.to_pylist() == [t.decode()], (codec.name, t, arr_b)  # binary renders the canonical text
    if isinstance(py_t, (PgDate, PgTimestamp)):
        assert str(py_t) == t.decode() or codec.name == "timestamptz"
    if codec.name == "interval":
        assert format_interval(py_t) == t.decode()


def test_every_type_text_and_binary_agree(conn: Any) -> None:
    reg = TypeRegistry()
    checked = 0
    for n, (sql_type, literals) in enumerate(CASES):
        table = _load(conn, n, sql_type, literals)
        oid, typmod, rows = _raw_rows(conn, table)
        codec = reg.resolve(oid, typmod)
        for t, b in rows:
            assert t is not None and b is not None
            try:
                _check_value(codec, t, b)
            except AssertionError as exc:
                raise AssertionError(f"{sql_type}: {exc}") from None
            checked += 1
    assert checked > 150


def test_arrow_bulk_matches_per_value(conn: Any) -> None:
    """A whole column at once (the pipeline's path), mixing text and binary values."""
    reg = TypeRegistry()
    from walspark.values import to_arrow_array

    for n, (sql_type, literals) in enumerate(CASES):
        table = _load(conn, 1000 + n, sql_type, literals)
        oid, typmod, rows = _raw_rows(conn, table)
        codec = reg.resolve(oid, typmod, ColumnOptions(numeric=NumericPolicy(mode="string")))
        kinds = "".join("tb"[i % 2] for i in range(len(rows))) + "nu"
        values = [r[i % 2] for i, r in enumerate(rows)] + [None, None]
        try:
            col = to_arrow_array(codec, kinds, values, column="v")
        except ValueConversionError:
            continue  # e.g. a timestamp past 294247 AD, checked per value above
        expected = [codec.text_storage(r[0]) if i % 2 == 0 else codec.binary_storage(r[1])
                    for i, r in enumerate(rows)]
        assert _same(col.array.slice(0, len(rows)), pa.array(expected, codec.arrow_type)), sql_type
        assert col.unchanged is not None and col.unchanged.to_pylist()[-1] is True


def test_multidimensional_and_bounded_arrays(conn: Any) -> None:
    reg = TypeRegistry()
    for n, (sql_type, literal, ndims) in enumerate(_MULTIDIM):
        table = _load(conn, 2000 + n, sql_type, [literal])
        oid, typmod, rows = _raw_rows(conn, table)
        codec = reg.resolve(oid, typmod, ColumnOptions(array_ndims=ndims, array_ignore_bounds=True))
        (t, b), = rows
        _check_value(codec, t, b)


@pytest.mark.parametrize("settings", [
    {"TimeZone": "Asia/Kolkata"}, {"TimeZone": "America/St_Johns"}, {"TimeZone": "Africa/Monrovia"},
    {"IntervalStyle": "postgres_verbose"}, {"IntervalStyle": "iso_8601"}, {"bytea_output": "escape"},
    {"extra_float_digits": "3"}, {"lc_monetary": "C"},
])
def test_session_settings_do_not_change_values(conn: Any, settings: dict[str, str]) -> None:
    for k, v in settings.items():
        conn.execute(f"SET {k} = '{v}'")
    reg = TypeRegistry()
    for n, (sql_type, literals) in enumerate(CASES):
        if sql_type not in ("timestamptz", "interval", "bytea", "float4", "float8", "money", "tstzrange"):
            continue
        table = _load(conn, 3000 + n, sql_type, literals)
        oid, typmod, rows = _raw_rows(conn, table)
        codec = reg.resolve(oid, typmod)
        for t, b in rows:
            assert _eq(codec.decode_text(t), codec.decode_binary(b)), (settings, sql_type, t)


def test_user_types_registered_from_the_catalog(conn: Any) -> None:
    conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
    conn.execute("CREATE DOMAIN price AS numeric(8,2) CHECK (VALUE >= 0)")
    conn.execute("CREATE TYPE item AS (id int, name text, p price, tags text[], m mood)")
    conn.execute("CREATE TYPE floatrange AS RANGE (subtype = float8)")
    conn.execute("ALTER TYPE item DROP ATTRIBUTE m")
    conn.execute("ALTER TYPE item ADD ATTRIBUTE m mood")  # a dropped attribute stays in pg_attribute
    conn.execute("CREATE EXTENSION citext")
    conn.execute("""CREATE TABLE u (i int, e mood, d price, c item, ca item[], r floatrange, ci citext,
                    ea mood[])""")
    conn.execute("""INSERT INTO u VALUES (1, 'happy', 12.5, ROW(7, 'a, "b"', 3, '{x,NULL}', 'ok'),
                    ARRAY[ROW(1, NULL, NULL, NULL, NULL)::item], '[1.5,2.5)', 'MiXeD', '{sad,ok}'),
                    (2, NULL, NULL, ROW(NULL, '', NULL, '{}', NULL), '{}', 'empty', '', '{}')""")
    reg = TypeRegistry()
    assert register_catalog_rows(reg, conn.execute(TYPE_CATALOG_QUERY).fetchall()) >= 5
    for col in ("e", "d", "c", "ca", "r", "ci", "ea"):
        oid, typmod, rows = _raw_rows(conn, "u", col)
        codec = reg.resolve(oid, typmod)
        for t, b in rows:
            if t is None:
                assert b is None
                continue
            _check_value(codec, t, b)
    item = reg.resolve(reg_oid := conn.execute("SELECT 'item'::regtype::oid").fetchone()[0])
    assert reg_oid and item.decode_text(b'(7,"a, ""b""",3.00,"{x,NULL}",ok)') == {
        "id": 7, "name": 'a, "b"', "p": Decimal("3.00"), "tags": ["x", None], "m": "ok"}


def test_unknown_extension_type_falls_back(conn: Any) -> None:
    conn.execute("CREATE EXTENSION hstore")
    conn.execute("CREATE TABLE h (i int, v hstore)")
    conn.execute("""INSERT INTO h VALUES (1, 'a=>1, "b c"=>NULL')""")
    oid, typmod, rows = _raw_rows(conn, "h")
    reg = TypeRegistry()
    with pytest.warns(UnknownTypeWarning, match="hstore|oid"):
        text_codec = reg.resolve(oid, typmod)
    binary_codec = reg.resolve(oid, typmod, binary=True)
    (t, b), = rows
    assert text_codec.arrow_from_text([t]).to_pylist() == [t.decode()]
    assert binary_codec.arrow_from_binary([b]).to_pylist() == [b]


def test_extension_types_the_catalog_names_are_text_without_a_warning(conn: Any) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS ltree")
    conn.execute("CREATE TABLE hx (i int, v ltree)")
    conn.execute("""INSERT INTO hx VALUES (1, 'top.a_b.c')""")
    oid, typmod, rows = _raw_rows(conn, "hx")
    reg = TypeRegistry()
    register_catalog_rows(reg, conn.execute(TYPE_CATALOG_QUERY).fetchall())
    assert not reg.is_known(oid), "kept as its text: the snapshot copies it in text"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownTypeWarning)
        codec = reg.resolve(oid, typmod)
    (t, _), = rows
    assert codec.arrow_from_text([t]).to_pylist() == [t.decode()]
    assert reg.type_name(oid) == "public.ltree"


def test_hstore_is_a_map_of_strings_in_both_formats(conn: Any) -> None:
    """hstore -> map<string,string>: every pair of the server's value, NULL values kept (a quoted
    "NULL" is a string), in the server's order, alike from hstore_out's text and hstore_send's
    bytes; the server builds each value from its pairs (``hstore(keys, values)``), so the
    expected pairs are known without parsing anything. Arrays of hstore keep their NULL elements."""
    import random

    conn.execute("CREATE EXTENSION IF NOT EXISTS hstore")
    conn.execute("CREATE TABLE hs (i int, v hstore, va hstore[])")
    rng = random.Random(36)
    alphabet = ['a', 'B', ' ', '"', '\\', '=', '>', ',', 'é', '€', '\n', 'NULL', '']
    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
    expected = []
    for i in range(150):
        pairs = {text(): rng.choice([None, text(), "NULL"]) for _ in range(rng.randrange(5))}
        expected.append(pairs)
        conn.execute("INSERT INTO hs VALUES (%s, hstore(%s::text[], %s::text[]), ARRAY[hstore(%s::text[], %s::text[]), NULL])",
                     [i, list(pairs), list(pairs.values()), list(pairs), list(pairs.values())])  # fmt: skip
    reg = TypeRegistry()
    register_catalog_rows(reg, conn.execute(TYPE_CATALOG_QUERY).fetchall())
    oid, typmod, rows = _raw_rows(conn, "hs")
    codec = reg.resolve(oid, typmod)
    assert reg.is_known(oid) and codec.arrow_type == pa.map_(pa.string(), pa.string())
    for (t, b), pairs in zip(rows, expected, strict=True):
        assert codec.decode_text(t) == codec.decode_binary(b) == pairs, (t, pairs)
        assert codec.arrow_from_text([t]).to_pylist() == codec.arrow_from_binary([b]).to_pylist()
        assert sorted(codec.arrow_from_text([t]).to_pylist()[0]) == sorted(pairs.items())
    oid, typmod, rows = _raw_rows(conn, "hs", "va")
    codec = reg.resolve(oid, typmod)
    for (t, b), pairs in zip(rows, expected, strict=True):
        assert codec.decode_text(t) == codec.decode_binary(b) == [pairs, None], (t, pairs)
        assert codec.arrow_from_text([t]).equals(codec.arrow_from_binary([b]))
    with pytest.raises(ValueConversionError):
        reg.resolve(oid).decode_text(b'{"\\"a\\"=>"1", "b"}')  # a key without its value


def test_pgvector_types_are_float_arrays_in_both_formats(conn: Any) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("CREATE TABLE vec (i int, v vector(3), h halfvec(3), va vector[])")
    conn.execute("""INSERT INTO vec VALUES (1, '[1,2.5,-3.25]', '[0.5,1e-3,65504]', ARRAY['[1,2,3]'::vector, NULL]),
                    (2, '[3.4028235e38,-1.17549435e-38,0]', '[-2,0,1]', '{}')""")
    reg = TypeRegistry()
    register_catalog_rows(reg, conn.execute(TYPE_CATALOG_QUERY).fetchall())
    for col in ("v", "h", "va"):
        oid, typmod, rows = _raw_rows(conn, "vec", col)
        codec = reg.resolve(oid, typmod)
        assert reg.is_known(oid)
        for t, b in rows:
            _check_value(codec, t, b)
    v = reg.resolve(conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])
    assert v.arrow_type == pa.list_(pa.float32())
    assert v.decode_text(b"[1,2.5,-3.25]") == [1.0, 2.5, -3.25]
    h = reg.resolve(conn.execute("SELECT 'halfvec'::regtype::oid").fetchone()[0])
    assert h.decode_text(b"[0.5,65504]") == [0.5, 65504.0]
