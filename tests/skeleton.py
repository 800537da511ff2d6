"""The walking skeleton the smoke test runs: PostgreSQL → pgoutput → Spark → Delta, thin, end to end.

It checks the ground every other part stands on — a server started with ``wal_level=logical``,
a pgoutput slot read through the SQL interface, the decoder, a local Spark with Delta from local
jars — on one small table, without the pipeline (``walspark run`` is tested by the scenarios).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from walspark.protocol import Decoder, Delete, Insert, Relation, Update

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession

SCHEMA = "shop"
TABLE = "orders"
PUBLICATION = "walspark_smoke"
SLOT = "walspark_smoke"

_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE {SCHEMA}.{TABLE} (
    id integer PRIMARY KEY,
    customer text NOT NULL,
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL
);
CREATE PUBLICATION {PUBLICATION} FOR TABLE {SCHEMA}.{TABLE};
"""

#: Spark SQL types of the smoke table; the minimal decode keeps text values and casts here.
_SPARK_COLUMNS = {"id": "INT", "customer": "STRING", "amount": "DECIMAL(12,2)", "status": "STRING"}


@dataclass(frozen=True, slots=True)
class SmokeResult:
    """What the smoke pipeline saw at the source and wrote to the target."""

    target: Path
    messages: int
    source_rows: list[tuple]
    target_rows: list[tuple]

    @property
    def matches(self) -> bool:
        return self.source_rows == self.target_rows


def prepare_source(conn: psycopg.Connection) -> None:
    """Create the table and publication, then the slot (so it sees every later change)."""
    conn.execute(_DDL)
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))


def run_workload(conn: psycopg.Connection, rows: int) -> None:
    """Inserts, updates (some twice) and a few deletes, in several transactions."""
    with conn.transaction():
        conn.cursor().executemany(
            f"INSERT INTO {SCHEMA}.{TABLE} VALUES (%s, %s, %s, 'new')",
            [(i, f"customer {i % 37}", f"{(i * 7919) % 100000 / 100:.2f}") for i in range(1, rows + 1)],
        )
    with conn.transaction():
        conn.execute(f"UPDATE {SCHEMA}.{TABLE} SET status = 'paid', amount = amount + 1 WHERE id % 3 = 0")
    with conn.transaction():
        conn.execute(f"UPDATE {SCHEMA}.{TABLE} SET status = 'shipped' WHERE id % 6 = 0")
        conn.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE id % 10 = 7")


def read_changes(conn: psycopg.Connection) -> list[tuple[int, bytes]]:
    """Consume the slot's binary changes through the SQL interface: ``(lsn, message)`` rows."""
    rows = conn.execute(
        "SELECT lsn::text, data FROM pg_logical_slot_get_binary_changes("
        "%s, NULL, NULL, 'proto_version', '1', 'publication_names', %s)",
        (SLOT, PUBLICATION),
    ).fetchall()
    from walspark.protocol import parse_lsn

    return [(parse_lsn(lsn), bytes(data)) for lsn, data in rows]


def fold_changes(changes: Iterable[tuple[int, bytes]]) -> dict[tuple[str, ...], dict[str, str | None]]:
    """Decode the messages and keep the last image of each row, keyed by its primary key.

    A deliberately minimal apply: values stay in their text form, and only what the smoke
    table needs (Relation, Insert, Update, Delete) is handled.
    """
    decoder = Decoder(protocol_version=1)
    relations: dict[int, Relation] = {}
    state: dict[tuple[str, ...], dict[str, str | None]] = {}
    for lsn, data in changes:
        message = decoder.decode(data, lsn=lsn)
        if isinstance(message, Relation):
            relations[message.relation_id] = message
        elif isinstance(message, (Insert, Update)):
            row = _text_row(relations[message.relation_id], message.new_tuple)
            state[_key(relations[message.relation_id], row)] = row
        elif isinstance(message, Delete):
            relation = relations[message.relation_id]
            state.pop(_key(relation, _text_row(relation, message.old_tuple or message.key_tuple)), None)
    return state


def _text_row(relation: Relation, tuple_data) -> dict[str, str | None]:
    return {
        column.name: None if value is None else bytes(value).decode()
        for column, value in zip(relation.columns, tuple_data.values, strict=True)
    }


def _key(relation: Relation, row: dict[str, str | None]) -> tuple[str, ...]:
    return tuple(row[column.name] or "" for column in relation.columns if column.is_key)


def write_delta(spark: SparkSession, rows: Iterable[dict[str, str | None]], target: Path) -> Path:
    """Write the folded rows as a Delta table at ``target/<schema>/<table>`` (overwrite)."""
    path = target / SCHEMA / TABLE
    frame = spark.createDataFrame(list(rows), schema=", ".join(f"{name} STRING" for name in _SPARK_COLUMNS))
    typed = frame.selectExpr(*(f"CAST({name} AS {kind}) AS {name}" for name, kind in _SPARK_COLUMNS.items()))
    typed.write.format("delta").mode("overwrite").save(str(path))
    return path


def source_rows(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute(f"SELECT id, customer, amount, status FROM {SCHEMA}.{TABLE} ORDER BY id").fetchall()


def target_rows(spark: SparkSession, path: Path) -> list[tuple]:
    frame = spark.read.format("delta").load(str(path)).orderBy("id")
    return [tuple(row) for row in frame.select(*_SPARK_COLUMNS).collect()]


def checksum(rows: Iterable[tuple]) -> str:
    """An order-independent digest of rows, to compare source and target at a glance."""
    digest = 0
    for row in rows:
        digest ^= int.from_bytes(hashlib.sha256(repr(row).encode()).digest()[:8], "big")
    return f"{digest:016x}"


def run_smoke_pipeline(
    dsn: str,
    spark: SparkSession,
    target: Path,
    *,
    rows: int = 1000,
    progress: Callable[[str], None] = lambda _: None,
) -> SmokeResult:
    """Source set-up, workload, slot read, decode, Delta write, read back: the whole skeleton."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        progress(f"creating {SCHEMA}.{TABLE}, publication {PUBLICATION} and slot {SLOT}")
        prepare_source(conn)
        progress(f"writing {rows} rows, then updates and deletes")
        run_workload(conn, rows)
        changes = read_changes(conn)
        progress(f"read {len(changes)} pgoutput messages from the slot")
        folded = fold_changes(changes)
        path = write_delta(spark, folded.values(), target)
        progress(f"wrote {len(folded)} rows to the Delta table at {path}")
        return SmokeResult(path, len(changes), source_rows(conn), target_rows(spark, path))
