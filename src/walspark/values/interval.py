"""interval: months, days and microseconds, kept apart.

A month is not 30 days, nor a day 24 hours across a DST change, so folding them is lossy. See
docs/types.md ("interval").
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

from ._scan import Reader, to_str
from .errors import ValueConversionError

__all__ = ["Interval", "decode_interval_binary", "format_interval", "parse_interval_text"]

_INT32_MAX, _INT32_MIN = 2**31 - 1, -(2**31)
_INT64_MAX, _INT64_MIN = 2**63 - 1, -(2**63)
_US_SEC = 1_000_000
_US_MIN = 60 * _US_SEC
_US_HOUR = 60 * _US_MIN


@dataclass(frozen=True, slots=True)
class Interval:
    """A PostgreSQL interval: three fields with their own signs, exactly as stored."""

    months: int = 0
    days: int = 0
    microseconds: int = 0

    @property
    def infinite(self) -> int:
        if (self.months, self.days, self.microseconds) == (_INT32_MAX, _INT32_MAX, _INT64_MAX):
            return 1
        if (self.months, self.days, self.microseconds) == (_INT32_MIN, _INT32_MIN, _INT64_MIN):
            return -1
        return 0

    def to_timedelta(self) -> _dt.timedelta:
        """days + microseconds as a timedelta; raises if months != 0 (no exact length)."""
        if self.months or self.infinite:
            raise ValueConversionError("an interval with months has no exact timedelta", value=str(self))
        return _dt.timedelta(days=self.days, microseconds=self.microseconds)

    def as_dict(self) -> dict[str, int]:
        return {"months": self.months, "days": self.days, "microseconds": self.microseconds}

    def __str__(self) -> str:
        return format_interval(self)


INFINITY = Interval(_INT32_MAX, _INT32_MAX, _INT64_MAX)
NEG_INFINITY = Interval(_INT32_MIN, _INT32_MIN, _INT64_MIN)


def decode_interval_binary(data: bytes) -> Interval:
    """interval_send: int64 microseconds, int32 days, int32 months."""
    r = Reader(data)
    us, days, months = r.i64(), r.i32(), r.i32()
    r.expect_end()
    return Interval(months, days, us)


def _trunc_divmod(a: int, b: int) -> tuple[int, int]:
    """C's division: quotient truncated toward zero, remainder with the dividend's sign."""
    q = abs(a) // abs(b)
    q = q if (a >= 0) == (b > 0) else -q
    return q, a - q * b


def format_interval(iv: Interval) -> str:
    """interval_out with IntervalStyle postgres (e.g. ``1 year 2 mons -3 days +04:05:06.5``)."""
    if iv.infinite:
        return "infinity" if iv.infinite > 0 else "-infinity"
    years, mons = _trunc_divmod(iv.months, 12)
    parts: list[str] = []
    is_before = False  # previous field negative: a following positive one gets '+'
    for value, unit in ((years, "year"), (mons, "mon"), (iv.days, "day")):
        if value == 0:
            continue
        plus = "+" if is_before and value > 0 else ""
        parts.append(f"{plus}{value} {unit}{'' if value == 1 else 's'}")
        is_before = value < 0
    us = iv.microseconds
    if not parts or us != 0:
        sign = "-" if us < 0 else ("+" if is_before else "")
        h, rem = divmod(abs(us), _US_HOUR)
        mi, rem = divmod(rem, _US_MIN)
        s, frac = divmod(rem, _US_SEC)
        ftxt = f".{frac:06d}".rstrip("0") if frac else ""
        parts.append(f"{sign}{h:02d}:{mi:02d}:{s:02d}{ftxt}")
    return " ".join(parts)


_UNIT_MONTHS = {"year": 12, "years": 12, "mon": 1, "mons": 1}
_UNIT_DAYS = {"day": 1, "days": 1}
_UNIT_US = {"hour": _US_HOUR, "hours": _US_HOUR, "min": _US_MIN, "mins": _US_MIN}
_TIME_PART = re.compile(r"([+-]?)([0-9]+):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?\Z")
_NUMBER = re.compile(r"[+-]?[0-9]+\Z")
_SECONDS = re.compile(r"([+-]?)([0-9]+)(?:\.([0-9]{1,6}))?\Z")
_ISO = re.compile(
    r"P(?:(-?[0-9]+)Y)?(?:(-?[0-9]+)M)?(?:(-?[0-9]+)D)?"
    r"(?:T(?:(-?[0-9]+)H)?(?:(-?[0-9]+)M)?(?:(-?)([0-9]+)(?:\.([0-9]{1,6}))?S)?)?\Z"
)


def _seconds_us(sign: str, whole: str, frac: str | None) -> int:
    us = int(whole) * _US_SEC + (int(frac.ljust(6, "0")) if frac else 0)
    return -us if sign == "-" else us


def _checked(months: int, days: int, us: int, s: str) -> Interval:
    if not (_INT32_MIN <= months <= _INT32_MAX and _INT32_MIN <= days <= _INT32_MAX and _INT64_MIN <= us <= _INT64_MAX):
        raise ValueConversionError("interval field out of range", value=s)
    return Interval(months, days, us)


def parse_interval_text(data: bytes | str) -> Interval:
    """interval_out in IntervalStyle postgres, postgres_verbose or iso_8601 -> Interval."""
    s = to_str(data)
    if s == "infinity":
        return INFINITY
    if s == "-infinity":
        return NEG_INFINITY
    if s.startswith("P"):
        m = _ISO.match(s)
        if not m or s in ("P", "PT"):
            raise ValueConversionError("invalid ISO 8601 interval text", value=s)
        y, mo, d, h, mi, ssign, sec, frac = m.groups()
        us = int(h or 0) * _US_HOUR + int(mi or 0) * _US_MIN
        if sec is not None:
            us += _seconds_us(ssign, sec, frac)
        return _checked(int(y or 0) * 12 + int(mo or 0), int(d or 0), us, s)
    verbose = s.startswith("@ ")
    tokens = (s[2:] if verbose else s).split()
    ago = verbose and tokens[-1:] == ["ago"]
    if ago:
        tokens.pop()
    if verbose and tokens == ["0"]:
        return Interval()
    months = days = us = 0
    i = 0
    try:
        while i < len(tokens):
            tok = tokens[i]
            tm = _TIME_PART.match(tok)
            if tm and not verbose:
                sign, h, mi, sec, frac = tm.groups()
                t = int(h) * _US_HOUR + int(mi) * _US_MIN + _seconds_us("", sec, frac)
                us += -t if sign == "-" else t
                i += 1
                continue
            unit = tokens[i + 1]
            if unit in ("sec", "secs") and verbose:
                sm = _SECONDS.match(tok)
                if not sm:
                    raise ValueError
                us += _seconds_us(*sm.groups())
            else:
                if not _NUMBER.match(tok):
                    raise ValueError
                n = int(tok)
                if unit in _UNIT_MONTHS:
                    months += n * _UNIT_MONTHS[unit]
                elif unit in _UNIT_DAYS:
                    days += n
                elif unit in _UNIT_US and verbose:
                    us += n * _UNIT_US[unit]
                else:
                    raise ValueError
            i += 2
    except (ValueError, IndexError):
        raise ValueConversionError(
            "invalid interval text (IntervalStyle must be postgres, postgres_verbose or iso_8601)",
            value=s,
        ) from None
    if ago:
        months, days, us = -months, -days, -us
    return _checked(months, days, us, s)
