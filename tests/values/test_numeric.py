"""numeric and money: exact decoding, typmods, and the Arrow/Spark policy."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.values import NumericPolicy, ValueConversionError, oids, to_arrow_array
from walspark.values.numeric import (
    decode_money_text,
    decode_numeric_binary,
    decode_numeric_text,
    format_numeric,
    numeric_typmod,
)

from .vectors import codec, i16, i64, numeric_send


def typmod(p: int, s: int) -> int:
    return ((p << 16) | (s & 0x7FF)) + 4


@pytest.mark.parametrize("text", [
    "0", "1.50", "-123456789012345678901234567890.123456789", "0.00000000000000000001", "10000",
    "0.0001", "9999.9999", "1" + "0" * 100, "-0.5", "12345678.90000",
])
def test_text_and_binary_agree_exactly(text: str) -> None:
    d = decode_numeric_text(text.encode())
    assert str(d) == text or format_numeric(d) == text
    b = decode_numeric_binary(numeric_send(text))
    assert b == d and b.as_tuple().exponent == d.as_tuple().exponent  # dscale kept


def test_binary_vector_from_the_server() -> None:
    # SELECT numeric_send(1.5): ndigits 2, weight 0, sign +, dscale 1, digits 1, 5000
    assert decode_numeric_binary(bytes.fromhex("000200000000000100011388")) == Decimal("1.5")


@pytest.mark.parametrize("special", ["NaN", "Infinity", "-Infinity"])
def test_specials(special: str) -> None:
    assert format_numeric(decode_numeric_text(special.encode())) == special
    assert format_numeric(decode_numeric_binary(numeric_send(special))) == special


def test_typmod() -> None:
    assert numeric_typmod(-1) is None
    assert numeric_typmod(typmod(10, 2)) == (10, 2)
    assert numeric_typmod(typmod(3, -2)) == (3, -2)  # PostgreSQL 15+ negative scale
    assert numeric_typmod(typmod(2, 5)) == (2, 5)


def test_arrow_types_under_auto_policy() -> None:
    assert codec(oids.NUMERIC, typmod(10, 2)).arrow_type == pa.decimal128(10, 2)
    assert codec(oids.NUMERIC, typmod(38, 0)).arrow_type == pa.decimal128(38, 0)
    assert codec(oids.NUMERIC, typmod(39, 2)).arrow_type == pa.string()
    assert codec(oids.NUMERIC).arrow_type == pa.string()
    assert codec(oids.NUMERIC, typmod(3, -2)).arrow_type == pa.decimal128(5, 0)
    assert codec(oids.NUMERIC, typmod(2, 5)).arrow_type == pa.decimal128(5, 5)


def test_unconstrained_numeric_is_exact_string_by_default() -> None:
    c = codec(oids.NUMERIC)
    big = "-123456789012345678901234567890.123456789012345"
    col = to_arrow_array(c, "tb", [big.encode(), numeric_send(big)])
    assert col.array.to_pylist() == [big, big]


def test_decimal_column_keeps_scale() -> None:
    c = codec(oids.NUMERIC, typmod(10, 2))
    col = to_arrow_array(c, "tbn", [b"1.50", numeric_send("-99999999.99"), None])
    assert col.array.to_pylist() == [Decimal("1.50"), Decimal("-99999999.99"), None]


@pytest.mark.parametrize("special", ["NaN", "Infinity", "-Infinity"])
def test_special_in_decimal_column_raises_naming_the_column(special: str) -> None:
    c = codec(oids.NUMERIC, typmod(10, 2))
    with pytest.raises(ValueConversionError) as e:
        to_arrow_array(c, "t", [special.encode()], column="price")
    assert "price" in str(e.value) and "numeric" in str(e.value)
    with pytest.raises(ValueConversionError):
        to_arrow_array(c, "b", [numeric_send(special)], column="price")


def test_special_null_opt_in_and_string_policy() -> None:
    c = codec(oids.NUMERIC, typmod(10, 2), numeric=NumericPolicy(on_special="null"))
    assert to_arrow_array(c, "t", [b"NaN"]).array.to_pylist() == [None]
    s = codec(oids.NUMERIC, typmod(10, 2), numeric=NumericPolicy(mode="string"))
    assert to_arrow_array(s, "tt", [b"NaN", b"1.50"]).array.to_pylist() == ["NaN", "1.50"]


def test_decimal_policy_for_unconstrained_never_rounds() -> None:
    c = codec(oids.NUMERIC, numeric=NumericPolicy(mode="decimal", precision=20, scale=4))
    assert c.arrow_type == pa.decimal128(20, 4)
    ok = to_arrow_array(c, "tt", [b"1.5", b"-1234567890123456.1200"]).array.to_pylist()
    assert ok == [Decimal("1.5"), Decimal("-1234567890123456.12")]
    with pytest.raises(ValueConversionError, match="fractional"):
        to_arrow_array(c, "t", [b"1.23456"], column="x")
    with pytest.raises(ValueConversionError, match="does not fit"):
        to_arrow_array(c, "t", [b"12345678901234567"], column="x")


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        NumericPolicy(mode="float")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        NumericPolicy(mode="decimal", precision=40)


_decimals = st.decimals(allow_nan=True, allow_infinity=True, places=None).filter(
    lambda d: not d.is_snan() and (not d.is_finite() or abs(d.adjusted()) < 400)
)


@given(_decimals)
def test_numeric_text_round_trip(d: Decimal) -> None:
    text = format_numeric(d)
    parsed = decode_numeric_text(text.encode())
    assert format_numeric(parsed) == text
    if d.is_finite():
        assert parsed == d


@given(st.decimals(allow_nan=False, allow_infinity=False).filter(lambda d: abs(d.adjusted()) < 300))
def test_numeric_binary_round_trip(d: Decimal) -> None:
    out = decode_numeric_binary(numeric_send(d))
    assert out == d  # numerically; and the displayed scale is kept:
    assert max(-out.as_tuple().exponent, 0) == max(-d.as_tuple().exponent, 0)


@pytest.mark.parametrize(("text", "expected"), [
    ("$1,234.56", "1234.56"), ("-$1,234.56", "-1234.56"), ("($5.00)", "-5.00"), ("1.234,56 €", "1234.56"),
    ("$0.00", "0.00"), ("$92,233,720,368,547,758.07", "92233720368547758.07"),
])
def test_money_text_is_locale_independent(text: str, expected: str) -> None:
    assert decode_money_text(text.encode()) == Decimal(expected)


def test_money_binary_and_arrow() -> None:
    c = codec(oids.MONEY)
    assert c.decode_binary(i64(-123456789)) == Decimal("-1234567.89")
    assert c.arrow_type == pa.decimal128(19, 2)
    col = to_arrow_array(c, "tb", [b"$12.34", i64(1234)])
    assert col.array.to_pylist() == [Decimal("12.34"), Decimal("12.34")]
    jpy = codec(oids.MONEY, money_frac_digits=0)
    assert jpy.decode_text("￥1,234".encode()) == Decimal(1234)


def test_numeric_binary_rejects_garbage() -> None:
    with pytest.raises(ValueConversionError):
        decode_numeric_binary(i16(1) + i16(0) + i16(0) + i16(0) + i16(10000))
    with pytest.raises(ValueConversionError):
        decode_numeric_binary(b"\x00\x01")


def test_numeric_binary_beyond_pythons_int_string_limit() -> None:
    """numeric holds 131072 digits before the point; Python refuses int -> str beyond 4300 digits.

    The binary decoder used to build the coefficient as an int and print it, so every valid
    value wider than 4300 digits failed with "Exceeds the limit (4300 digits)".
    """
    # 80000 digits before the point (20000 base-10000 groups), 16383 after.
    groups = [9999] * 20000 + [1111] * 4095 + [1110]
    raw = i16(len(groups)) + i16(19999) + i16(0) + i16(16383) + b"".join(i16(g) for g in groups)
    wide = decode_numeric_binary(raw)
    assert wide.as_tuple() == (0, (9,) * 80000 + (1,) * 16383, -16383)
    assert format_numeric(wide) == "9" * 80000 + "." + "1" * 16383
    # ndigits 1, weight 32767, sign +, dscale 0, digit 1: 1 followed by 131068 zeros
    raw = i16(1) + i16(32767) + i16(0) + i16(0) + i16(1)
    assert decode_numeric_binary(raw) == Decimal(10) ** 131068
    assert codec(oids.NUMERIC).decode("b", raw) == Decimal(10) ** 131068
