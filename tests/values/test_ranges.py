"""Ranges and multiranges: text parser, range_send, Arrow struct, round trips."""

from __future__ import annotations

import datetime as dtm
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.values import PgDate, Range, ValueConversionError, oids, to_arrow_array
from walspark.values.ranges import format_multirange, format_range, parse_range_text

from .vectors import codec, i32, i64, numeric_send, range_send


@pytest.mark.parametrize(("text", "binary", "expected"), [
    ("[1,5)", range_send(i32(1), i32(5), True, False), Range(1, 5, True, False)),
    ("empty", range_send(None, None, False, False, empty=True), Range(empty=True)),
    ("(,5]", range_send(None, i32(5), False, True), Range(None, 5, False, True)),
    ("(,)", range_send(None, None, False, False), Range()),
])
def test_int4range(text: str, binary: bytes, expected: Range) -> None:
    c = codec(oids.INT4RANGE)
    assert c.decode_text(text.encode()) == expected
    assert c.decode_binary(binary) == expected


def test_numrange_and_daterange_infinity_bound_is_a_value() -> None:
    n = codec(oids.NUMRANGE)
    assert n.decode_binary(range_send(numeric_send("1.5"), numeric_send("2.25"), True, True)) == \
        Range(Decimal("1.5"), Decimal("2.25"), True, True)
    d = codec(oids.DATERANGE)
    v = d.decode_text(b"[2020-01-01,infinity)")
    assert v == Range(dtm.date(2020, 1, 1), PgDate(2**31 - 1), True, False)
    assert d.decode_text(b"[2020-01-01,)").upper is None  # unbounded is not infinity


def test_tstzrange_quoted_bounds() -> None:
    c = codec(oids.TSTZRANGE)
    v = c.decode_text(b'["2020-01-01 00:00:00+00","2020-01-02 00:00:00+05:30")')
    utc = dtm.UTC
    assert v == Range(dtm.datetime(2020, 1, 1, tzinfo=utc), dtm.datetime(2020, 1, 1, 18, 30, tzinfo=utc), True, False)


def test_arrow_struct() -> None:
    c = codec(oids.INT8RANGE)
    assert c.arrow_type == pa.struct([("lower", pa.int64()), ("upper", pa.int64()), ("lower_inc", pa.bool_()),
                                      ("upper_inc", pa.bool_()), ("empty", pa.bool_())])
    col = to_arrow_array(c, "tbn", [b"[1,10)", range_send(i64(3), None, True, False), None]).array
    assert col.to_pylist() == [
        {"lower": 1, "upper": 10, "lower_inc": True, "upper_inc": False, "empty": False},
        {"lower": 3, "upper": None, "lower_inc": True, "upper_inc": False, "empty": False},
        None,
    ]


def test_multiranges() -> None:
    c = codec(oids.INT4MULTIRANGE)
    assert c.decode_text(b"{}") == []
    assert c.decode_text(b"{[1,3), [5,7)}") == [Range(1, 3, True, False), Range(5, 7, True, False)]
    binary = i32(2) + b"".join(i32(len(r)) + r for r in (range_send(i32(1), i32(3), True, False),
                                                          range_send(i32(5), i32(7), True, False)))
    assert c.decode_binary(binary) == c.decode_text(b"{[1,3),[5,7)}")
    arr = to_arrow_array(c, "tb", [b"{[1,3)}", binary]).array
    assert arr.type == pa.list_(codec(oids.INT4RANGE).arrow_type)
    assert [len(x) for x in arr.to_pylist()] == [1, 2]


@pytest.mark.parametrize("bad", ["[1,5", "1,5)", "[1;5)", "[1,5)x", "{[1,3)", "{[1,3);[4,5)}"])
def test_malformed(bad: str) -> None:
    with pytest.raises(ValueConversionError):
        codec(oids.INT4MULTIRANGE if bad.startswith("{") else oids.INT4RANGE).decode("t", bad.encode())


_bound_text = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                      max_size=8)


@given(st.one_of(st.none(), _bound_text), st.one_of(st.none(), _bound_text), st.booleans(), st.booleans())
def test_range_text_round_trip(lower: str | None, upper: str | None, li: bool, ui: bool) -> None:
    rng = Range(lower, upper, li and lower is not None, ui and upper is not None)
    parsed = parse_range_text(format_range(rng))
    assert parsed.map(lambda s: s) == rng


@given(st.lists(st.tuples(st.integers(-1000, 1000), st.integers(1, 50)), max_size=5))
def test_multirange_round_trip(spans: list[tuple[int, int]]) -> None:
    ranges = [Range(lo, lo + n, True, False) for lo, n in spans]
    text = format_multirange(ranges)
    assert codec(oids.INT4MULTIRANGE).decode_text(text.encode()) == ranges
