"""A live stream under a concurrent workload assembles into exactly what was committed.

Several clients write at once — inserts, updates, deletes, truncates, savepoint rollbacks,
whole rollbacks, two-phase commits and rollbacks, and transactions large enough to be streamed
— each recording its xid and its changes. The stream, read through the duplicate filter and the
assembler, must yield the committed transactions, each once, in commit order, with their
changes in order, and nothing of the aborted work.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest

from walspark.changes.assembly import CommittedTransaction
from walspark.changes.live import LiveTransactions
from walspark.protocol import Delete, Insert, Relation, Truncate, Update, decode_message
from walspark.source.options import StreamOptions
from walspark.source.stream import ReplicationStream

CLIENTS = 4
TXNS_PER_CLIENT = 30


def _setup(dsn: str, two_phase: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(CLIENTS):
            conn.execute(f"CREATE TABLE t{n} (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION pub FOR ALL TABLES")
        conn.execute("SELECT pg_create_logical_replication_slot('live', 'pgoutput', false, %s)", (two_phase,))


def _client(dsn: str, n: int, seed: int, committed: dict[int, list[tuple]], lock: threading.Lock,
            two_phase: bool) -> None:  # fmt: skip
    """One writer: random transactions on its own table, recording what each committed one did."""
    rng = random.Random(seed)
    table = f"t{n}"
    live: set[int] = set()
    next_id = 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(TXNS_PER_CLIENT):
            changes: list[tuple] = []
            shadow = set(live)
            conn.execute("BEGIN")
            xid = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
            for _ in range(rng.randint(1, 6)):
                roll = rng.random()
                if roll < 0.5 or not shadow:
                    count = 3000 if rng.random() < 0.05 else 1  # now and then, big enough to stream
                    conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(%s::int, %s::int) g",
                                 (next_id, next_id + count - 1))  # fmt: skip
                    changes += [(table, "I", k) for k in range(next_id, next_id + count)]
                    shadow |= set(range(next_id, next_id + count))
                    next_id += count
                elif roll < 0.7:
                    key = rng.choice(sorted(shadow))
                    conn.execute(f"UPDATE {table} SET v = v || 'u' WHERE id = %s", (key,))
                    changes.append((table, "U", key))
                elif roll < 0.85:
                    key = rng.choice(sorted(shadow))
                    conn.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
                    changes.append((table, "D", key))
                    shadow.discard(key)
                elif roll < 0.95:
                    conn.execute("SAVEPOINT sp")
                    conn.execute(f"INSERT INTO {table} VALUES (%s, 'rolled back')", (next_id,))
                    conn.execute("ROLLBACK TO SAVEPOINT sp")
                    next_id += 1
                else:
                    conn.execute(f"TRUNCATE {table}")
                    changes.append((table, "T", None))
                    shadow = set()
            outcome = rng.random()
            if outcome < 0.15:
                conn.execute("ROLLBACK")
                continue
            if two_phase and outcome < 0.35:
                gid = f"g{n}-{i}"
                conn.execute(f"PREPARE TRANSACTION '{gid}'")
                if outcome < 0.28:
                    conn.execute(f"COMMIT PREPARED '{gid}'")
                else:
                    conn.execute(f"ROLLBACK PREPARED '{gid}'")
                    continue
            else:
                conn.execute("COMMIT")
            live = shadow
            if changes:  # pgoutput sends nothing for a transaction without published changes
                with lock:
                    committed[xid] = changes


def _changes_of(txn: CommittedTransaction, relations: dict[int, str], version: int) -> list[tuple]:
    out: list[tuple] = []
    for lsn, in_stream, data in txn.messages():
        message = decode_message(data, protocol_version=version, in_stream=in_stream, lsn=lsn)
        if isinstance(message, Relation):
            relations[message.relation_id] = message.relation_name
        elif isinstance(message, Insert):
            out.append((relations[message.relation_id], "I", int(message.new_tuple.values[0])))
        elif isinstance(message, Update):
            out.append((relations[message.relation_id], "U", int(message.new_tuple.values[0])))
        elif isinstance(message, Delete):
            out.append((relations[message.relation_id], "D", int((message.key_tuple or message.old_tuple).values[0])))
        elif isinstance(message, Truncate):
            out += [(relations[r], "T", None) for r in message.relation_ids]
    return out


def _terminate_walsender(dsn: str, pid: int | None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.mark.parametrize(
    ("server", "kills"),
    [("pg18", 0), ("pg15", 0), ("pg18", 3)],
    ids=["pg18", "pg15", "pg18-walsender-killed"],
)
def test_concurrent_workload_assembles_to_what_was_committed(server, kills, request):
    """...and with the walsender terminated mid-stream: each committed transaction exactly once."""
    dsn = request.getfixturevalue(f"{server}_dsn")
    two_phase = True
    _setup(dsn, two_phase)
    committed: dict[int, list[tuple]] = {}
    lock = threading.Lock()
    failures: list[BaseException] = []

    def client(n: int) -> None:
        try:
            _client(dsn, n, 1000 + n, committed, lock, two_phase)
        except BaseException as exc:  # noqa: BLE001 - reported by the test, not lost in a thread
            failures.append(exc)

    writers = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    # A small logical_decoding_work_mem on the walsender makes the big transactions stream.
    stream_dsn = dsn + " options='-c logical_decoding_work_mem=64kB'"
    stream = ReplicationStream(stream_dsn, "live", StreamOptions(("pub",), two_phase=True), status_interval=1.0)
    live = LiveTransactions(stream, memory_budget=256 * 1024)
    received: list[CommittedTransaction] = []
    got: dict[int, list[tuple]] = {}
    relations: dict[int, str] = {}
    try:
        for writer in writers:
            writer.start()
        deadline = time.monotonic() + 120
        while True:
            events = live.read(timeout=0.5) or []
            for event in events:
                assert isinstance(event, CommittedTransaction)
                received.append(event)
                assert event.xid not in got, "a transaction was delivered twice"
                got[event.xid] = _changes_of(event, relations, stream.options.proto_version)
                event.release()
                live.confirm(event.end_lsn)
                if kills and len(received) % 25 == 0 and stream.reconnects < kills:
                    _terminate_walsender(dsn, stream.backend_pid)
            if not any(w.is_alive() for w in writers) and set(committed) <= set(got):
                break
            assert not failures, failures
            missing = sorted(set(committed) - {txn.xid for txn in received})
            assert time.monotonic() < deadline, f"received {len(received)} of {len(committed)}; missing {missing}"
    finally:
        for writer in writers:
            writer.join()
        live.close()

    # A prepared transaction is sent even when it has no published change (its PREPARE must
    # reach a subscriber); the writers only record transactions with changes.
    assert {xid: changes for xid, changes in got.items() if changes} == committed
    commit_lsns = [txn.commit_lsn for txn in received]
    assert commit_lsns == sorted(commit_lsns) and len(set(commit_lsns)) == len(commit_lsns)
    assert any(txn.streamed for txn in received), "the workload should have streamed a large transaction"
    assert any(txn.gid for txn in received), "the workload should have committed a prepared transaction"
    if kills:
        assert stream.reconnects >= 1
