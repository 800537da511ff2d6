"""The bulk path: TupleData columns -> Arrow arrays, unchanged TOAST, schemas."""

from __future__ import annotations

import datetime as dtm
import math
import time
from decimal import Decimal

import pyarrow as pa
import pytest

from walspark.protocol.messages import RelationColumn, TupleData
from walspark.values import (
    ColumnOptions,
    NumericPolicy,
    TypeRegistry,
    ValueConversionError,
    arrow_schema,
    decode_tuples,
    oids,
    to_arrow_array,
    unchanged_columns_array,
)
from walspark.values.scalars import to_float4

from .vectors import codec, f64, i16, i32, i64, numeric_send


def test_kinds_in_every_spelling() -> None:
    c = codec(oids.INT2)
    for kinds in ("tnb", [b"t", b"n", b"b"], [ord("t"), ord("n"), ord("b")], ["t", None, "b"]):
        assert to_arrow_array(c, kinds, [b"1", None, i16(2)]).array.to_pylist() == [1, None, 2]
    with pytest.raises(ValueConversionError, match="kind"):
        to_arrow_array(c, "x", [b"1"])


def test_unchanged_toast_is_reported_apart_from_null() -> None:
    c = codec(oids.TEXT)
    col = to_arrow_array(c, "tun", [b"a", None, None])
    assert col.array.to_pylist() == ["a", None, None]
    assert col.unchanged is not None and col.unchanged.to_pylist() == [False, True, False]
    assert to_arrow_array(c, "tn", [b"a", None]).unchanged is None
    names = unchanged_columns_array(["id", "body", "meta"], [None, col, pa.array([True, True, False])], 3)
    assert names.to_pylist() == [["meta"], ["body", "meta"], []]


def test_all_null_and_empty_batches() -> None:
    c = codec(oids.NUMERIC, ((10 << 16) | 2) + 4)
    assert to_arrow_array(c, "nu", [None, None]).array.type == pa.decimal128(10, 2)
    assert len(to_arrow_array(c, "", []).array) == 0


def test_vectorised_paths_match_per_value_paths() -> None:
    ints = [str(i).encode() for i in range(-500, 500)] + [None]
    c = codec(oids.INT8)
    fast = to_arrow_array(c, "t" * 1000 + "n", ints).array
    assert fast.to_pylist() == [None if v is None else int(v) for v in ints]
    floats = [b"0.1", b"NaN", b"Infinity", b"-Infinity", b"-0", b"1e-05", b"1.7976931348623157e+308"]
    f = to_arrow_array(codec(oids.FLOAT8), "t" * 7, floats).array.to_pylist()
    assert f[0] == 0.1 and math.isnan(f[1]) and f[2:4] == [math.inf, -math.inf]
    assert math.copysign(1, f[4]) == -1 and f[5] == 1e-05 and f[6] == 1.7976931348623157e308
    f4 = to_arrow_array(codec(oids.FLOAT4), "tt", [b"0.1", b"3.4028235e+38"]).array
    assert f4.type == pa.float32() and f4.to_pylist() == [to_float4(0.1), to_float4(3.4028235e38)]
    b = to_arrow_array(codec(oids.BOOL), "ttn", [b"t", b"f", None]).array
    assert b.to_pylist() == [True, False, None]


def test_fast_path_errors_still_name_the_column() -> None:
    with pytest.raises(ValueConversionError) as e:
        to_arrow_array(codec(oids.INT2), "tt", [b"1", b"99999"], column="qty")
    assert "qty" in str(e.value) and "int2" in str(e.value)
    with pytest.raises(ValueConversionError, match="bool"):
        to_arrow_array(codec(oids.BOOL), "t", [b"x"], column="flag")
    with pytest.raises(ValueConversionError, match="UTF-8"):
        to_arrow_array(codec(oids.TEXT), "t", [b"\xff"], column="t")


def test_mixed_text_and_binary_in_one_batch() -> None:
    col = to_arrow_array(codec(oids.FLOAT8), "tbtb", [b"1.5", f64(2.5), b"3", f64(-0.0)]).array
    assert col.to_pylist() == [1.5, 2.5, 3.0, -0.0]
    ts = to_arrow_array(codec(oids.TIMESTAMP), "tb", [b"2000-01-01 00:00:01", i64(2_000_000)]).array
    assert ts.to_pylist() == [dtm.datetime(2000, 1, 1, 0, 0, 1), dtm.datetime(2000, 1, 1, 0, 0, 2)]


def test_schema_from_relation_columns() -> None:
    cols = (RelationColumn(1, "id", oids.INT8, -1), RelationColumn(0, "price", oids.NUMERIC, ((12 << 16) | 2) + 4),
            RelationColumn(0, "raw", oids.NUMERIC, -1), RelationColumn(0, "at", oids.TIMESTAMPTZ, -1),
            RelationColumn(0, "tags", oids.ARRAY_OF[oids.TEXT], -1), RelationColumn(0, "ext", 99_999, -1))
    with pytest.warns(UserWarning):
        schema = arrow_schema(cols, TypeRegistry())
    assert schema.types == [pa.int64(), pa.decimal128(12, 2), pa.string(), pa.timestamp("us", tz="UTC"),
                            pa.list_(pa.string()), pa.string()]
    assert schema.field("price").metadata == {b"pg.type": b"numeric", b"pg.type_oid": b"1700",
                                              b"pg.type_modifier": str(((12 << 16) | 2) + 4).encode()}
    per_col = arrow_schema(cols[:3], TypeRegistry(), {"raw": ColumnOptions(numeric=NumericPolicy(
        mode="decimal", precision=38, scale=10))})
    assert per_col.field("raw").type == pa.decimal128(38, 10)
    assert per_col.field("price").type == pa.decimal128(12, 2)


def test_decode_tuples_from_protocol_tuple_data() -> None:
    cols = [RelationColumn(1, "id", oids.INT4, -1), RelationColumn(0, "body", oids.TEXT, -1),
            RelationColumn(0, "amount", oids.NUMERIC, ((10 << 16) | 2) + 4)]
    rows = [TupleData("ttt", (b"1", b"hello", b"1.50")), TupleData("bub", (i32(2), None, numeric_send("2.00"))),
            TupleData("tnn", (b"3", None, None))]
    batch, unchanged = decode_tuples(cols, rows, TypeRegistry())
    assert batch.to_pylist() == [
        {"id": 1, "body": "hello", "amount": Decimal("1.50")},
        {"id": 2, "body": None, "amount": Decimal("2.00")},
        {"id": 3, "body": None, "amount": None},
    ]
    assert unchanged.to_pylist() == [[], ["body"], []]


def test_bulk_speed_is_reasonable() -> None:
    n = 50_000
    ints = [str(i).encode() for i in range(n)]
    start = time.perf_counter()
    to_arrow_array(codec(oids.INT4), "t" * n, ints)
    to_arrow_array(codec(oids.INT4), "b" * n, [i32(i) for i in range(n)])
    to_arrow_array(codec(oids.TEXT), "t" * n, ints)
    assert time.perf_counter() - start < 2.0


def test_single_value_api_keeps_unchanged_apart() -> None:
    import pickle

    from walspark.values import UNCHANGED_TOAST, decode_value

    assert decode_value(oids.INT4, "u", None) is UNCHANGED_TOAST
    assert decode_value(oids.INT4, "n", None) is None
    assert decode_value(oids.INT4, "b", i32(5)) == 5
    assert decode_value(oids.INT4, "t", b"5") == 5
    assert pickle.loads(pickle.dumps(UNCHANGED_TOAST)) is UNCHANGED_TOAST
    with pytest.raises(ValueConversionError):
        decode_value(oids.INT4, "x", b"5")


def test_unexpected_exceptions_become_conversion_errors() -> None:
    with pytest.raises(ValueConversionError, match="uuid"):
        codec(oids.UUID).decode("b", b"short")
    with pytest.raises(ValueConversionError, match="interval"):
        codec(oids.INTERVAL).decode("b", b"\x00" * 3)


# --- the vectorised text paths must equal the per-value paths exactly ------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from walspark.values.codecs import Codec, ScalarCodec  # noqa: E402
from walspark.values.datetimes import format_date, format_offset, format_timestamp  # noqa: E402


def _per_value(c: Codec, values: list[bytes]) -> pa.Array:
    return Codec.arrow_from_text(c, values)


_pg_us = st.integers(min_value=-211813488000000000, max_value=9223371331199999999)


@settings(max_examples=200)
@given(st.lists(st.one_of(_pg_us, st.sampled_from([2**63 - 1, -(2**63)])), max_size=8))
def test_timestamp_fast_path_is_exact(values: list[int]) -> None:
    c = codec(oids.TIMESTAMP)
    texts = [format_timestamp(v, False).encode() for v in values]
    try:
        slow = _per_value(c, texts)
    except ValueConversionError:
        with pytest.raises(ValueConversionError):
            c.arrow_from_text(texts)
        return
    assert c.arrow_from_text(texts).equals(slow)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(-(10**16), 10**16), st.integers(-15 * 3600, 15 * 3600)), max_size=8))
def test_timestamptz_fast_path_is_exact_for_any_offset(values: list[tuple[int, int]]) -> None:
    c = codec(oids.TIMESTAMPTZ)
    texts = []
    for us, off in values:  # render in a zone with offset `off` (seconds east)
        local = format_timestamp(us + off * 10**6, False)
        bc = local.endswith(" BC")
        texts.append((local.removesuffix(" BC") + format_offset(off) + (" BC" if bc else "")).encode())
    assert c.arrow_from_text(texts).equals(_per_value(c, texts))


@given(st.lists(st.integers(-2451545, 2145031948), max_size=8))
def test_date_fast_path_is_exact(values: list[int]) -> None:
    c = codec(oids.DATE)
    texts = [format_date(v).encode() for v in values]
    assert c.arrow_from_text(texts).equals(_per_value(c, texts))


@given(st.lists(st.decimals(min_value=-(10**8), max_value=10**8, places=2), max_size=8),
       st.sampled_from([b"NaN", b"Infinity", b"1.5", None]))
def test_numeric_fast_path_is_exact(values: list[Decimal], extra: bytes | None) -> None:
    c = codec(oids.NUMERIC, ((10 << 16) | 2) + 4)
    texts: list[bytes | None] = [str(v).encode() for v in values] + [extra]
    try:
        slow = _per_value(c, texts)
    except ValueConversionError:
        with pytest.raises(ValueConversionError):
            c.arrow_from_text(texts)
        return
    assert c.arrow_from_text(texts).equals(slow)
    assert isinstance(c, ScalarCodec)


@settings(max_examples=200)
@given(st.lists(st.one_of(st.none(), _pg_us, st.sampled_from([2**63 - 1, -(2**63), 2**63 - 2])), max_size=8),
       st.sampled_from(["sentinel", "null", "error"]))
def test_timestamp_binary_fast_path_is_exact(values: list[int | None], infinity: str) -> None:
    for oid in (oids.TIMESTAMP, oids.TIMESTAMPTZ):
        c = codec(oid, infinity=infinity)
        raw = [None if v is None else i64(v) for v in values]
        try:
            slow = Codec.arrow_from_binary(c, raw)
        except ValueConversionError:
            with pytest.raises(ValueConversionError):
                c.arrow_from_binary(raw)
            continue
        assert c.arrow_from_binary(raw).equals(slow)


@given(st.lists(st.one_of(st.none(), st.integers(-2451545, 2145031948), st.sampled_from([-(2**31), 2**31 - 1])),
                max_size=8))
def test_date_binary_fast_path_is_exact(values: list[int | None]) -> None:
    c = codec(oids.DATE)
    raw = [None if v is None else i32(v) for v in values]
    assert c.arrow_from_binary(raw).equals(Codec.arrow_from_binary(c, raw))
