"""Helpers shared by the source tests: workloads, a tiny transaction collector, polling."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg

from walspark.protocol.decoder import Decoder
from walspark.protocol.messages import Begin, Commit, Delete, Insert, StreamAbort, StreamCommit, StreamStart, Update
from walspark.source import (
    RawMessage,
    Reconnected,
    ReplicationStream,
    create_publication,
    create_slot,
    get_slot,
)

T = TypeVar("T")

_numbers = itertools.count()


def fresh_database(server: Any, prefix: str = "src") -> Iterator[str]:
    """A new database on ``server`` for one test; its slots are dropped afterwards."""
    name = f"{prefix}{os.getpid()}_{next(_numbers)}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.dsn(name)
    finally:
        try:
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                             " WHERE database = %s AND active_pid IS NOT NULL", (name,))
                conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                             " WHERE database = %s AND NOT active", (name,))
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception:  # noqa: BLE001 - the server may be mid-restart in a failing test; its tmp dir goes anyway
            pass


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.05, what: str = "") -> T:
    """Poll until ``predicate()`` is truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def setup_source(dsn: str, *, slot: str = "s1", publication: str = "pub", table: str = "t") -> None:
    """A table, a publication for it and a slot, in the DSN's database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{table}" (id int PRIMARY KEY, v text)')
        create_publication(conn, publication, tables=[table])
        create_slot(conn, slot)


def slot_confirmed(dsn: str, slot: str = "s1") -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        info = get_slot(conn, slot)
        assert info is not None and info.confirmed_flush_lsn is not None
        return info.confirmed_flush_lsn


@dataclass
class Txn:
    xid: int
    commit_lsn: int
    end_lsn: int
    rows: list[tuple[str, int]] = field(default_factory=list)


class Collector:
    """Assembles committed transactions from raw messages (enough for these tests).

    Drops a partly received transaction on :class:`Reconnected`, like a real consumer must.
    """

    def __init__(self, proto: int, streaming_parallel: bool = False) -> None:
        self.decoder = Decoder(proto, streaming_parallel=streaming_parallel)
        self.proto = proto
        self.streaming_parallel = streaming_parallel
        self.txns: list[Txn] = []
        self.current: Txn | None = None
        self.streams: dict[int, list[tuple[str, int]]] = {}
        self.reconnects = 0

    def feed(self, item: RawMessage | Reconnected) -> Txn | None:
        if isinstance(item, Reconnected):
            self.reconnects += 1
            self.current = None
            self.streams.clear()
            self.decoder = Decoder(self.proto, streaming_parallel=self.streaming_parallel)
            return None
        m = self.decoder.decode(item.payload, item.data_start)
        if isinstance(m, Begin):
            self.current = Txn(m.xid, m.final_lsn, 0)
        elif isinstance(m, (Insert, Update, Delete)):
            tup = m.new_tuple if not isinstance(m, Delete) else (m.key_tuple or m.old_tuple)
            row = (type(m).__name__, int(tup.values[0]))
            if m.xid is not None:
                self.streams.setdefault(m.xid, []).append(row)
            else:
                assert self.current is not None
                self.current.rows.append(row)
        elif isinstance(m, Commit):
            assert self.current is not None and self.current.commit_lsn == m.commit_lsn
            self.current.end_lsn = m.end_lsn
            done, self.current = self.current, None
            self.txns.append(done)
            return done
        elif isinstance(m, StreamStart):
            self.streams.setdefault(m.xid, [])
        elif isinstance(m, StreamCommit):
            done = Txn(m.xid, m.commit_lsn, m.end_lsn, self.streams.pop(m.xid, []))
            self.txns.append(done)
            return done
        elif isinstance(m, StreamAbort) and m.xid == m.subxid:
            self.streams.pop(m.xid, None)
        return None


class Workload:
    """Several clients inserting rows in small transactions, in background threads."""

    def __init__(self, dsn: str, *, clients: int = 3, txns_per_client: int = 50, table: str = "t",
                 pause: float = 0.0, start_id: int = 0) -> None:
        self.dsn = dsn
        self.table = table
        self.pause = pause
        self.committed: list[int] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(start_id + c * 1_000_000, txns_per_client), daemon=True)
            for c in range(clients)
        ]
        self.errors: list[BaseException] = []

    def _run(self, base: int, count: int) -> None:
        i = 0
        conn = None
        while i < count:
            try:
                if conn is None:
                    conn = psycopg.connect(self.dsn, autocommit=True)
                with conn.transaction():
                    conn.execute(f'INSERT INTO "{self.table}" VALUES (%s, %s), (%s, %s)',
                                 (base + 2 * i, "a", base + 2 * i + 1, "b"))
                with self._lock:
                    self.committed += [base + 2 * i, base + 2 * i + 1]
                i += 1
                if self.pause:
                    time.sleep(self.pause)
            except psycopg.OperationalError:
                # server restarting: whether that commit happened is read back from the table later
                conn = None
                time.sleep(0.2)
                i += 1
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                return
        if conn is not None:
            conn.close()

    def start(self) -> Workload:
        for t in self._threads:
            t.start()
        return self

    def join(self, timeout: float = 60) -> None:
        for t in self._threads:
            t.join(timeout)
        assert not self.errors, self.errors


def table_ids(dsn: str, table: str = "t") -> set[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0] for r in conn.execute(f'SELECT id FROM "{table}"')}


def drain(stream: ReplicationStream, collector: Collector, *, until: Callable[[], bool], timeout: float = 30,
          confirm_every: int = 1, filt: Any = None) -> None:
    """Read until ``until()`` holds, feeding ``collector`` (through ``filt`` if given) and confirming."""
    deadline = time.monotonic() + timeout
    done = 0
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"stream did not deliver in {timeout}s ({len(collector.txns)} txns so far)")
        item = stream.read(0.2)
        if item is None:
            continue
        if filt is not None:
            item = filt.feed(item)
            if item is None:
                continue
        txn = collector.feed(item)
        if txn is not None:
            done += 1
            if done % confirm_every == 0:
                stream.confirm(txn.end_lsn)
