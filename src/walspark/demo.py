"""The demo: a small shop on an embedded PostgreSQL 18, mirrored into Delta Lake while it trades.

README.md ("What the demo does") describes it. The comparison reads the Delta tables with
delta-rs or plain Spark, not through walspark, both sides reduced to the same canonical values per
column: a mismatch means a wrong row, not a different rendering.
"""

from __future__ import annotations

import hashlib
import random
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import SparkSession

PUBLICATION = "shop_pub"
SLOT = "shop_slot"

SCHEMA_SQL = """
CREATE SCHEMA shop;
CREATE TYPE shop.order_status AS ENUM ('new', 'paid', 'shipped', 'delivered', 'cancelled');
CREATE TABLE shop.customers (
    id integer PRIMARY KEY,
    name text NOT NULL,
    email text,
    country char(2),
    signed_up timestamptz NOT NULL,
    vip boolean NOT NULL DEFAULT false,
    tags text[],
    profile jsonb
);
CREATE TABLE shop.products (
    id integer PRIMARY KEY,
    sku uuid NOT NULL,
    title text NOT NULL,
    price numeric(10, 2) NOT NULL,
    weight_kg double precision,
    attrs jsonb,
    launched date
);
CREATE TABLE shop.orders (
    id bigint PRIMARY KEY,
    customer_id integer NOT NULL,
    status shop.order_status NOT NULL,
    total numeric(12, 2) NOT NULL,
    placed_at timestamptz NOT NULL,
    note text
);
ALTER TABLE shop.orders ALTER COLUMN note SET STORAGE EXTERNAL;
CREATE TABLE shop.order_items (
    order_id bigint NOT NULL,
    line integer NOT NULL,
    product_id integer NOT NULL,
    qty integer NOT NULL,
    unit_price numeric(10, 2) NOT NULL,
    PRIMARY KEY (order_id, line)
);
"""

SEED_SQL = """
INSERT INTO shop.customers
SELECT g, 'Customer ' || g, 'c' || g || '@example.com', (ARRAY['FR','DE','US','JP','BR'])[1 + g % 5],
       timestamptz '2024-01-01 00:00:00+00' + g * interval '37 minutes', g % 17 = 0,
       ARRAY['tag' || g % 7, 'tag "' || g % 3 || '"'],
       jsonb_build_object('age', 18 + g % 60, 'newsletter', g % 2 = 0, 'name', 'Zoë ' || g)
FROM generate_series(1, {customers}) g;
INSERT INTO shop.products
SELECT g, md5('sku' || g)::uuid, 'Product ' || g, (g % 500) + 0.99, (g % 90) / 7.0,
       jsonb_build_object('color', (ARRAY['red','green','blue'])[1 + g % 3], 'dims', jsonb_build_array(g % 9, g % 4)),
       date '2020-01-01' + g
FROM generate_series(1, {products}) g;
INSERT INTO shop.orders
SELECT g, 1 + g % {customers}, (ARRAY['new','paid','shipped','delivered']::shop.order_status[])[1 + g % 4],
       (g % 1000) * 1.25, timestamptz '2025-01-01 00:00:00+00' + g * interval '3 minutes',
       CASE WHEN g % 50 = 0 THEN repeat('long note ' || g || ' ', 4000) END
FROM generate_series(1, {orders}) g;
INSERT INTO shop.order_items
SELECT o, l, 1 + (o * l) % {products}, 1 + (o + l) % 4, ((o * l) % 500) + 0.99
FROM generate_series(1, {orders}) o, generate_series(1, 3) l;
"""

TABLES = ("customers", "products", "orders", "order_items")


def create_shop(conn: psycopg.Connection, *, customers: int = 2000, products: int = 300, orders: int = 6000) -> None:
    """The schema, its existing rows, and a publication of the four tables."""
    conn.execute(SCHEMA_SQL)
    conn.execute(SEED_SQL.format(customers=int(customers), products=int(products), orders=int(orders)))
    conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE " + ", ".join(f"shop.{t}" for t in TABLES))


class Workload:
    """A background thread trading in the shop until stopped (or for ``seconds``)."""

    def __init__(self, dsn: str, *, rate: float = 40.0, seed: int = 7) -> None:
        self.dsn = dsn
        self.rate = rate
        self.transactions = 0
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="walspark-demo-workload", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Workload:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop writing (idempotent); re-raises what made the workload fail, if anything did."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _run(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                next_order = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM shop.orders").fetchone()[0]  # type: ignore[index]
                while not self._stop.wait(1.0 / self.rate):
                    with conn.transaction():
                        next_order = self._one(conn, next_order)
                    self.transactions += 1
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.error = exc

    def _one(self, conn: psycopg.Connection, next_order: int) -> int:
        rng = self._rng
        roll = rng.random()
        if roll < 0.35 or next_order <= 1:  # a new order with its lines (the first, after a truncate)
            conn.execute(
                "INSERT INTO shop.orders VALUES (%s, %s, 'new', 0, now(), %s)",
                (next_order, rng.randint(1, 2000), "gift wrap " * 3000 if rng.random() < 0.1 else None),
            )
            for line in range(1, rng.randint(2, 4)):
                conn.execute(
                    "INSERT INTO shop.order_items SELECT %s, %s, p.id, %s, p.price FROM shop.products p WHERE p.id = %s",
                    (next_order, line, rng.randint(1, 5), rng.randint(1, 300)),
                )
            conn.execute(
                "UPDATE shop.orders SET total = (SELECT coalesce(sum(qty * unit_price), 0) FROM shop.order_items"
                " WHERE order_id = %s) WHERE id = %s",
                (next_order, next_order),
            )
            return next_order + 1
        order = rng.randint(1, next_order - 1)
        if roll < 0.6:  # status moves on; a large note, if any, is left untouched (unchanged TOAST)
            conn.execute(
                "UPDATE shop.orders SET status = CASE status WHEN 'new' THEN 'paid' WHEN 'paid' THEN 'shipped'"
                " WHEN 'shipped' THEN 'delivered' ELSE status END WHERE id = %s",
                (order,),
            )
        elif roll < 0.7:  # a cancellation
            conn.execute("DELETE FROM shop.order_items WHERE order_id = %s", (order,))
            conn.execute("UPDATE shop.orders SET status = 'cancelled', total = 0 WHERE id = %s", (order,))
        elif roll < 0.8:
            conn.execute("UPDATE shop.products SET price = price + 0.5 WHERE id = %s", (rng.randint(1, 300),))
        elif roll < 0.9:
            conn.execute(
                "UPDATE shop.customers SET profile = profile || jsonb_build_object('visits', %s::int),"
                " tags = array_append(tags, 'v' || %s::text) WHERE id = %s",
                (rng.randint(1, 99), rng.randint(1, 9), rng.randint(1, 2000)),
            )
        else:
            conn.execute("DELETE FROM shop.customers WHERE id = %s AND NOT vip", (rng.randint(1, 2000),))
        return next_order


# -- comparison -------------------------------------------------------------------------------

#: Per table: its key, and per column how to reduce it to a canonical value on each side
#: (PostgreSQL SQL expression, Spark SQL expression, the same in Python on an Arrow column:
#: ``micros`` or ``md5``). Plain columns compare as they are.
_CANONICAL: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, str, str]]]] = {
    "customers": (
        ("id",),
        {
            "signed_up": ("(extract(epoch FROM signed_up) * 1000000)::bigint", "unix_micros(signed_up)", "micros"),
            "profile": ("profile::text", "profile", ""),
        },
    ),
    "products": (("id",), {"sku": ("sku::text", "sku", ""), "attrs": ("attrs::text", "attrs", "")}),
    "orders": (
        ("id",),
        {
            "status": ("status::text", "status", ""),
            "placed_at": ("(extract(epoch FROM placed_at) * 1000000)::bigint", "unix_micros(placed_at)", "micros"),
            "note": ("md5(note)", "md5(note)", "md5"),
        },
    ),
    "order_items": (("order_id", "line"), {}),
}


@dataclass(frozen=True, slots=True)
class TableComparison:
    table: str
    source_rows: int
    target_rows: int
    source_checksum: str
    target_checksum: str

    @property
    def matches(self) -> bool:
        return self.source_rows == self.target_rows and self.source_checksum == self.target_checksum


def _checksum(rows: list[tuple]) -> str:
    digest = hashlib.sha256()
    for row in rows:
        digest.update(repr(row).encode())
    return digest.hexdigest()[:16]


def table_rows(conn: psycopg.Connection, spark: SparkSession, target: str, table: str) -> tuple[list, list]:
    """(source rows, Delta rows) of one shop table, canonical per column, sorted by key.

    The Delta side is read with delta-rs where the table is local (no Spark job), else with plain
    ``spark.read.format("delta")``: the comparison must not share a code path with what it checks.
    """
    keys, canonical = _CANONICAL[table]
    columns = [name for (name,) in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"
        " ORDER BY attnum", (f"shop.{table}",)).fetchall()]  # fmt: skip
    pg_cols = ", ".join(canonical.get(c, (c,))[0] for c in columns)
    source = [tuple(r) for r in conn.execute(f"SELECT {pg_cols} FROM shop.{table} ORDER BY {', '.join(keys)}")]
    path = f"{target}/shop/{table}"
    target_rows = _delta_rs_rows(path, columns, keys, canonical)
    if target_rows is None:
        frame = spark.read.format("delta").load(path)
        spark_cols = [canonical.get(c, (c, c))[1] for c in columns]
        target_rows = [tuple(r) for r in frame.selectExpr(*spark_cols).orderBy(*keys).collect()]
    return source, target_rows


def _delta_rs_rows(
    path: str, columns: list[str], keys: tuple[str, ...], canonical: dict[str, tuple[str, str, str]]
) -> list[tuple] | None:
    """The rows of a local Delta table through delta-rs's SQL engine (which maps column-mapped
    names back), canonical per column; None where Spark must read it (an object store, or a
    table feature delta-rs cannot read)."""
    import pyarrow as pa
    from deltalake.exceptions import DeltaError

    from walspark.spark.lake.driver_log import local_path, query

    local = local_path(path)
    if local is None:
        return None
    select = ", ".join(f'"{c}"' for c in columns)
    order = ", ".join(f'"{c}"' for c in keys)
    try:
        result = query(local, f"SELECT {select} FROM t ORDER BY {order}")
    except DeltaError:
        return None
    out = []
    for name, column in zip(columns, result.columns, strict=True):
        kind = canonical.get(name, ("", "", ""))[2]
        if kind == "micros":
            out.append(column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64()).to_pylist())
        elif kind == "md5":
            out.append([None if v is None else hashlib.md5(v.encode()).hexdigest() for v in column.to_pylist()])
        else:
            out.append(column.to_pylist())
    return list(zip(*out, strict=True))


def compare(conn: psycopg.Connection, spark: SparkSession, target: str) -> list[TableComparison]:
    """Source vs Delta, table by table, row by row in key order."""
    out = []
    for table in TABLES:
        source, target_rows = table_rows(conn, spark, target, table)
        out.append(TableComparison(f"shop.{table}", len(source), len(target_rows), _checksum(source),
                                   _checksum(target_rows)))  # fmt: skip
    return out
