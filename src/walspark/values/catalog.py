"""Registering user types from the source database's catalog (the query, not the I/O).

Why here: pgoutput's Type message names a user type but says nothing of its structure
(an enum's labels, a domain's base, a composite's fields, a range's subtype). The source
layer runs :data:`TYPE_CATALOG_QUERY` on an ordinary connection and hands the rows to
:func:`register_catalog_rows`; ``values`` itself stays free of I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import oids
from .extensions import EXTENSION_CODECS
from .registry import TypeRegistry

__all__ = ["TEXT_LIKE_EXTENSION_TYPES", "TYPE_CATALOG_QUERY", "UserTypes", "register_catalog_rows", "registry_of"]

#: The rows of :data:`TYPE_CATALOG_QUERY` as plain tuples: what the snapshot's and the stream's
#: tasks receive (picklable, JSON-ready), so both resolve every column through the same registry.
UserTypes = tuple[tuple[Any, ...], ...]

#: One row per user-defined type (OID >= 16384): enums, domains, composites, ranges and
#: base types from extensions. Columns, in order: oid, namespace, name, typtype, typarray,
#: typbasetype, typtypmod, rngsubtype, rngmultitypid, fields (composites: an array of
#: [name, type oid, typmod] text triples in attnum order, dropped columns left out).
TYPE_CATALOG_QUERY = """
SELECT t.oid, n.nspname, t.typname, t.typtype, t.typarray, t.typbasetype, t.typtypmod,
       r.rngsubtype, r.rngmultitypid,
       (SELECT array_agg(ARRAY[a.attname::text, a.atttypid::text, a.atttypmod::text] ORDER BY a.attnum)
          FROM pg_attribute a
         WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped) AS fields
  FROM pg_type t
  JOIN pg_namespace n ON n.oid = t.typnamespace
  LEFT JOIN pg_range r ON r.rngtypid = t.oid
 WHERE t.oid >= 16384 AND t.typtype IN ('b', 'c', 'd', 'e', 'r')
   AND t.typelem = 0
"""

#: Extension base types whose text and binary forms are both plain text.
TEXT_LIKE_EXTENSION_TYPES = frozenset({"citext"})


def register_catalog_rows(registry: TypeRegistry, rows: Iterable[Any]) -> int:
    """Register every type in the rows of :data:`TYPE_CATALOG_QUERY`; returns the count.

    Other extension base types (PostGIS, ltree, isbn, ...) keep the unknown-type fallback (their text),
    named and without its warning, since the catalog says what they are; their arrays are arrays
    of it, as pgoutput's text form has them.
    """
    count = 0
    for oid, nsp, name, typtype, arr, base, typmod, subtype, multi, fields in rows:
        full = name if nsp in ("public", "pg_catalog") else f"{nsp}.{name}"
        registry.note_type(oid, nsp, name)
        arr = arr or None
        if typtype == "e":
            registry.register_enum(oid, full, array_oid=arr)
        elif typtype == "d":
            registry.register_domain(oid, base, full, base_typmod=typmod, array_oid=arr)
        elif typtype == "c":
            registry.register_composite(oid, full, [(f[0], int(f[1]), int(f[2])) for f in fields or []], array_oid=arr)
        elif typtype == "r":
            registry.register_range(oid, subtype, full, multirange_oid=multi or None, array_oid=arr)
        elif typtype == "b" and name in TEXT_LIKE_EXTENSION_TYPES:
            registry.register_domain(oid, oids.TEXT, full, array_oid=arr)
        elif typtype == "b" and name in EXTENSION_CODECS:
            registry.register_extension(oid, full, EXTENSION_CODECS[name], array_oid=arr)
        elif typtype == "b":
            registry.register_opaque(oid)
            if arr:
                registry.register_array(arr, oid, "_" + full)
            continue
        else:
            continue
        count += 1
    return count


def registry_of(rows: Iterable[Any]) -> TypeRegistry:
    """A new registry holding the user types of these :data:`TYPE_CATALOG_QUERY` rows."""
    registry = TypeRegistry()
    register_catalog_rows(registry, rows)
    return registry
