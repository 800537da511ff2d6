"""Binary values converted in C (``walspark_c``) against the pure-Python reference: same arrays, same errors.

Where a column of binary values arrives as an Arrow binary array (the compiled hot path's
gathered buffers, the snapshot's COPY columns), fixed-width values (int2/4/8, float4/8, date,
timestamp[tz]) are byte-swapped in C and numeric values summed into decimal128 integers in C.
The reference is the same codec given the values as a list of bytes (struct, Decimal, the
column's policies). For any column — valid values, NaNs and infinities, NULLs, values of the
wrong size, headers and digits numeric_send never sends — both give the same Arrow array (bit
for bit) or the same error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walspark.compiled import PURE_VARIABLE, speedups
from walspark.values import NumericPolicy, oids

from .vectors import codec, i16, numeric_send

pytestmark = pytest.mark.skipif(speedups is None and os.environ.get(PURE_VARIABLE, "") not in ("", "0"),
                                reason=f"{PURE_VARIABLE} is set: the compiled path is off")

#: Fixed-width binary types (their size), which the compiled path byte-swaps into Arrow buffers.
FIXED_WIDTH = {oids.INT2: 2, oids.INT4: 4, oids.INT8: 8, oids.FLOAT4: 4, oids.FLOAT8: 8, oids.DATE: 4,
               oids.TIMESTAMP: 8, oids.TIMESTAMPTZ: 8, oids.OID: 4}
#: Bit patterns the byte swap must treat as the reference does: NaNs (quiet and signalling, of
#: float4 and float8), the infinities of date and timestamp, the extremes.
SPECIAL_BITS = [bytes.fromhex(h) for h in (
    "7fc00000", "7f800001", "ff800001", "7fbfffff", "7ff8000000000000", "7ff0000000000001", "fff0000000000001",
    "7fffffff", "80000000", "7fffffffffffffff", "8000000000000000", "0000", "8000")]


def outcome(convert: Callable[[], pa.Array]) -> object:
    """The array, floats as their bit patterns (so NaN == NaN when the bits agree); or the error."""
    try:
        array = convert()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return type(exc), str(exc)
    if pa.types.is_floating(array.type):
        return array.type, array.view({32: pa.int32(), 64: pa.int64()}[array.type.bit_width])
    return array


def assert_same(column_codec, values: list[bytes | None]) -> None:  # type: ignore[no-untyped-def]
    pure = outcome(lambda: column_codec.arrow_from_binary(values))
    fast = outcome(lambda: column_codec.arrow_from_binary(pa.array(values, pa.binary())))
    assert pure == fast if isinstance(pure, tuple) else pure.equals(fast), (values, pure, fast)


@given(st.sampled_from(sorted(FIXED_WIDTH)).flatmap(lambda oid: st.tuples(st.just(oid), st.lists(
    st.none() | st.binary(min_size=FIXED_WIDTH[oid], max_size=FIXED_WIDTH[oid])
    | st.sampled_from([b for b in SPECIAL_BITS if len(b) == FIXED_WIDTH[oid]]) | st.binary(max_size=9),
    max_size=12))))
@settings(max_examples=400, deadline=None)
def test_fixed_width_values_convert_like_the_reference(drawn: tuple[int, list[bytes | None]]) -> None:
    oid, values = drawn
    assert_same(codec(oid), values)


def typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


#: numeric bytes numeric_send never sends, and values no decimal column holds.
ODD_NUMERIC = [
    numeric_send("NaN"), numeric_send("Infinity"), numeric_send("-Infinity"),
    i16(1) + i16(0) + b"\x00\x00" + i16(0) + i16(10000),  # a digit past 9999
    i16(1) + i16(0) + b"\x00\x00" + i16(0) + i16(-1),  # a negative digit
    i16(1) + i16(-1) + b"\x00\x00" + i16(2) + i16(1234),  # 0.1234 sent with dscale 2: digits past dscale
    i16(1) + i16(-1) + b"\x00\x00" + i16(2) + i16(1200),  # 0.12 (the same, with zeros past dscale)
    i16(-1) + i16(0) + b"\x00\x00" + i16(0),  # a negative digit count
    i16(0) + i16(0) + b"\x00\x00" + i16(-1),  # a negative dscale
    i16(0) + i16(0) + b"\x10\x00" + i16(0),  # no such sign
    i16(2) + i16(0) + b"\x00\x00" + i16(0) + i16(1),  # fewer digits than it says
    i16(0) + i16(0) + b"\x40\x00" + i16(3),  # -0.000
    i16(1) + i16(20) + b"\x00\x00" + i16(0) + i16(9999),  # 9999 * 10000**20: past any decimal128
    i16(1) + i16(-20) + b"\x00\x00" + i16(84) + i16(5),  # 5 * 10000**-20
]
NUMERIC_TYPMODS = [typmod(12, 2), typmod(38, 0), typmod(38, 38), typmod(5, 5), typmod(3, -2), typmod(20, 10),
                   typmod(1, 0)]
#: Any decimal, as numeric_send sends it.
decimals = st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
    lambda d: abs(d.adjusted()) < 60).map(lambda d: numeric_send(d))  # fmt: skip


def fitting(mod: int) -> st.SearchStrategy[bytes]:
    """Decimals the numeric(typmod) column's decimal128(precision, scale) holds, at that scale or fewer places."""
    arrow_type = codec(oids.NUMERIC, mod).arrow_type
    precision, scale = arrow_type.precision, arrow_type.scale
    bound = Decimal(10) ** (precision - scale) - Decimal(10) ** -scale
    return st.integers(0, scale).flatmap(lambda places: st.decimals(-bound, bound, places=places)).map(numeric_send)


@given(st.sampled_from(NUMERIC_TYPMODS).flatmap(lambda mod: st.tuples(
    st.just(mod), st.sampled_from(["error", "null"]),
    st.lists(st.none() | fitting(mod), max_size=10),
    st.lists(st.none() | decimals | st.sampled_from(ODD_NUMERIC) | st.binary(max_size=12), max_size=2))))
@settings(max_examples=500, deadline=None)
def test_numeric_values_convert_like_the_reference(drawn: tuple[int, str, list, list]) -> None:
    """decimal(p, s) columns (the typmod's, or the policy's for a plain numeric) from numeric_send
    bytes: values that fit, now and then with a few that do not or that no decimal holds."""
    mod, on_special, values, odd = drawn
    values = values + odd if len(values) % 3 == 0 else values
    assert_same(codec(oids.NUMERIC, mod, numeric=NumericPolicy(on_special=on_special)), values)
    assert_same(codec(oids.NUMERIC, -1, numeric=NumericPolicy(mode="decimal", precision=18, scale=4)), values)
