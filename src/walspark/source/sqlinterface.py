"""pgoutput messages through the SQL interface of logical decoding (no replication connection).

``pg_logical_slot_peek_binary_changes`` returns the same messages a walsender streams, without
consuming them — what ``walspark capture``, the batch ``peek`` read and the tests use.
``pg_logical_slot_get_binary_changes`` consumes them. Either way the server decodes everything
up to ``upto_lsn`` (or now) in one call, so this is for bounded reads, not for live streaming.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from walspark.protocol import format_lsn
from walspark.values import RECOMMENDED_SESSION_SETTINGS

if TYPE_CHECKING:
    import psycopg

#: Rows fetched per round trip from the server-side cursor.
FETCH_ROWS = 10_000


def slot_changes(
    conn: psycopg.Connection,
    slot: str,
    options: Mapping[str, str],
    *,
    upto_lsn: int | None = None,
    upto_nchanges: int | None = None,
    consume: bool = False,
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(lsn, message)`` for the slot's pending changes, in stream order.

    ``options`` are pgoutput's (``proto_version``, ``publication_names``, ``binary``, ...),
    passed as values, never spliced into SQL. Rows come through a server-side cursor, inside a
    transaction of its own, so a large backlog does not have to fit in memory at once.

    In text mode pgoutput renders values with the *decoding session's* settings (DateStyle,
    IntervalStyle, extra_float_digits, ...), so those walspark's parsers rely on are set for
    the duration of the transaction.
    """
    function = "pg_logical_slot_get_binary_changes" if consume else "pg_logical_slot_peek_binary_changes"
    flat = [item for pair in options.items() for item in pair]
    upto = None if upto_lsn is None else format_lsn(upto_lsn)
    query = f"SELECT (lsn - '0/0'::pg_lsn)::bigint, data FROM {function}(%s, %s::pg_lsn, %s, VARIADIC %s::text[])"
    with conn.transaction(), conn.cursor(name="walspark_slot_changes") as cursor:
        for name, value in RECOMMENDED_SESSION_SETTINGS.items():
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        cursor.itersize = FETCH_ROWS
        cursor.execute(query, (slot, upto, upto_nchanges, flat))
        for lsn, data in cursor:
            yield lsn, bytes(data)
