"""Validation and quoting of slot and publication names.

Names are checked before they reach the server (which truncates them silently), and quoted for
SQL and for the walsender's own grammar. See docs/design/source.md.
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
        raise InvalidName(f"invalid slot name {name!r}: use 1-63 characters among lower-case letters, digits and '_'")
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
        raise InvalidName(f"publication name {name!r} is {size} bytes of UTF-8; PostgreSQL keeps only {MAX_NAME_BYTES}")
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
