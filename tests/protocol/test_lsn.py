"""LSN text (``X/Y``) and PostgreSQL timestamps (microseconds since 2000-01-01 UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.protocol import (
    MAX_LSN,
    PG_EPOCH,
    datetime_to_pg_timestamp,
    format_lsn,
    parse_lsn,
    pg_timestamp_to_datetime,
)


@pytest.mark.parametrize(("value", "text"), [
    (0, "0/0"),
    (0x16B3748, "0/16B3748"),
    (0x1_0000_0000, "1/0"),
    (0xA_0000_00FF, "A/FF"),
    (MAX_LSN, "FFFFFFFF/FFFFFFFF"),
])
def test_format_like_postgresql(value: int, text: str) -> None:
    assert format_lsn(value) == text
    assert parse_lsn(text) == value


def test_parse_accepts_lower_case_and_leading_zeros() -> None:
    assert parse_lsn("0/16b3748") == 0x16B3748
    assert parse_lsn("00000000/016B3748") == 0x16B3748


@pytest.mark.parametrize("text", ["", "0", "0/", "/0", " 0/1", "0/1 ", "0x1/0", "1/2/3", "123456789/0",
                                  "0/123456789", "g/0", "-1/0", "0/+1"])
def test_parse_is_strict(text: str) -> None:
    with pytest.raises(ValueError, match="invalid LSN"):
        parse_lsn(text)


@pytest.mark.parametrize("value", [-1, MAX_LSN + 1])
def test_format_refuses_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        format_lsn(value)


@given(st.integers(0, MAX_LSN))
def test_lsn_text_round_trip(value: int) -> None:
    assert parse_lsn(format_lsn(value)) == value


def test_timestamp_epoch_is_2000_utc() -> None:
    assert pg_timestamp_to_datetime(0) == datetime(2000, 1, 1, tzinfo=UTC) == PG_EPOCH
    assert pg_timestamp_to_datetime(-1) == PG_EPOCH - timedelta(microseconds=1)
    assert pg_timestamp_to_datetime(0).tzinfo is UTC


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)))
def test_timestamp_round_trip(value: datetime) -> None:
    assert pg_timestamp_to_datetime(datetime_to_pg_timestamp(value)) == value


def test_timestamp_conversion_respects_offsets_and_refuses_naive() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert datetime_to_pg_timestamp(datetime(2000, 1, 1, 2, tzinfo=plus_two)) == 0
    with pytest.raises(ValueError, match="timezone-aware"):
        datetime_to_pg_timestamp(datetime(2000, 1, 1))


@pytest.mark.parametrize("infinity", [-(1 << 63), (1 << 63) - 1])
def test_timestamp_infinity_is_a_value_error(infinity: int) -> None:
    with pytest.raises(ValueError, match="outside the datetime range"):
        pg_timestamp_to_datetime(infinity)
