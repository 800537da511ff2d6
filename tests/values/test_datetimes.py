"""date, time, timetz, timestamp, timestamptz: both formats, extremes and policies."""

from __future__ import annotations

import datetime as dtm

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.values import PgDate, PgTime, PgTimestamp, ValueConversionError, oids, to_arrow_array
from walspark.values.datetimes import (
    DATE_NOBEGIN,
    DATE_NOEND,
    DT_NOBEGIN,
    civil_from_days,
    days_from_civil,
    format_date,
    format_timestamp,
    parse_date_text,
    parse_timestamp_text,
)

from .vectors import codec, i32, i64

UTC = dtm.UTC
US_DAY = 86_400_000_000


def pg_days(y: int, m: int, d: int) -> int:
    return days_from_civil(y, m, d) - 10957


@pytest.mark.parametrize(("text", "days", "py"), [
    ("2000-01-01", 0, dtm.date(2000, 1, 1)),
    ("2024-02-29", pg_days(2024, 2, 29), dtm.date(2024, 2, 29)),
    ("0001-01-01", pg_days(1, 1, 1), dtm.date(1, 1, 1)),
    ("9999-12-31", pg_days(9999, 12, 31), dtm.date(9999, 12, 31)),
    ("10000-01-01", pg_days(10000, 1, 1), PgDate(pg_days(10000, 1, 1))),
    ("0001-12-31 BC", pg_days(0, 12, 31), PgDate(pg_days(0, 12, 31))),
    ("4714-11-24 BC", -2451545, PgDate(-2451545)),  # Julian day 0, the first date
    ("5874897-12-31", 2145031948, PgDate(2145031948)),
    ("infinity", DATE_NOEND, PgDate(DATE_NOEND)),
    ("-infinity", DATE_NOBEGIN, PgDate(DATE_NOBEGIN)),
])
def test_date_vectors(text: str, days: int, py: object) -> None:
    c = codec(oids.DATE)
    assert parse_date_text(text) == days
    assert c.decode_text(text.encode()) == py
    assert c.decode_binary(i32(days)) == py
    assert format_date(days) == text
    assert str(py) == (text if isinstance(py, PgDate) else py.isoformat())  # type: ignore[union-attr]


def test_date_arrow_covers_every_finite_date_and_sentinels() -> None:
    c = codec(oids.DATE)
    col = to_arrow_array(c, "ttttb", [b"1970-01-02", b"4714-11-24 BC", b"5874897-12-31", b"infinity",
                                       i32(DATE_NOBEGIN)])
    assert col.array.type == pa.date32()
    assert col.array.cast(pa.int32()).to_pylist() == [1, -2440588, 2145042905, 2**31 - 1, -(2**31)]


@pytest.mark.parametrize("policy", ["null", "error"])
def test_infinity_policies(policy: str) -> None:
    c = codec(oids.TIMESTAMP, infinity=policy)
    if policy == "null":
        assert to_arrow_array(c, "tb", [b"infinity", i64(DT_NOBEGIN)]).array.to_pylist() == [None, None]
    else:
        with pytest.raises(ValueConversionError, match="infinity") as e:
            to_arrow_array(c, "t", [b"-infinity"], column="valid_from")
        assert "valid_from" in str(e.value)


@pytest.mark.parametrize(("text", "py"), [
    ("2024-01-02 03:04:05.123456", dtm.datetime(2024, 1, 2, 3, 4, 5, 123456)),
    ("2000-01-01 00:00:00", dtm.datetime(2000, 1, 1)),
    ("0001-01-01 00:00:00", dtm.datetime(1, 1, 1)),
    ("9999-12-31 23:59:59.999999", dtm.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ("1969-12-31 23:59:59.5", dtm.datetime(1969, 12, 31, 23, 59, 59, 500000)),
])
def test_timestamp_vectors(text: str, py: dtm.datetime) -> None:
    c = codec(oids.TIMESTAMP)
    us = (py - dtm.datetime(2000, 1, 1)) // dtm.timedelta(microseconds=1)
    assert c.decode_text(text.encode()) == py
    assert c.decode_binary(i64(us)) == py
    assert format_timestamp(us, False) == text
    arrow = to_arrow_array(c, "tb", [text.encode(), i64(us)]).array
    assert arrow.type == pa.timestamp("us")
    assert arrow.to_pylist() == [py, py]


@pytest.mark.parametrize("text", [
    "10000-01-01 00:00:00", "0044-03-15 12:00:00 BC", "4713-11-24 00:00:00 BC", "294276-12-31 23:59:59.999999",
    "infinity", "-infinity",
])
def test_timestamps_python_cannot_hold(text: str) -> None:
    c = codec(oids.TIMESTAMP)
    v = c.decode_text(text.encode())
    assert isinstance(v, PgTimestamp) and str(v) == text
    assert c.decode_binary(i64(v.microseconds)) == v


def test_timestamp_arrow_extremes() -> None:
    c = codec(oids.TIMESTAMP)
    got = to_arrow_array(c, "tttt", [b"10000-01-01 00:00:00", b"0044-03-15 12:00:00 BC", b"infinity",
                                     b"-infinity"]).array.cast(pa.int64()).to_pylist()
    assert got[0] == days_from_civil(10000, 1, 1) * US_DAY
    assert got[1] == days_from_civil(-43, 3, 15) * US_DAY + 12 * 3600 * 10**6
    assert got[2:] == [2**63 - 1, -(2**63)]
    # The last ~30 years of PostgreSQL's range do not fit in microseconds since 1970.
    with pytest.raises(ValueConversionError, match="294247"):
        to_arrow_array(c, "t", [b"294276-12-31 23:59:59.999999"], column="t")


@pytest.mark.parametrize(("text", "utc"), [
    ("2024-01-02 03:04:05.123456+00", dtm.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
    ("2024-06-01 12:00:00+05:30", dtm.datetime(2024, 6, 1, 6, 30, tzinfo=UTC)),
    ("1900-01-01 00:00:00-04:56:02", dtm.datetime(1900, 1, 1, 4, 56, 2, tzinfo=UTC)),
    ("2024-03-10 01:59:59-08", dtm.datetime(2024, 3, 10, 9, 59, 59, tzinfo=UTC)),
])
def test_timestamptz_offsets_are_applied(text: str, utc: dtm.datetime) -> None:
    c = codec(oids.TIMESTAMPTZ)
    v = c.decode_text(text.encode())
    assert v == utc and v.tzinfo == UTC
    us = (utc - dtm.datetime(2000, 1, 1, tzinfo=UTC)) // dtm.timedelta(microseconds=1)
    assert c.decode_binary(i64(us)) == utc
    arr = to_arrow_array(c, "tb", [text.encode(), i64(us)]).array
    assert arr.type == pa.timestamp("us", tz="UTC") and arr.to_pylist() == [utc, utc]


def test_timestamptz_bc_with_offset() -> None:
    v = codec(oids.TIMESTAMPTZ).decode_text(b"0044-03-15 12:00:00+01 BC")
    assert isinstance(v, PgTimestamp) and str(v) == "0044-03-15 11:00:00+00 BC"


def test_timestamp_text_mismatches_are_errors() -> None:
    with pytest.raises(ValueConversionError):
        parse_timestamp_text("2024-01-01 00:00:00+00", with_tz=False)
    with pytest.raises(ValueConversionError):
        parse_timestamp_text("2024-01-01 00:00:00", with_tz=True)
    with pytest.raises(ValueConversionError, match="ISO"):
        parse_date_text("01/02/2024")


@pytest.mark.parametrize(("text", "us", "py"), [
    ("00:00:00", 0, dtm.time(0)),
    ("23:59:59.999999", US_DAY - 1, dtm.time(23, 59, 59, 999999)),
    ("12:34:56.5", (12 * 3600 + 34 * 60 + 56) * 10**6 + 500000, dtm.time(12, 34, 56, 500000)),
    ("24:00:00", US_DAY, PgTime(US_DAY)),
])
def test_time(text: str, us: int, py: object) -> None:
    c = codec(oids.TIME)
    assert c.decode_text(text.encode()) == py
    assert c.decode_binary(i64(us)) == py
    assert to_arrow_array(c, "tb", [text.encode(), i64(us)]).array.to_pylist() == [us, us]


@pytest.mark.parametrize(("text", "us", "east"), [
    ("12:00:00+05:30", 12 * 3600 * 10**6, 19800),
    ("00:00:00-15:59", 0, -(15 * 3600 + 59 * 60)),
    ("13:14:15.123456-03:00:15", (13 * 3600 + 14 * 60 + 15) * 10**6 + 123456, -(3 * 3600 + 15)),
    ("24:00:00+00", US_DAY, 0),
])
def test_timetz(text: str, us: int, east: int) -> None:
    c = codec(oids.TIMETZ)
    binary = i64(us) + i32(-east)  # timetz_send: zone in seconds west of UTC
    py_t, py_b = c.decode_text(text.encode()), c.decode_binary(binary)
    assert py_t == py_b
    if us < US_DAY:
        assert py_t.utcoffset() == dtm.timedelta(seconds=east)  # type: ignore[union-attr]
    assert to_arrow_array(c, "tb", [text.encode(), binary]).array.to_pylist() == [text, text]


@given(st.integers(min_value=-2451545, max_value=2145031948))
def test_date_text_round_trip(days: int) -> None:
    assert parse_date_text(format_date(days)) == days


@given(st.integers(min_value=-211813488000000000, max_value=9223371331199999999))
def test_timestamp_text_round_trip(us: int) -> None:
    assert parse_timestamp_text(format_timestamp(us, False), with_tz=False) == us
    assert parse_timestamp_text(format_timestamp(us, True), with_tz=True) == us


@given(st.integers(min_value=-(10**9), max_value=10**9))
def test_civil_days_inverse(z: int) -> None:
    assert days_from_civil(*civil_from_days(z)) == z
