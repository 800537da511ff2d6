"""Validation and quoting of slot and publication names.

Why validate before talking to the server: PostgreSQL silently *truncates* identifiers longer
than 63 bytes (NAMEDATALEN - 1), so ``CREATE PUBLICATION`` with a 70-byte name succeeds and a
later lookup by the full name fails; a NUL byte cannot travel in the protocol at all. Refusing
both up front gives an error that names the problem.

Why two quoting paths: SQL statements are composed with :class:`psycopg.sql.Identifier` (the
driver knows the rules), but replication commands (``START_REPLICATION``,
``CREATE_REPLICATION_SLOT``) go through the walsender's own small grammar and are sent as plain
text, so they need :func:`quote_repl_ident` / :func:`quote_repl_literal`. The walsender scanner
accepts double-quoted identifiers with ``""`` for a quote and single-quoted strings with ``''``
for a quote; backslashes are not escapes there.

``publication_names`` is special: it is *one* string option whose value is a comma-separated
list that pgoutput splits with ``SplitIdentifierString`` — unquoted names are down-cased, quoted
ones are taken verbatim. :func:`publication_names_value` therefore double-quotes every name,
and :func:`quote_repl_literal` then wraps the whole list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import InvalidName

__all__ = [
    "MAX_NAME_BYTES",
    "publication_names_value",
    "quote_repl_ident",
    "quote_repl_literal",
    "validate_publication_name",
    "validate_slot_name",
]

#: NAMEDATALEN - 1: the longest identifier PostgreSQL keeps without truncating it.
MAX_NAME_BYTES = 63

_SLOT_RE = re.compile(r"[a-z0-9_]{1,63}")


def validate_slot_name(name: str) -> str:
    """Return ``name`` if PostgreSQL accepts it as a replication slot name, else raise.

    The server's rule (``ReplicationSlotValidateName``): 1-63 characters, only lower-case
    letters, digits and underscores.
    """
    if not isinstance(name, str):
        raise InvalidName(f"slot name must be a string, not {type(name).__name__}")
    if not _SLOT_RE.fullmatch(name):
        raise InvalidName(
            f"invalid slot name {name!r}: use 1-63 characters among lower-case letters, digits and '_'"
        )
    return name


def validate_publication_name(name: str) -> str:
    """Return ``name`` if it is a usable publication name, else raise.

    Any identifier is allowed (spaces, quotes, unicode...) as long as it is not empty, holds no
    NUL byte and fits 63 bytes of UTF-8 — beyond that PostgreSQL would truncate it.
    """
    if not isinstance(name, str):
        raise InvalidName(f"publication name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidName("publication name must not be empty")
    if "\x00" in name:
        raise InvalidName(f"publication name {name!r} contains a NUL character")
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise InvalidName(
            f"publication name {name!r} is {size} bytes of UTF-8; PostgreSQL keeps only {MAX_NAME_BYTES}"
        )
    return name


def quote_repl_ident(name: str) -> str:
    """Double-quote an identifier for a replication command (``"a""b"`` for ``a"b``)."""
    if "\x00" in name:
        raise InvalidName(f"identifier {name!r} contains a NUL character")
    return '"' + name.replace('"', '""') + '"'


def quote_repl_literal(value: str) -> str:
    """Single-quote a string for a replication command (``'it''s'``; backslash is not special)."""
    if "\x00" in value:
        raise InvalidName(f"string {value!r} contains a NUL character")
    return "'" + value.replace("'", "''") + "'"


def publication_names_value(names: Iterable[str]) -> str:
    """The ``publication_names`` option value: each name validated and double-quoted, comma-joined.

    The result still has to go through :func:`quote_repl_literal` to become a command literal.
    """
    validated = [validate_publication_name(n) for n in names]
    if not validated:
        raise InvalidName("at least one publication name is required")
    return ",".join(quote_repl_ident(n) for n in validated)
