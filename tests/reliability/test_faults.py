"""Faults the crash suite does not cover: a connection torn mid-message, a spill disk that fills up.

Issue 9's fault bullets. Both run against the real embedded PostgreSQL; the faults are real too —
a TCP proxy that closes its sockets after forwarding part of an XLogData message, and a spill
directory on a 256 kB tmpfs (or, where mounting is not allowed, a child process whose file size
limit is 256 kB).

What must hold:

* **Torn connection.** The stream reconnects on its own; through the duplicate filter and the
  assembler the consumer gets every committed transaction exactly once, in commit order, with
  exactly the rows the source holds for it; and the slot's ``confirmed_flush_lsn``, sampled all
  along by a separate connection, never passes what the consumer confirmed. When the network
  stays down the read fails with one clear line that names the slot and leaks no password.
* **Full spill disk.** The read fails with a :class:`~walspark.changes.spill.SpillError` that
  names the directory, what ran out and what to do; nothing of the big transaction reached the
  consumer, no spill file is left behind, the slot stays at the last delivered transaction; a
  rerun with room delivers the big transaction whole, exactly once.

``WALSPARK_FAULT_SEED`` replays a run's cut points (they are printed).
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from walspark.changes.assembly import CommittedTransaction
from walspark.changes.live import LiveTransactions
from walspark.embedded.postgres import EmbeddedPostgres
from walspark.protocol import Insert, decode_message
from walspark.source import ReconnectExhausted, ReconnectPolicy, ReplicationStream, StreamOptions

from .faultsupport import CutSpec, CuttingProxy, SpillRun, run_spill_consumer, run_spill_consumer_limited

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SLOT = "fault_slot"
PUBLICATION = "fault_pub"
SECRET = "Sup3r-Secret-pw"
SEED = int(os.environ.get("WALSPARK_FAULT_SEED", "20260921"))
#: Deadlines, not expectations (a 2-core host shared with other suites).
DEADLINE = 90.0
#: Retry quickly: each cut costs one reconnect, and the test waits for all of them.
FAST = ReconnectPolicy(max_attempts=40, max_elapsed=60, initial_delay=0.05, max_delay=0.5)
#: Small enough that a 30-row transaction of 4.8 kB values (~150 kB) is streamed when streaming is on.
SMALL_DECODING_MEM = "-c logical_decoding_work_mem=64kB"


def _setup(dsn: str) -> None:
    """One insert-only table whose rows record the writing transaction's xid (the oracle's key).

    The xid is taken modulo 2^32 because pgoutput's Begin carries the 32-bit xid, while
    ``pg_current_xact_id()`` includes the epoch.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigserial PRIMARY KEY,"
                     " xid bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint % 4294967296), v text)")
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))


def _source_transactions(dsn: str) -> dict[int, list[int]]:
    """xid → ids it inserted, ascending (= insert order: one sequence, rows inserted in order)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT xid, array_agg(id ORDER BY id) FROM t GROUP BY xid")
        return {xid: list(ids) for xid, ids in rows}


def _slot_confirmed(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots"
                           " WHERE slot_name = %s", (SLOT,)).fetchone()  # fmt: skip
    assert row is not None
    return int(row[0])


def _inserted_ids(txn: CommittedTransaction, proto: int) -> list[int]:
    ids = []
    for lsn, in_stream, data in txn.messages():
        message = decode_message(data, protocol_version=proto, in_stream=in_stream, lsn=lsn)
        if isinstance(message, Insert):
            ids.append(int(message.new_tuple.values[0]))
    return ids


def _random_rows(md5s: int) -> str:
    """An INSERT of rows of ``32 * md5s`` characters of incompressible text; the row count is its parameter.

    The subquery refers to ``g``, so it is evaluated per row (every row differs).
    """
    return ("INSERT INTO t (v) SELECT (SELECT string_agg(md5(g::text || s::text || random()::text), '')"
            f" FROM generate_series(1, {md5s}) s) FROM generate_series(1, %s) g")


#: Rows of ~4.8 kB.
_RANDOM_ROWS = _random_rows(150)


class Writers:
    """Small transactions from two clients and, from a third, large ones with kB-sized rows.

    The large ones carry ~4.8 kB per row (messages of several kB, so a cut often lands inside
    one) and roll back a savepoint (a subtransaction that must not be delivered; streamed, it is
    sent and then aborted). The values are random, not ``repeat()``: a compressible value is
    small in WAL, and the server's decoding memory — which decides whether a transaction is
    streamed — counts it compressed. They run until :meth:`stop`.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self.big = 0
        self._threads = [threading.Thread(target=self._guard, args=(self._small,), daemon=True) for _ in range(2)]
        self._threads.append(threading.Thread(target=self._guard, args=(self._large,), daemon=True))

    def _guard(self, body) -> None:  # type: ignore[no-untyped-def]
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    body(conn)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(exc)

    def _small(self, conn: psycopg.Connection) -> None:
        conn.execute("INSERT INTO t (v) VALUES ('small'), ('small')")
        time.sleep(0.005)

    def _large(self, conn: psycopg.Connection) -> None:
        with conn.transaction():
            conn.execute(_RANDOM_ROWS, (15,))
            conn.execute("SAVEPOINT sp")
            conn.execute("INSERT INTO t (v) SELECT repeat('rolled back ', 400) FROM generate_series(1, 5)")
            conn.execute("ROLLBACK TO SAVEPOINT sp")
            conn.execute(_RANDOM_ROWS, (15,))
        self.big += 1
        time.sleep(0.1)

    def start(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        assert not self.errors, self.errors


class SlotWatch:
    """Samples the slot's ``confirmed_flush_lsn`` from its own connection while the test streams.

    ``bound`` is what the consumer has confirmed (raised by the consumer *before* it calls
    ``confirm``). A sample is checked against the bound read *after* the sample returned: the
    bound only grows, so a later read can only make the check laxer, never flag a correct slot.
    """

    def __init__(self, dsn: str, bound: int) -> None:
        self.dsn = dsn
        self.bound = bound
        self.samples = 0
        self.violations: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.02):
                row = conn.execute("SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots"
                                   " WHERE slot_name = %s", (SLOT,)).fetchone()  # fmt: skip
                bound = self.bound
                self.samples += 1
                if row is not None and int(row[0]) > bound:
                    self.violations.append((int(row[0]), bound))

    def __enter__(self) -> SlotWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _cut_plan(rng: random.Random, streaming: str, count: int) -> list[CutSpec]:
    """``count`` cut points at random stream offsets: every other one inside a big message, one
    inside a small one (Begin, Commit, a small Insert), and (streaming on) one in a streamed block."""
    plan = []
    for n in range(count):
        after = rng.randrange(200, 120_000)
        plan.append(CutSpec(after=after, min_size=2_000 if n % 2 == 0 else 0, max_size=300 if n == 3 else None,
                            in_stream=streaming == "on" and n == 1))
    return plan


# ---------------------------------------------------------------------------- torn connections


@pytest.mark.parametrize("streaming", ["off", "on"])
def test_connection_cut_mid_message_resumes_exactly_once(pg18: EmbeddedPostgres, pg18_dsn: str,
                                                         streaming: str) -> None:
    """Four cuts, each inside an XLogData message, under a live workload with big transactions."""
    _setup(pg18_dsn)
    rng = random.Random(f"{SEED}-{streaming}")
    plan = _cut_plan(rng, streaming, 4)
    print(f"seed {SEED}: cut plan {plan}")
    initial = _slot_confirmed(pg18_dsn)
    delivered: list[CommittedTransaction] = []
    got: dict[int, list[int]] = {}
    with CuttingProxy(pg18.host, pg18.port, plan, seed=rng.randrange(1 << 30)) as proxy, \
            SlotWatch(pg18_dsn, initial) as watch:
        dsn = proxy.dsn(pg18_dsn, password=SECRET, options=SMALL_DECODING_MEM)
        stream = ReplicationStream(dsn, SLOT, StreamOptions((PUBLICATION,), streaming=streaming), status_interval=0.2,
                                   idle_confirm=False, reconnect=FAST)
        live = LiveTransactions(stream, memory_budget=64 * 1024)
        writers = Writers(pg18_dsn).start()
        truth: dict[int, list[int]] | None = None
        deadline = time.monotonic() + DEADLINE
        try:
            while truth is None or not set(truth) <= set(got):
                if truth is None and proxy.cuts_done.is_set():
                    writers.stop()
                    truth = _source_transactions(pg18_dsn)
                assert time.monotonic() < deadline, (
                    f"after {DEADLINE:.0f} s: {len(proxy.records)} of {len(plan)} cuts, "
                    f"{stream.reconnects} reconnects, "
                    f"{len(got)} transactions delivered" + ("" if truth is None else f" of {len(truth)}"))
                for event in live.read(0.2) or []:
                    assert isinstance(event, CommittedTransaction)
                    assert event.xid not in got, f"transaction {event.xid} delivered twice"
                    got[event.xid] = _inserted_ids(event, stream.options.proto_version)  # type: ignore[union-attr]
                    event.release()
                    delivered.append(event)
                    if len(delivered) % 3 == 0:  # leave some unconfirmed: they come again after a cut
                        watch.bound = max(watch.bound, event.end_lsn)
                        live.confirm(event.end_lsn)
            watch.bound = max(watch.bound, delivered[-1].end_lsn)
            live.confirm(delivered[-1].end_lsn)
            time.sleep(0.5)  # a few more samples after the last confirm reached the server
        finally:
            if truth is None:
                writers.stop()
            live.close()
    for record in proxy.records:
        print(f"cut: {record}")
    print(f"{len(delivered)} transactions ({writers.big} large, {sum(t.streamed for t in delivered)} streamed), "
          f"{stream.reconnects} reconnects, {watch.samples} slot samples")

    assert len(proxy.records) == len(plan)
    assert all(0 < r.forwarded < r.message_size for r in proxy.records), "a cut fell on a message boundary"
    assert any(r.message_size >= 2_000 for r in proxy.records) and any(r.message_size <= 300 for r in proxy.records)
    assert stream.reconnects == len(plan), "each cut should cost exactly one reconnect"
    assert got == truth, "the delivered transactions differ from what the source committed"
    commits = [t.commit_lsn for t in delivered]
    assert commits == sorted(commits) and len(set(commits)) == len(commits), "not in commit order"
    assert writers.big >= 1 and any(len(ids) >= 30 for ids in got.values())
    if streaming == "on":
        assert any(r.in_stream for r in proxy.records), "no cut landed inside a streamed block"
        assert any(t.streamed for t in delivered), "the large transactions should have been streamed"
    assert watch.samples > 0 and not watch.violations, (
        f"slot confirmed past the consumer (slot, consumer): {watch.violations[:5]}")


def test_network_stays_down_fails_with_one_clear_line(pg18: EmbeddedPostgres, pg18_dsn: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A cut inside a big message, then nothing listens: one line naming the slot, no password."""
    _setup(pg18_dsn)
    caplog.set_level(logging.DEBUG, logger="walspark")
    rng = random.Random(f"{SEED}-down")
    plan = [CutSpec(after=rng.randrange(200, 60_000), min_size=2_000)]
    policy = ReconnectPolicy(max_attempts=3, initial_delay=0.05, max_delay=0.2)
    got: dict[int, list[int]] = {}
    with CuttingProxy(pg18.host, pg18.port, plan, seed=rng.randrange(1 << 30), down_after_cuts=True) as proxy:
        stream = ReplicationStream(proxy.dsn(pg18_dsn, password=SECRET), SLOT, StreamOptions((PUBLICATION,)),
                                   status_interval=0.2, idle_confirm=False, reconnect=policy)
        live = LiveTransactions(stream)
        writers = Writers(pg18_dsn).start()
        deadline = time.monotonic() + DEADLINE
        try:
            with pytest.raises(ReconnectExhausted) as info:
                while True:
                    assert time.monotonic() < deadline, f"no failure after {DEADLINE:.0f} s ({len(proxy.records)} cuts)"
                    for event in live.read(0.2) or []:
                        assert isinstance(event, CommittedTransaction)
                        got[event.xid] = _inserted_ids(event, stream.options.proto_version)  # type: ignore[union-attr]
                        event.release()
                        live.confirm(event.end_lsn)
        finally:
            writers.stop()
            live.close()
    message = str(info.value)
    print(f"cut: {proxy.records}\nerror: {message}")
    assert proxy.records and proxy.connections == 1, "the proxy should have refused every reconnect"
    assert "\n" not in message and "Traceback" not in message
    assert SECRET not in message and "password=***" in message
    assert f"slot {SLOT!r}" in message and "after 3 attempt(s)" in message
    truth = _source_transactions(pg18_dsn)
    assert got and all(truth[xid] == ids for xid, ids in got.items()), "a delivered transaction is incomplete"
    walspark_records = [r for r in caplog.records if r.name.startswith("walspark")]
    assert not any(r.exc_info for r in walspark_records), "a traceback was logged"
    for record in walspark_records:
        text = record.getMessage()
        assert SECRET not in text
        assert "\n" not in text, f"a multi-line log message: {text!r}"


# ---------------------------------------------------------------------------- full spill disk

#: The small disk: far less than the big transaction below (~1.2 MB of messages).
DISK_BYTES = 256 * 1024
BUDGET = 64 * 1024


@dataclass
class SmallDisk:
    """A spill directory that holds ``size`` bytes: a tmpfs, or a file size limit in a child."""

    path: Path
    kind: str  # "tmpfs" or "rlimit"
    size: int

    def run(self, **kwargs: object) -> SpillRun:
        if self.kind == "tmpfs":
            return run_spill_consumer(spill_dir=str(self.path), **kwargs)  # type: ignore[arg-type]
        return run_spill_consumer_limited(self.size, spill_dir=str(self.path), **kwargs)


@pytest.fixture(params=["tmpfs", "rlimit"])
def small_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SmallDisk]:
    """A 256 kB tmpfs mounted under ``tmp_path`` (unmounted afterwards), or the RLIMIT_FSIZE child.

    ``rlimit`` is also what ``tmpfs`` falls back to where mounting is not permitted (not root, no
    CAP_SYS_ADMIN in a container), so the test runs everywhere instead of skipping.
    """
    path = tmp_path / "spill"
    path.mkdir()
    if request.param == "tmpfs":
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(path)],
                               capture_output=True, text=True)
        if mount.returncode == 0:
            try:
                yield SmallDisk(path, "tmpfs", DISK_BYTES)
            finally:
                if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
                    subprocess.run(["umount", "-l", str(path)], capture_output=True)
            return
        print(f"cannot mount a tmpfs ({mount.stderr.strip()}); using a file size limit instead")
    yield SmallDisk(path, "rlimit", DISK_BYTES)


@pytest.mark.parametrize("rows", [400, 150], ids=["fails-buffering", "fails-reading-back"])
@pytest.mark.parametrize("streaming", ["off", "on"])
def test_spill_disk_full_fails_cleanly_and_a_rerun_with_room_delivers(
        pg18_dsn: str, small_disk: SmallDisk, tmp_path: Path, streaming: str, rows: int) -> None:
    """A big transaction, 64 kB memory budget, 256 kB of disk: a clear error, then a clean rerun.

    The source commits three small transactions, the big one, two small ones. 400 rows of 3 kB
    (1.2 MB) overflow the spill file's 1 MB write buffer, so the disk fills while the transaction
    is still arriving; 150 rows (450 kB) stay in that buffer until the
    commit reads the file back, so the disk fills only then.
    """
    _setup(pg18_dsn)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        def small() -> int:
            return conn.execute("INSERT INTO t (v) VALUES ('small'), ('small') RETURNING xid").fetchone()[0]

        before = [small() for _ in range(3)]
        with conn.transaction():
            big = conn.execute(_random_rows(94) + " RETURNING xid", (rows,)).fetchall()[0][0]
        after = [small() for _ in range(2)]
    truth = _source_transactions(pg18_dsn)
    dsn = pg18_dsn + f" options='{SMALL_DECODING_MEM}'"
    common = {"dsn": dsn, "slot": SLOT, "publication": PUBLICATION, "memory_budget": BUDGET, "streaming": streaming,
              "until_xid": after[-1]}

    first = small_disk.run(**common)
    print(f"first run ({small_disk.kind}): {first.error_type}: {first.error_message}")
    assert first.error_type == "SpillError", f"expected a SpillError, got {first.error_type}: {first.error_message}"
    message = first.error_message or ""
    ran_out = "No space left on device" if small_disk.kind == "tmpfs" else "File too large"
    assert str(small_disk.path) in message and ran_out in message
    assert "free space" in message and "memory budget" in message and "spill directory elsewhere" in message
    assert "\n" not in message and "close failed" not in message
    assert first.failed_in == ("feed" if rows == 400 else "messages"), first.failed_in
    if first.failed_in == "feed":
        assert first.failure_sticks, "the assembler took more input after losing part of a transaction"
    assert [d.xid for d in first.delivered] == before, "only the transactions before the big one may be delivered"
    assert first.spill_files_left == [], f"spill files left behind: {first.spill_files_left}"
    assert _slot_confirmed(pg18_dsn) <= first.confirmed == first.delivered[-1].end_lsn

    second = run_spill_consumer(spill_dir=str(tmp_path / "roomy"), delivered_lsn=first.confirmed, **common)
    assert second.error_type is None, f"{second.error_type}: {second.error_message}"
    assert [d.xid for d in second.delivered] == [big, *after], "the rerun must deliver the big one and the rest, once"
    assert {d.xid: d.ids for d in second.delivered} == {x: truth[x] for x in (big, *after)}
    assert second.spilled_transactions >= 1 and second.spill_files_left == []
    assert any(d.streamed for d in second.delivered) == (streaming == "on")
