"""Arrays: the text parser (quoting, escapes, NULLs, dimensions, bounds) and array_send."""

from __future__ import annotations

import datetime as dtm
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.values import PgArray, PgDate, ValueConversionError, format_array, oids, to_arrow_array
from walspark.values.arrays import parse_array_text

from .vectors import array_send, codec, i32, numeric_send

TEXT_ARRAY, INT4_ARRAY = oids.ARRAY_OF[oids.TEXT], oids.ARRAY_OF[oids.INT4]


@pytest.mark.parametrize(("text", "expected"), [
    ("{}", []),
    ("{1,NULL,3}", [1, None, 3]),
    ("{{1,2},{3,4}}", [[1, 2], [3, 4]]),
    ("{{{1},{2}},{{3},{4}}}", [[[1], [2]], [[3], [4]]]),
    ("{ 1 , 2 }", [1, 2]),
    ("{null,NuLl}", [None, None]),
])
def test_int_arrays(text: str, expected: list) -> None:
    assert codec(INT4_ARRAY).decode_text(text.encode()) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a b",NULL,"NULL","","\\"q\\"","back\\\\slash",é," lead"}',
     ["a b", None, "NULL", "", '"q"', "back\\slash", "é", " lead"]),
    ('{a\\,b,c\\ }', ["a,b", "c "]),  # escapes in unquoted elements; escaped blank kept
    ('{"{}",",",x}', ["{}", ",", "x"]),
    ('{{a,b},{c,"d,e"}}', [["a", "b"], ["c", "d,e"]]),
    ('{  "x"  ,y  }', ["x", "y"]),
    ('{\\NULL}', ["NULL"]),  # an escaped NULL is a string
])
def test_text_arrays_quoting_and_escapes(text: str, expected: list) -> None:
    assert codec(TEXT_ARRAY).decode_text(text.encode()) == expected


def test_lower_bounds_are_kept_in_python() -> None:
    c = codec(INT4_ARRAY)
    v = c.decode_text(b"[2:3]={1,2}")
    assert v == PgArray([1, 2], (2,))
    b = array_send(oids.INT4, [2], [2], [i32(1), i32(2)])
    assert c.decode_binary(b) == v
    v2 = c.decode_text(b"[0:1][-1:0]={{1,2},{3,4}}")
    assert v2 == PgArray([[1, 2], [3, 4]], (0, -1))


def test_lower_bounds_policy_in_arrow() -> None:
    with pytest.raises(ValueConversionError, match="lower bounds") as e:
        to_arrow_array(codec(INT4_ARRAY), "t", [b"[2:3]={1,2}"], column="xs")
    assert "xs" in str(e.value)
    ok = to_arrow_array(codec(INT4_ARRAY, array_ignore_bounds=True), "t", [b"[2:3]={1,2}"])
    assert ok.array.to_pylist() == [[1, 2]]


def test_dimension_policy_in_arrow() -> None:
    with pytest.raises(ValueConversionError, match="dimensions"):
        to_arrow_array(codec(INT4_ARRAY), "t", [b"{{1,2},{3,4}}"], column="m")
    c2 = codec(INT4_ARRAY, array_ndims=2)
    assert c2.arrow_type == pa.list_(pa.list_(pa.int32()))
    col = to_arrow_array(c2, "ttb", [b"{{1,2},{3,4}}", b"{}",
                                     array_send(oids.INT4, [1, 2], [1, 1], [i32(5), None])])
    assert col.array.to_pylist() == [[[1, 2], [3, 4]], [], [[5, None]]]


@pytest.mark.parametrize("bad", ["{1,2", "1,2}", "{{1,2},{3}}", "{1,{2}}", '{"a}', "{a,,b}", "{a}x",
                                 "[1:3]={1,2}", "{1,2}}", '{a"b}'])
def test_malformed_arrays_are_errors(bad: str) -> None:
    with pytest.raises(ValueConversionError):
        codec(TEXT_ARRAY).decode("t", bad.encode())


def test_box_arrays_use_semicolons() -> None:
    c = codec(oids.ARRAY_OF[oids.BOX])
    assert c.decode_text(b"{(3,4),(1,2);(1,1),(0,0)}") == ["(3,4),(1,2)", "(1,1),(0,0)"]


def test_binary_arrays_with_nulls_and_empty() -> None:
    c = codec(INT4_ARRAY)
    assert c.decode_binary(array_send(oids.INT4, [], [], [])) == []
    assert c.decode_binary(array_send(oids.INT4, [3], [1], [i32(1), None, i32(3)])) == [1, None, 3]
    t = codec(TEXT_ARRAY)
    assert t.decode_binary(array_send(oids.TEXT, [2, 1], [1, 1], ["é".encode(), b""])) == [["é"], [""]]


def test_arrays_of_typed_elements() -> None:
    n = codec(oids.ARRAY_OF[oids.NUMERIC], ((10 << 16) | 2) + 4)
    assert n.arrow_type == pa.list_(pa.decimal128(10, 2))
    col = to_arrow_array(n, "tb", [b"{1.50,NULL}", array_send(oids.NUMERIC, [1], [1], [numeric_send("2.25")])])
    assert col.array.to_pylist() == [[Decimal("1.50"), None], [Decimal("2.25")]]
    d = codec(oids.ARRAY_OF[oids.DATE])
    assert d.decode_text(b"{2024-01-01,infinity}") == [dtm.date(2024, 1, 1), PgDate(2**31 - 1)]
    ts = codec(oids.ARRAY_OF[oids.TIMESTAMP])
    v = ts.decode_text(b'{"2024-01-01 00:00:00",NULL}')
    assert v == [dtm.datetime(2024, 1, 1), None]


def test_vectors_int2vector_oidvector() -> None:
    assert codec(oids.INT2VECTOR).decode_text(b"1 2 3") == [1, 2, 3]
    assert codec(oids.OIDVECTOR).decode_binary(array_send(oids.OID, [2], [0], [i32(1), i32(2)])) == [1, 2]


# --- property tests: values -> array_out text (our encoder) -> parser -> equal -------------

_elem_text = st.one_of(
    st.none(),
    st.sampled_from(["", "NULL", "null", " ", "a b", '"', "\\", "{", "}", ",", "é", "\t", "x\\\"y"]),
    st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=8),
)


@st.composite
def _arrays(draw: st.DrawFn, elem: st.SearchStrategy) -> list:
    ndim = draw(st.integers(1, 3))
    dims = [draw(st.integers(1, 3)) for _ in range(ndim)]

    def build(level: int) -> list:
        if level == ndim - 1:
            return [draw(elem) for _ in range(dims[level])]
        return [build(level + 1) for _ in range(dims[level])]

    return build(0)


@given(_arrays(_elem_text))
def test_text_array_round_trip(value: list) -> None:
    text = format_array(value)
    assert codec(TEXT_ARRAY).decode_text(text.encode()) == value


@given(_arrays(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))), st.integers(-5, 5))
def test_int_array_round_trip_with_bounds(value: list, lb: int) -> None:
    ndim, probe = 0, value
    while isinstance(probe, list):
        ndim, probe = ndim + 1, probe[0]
    bounds = (lb,) * ndim
    text = format_array(value, lower_bounds=bounds)
    got = codec(INT4_ARRAY).decode_text(text.encode())
    assert got == (value if lb == 1 else PgArray(value, bounds))
    parsed = parse_array_text(text)
    assert parsed.lower_bounds == bounds
