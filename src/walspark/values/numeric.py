"""numeric and money: exact decimals, and the policy for what Arrow/Spark cannot hold.

Why a policy: Spark's DecimalType holds at most 38 digits, while PostgreSQL's numeric
holds up to 131072 digits before the point and 16383 after, plus NaN and ±Infinity.
Several CDC tools convert to float and lose digits silently; walspark never does.
See docs/types.md for the user-facing description.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Literal

import pyarrow as pa

from ._scan import Reader, to_str
from .errors import ValueConversionError

__all__ = [
    "MAX_DECIMAL_PRECISION",
    "NumericPolicy",
    "decode_money_binary",
    "decode_money_text",
    "decode_numeric_binary",
    "decode_numeric_text",
    "format_numeric",
    "numeric_arrow_type",
    "numeric_to_storage",
    "numeric_typmod",
]

MAX_DECIMAL_PRECISION = 38  # Spark DecimalType and Arrow decimal128

_NUMERIC_POS = 0x0000
_NUMERIC_NEG = 0x4000
_NUMERIC_NAN = 0xC000
_NUMERIC_PINF = 0xD000
_NUMERIC_NINF = 0xF000
_NBASE = 10000
_EXACT = Context(prec=1_000_000)  # never rounds: numeric holds at most ~147k digits


@dataclass(frozen=True, slots=True)
class NumericPolicy:
    """How a numeric column maps to Arrow/Spark. Per column; see docs/types.md.

    mode:
      * ``"auto"`` (default): ``decimal(p, s)`` when the column has a typmod whose
        precision fits in 38 digits; otherwise (unconstrained ``numeric`` or
        ``numeric(p>38, s)``) an exact string column holding numeric_out's text.
      * ``"decimal"``: always ``decimal(p, s)``; for columns without a usable typmod the
        policy's ``precision``/``scale`` are used. A value that does not fit raises
        :class:`ValueConversionError` — it is never rounded.
      * ``"string"``: always the exact text (``"NaN"``, ``"Infinity"`` included).
    on_special: what a decimal column does with NaN/±Infinity, which no decimal can hold:
      ``"error"`` (default) raises; ``"null"`` stores NULL (an explicit, lossy opt-in).
    """

    mode: Literal["auto", "decimal", "string"] = "auto"
    precision: int = 38
    scale: int = 18
    on_special: Literal["error", "null"] = "error"

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "decimal", "string"):
            raise ValueError(f"unknown numeric mode {self.mode!r}")
        if self.on_special not in ("error", "null"):
            raise ValueError(f"unknown on_special {self.on_special!r}")
        if not (1 <= self.precision <= MAX_DECIMAL_PRECISION and 0 <= self.scale <= self.precision):
            raise ValueError("numeric policy needs 1 <= precision <= 38 and 0 <= scale <= precision")


_NUMERIC_TEXT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z|NaN\Z|-?Infinity\Z")


def decode_numeric_text(data: bytes | str) -> Decimal:
    """numeric_out: plain notation, 'NaN', 'Infinity', '-Infinity'. Exact."""
    s = to_str(data)
    if not _NUMERIC_TEXT.match(s):
        raise ValueConversionError("invalid numeric text", value=s)
    return Decimal(s)


def decode_numeric_binary(data: bytes) -> Decimal:
    """numeric_send: int16 ndigits, int16 weight, uint16 sign, int16 dscale, base-10000 digits.

    The value is sum(digit[i] * 10000**(weight - i)); dscale is the number of digits
    shown after the point (trailing zeros are significant to numeric_out).
    """
    r = Reader(data)
    ndigits, weight, sign, dscale = r.i16(), r.i16(), r.u16(), r.i16()
    if sign == _NUMERIC_NAN:
        return Decimal("NaN")
    if sign == _NUMERIC_PINF:
        return Decimal("Infinity")
    if sign == _NUMERIC_NINF:
        return Decimal("-Infinity")
    if sign not in (_NUMERIC_POS, _NUMERIC_NEG) or ndigits < 0 or dscale < 0:
        raise ValueConversionError("invalid numeric binary header", value=data)
    # The coefficient is built as decimal digit text, never as a Python int: numeric holds
    # up to 131072 digits before the point, and int -> str beyond 4300 digits is refused by
    # Python (sys.set_int_max_str_digits) and quadratic anyway.
    groups = []
    for _ in range(ndigits):
        d = r.i16()
        if not 0 <= d < _NBASE:
            raise ValueConversionError("invalid numeric digit", value=data)
        groups.append(f"{d:04d}")
    r.expect_end()
    digits = "".join(groups)
    exp = (weight - ndigits + 1) * 4  # value = int(digits) * 10**exp
    if exp > -dscale:
        digits += "0" * (exp + dscale)
    elif exp < -dscale:
        cut = -dscale - exp  # digits below dscale: numeric_send never sends non-zero ones
        if digits[-cut:].strip("0"):
            raise ValueConversionError("numeric digits beyond dscale", value=data)
        digits = digits[:-cut] if cut < len(digits) else ""
    digits = digits.lstrip("0") or "0"
    return Decimal((1 if sign == _NUMERIC_NEG else 0, tuple(map(int, digits)), -dscale))


def format_numeric(value: Decimal) -> str:
    """numeric_out's text for a Decimal (plain notation, no exponent)."""
    if value.is_nan():
        return "NaN"
    if value.is_infinite():
        return "Infinity" if value > 0 else "-Infinity"
    s = format(value, "f")
    if value.is_zero() and s.startswith("-"):
        s = s[1:]  # numeric has no negative zero
    return s


def numeric_typmod(typmod: int) -> tuple[int, int] | None:
    """(precision, scale) from a numeric typmod, or None when unconstrained (-1).

    typmod = ((precision << 16) | (scale & 0x7ff)) + 4; the scale is an 11-bit signed
    number since PostgreSQL 15 (negative scales round to tens, hundreds, ...).
    """
    if typmod < 4:
        return None
    tm = typmod - 4
    precision = (tm >> 16) & 0xFFFF
    scale = tm & 0x7FF
    if scale >= 0x400:
        scale -= 0x800
    return precision, scale


def _decimal_shape(precision: int, scale: int) -> tuple[int, int]:
    """A (p, s) with 0 <= s <= p that holds every value of numeric(precision, scale)."""
    if scale < 0:  # numeric(3,-2): up to 99900 -> decimal(5, 0)
        return precision - scale, 0
    return max(precision, scale), scale


def numeric_arrow_type(typmod: int, policy: NumericPolicy) -> pa.DataType:
    """The Arrow type of a numeric column under ``policy`` (see :class:`NumericPolicy`)."""
    if policy.mode == "string":
        return pa.string()
    pm = numeric_typmod(typmod)
    if pm is not None:
        p, s = _decimal_shape(*pm)
        if p <= MAX_DECIMAL_PRECISION:
            return pa.decimal128(p, s)
    if policy.mode == "decimal":
        return pa.decimal128(policy.precision, policy.scale)
    return pa.string()


def numeric_to_storage(value: Decimal, arrow_type: pa.DataType, policy: NumericPolicy) -> Decimal | str | None:
    """The Arrow-ready value of ``value`` in a column of ``arrow_type``; never rounds."""
    if pa.types.is_string(arrow_type):
        return format_numeric(value)
    if not value.is_finite():
        if policy.on_special == "null":
            return None
        raise ValueConversionError(
            f"{format_numeric(value)} cannot be stored in {arrow_type}; "
            "use NumericPolicy(mode='string') or on_special='null'",
            value=format_numeric(value),
        )
    p, s = arrow_type.precision, arrow_type.scale
    exp = value.as_tuple().exponent
    assert isinstance(exp, int)
    if -exp > s:
        # More fractional digits than the column holds: only trailing zeros may go.
        q = value.quantize(Decimal(1).scaleb(-s), context=_EXACT)
        if q != value:
            raise ValueConversionError(f"value has more than {s} fractional digits for {arrow_type}", value=str(value))
        value = q
    digits_before = max(value.adjusted() + 1, 0)
    if digits_before > p - s:
        raise ValueConversionError(f"value does not fit in {arrow_type}", value=str(value))
    return value


# --- money ------------------------------------------------------------------------------


def decode_money_binary(data: bytes, frac_digits: int = 2) -> Decimal:
    """cash_send: int64 in the currency's smallest unit (lc_monetary's frac_digits)."""
    r = Reader(data)
    v = r.i64()
    r.expect_end()
    return Decimal(v).scaleb(-frac_digits)


_DIGITS = re.compile(r"[0-9]")


def decode_money_text(data: bytes | str, frac_digits: int = 2) -> Decimal:
    """cash_out: locale-formatted (``$1,234.56``, ``-$1.00``, ``1.234,56 €``...).

    cash_out always prints exactly frac_digits fraction digits, and currency symbols and
    separators contain no ASCII digits, so the digits alone, scaled by frac_digits, give
    the exact amount whatever lc_monetary is; a '-' or '(' marks a negative amount.
    """
    s = to_str(data)
    digits = "".join(_DIGITS.findall(s))
    if not digits:
        raise ValueConversionError("invalid money text", value=s)
    v = int(digits)
    if "-" in s or "(" in s:
        v = -v
    return Decimal(v).scaleb(-frac_digits)
