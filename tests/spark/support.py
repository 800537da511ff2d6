"""Helpers for the pgoutput data source tests: a source database, a workload with a known order,
readers of a streaming checkpoint (offsets/commits), and a source drained into change DataFrames
(the sink's tests) — all real: embedded PostgreSQL, local Spark."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from walspark.changes.assembly import TransactionAssembler
from walspark.changes.rows import ChangeRowBuilder
from walspark.protocol import parse_lsn
from walspark.source.sqlinterface import slot_changes
from walspark.spark.lake.apply import apply_changes
from walspark.spark.lake.frames import change_dataframe

DDL = """
CREATE TABLE acct (id int PRIMARY KEY, owner text, balance numeric(12,2), seq bigint);
CREATE TABLE ev (k bigint PRIMARY KEY, at timestamptz, tags text[], seq bigint);
CREATE PUBLICATION pub FOR TABLE acct, ev;
"""


def create_source(dsn: str, slot: str = "s") -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


class Workload:
    """Transactions on ``acct``/``ev`` from one connection, so their commit order is the order issued.

    Every change writes a fresh global ``seq`` value (inserts and updates; deletes are recorded
    by key), so a sink can be checked for "each change exactly once, in commit order per table".
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.seq = 0
        self.next_id = 0
        self.changes: list[tuple[str, str, int, int | None]] = []  # (table, op, key, seq) in commit order
        self.txns = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def txn(self, conn: psycopg.Connection, rows: int = 5) -> None:
        pending = []
        with conn.transaction():
            for _ in range(rows):
                self.seq += 1
                self.next_id += 1
                i = self.next_id
                conn.execute("INSERT INTO acct VALUES (%s, %s, %s, %s)", (i, f"o{i}", i / 4, self.seq))
                pending.append(("acct", "I", i, self.seq))
            if self.next_id % 3 == 0:
                self.seq += 1
                conn.execute("UPDATE acct SET balance = balance + 1, seq = %s WHERE id = %s", (self.seq, self.next_id))
                pending.append(("acct", "U", self.next_id, self.seq))
            if self.next_id % 4 == 0:
                conn.execute("DELETE FROM acct WHERE id = %s", (self.next_id - 1,))
                pending.append(("acct", "D", self.next_id - 1, None))
            self.seq += 1
            conn.execute("INSERT INTO ev VALUES (%s, now(), ARRAY['a', %s], %s)", (self.next_id, str(self.seq), self.seq))
            pending.append(("ev", "I", self.next_id, self.seq))
        self.changes.extend(pending)
        self.txns += 1

    def run(self, count: int, rows: int = 5) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for _ in range(count):
                self.txn(conn, rows)

    def start(self, pause: float = 0.02) -> None:
        def loop() -> None:
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    while not self._stop.is_set():
                        self.txn(conn)
                        self._stop.wait(pause)
            except BaseException as exc:  # noqa: BLE001
                self.error = exc

        self._stop.clear()
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.error is not None:
            raise self.error


def slot_confirmed(dsn: str, slot: str = "s") -> int:
    with psycopg.connect(dsn) as conn:
        (lsn,) = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                              (slot,)).fetchone()
    return parse_lsn(lsn)


def idle_mark(staging: Path) -> int:
    """The highest idle keepalive position a stager under ``staging`` recorded (0: none).

    The stager lets the slot move past the last committed batch only to such a position, with
    no transaction in between, and records it *before* the slot moves (read the slot first).
    """
    return max((parse_lsn(p.read_text().strip()) for p in staging.rglob("idle-confirmed")), default=0)


def current_lsn(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def checkpoint_offsets(checkpoint: Path) -> dict[int, int]:
    """Batch id -> end LSN of the pgoutput source, from ``offsets/`` (the write-ahead log)."""
    out = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit():
            out[int(f.name)] = parse_lsn(json.loads(f.read_text().splitlines()[-1])["lsn"])
    return out


def committed_end(checkpoint: Path) -> int | None:
    """End LSN of the last batch in ``commits/`` — what the slot may be confirmed up to."""
    commits = [int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit()] \
        if (checkpoint / "commits").exists() else []
    if not commits:
        return None
    return checkpoint_offsets(checkpoint)[max(commits)]


def sink_changes(spark, path: Path, *, per_table: str | None = None) -> list[tuple[str, str, int, int | None]]:
    """(table, op, key, seq) of every row in a parquet sink, per table in (_commit_lsn, _seq) order."""
    df = spark.read.parquet(str(path))
    rows = df.orderBy("_commit_lsn", "_seq").collect()
    out = []
    for r in rows:
        if per_table:
            new, old = r.asDict(), r["_old"]
        else:
            name = f"{r['_schema']}.{r['_table']}"
            new, old = r[name], r[name + ":old"]
        key = "id" if r["_table"] == "acct" else "k"
        if r["_op"] == "D":
            out.append((r["_table"], "D", old[key], None))
        else:
            out.append((r["_table"], r["_op"], new[key], new["seq"]))
    return out


def per_table(changes: list[tuple[str, str, int, int | None]]) -> dict[str, list[tuple[str, int, int | None]]]:
    out: dict[str, list] = {}
    for table, op, key, seq in changes:
        out.setdefault(table, []).append((op, key, seq))
    return out


def has_deletion_vectors(spark, path: str) -> bool:
    """Whether the Delta table at ``path`` has the deletion vectors feature."""
    return "deletionVectors" in (spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["tableFeatures"] or [])


class Source:
    """A source database with a publication and a pgoutput slot, drained into change DataFrames."""

    def __init__(self, dsn: str, spark, ddl: str) -> None:
        self.dsn, self.spark = dsn, spark
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(ddl)
        self.conn.execute("CREATE PUBLICATION pub FOR ALL TABLES")
        self.conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        self.options = {"proto_version": "4", "publication_names": "pub", "binary": "true"}
        self.assembler = TransactionAssembler(4, memory_budget=1 << 30)
        self.builder = ChangeRowBuilder(4, binary=True)
        self.batch_id = 0

    def sql(self, *statements: str, params: tuple = ()) -> None:
        """Run statements in one transaction."""
        with self.conn.transaction():
            for statement in statements:
                self.conn.execute(statement, params if "%s" in statement else None)

    def drain(self, *, join_identities: bool = False) -> list:
        """Change DataFrames (one per table shape, in change order) committed since the last drain.
        ``join_identities``: a table's shapes with the same columns (its replica identity changed)
        in one DataFrame, as a micro-batch of the pipeline holds them."""
        with psycopg.connect(self.dsn) as conn:
            for lsn, data in slot_changes(conn, "s", self.options, consume=True):
                for txn in self.assembler.feed(lsn, data):
                    self.builder.add_transaction(txn)
        built = sorted(self.builder.build(), key=lambda vb: vb[1].column("_commit_lsn")[0].as_py())
        groups: dict[object, list] = {}
        for version, batch in built:
            groups.setdefault((version.relation_id, batch.schema) if join_identities else len(groups), []).append(batch)
        return [change_dataframe(self.spark, batches) for batches in groups.values()]

    def apply(self, target: str, sink=None, **kwargs) -> list:
        """Drain and apply, one batch id per change DataFrame."""
        results = []
        for df in self.drain():
            if sink is not None:
                results += sink.foreach_batch(df, self.batch_id)
            else:
                results.append(apply_changes(df, self.batch_id, target=target, **kwargs))
            self.batch_id += 1
        return results

    def rows(self, table: str) -> list[dict]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(f"SELECT * FROM {table}").fetchall()

    def close(self) -> None:
        self.conn.close()
