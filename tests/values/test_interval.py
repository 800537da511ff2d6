"""interval: three fields kept apart, every IntervalStyle but sql_standard, binary."""

from __future__ import annotations

import datetime as dtm

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.values import Interval, ValueConversionError, oids, to_arrow_array
from walspark.values.interval import format_interval, parse_interval_text

from .vectors import codec, i32, i64

H = 3600 * 10**6


@pytest.mark.parametrize(("postgres", "verbose", "iso", "iv"), [
    ("1 year 2 mons -3 days +04:05:06.5", "@ 1 year 2 mons -3 days 4 hours 5 mins 6.5 secs",
     "P1Y2M-3DT4H5M6.5S", Interval(14, -3, 4 * H + 5 * 60 * 10**6 + 6_500_000)),
    ("-1 years -2 mons +3 days -04:05:06", "@ 1 year 2 mons -3 days 4 hours 5 mins 6 secs ago",
     "P-1Y-2M3DT-4H-5M-6S", Interval(-14, 3, -(4 * H + 5 * 60 * 10**6 + 6_000_000))),
    ("00:00:00", "@ 0", "PT0S", Interval(0, 0, 0)),
    ("-1 days", "@ 1 day ago", "P-1D", Interval(0, -1, 0)),
    ("-00:00:01.5", "@ 1.5 secs ago", "PT-1.5S", Interval(0, 0, -1_500_000)),
    ("1 mon -1 days", None, "P1M-1D", Interval(1, -1, 0)),
    ("178956970 years 7 mons 2147483646 days 2562047788:00:54.775807", None, None,
     Interval(2**31 - 1, 2**31 - 2, 2**63 - 1)),  # largest fields short of infinity
])
def test_interval_styles(postgres: str, verbose: str | None, iso: str | None, iv: Interval) -> None:
    assert parse_interval_text(postgres.encode()) == iv
    assert format_interval(iv) == postgres
    if verbose:
        assert parse_interval_text(verbose.encode()) == iv
    if iso:
        assert parse_interval_text(iso.encode()) == iv
    c = codec(oids.INTERVAL)
    binary = i64(iv.microseconds) + i32(iv.days) + i32(iv.months)
    assert c.decode_binary(binary) == iv


def test_infinite_intervals() -> None:
    c = codec(oids.INTERVAL)
    pos = c.decode_text(b"infinity")
    neg = c.decode_binary(i64(-(2**63)) + i32(-(2**31)) + i32(-(2**31)))
    assert pos.infinite == 1 and neg.infinite == -1
    assert str(pos) == "infinity" and str(neg) == "-infinity"


def test_arrow_struct_keeps_fields_apart() -> None:
    c = codec(oids.INTERVAL)
    assert c.arrow_type == pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())])
    col = to_arrow_array(c, "tbn", [b"1 mon", i64(1) + i32(1) + i32(0), None]).array
    assert col.to_pylist() == [{"months": 1, "days": 0, "microseconds": 0},
                               {"months": 0, "days": 1, "microseconds": 1}, None]


def test_to_timedelta_only_without_months() -> None:
    assert Interval(0, 2, 5).to_timedelta() == dtm.timedelta(days=2, microseconds=5)
    with pytest.raises(ValueConversionError):
        Interval(1, 0, 0).to_timedelta()


@pytest.mark.parametrize("bad", ["1-2 3 4:05:06", "1 fortnight", "P", "@ 1 parsec", "12"])
def test_unsupported_text_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueConversionError, match="interval"):
        codec(oids.INTERVAL).decode("t", bad.encode())


_intervals = st.builds(
    Interval,
    st.integers(-(2**31) + 1, 2**31 - 2),
    st.integers(-(2**31) + 1, 2**31 - 2),
    st.integers(-(2**63) + 1, 2**63 - 2),
)


@given(_intervals)
def test_interval_text_round_trip(iv: Interval) -> None:
    assert parse_interval_text(format_interval(iv).encode()) == iv
