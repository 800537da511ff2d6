"""What every Delta table walspark creates has in common (snapshot copies and apply targets)."""

from __future__ import annotations

#: The Delta table properties of every target table: column mapping by name, so any PostgreSQL
#: identifier (spaces, commas, parentheses...) is a valid column name. The snapshot's
#: ``CREATE OR REPLACE TABLE`` and the apply step's ``createIfNotExists`` both use it, so a table
#: started by either is the same kind of table.
TABLE_PROPERTIES: dict[str, str] = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}
