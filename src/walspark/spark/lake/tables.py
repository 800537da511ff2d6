"""What every Delta table walspark creates has in common (snapshot copies and apply targets).

Where a table lives. ``<target>/<schema>/<table>``, each name as PostgreSQL spells it — quotes,
spaces, dots, upper case and non-ASCII letters kept — so a data engineer finds ``public.Orders``
at ``lake/public/Orders``. Only what a file system path cannot hold unambiguously is
percent-encoded (UTF-8 bytes as ``%XX``): ``%`` itself, ``/`` and ``\\``, ``:`` (Hadoop reads
``a:b`` as a URI scheme), control characters, a leading ``.`` (``.`` and ``..`` are not names
on disk), and the schema ``_walspark``, whose folder holds walspark's own bookkeeping. Since
``%`` is encoded too, two different tables never share a path, and
:func:`urllib.parse.unquote` gives the name back.
"""

from __future__ import annotations

import re

__all__ = ["TABLE_PROPERTIES", "path_segment", "quote", "table_path"]

#: The Delta table properties of every target table: column mapping by name, so any PostgreSQL
#: identifier (spaces, commas, parentheses...) is a valid column name. The snapshot's
#: ``CREATE OR REPLACE TABLE`` and the apply step's ``createIfNotExists`` both use it, so a table
#: started by either is the same kind of table.
TABLE_PROPERTIES: dict[str, str] = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}

#: walspark's own folder under the target (progress table, checkpoints, staging, snapshot record).
HOME = "_walspark"

_UNSAFE = re.compile(r"[%/\\:\x00-\x1f\x7f]|^\.")


def _encode(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group(0).encode("utf-8"))


def path_segment(name: str, *, schema: bool = False) -> str:
    """One PostgreSQL name as a folder name (see the module docstring for the rule)."""
    segment = _UNSAFE.sub(_encode, name)
    if schema and segment == HOME:
        segment = "%5F" + segment[1:]
    return segment or "%00"  # PostgreSQL names are never empty; an empty segment would vanish


def table_path(target: str, schema: str, table: str) -> str:
    """``<target>/<schema>/<table>``: where a source table's Delta table lives (ARCHITECTURE.md)."""
    return f"{target.rstrip('/')}/{path_segment(schema, schema=True)}/{path_segment(table)}"


def quote(name: str) -> str:
    """A Spark SQL identifier for any name: backquoted, inner backquotes doubled."""
    return "`" + name.replace("`", "``") + "`"
