"""LSNs and PostgreSQL timestamps: the two scalar types every replication message carries.

Inside walspark an LSN is an unsigned 64-bit ``int`` and a timestamp is an ``int`` of
microseconds since the PostgreSQL epoch (2000-01-01 00:00:00 UTC), exactly as on the wire.
Keeping them as ints makes decoding cheap and comparisons exact; conversion to text
(``X/Y``) or to :class:`datetime.datetime` happens only at human-facing edges, on request.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = [
    "INVALID_LSN",
    "MAX_LSN",
    "PG_EPOCH",
    "datetime_to_pg_timestamp",
    "format_lsn",
    "parse_lsn",
    "pg_timestamp_to_datetime",
]

#: ``InvalidXLogRecPtr``: PostgreSQL's "no position" value.
INVALID_LSN = 0
#: The largest representable LSN (``FFFFFFFF/FFFFFFFF``).
MAX_LSN = (1 << 64) - 1
#: Microsecond 0 of PostgreSQL's ``TimestampTz``.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)

_ONE_US = timedelta(microseconds=1)
# pg_lsn_in accepts 1-8 hex digits on each side of the slash, in either case.
_LSN_RE = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def format_lsn(lsn: int) -> str:
    """Render an LSN the way PostgreSQL prints ``pg_lsn``: ``X/Y``, upper-case hex, no padding.

    Raises :class:`ValueError` for values outside the unsigned 64-bit range, because a
    silently wrapped LSN would point somewhere else in the WAL.
    """
    if not isinstance(lsn, int) or isinstance(lsn, bool):
        raise TypeError(f"LSN must be an int, not {type(lsn).__name__}")
    if lsn < 0 or lsn > MAX_LSN:
        raise ValueError(f"LSN {lsn} is outside the unsigned 64-bit range")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """Parse ``X/Y`` text (as accepted by PostgreSQL's ``pg_lsn`` type) into an int.

    Strict on purpose — this is user input (CLI flags, config, JSON): no surrounding
    whitespace, no ``0x`` prefix, at most 8 hex digits per half. Raises :class:`ValueError`
    with the offending text otherwise.
    """
    if not isinstance(text, str):
        raise TypeError(f"LSN text must be a str, not {type(text).__name__}")
    match = _LSN_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid LSN {text!r}: expected X/Y with 1-8 hex digits on each side")
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


def pg_timestamp_to_datetime(us: int) -> datetime:
    """Convert microseconds since 2000-01-01 UTC into a timezone-aware UTC datetime.

    Raises :class:`ValueError` when the value lies outside what :class:`datetime` can hold
    (e.g. PostgreSQL's ``-infinity``/``infinity`` sentinels, INT64_MIN/INT64_MAX).
    """
    try:
        return PG_EPOCH + timedelta(microseconds=us)
    except OverflowError:
        raise ValueError(f"PostgreSQL timestamp {us} is outside the datetime range") from None


def datetime_to_pg_timestamp(value: datetime) -> int:
    """Convert an aware datetime into microseconds since 2000-01-01 UTC (exact, no float).

    Naive datetimes are refused: guessing a timezone would shift every commit time.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("datetime must be timezone-aware")
    return (value - PG_EPOCH) // _ONE_US
