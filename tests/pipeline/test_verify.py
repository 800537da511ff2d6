"""``Pipeline.verify()`` and ``walspark verify`` against a pipeline that keeps streaming.

Real PostgreSQL 18 and the suite's Spark session: no false difference while a writer changes
about 1,000 rows a second; then, the writer stopped and the pipeline still streaming, a row
changed, a row deleted and a row added behind walspark's back in the Delta table, and a row
added twice to a REPLICA IDENTITY FULL table (a multiset), each reported with its key or row,
and the command exits 1.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest
from click.testing import CliRunner

from walspark.storage.layout import TargetLayout

pytestmark = pytest.mark.spark

ROWS = 30_000


class _Writer(threading.Thread):
    """About ``rate`` row changes a second on ``items`` (updates, inserts, deletes) and a few on ``tags``."""

    def __init__(self, dsn: str, seconds: float, rate: int = 1000, per_transaction: int = 50) -> None:
        super().__init__(name="verify-test-writer", daemon=True)
        self.dsn, self.seconds, self.rate, self.per = dsn, seconds, rate, per_transaction
        self.changes, self.error, self.ran = 0, None, 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        rng, next_id = random.Random(5), ROWS + 1
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                began = time.monotonic()
                while not self.stop.is_set() and time.monotonic() - began < self.seconds:
                    with conn.transaction():
                        ids = [rng.randint(100, ROWS) for _ in range(self.per - 4)]
                        conn.execute("UPDATE items SET qty = qty + 1, note = 'w' || qty WHERE id = ANY(%s)", (ids,))
                        conn.execute("INSERT INTO items SELECT g, 1, 'new', now(), 1.5, current_date"
                                     " FROM generate_series(%s::int, %s::int) g", (next_id, next_id + 1))  # fmt: skip
                        conn.execute("DELETE FROM items WHERE id = %s", (rng.randint(100, ROWS),))
                        conn.execute("INSERT INTO tags VALUES ('live', %s)", (rng.randint(0, 2),))
                    next_id += 2
                    self.changes += self.per
                    ahead = self.changes / self.rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)
                self.ran = time.monotonic() - began
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc


def _caught_up(dsn: str, settings, handle) -> None:  # type: ignore[no-untyped-def]
    from walspark.pipeline.verify import lake_applied

    deadline = time.monotonic() + 300
    with psycopg.connect(dsn, autocommit=True) as conn:
        point = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0]
        while not lake_applied(conn, settings, int(point))[0]:
            assert handle.is_active and time.monotonic() < deadline, handle.status()
            time.sleep(0.3)


def test_verify_while_streaming_and_edits_behind_walsparks_back(spark, pg18_dsn, tmp_path):
    from walspark import Pipeline
    from walspark.cli import commands  # noqa: F401  (registers the subcommands)
    from walspark.cli.main import cli

    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL, note text, at timestamptz,"
                     " price numeric(10, 2), day date, weight float8)")  # fmt: skip
        conn.execute("INSERT INTO items SELECT g, g %% 7, 'n' || g, timestamptz '2025-01-01 00:00:00+00' + g * interval"
                     " '1 minute', g * 0.25, date '2024-01-01' + g %% 400, g / 3.0 FROM generate_series(1, %s) g",
                     (ROWS,))  # fmt: skip
        conn.execute("CREATE TABLE tags (tag text, n int)")
        conn.execute("ALTER TABLE tags REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO tags SELECT 't' || g % 50, g % 3 FROM generate_series(1, 500) g")  # duplicates
        conn.execute("CREATE PUBLICATION shop FOR TABLE items, tags")
    target = str(tmp_path / "lake")
    lines: list[str] = []
    pipeline = (Pipeline(spark, dsn=pg18_dsn, publication="shop", slot="shop_slot", target=target)
                .trigger_seconds(0.5).on_progress(lines.append))  # fmt: skip
    handle = pipeline.start()
    try:
        deadline = time.monotonic() + 300
        while handle.status().state != "streaming":
            assert handle.is_active and time.monotonic() < deadline, (handle.status(), lines[-5:])
            time.sleep(0.3)
        # the writer runs through the first pass and the first re-reads (the stream well behind it
        # when the comparison starts); the re-reads after it stops are the ones that converge
        writer = _Writer(pg18_dsn, seconds=15)
        writer.start()
        time.sleep(3)
        live = pipeline.verify()
        writer.join()
        rate = writer.changes / writer.ran
        assert writer.error is None, writer.error
        assert live.matches, (live, lines[-10:])
        assert rate > 500, f"the writer made only {rate:.0f} changes/s: the check proves little"
        items, tags = live.tables
        assert (items.table, items.key, tags.table, tags.multiset) == ("public.items", ("id",), "public.tags", True)
        assert items.not_compared == ("weight (double precision)",), items
        assert items.source_rows > ROWS * 0.99 and items.still_changing < 50, items
        print(f"verify while writing {rate:.0f} changes/s: {live.seconds:.1f} s, {items.rechecked} range(s) re-read, "
              f"{items.still_changing} key(s) still changing", [x for x in lines if x.startswith("verify")])  # fmt: skip

        # behind walspark's back, the pipeline still streaming, once it has applied the writer's last changes
        _caught_up(pg18_dsn, pipeline.settings(), handle)
        path = TargetLayout(target).table("public", "items")
        spark.sql(f"UPDATE delta.`{path}` SET note = 'tampered' WHERE id = 5")
        spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 7")
        spark.sql(f"INSERT INTO delta.`{path}` (id, qty, note, at, price, day, weight) VALUES (99999999, 1, 'stray',"
                  " TIMESTAMP '2025-01-01 00:00:00', 1.00, DATE '2025-01-01', 0.5)")  # fmt: skip
        tags_path = TargetLayout(target).table("public", "tags")
        spark.sql(f"INSERT INTO delta.`{tags_path}` VALUES ('t1', 1), ('t1', 1)")
        result = CliRunner().invoke(cli, ["verify", "--dsn", pg18_dsn, "--publication", "shop", "--slot", "shop_slot",
                                          "--target", target])  # fmt: skip
        assert handle.is_active, "verify stopped the pipeline"
    finally:
        if "writer" in locals():
            writer.stop.set()
        assert handle.stop(timeout=120)
    out = result.output
    assert result.exit_code == 1, (out, repr(result.exception))
    assert "public.items: key id='5': differs (note: source 'n5', lake 'tampered')" in out, out
    assert "public.items: key id='7': missing from the lake (id='7', qty=" in out, out
    assert "public.items: key id='99999999': only in the lake (id='99999999', qty='1', note='stray'" in out, out
    assert "public.tags: row tag='t1', n='1': 4 time(s) in the source, 6 in the lake" in out, out
    assert "4 difference(s) in public.items, public.tags" in out and "walspark resnapshot" in out, out
    (summary,) = [line.split() for line in out.splitlines() if line.startswith("public.items ")]
    assert summary[5:] == ["3", "0"], out  # differences, still changing


def test_lake_grid_steps_fall_in_the_ranges_of_their_keys(spark):
    """The lake side groups rows by grid step (floor of key / grid, clamped to the bounds' span)
    and adds the steps up into ranges: every key, negative, on a bound, beyond either end, must
    land in the range the source's bounds put it in (the range filter both sides re-read by)."""
    from walspark.pipeline.verify import _Plan

    keys = [-(2**63), -(2**62) - 7, -1001, -1000, -999, -501, -500, -1, 0, 1, 499, 500, 999, 1000, 1001, 2**63 - 1]
    plans = [_Plan(None, ("id",), ("id::text",), ("CAST(`id` AS STRING)",), ("id",), (), bounds, 0, 0, grid)  # type: ignore[arg-type]
             for grid, bounds in ((1, (-3, 0, 7)), (250, (-1000, -500, 0, 500, 1000)), (7, (-7000, 14, 700)))]  # fmt: skip
    columns = [e for i, p in enumerate(plans) for e in (f"{p.grid_expr()} AS s{i}", f"{p.range_expr(False)} AS r{i}")]
    for row in spark.createDataFrame([(k,) for k in keys], "id bigint").selectExpr("id", *columns).collect():  # one job
        for i, plan in enumerate(plans):
            expected = sum(1 for b in plan.bounds or () if b <= row.id)  # the range whose key filter holds the key
            step, case = row[f"s{i}"], row[f"r{i}"]
            assert plan.grid_range(step) == case == expected, (plan.grid, plan.bounds, row.id, step, case)


def test_both_engines_hash_every_compared_value_alike(spark, pg18_dsn, tmp_path):
    """The checksums of a range are equal on both sides for the same rows, with either row hash:
    CRC-32 (PostgreSQL 18 and later) and md5 (earlier servers; with and without ``0x`` literals),
    over values whose text forms need care: non-ASCII text, NULLs, padded bpchar, numerics,
    infinite and BC timestamps and dates, times, booleans, uuids, jsonb, an enum."""
    import dataclasses

    from walspark.pipeline import RunSettings
    from walspark.pipeline.verify import _Lake, _plan, _Source
    from walspark.source.catalog import published_tables
    from walspark.spark.snapshot.initial import run_snapshot

    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'happy')")
        conn.execute("CREATE TABLE odd (id bigint PRIMARY KEY, t text, c char(5), n numeric(20, 4), ts timestamptz,"
                     " tsn timestamp, d date, tm time, b boolean, u uuid, j jsonb, m mood, v varchar(9))")  # fmt: skip
        conn.execute("""INSERT INTO odd VALUES
            (1, 'plain', 'ab', 1.5, '2025-01-01 00:00:00.000001+00', '2025-01-01 12:00', '2025-01-01', '00:00:01.5',
             true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2]}', 'sad', 'v'),
            (2, 'école 日本 🎉', 'xyz  ', -99999999.9999, 'infinity', '-infinity', 'infinity', '23:59:59.999999',
             false, NULL, '"s"', 'happy', ''),
            (3, NULL, NULL, NULL, '-infinity', '0044-03-15 12:00 BC', '-infinity', NULL, NULL, NULL, NULL, NULL, NULL),
            (-4, '', '', 0, '1969-12-31 23:59:59.5+00', '1900-01-01', '0044-03-15 BC', '12:00', true,
             '00000000-0000-0000-0000-000000000000', 'null', 'sad', 'nine char')""")
        conn.execute("INSERT INTO odd SELECT g, 'r' || g, 'c', g / 7.0, now(), now(), current_date, now()::time,"
                     " g % 2 = 0, gen_random_uuid(), jsonb_build_object('g', g), 'happy', 'x'"
                     " FROM generate_series(10, 60000) g")  # fmt: skip
        conn.execute("CREATE PUBLICATION p FOR TABLE odd")
    target = str(tmp_path / "lake")
    run_snapshot(spark, pg18_dsn, "p", "p_slot", target)
    with psycopg.connect(pg18_dsn, autocommit=True, client_encoding="UTF8") as conn:
        (table,) = published_tables(conn, "p")
        plan = _plan(conn, table)
        assert plan.crc and plan.ranges > 1 and not plan.not_compared, plan
        lake = _Lake(spark, RunSettings(pg18_dsn, "p", "p_slot", target))
        frame = lake.frame(plan)
        assert frame is not None
        for variant in (plan, dataclasses.replace(plan, crc=False), dataclasses.replace(plan, crc=False, hex_literals=False),
                        dataclasses.replace(plan, bounds=None, buckets=7)):  # fmt: skip
            source, _ = _Source(conn).checksums(variant)
            assert source == lake.checksums(variant, frame), variant
            assert sum(n for n, _ in source.values()) == 59_995
            odd, _ = _Source(conn).rows(variant, range(variant.ranges))
            assert odd == lake.rows(variant, frame, range(variant.ranges))


def test_a_slot_or_table_verify_cannot_compare_is_refused_in_one_line(pg18_dsn, tmp_path):
    """Before any table is read (so even a lake that matches does not hide a wrong --slot): a slot
    that does not exist, and a table the publication does not publish, each in one line naming the fix."""
    from walspark.pipeline import RunSettings
    from walspark.pipeline.verify import verify_tables
    from walspark.source.errors import OptionError, SlotNotFound

    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION p FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    target = str(tmp_path / "lake")
    with pytest.raises(SlotNotFound) as lost:
        verify_tables(None, RunSettings(pg18_dsn, "p", "nosuch", target), print)  # type: ignore[arg-type]
    assert str(lost.value) == ("replication slot 'nosuch' does not exist: verify compares the lake of a pipeline's "
                               "slot; give the --slot of walspark run"), lost.value  # fmt: skip
    with pytest.raises(OptionError) as unpublished:
        verify_tables(None, RunSettings(pg18_dsn, "p", "s", target), print, tables=["public.nosuch"])  # type: ignore[arg-type]
    assert "public.nosuch: not published by p; give a table the publication publishes" in str(unpublished.value)
    assert "\n" not in str(lost.value) + str(unpublished.value)
