"""date, time, timetz, timestamp, timestamptz: text (DateStyle ISO) and binary formats.

PostgreSQL's range is far wider than Python's ``datetime``: values it cannot hold are kept
exactly, never None, never clamped. See docs/types.md ("Dates and timestamps") for the policy.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from typing import Literal

from ._scan import Reader, to_str
from .errors import ValueConversionError

__all__ = [
    "InfinityPolicy",
    "PgDate",
    "PgTime",
    "PgTimestamp",
    "civil_from_days",
    "date_to_python",
    "date_to_storage",
    "days_from_civil",
    "decode_date_binary",
    "decode_time_binary",
    "decode_timestamp_binary",
    "decode_timetz_binary",
    "format_date",
    "format_time",
    "format_timestamp",
    "format_timetz",
    "parse_date_text",
    "parse_time_text",
    "parse_timestamp_text",
    "parse_timetz_text",
    "time_to_python",
    "timestamp_to_python",
    "timestamp_to_storage",
    "timetz_to_python",
]

InfinityPolicy = Literal["sentinel", "null", "error"]

PG_EPOCH_DAYS = 10957  # 2000-01-01 minus 1970-01-01, in days
USECS_PER_SEC = 1_000_000
USECS_PER_DAY = 86_400 * USECS_PER_SEC
PG_EPOCH_USECS = PG_EPOCH_DAYS * USECS_PER_DAY
DATE_NOBEGIN = -(2**31)
DATE_NOEND = 2**31 - 1
DT_NOBEGIN = -(2**63)
DT_NOEND = 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_UNIX_EPOCH = _dt.datetime(1970, 1, 1)
_UNIX_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ORDINAL_1970 = _dt.date(1970, 1, 1).toordinal()
_PY_MIN_DAY = _dt.date.min.toordinal() - _ORDINAL_1970
_PY_MAX_DAY = _dt.date.max.toordinal() - _ORDINAL_1970
_PY_MIN_US = _PY_MIN_DAY * USECS_PER_DAY
_PY_MAX_US = (_PY_MAX_DAY + 1) * USECS_PER_DAY - 1


def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical year: 1 BC = 0)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(z: int) -> tuple[int, int, int]:
    """Inverse of :func:`days_from_civil`."""
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


def _ymd_text(days_unix: int) -> tuple[str, bool]:
    y, m, d = civil_from_days(days_unix)
    bc = y <= 0
    if bc:
        y = 1 - y
    return f"{y:04d}-{m:02d}-{d:02d}", bc


def _frac_text(us: int) -> str:
    return f".{us:06d}".rstrip("0") if us else ""


def format_time(us: int) -> str:
    """time_out: ``HH:MM:SS[.ffffff]`` with trailing fraction zeros dropped."""
    secs, frac = divmod(us, USECS_PER_SEC)
    h, rem = divmod(secs, 3600)
    mi, s = divmod(rem, 60)
    return f"{h:02d}:{mi:02d}:{s:02d}{_frac_text(frac)}"


def format_offset(east_seconds: int) -> str:
    """A UTC offset as PostgreSQL prints it: ``+HH``, ``+HH:MM`` or ``+HH:MM:SS``."""
    sign = "-" if east_seconds < 0 else "+"
    h, rem = divmod(abs(east_seconds), 3600)
    mi, s = divmod(rem, 60)
    out = f"{sign}{h:02d}"
    if mi or s:
        out += f":{mi:02d}"
    if s:
        out += f":{s:02d}"
    return out


def format_date(pg_days: int) -> str:
    """date_out with DateStyle ISO (``infinity``, ``0044-03-15 BC``, ``10000-01-01``)."""
    if pg_days == DATE_NOEND:
        return "infinity"
    if pg_days == DATE_NOBEGIN:
        return "-infinity"
    text, bc = _ymd_text(pg_days + PG_EPOCH_DAYS)
    return text + (" BC" if bc else "")


def format_timestamp(pg_us: int, with_tz: bool) -> str:
    """timestamp_out / timestamptz_out with DateStyle ISO; timestamptz shown in UTC."""
    if pg_us == DT_NOEND:
        return "infinity"
    if pg_us == DT_NOBEGIN:
        return "-infinity"
    days, us = divmod(pg_us, USECS_PER_DAY)
    text, bc = _ymd_text(days + PG_EPOCH_DAYS)
    return f"{text} {format_time(us)}{'+00' if with_tz else ''}{' BC' if bc else ''}"


@dataclass(frozen=True, slots=True)
class PgDate:
    """A PostgreSQL date that ``datetime.date`` cannot hold (±infinity, BC, year > 9999).

    ``days`` is PostgreSQL's own number: days since 2000-01-01, with INT32_MIN/INT32_MAX
    meaning -infinity/+infinity.
    """

    days: int

    @property
    def infinite(self) -> int:
        """+1 for infinity, -1 for -infinity, 0 for a finite date."""
        return 1 if self.days == DATE_NOEND else -1 if self.days == DATE_NOBEGIN else 0

    def __str__(self) -> str:
        return format_date(self.days)


@dataclass(frozen=True, slots=True)
class PgTimestamp:
    """A PostgreSQL timestamp[tz] that ``datetime`` cannot hold (±infinity, BC, year > 9999).

    ``microseconds`` is PostgreSQL's own number: since 2000-01-01 00:00 (UTC for
    timestamptz), INT64_MIN/INT64_MAX meaning -infinity/+infinity.
    """

    microseconds: int
    with_tz: bool

    @property
    def infinite(self) -> int:
        return 1 if self.microseconds == DT_NOEND else -1 if self.microseconds == DT_NOBEGIN else 0

    def __str__(self) -> str:
        return format_timestamp(self.microseconds, self.with_tz)


@dataclass(frozen=True, slots=True)
class PgTime:
    """A time of day ``datetime.time`` cannot hold: PostgreSQL allows ``24:00:00``."""

    microseconds: int
    utc_offset: int | None = None  # seconds east of UTC, for timetz

    def __str__(self) -> str:
        text = format_time(self.microseconds)
        return text if self.utc_offset is None else text + format_offset(self.utc_offset)


# --- date --------------------------------------------------------------------------------

_DATE_RE = re.compile(r"([0-9]{4,})-([0-9]{2})-([0-9]{2})( BC)?\Z")


def _civil_to_days(y: int, m: int, d: int, bc: bool, raw: object) -> int:
    if not (1 <= m <= 12 and 1 <= d <= 31) or y == 0:
        raise ValueConversionError("invalid date fields", value=str(raw))
    return days_from_civil(1 - y if bc else y, m, d)


def parse_date_text(data: bytes | str) -> int:
    """date_out (DateStyle ISO) -> PostgreSQL days since 2000-01-01."""
    s = to_str(data)
    if s == "infinity":
        return DATE_NOEND
    if s == "-infinity":
        return DATE_NOBEGIN
    m = _DATE_RE.match(s)
    if not m:
        raise ValueConversionError("invalid date text (DateStyle must be ISO)", value=s)
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    return _civil_to_days(y, mo, d, bool(m.group(4)), s) - PG_EPOCH_DAYS


def decode_date_binary(data: bytes) -> int:
    """date_send: int32 days since 2000-01-01."""
    r = Reader(data)
    v = r.i32()
    r.expect_end()
    return v


def date_to_python(pg_days: int) -> _dt.date | PgDate:
    unix = pg_days + PG_EPOCH_DAYS
    if pg_days in (DATE_NOEND, DATE_NOBEGIN) or not _PY_MIN_DAY <= unix <= _PY_MAX_DAY:
        return PgDate(pg_days)
    return _dt.date.fromordinal(unix + _ORDINAL_1970)


def _infinite(sign: int, policy: InfinityPolicy, lo: int, hi: int, what: str) -> int | None:
    if policy == "sentinel":
        return hi if sign > 0 else lo
    if policy == "null":
        return None
    raise ValueConversionError(
        f"{'' if sign > 0 else '-'}infinity {what} with infinity policy 'error'",
        value="infinity" if sign > 0 else "-infinity",
    )


def date_to_storage(pg_days: int, infinity: InfinityPolicy = "sentinel") -> int | None:
    """Days since 1970 for Arrow date32; ±infinity per ``infinity`` policy."""
    if pg_days == DATE_NOEND:
        return _infinite(1, infinity, INT32_MIN, INT32_MAX, "date")
    if pg_days == DATE_NOBEGIN:
        return _infinite(-1, infinity, INT32_MIN, INT32_MAX, "date")
    return pg_days + PG_EPOCH_DAYS  # every finite PostgreSQL date fits in int32


# --- time ----------------------------------------------------------------------------------

_TIME_RE = r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?"
_OFFSET_RE = r"([+-])([0-9]{2})(?::([0-9]{2}))?(?::([0-9]{2}))?"
_TIME_ONLY = re.compile(_TIME_RE + r"\Z")
_TIMETZ = re.compile(_TIME_RE + _OFFSET_RE + r"\Z")
_TIMESTAMP = re.compile(r"([0-9]{4,})-([0-9]{2})-([0-9]{2}) " + _TIME_RE + r"(?:" + _OFFSET_RE + r")?( BC)?\Z")


def _time_us(h: str, mi: str, s: str, frac: str | None) -> int:
    us = ((int(h) * 60 + int(mi)) * 60 + int(s)) * USECS_PER_SEC
    if frac:
        us += int(frac.ljust(6, "0"))
    return us


def _offset_seconds(sign: str | None, h: str | None, mi: str | None, s: str | None) -> int:
    if sign is None:
        return 0
    secs = int(h or 0) * 3600 + int(mi or 0) * 60 + int(s or 0)
    return -secs if sign == "-" else secs


def parse_time_text(data: bytes | str) -> int:
    """time_out -> microseconds since midnight (0 to 86400000000 inclusive)."""
    s = to_str(data)
    m = _TIME_ONLY.match(s)
    if not m:
        raise ValueConversionError("invalid time text", value=s)
    us = _time_us(*m.groups())
    if us > USECS_PER_DAY:
        raise ValueConversionError("time out of range", value=s)
    return us


def decode_time_binary(data: bytes) -> int:
    """time_send: int64 microseconds since midnight."""
    r = Reader(data)
    v = r.i64()
    r.expect_end()
    return v


def time_to_python(us: int, utc_offset: int | None = None) -> _dt.time | PgTime:
    if not 0 <= us < USECS_PER_DAY:
        return PgTime(us, utc_offset)
    secs, frac = divmod(us, USECS_PER_SEC)
    h, rem = divmod(secs, 3600)
    mi, s = divmod(rem, 60)
    tz = None if utc_offset is None else _dt.timezone(_dt.timedelta(seconds=utc_offset))
    return _dt.time(h, mi, s, frac, tzinfo=tz)


def parse_timetz_text(data: bytes | str) -> tuple[int, int]:
    """timetz_out -> (microseconds since midnight, UTC offset in seconds east)."""
    s = to_str(data)
    m = _TIMETZ.match(s)
    if not m:
        raise ValueConversionError("invalid timetz text", value=s)
    g = m.groups()
    return _time_us(*g[:4]), _offset_seconds(*g[4:])


def decode_timetz_binary(data: bytes) -> tuple[int, int]:
    """timetz_send: int64 microseconds, int32 zone in seconds *west* of UTC."""
    r = Reader(data)
    us, zone = r.i64(), r.i32()
    r.expect_end()
    return us, -zone


def timetz_to_python(value: tuple[int, int]) -> _dt.time | PgTime:
    return time_to_python(value[0], value[1])


def format_timetz(value: tuple[int, int]) -> str:
    """timetz_out: the time then its offset (``12:00:00+05:30``)."""
    return format_time(value[0]) + format_offset(value[1])


# --- timestamp / timestamptz -----------------------------------------------------------------


def parse_timestamp_text(data: bytes | str, with_tz: bool) -> int:
    """timestamp[tz]_out (DateStyle ISO) -> PostgreSQL microseconds since 2000-01-01 (UTC)."""
    s = to_str(data)
    if s == "infinity":
        return DT_NOEND
    if s == "-infinity":
        return DT_NOBEGIN
    m = _TIMESTAMP.match(s)
    if not m:
        raise ValueConversionError("invalid timestamp text (DateStyle must be ISO)", value=s)
    g = m.groups()
    if (g[7] is not None) != with_tz:
        raise ValueConversionError(
            "timestamptz text needs a UTC offset" if with_tz else "timestamp text has a UTC offset",
            value=s,
        )
    days = _civil_to_days(int(g[0]), int(g[1]), int(g[2]), bool(g[11]), s)
    us = days * USECS_PER_DAY + _time_us(*g[3:7])
    us -= _offset_seconds(*g[7:11]) * USECS_PER_SEC
    return us - PG_EPOCH_USECS


def decode_timestamp_binary(data: bytes) -> int:
    """timestamp_send / timestamptz_send: int64 microseconds since 2000-01-01 (UTC)."""
    r = Reader(data)
    v = r.i64()
    r.expect_end()
    return v


def timestamp_to_python(pg_us: int, with_tz: bool) -> _dt.datetime | PgTimestamp:
    unix = pg_us + PG_EPOCH_USECS
    if pg_us in (DT_NOEND, DT_NOBEGIN) or not _PY_MIN_US <= unix <= _PY_MAX_US:
        return PgTimestamp(pg_us, with_tz)
    base = _UNIX_EPOCH_UTC if with_tz else _UNIX_EPOCH
    return base + _dt.timedelta(microseconds=unix)


def timestamp_to_storage(pg_us: int, infinity: InfinityPolicy = "sentinel") -> int | None:
    """Microseconds since 1970 for Arrow timestamp[us]; ±infinity per policy."""
    if pg_us == DT_NOEND:
        return _infinite(1, infinity, INT64_MIN, INT64_MAX, "timestamp")
    if pg_us == DT_NOBEGIN:
        return _infinite(-1, infinity, INT64_MIN, INT64_MAX, "timestamp")
    unix = pg_us + PG_EPOCH_USECS
    if not INT64_MIN < unix < INT64_MAX:
        raise ValueConversionError(
            "timestamp beyond year 294247 does not fit in microseconds since 1970",
            value=format_timestamp(pg_us, False),
        )
    return unix


def python_date_to_pg(value: _dt.date | PgDate) -> int:
    """PostgreSQL days of a Python value produced by :func:`date_to_python`."""
    if isinstance(value, PgDate):
        return value.days
    return value.toordinal() - _ORDINAL_1970 - PG_EPOCH_DAYS


def python_timestamp_to_pg(value: _dt.datetime | PgTimestamp) -> int:
    """PostgreSQL microseconds of a value produced by :func:`timestamp_to_python`."""
    if isinstance(value, PgTimestamp):
        return value.microseconds
    base = _UNIX_EPOCH_UTC if value.tzinfo is not None else _UNIX_EPOCH
    return (value - base) // _dt.timedelta(microseconds=1) - PG_EPOCH_USECS
