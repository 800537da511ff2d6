"""A broad real schema through ``walspark run``: the Chinook sample database, with the types of real ones.

Chinook (a digital media store: artists, albums, tracks, playlists, customers, employees,
invoices) is a sample database many engines ship. Its DDL is ported here (the tables, keys and
references, not its data), with the column types a PostgreSQL schema of this kind has: an enum
(the media kind), domains (an e-mail over ``citext`` with a CHECK, a positive price over
``numeric(10,2)``), a composite (an address), ``hstore`` tags, ``text[]``, ``jsonb``,
``tsvector``, ``bytea`` cover art, ``interval`` durations, a ``tstzrange`` of validity, ``inet``,
``uuid``, and a TOASTed lyrics text that updates leave unchanged. ``invoice`` is partitioned by
month of its date (three partitions and a default), as pagila's ``payment`` is, and the playlist
membership table has no key (REPLICA IDENTITY FULL: a multiset). A seeded workload of inserts,
updates (an invoice moved to another month's partition among them) and deletes runs after the
snapshot, in two phases, each applied by a ``walspark run --once``.

Both partition settings: ``publish_via_partition_root = false`` (each partition is a table of
its own) and ``= true`` (the root's table holds every partition's rows). After the snapshot and
after each phase, every Delta table equals what the publication publishes, value by value (the
oracle, tests/scenarios/support.py).
"""

from __future__ import annotations

import json
import random

import psycopg
import pytest

from .support import assert_matches_publication, run_once

pytestmark = pytest.mark.spark

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS citext;
CREATE EXTENSION IF NOT EXISTS hstore;
CREATE SCHEMA chinook;
SET search_path = chinook, public;
CREATE TYPE media_kind AS ENUM ('MPEG audio', 'Protected AAC audio', 'Protected MPEG-4 video', 'AAC audio');
CREATE DOMAIN email AS citext CHECK (VALUE LIKE '%_@_%');
CREATE DOMAIN price AS numeric(10,2) CHECK (VALUE >= 0);
CREATE TYPE address AS (street text, city text, state text, country text, postal_code text);
CREATE TABLE artist (artist_id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE genre (genre_id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE media_type (media_type_id int PRIMARY KEY, name text NOT NULL, kind media_kind NOT NULL);
CREATE TABLE album (album_id int PRIMARY KEY, title text NOT NULL, artist_id int NOT NULL REFERENCES artist,
                    cover bytea, released date);
CREATE TABLE track (track_id int PRIMARY KEY, name text NOT NULL, album_id int REFERENCES album,
                    media_type_id int NOT NULL REFERENCES media_type, genre_id int REFERENCES genre,
                    composer text, duration interval NOT NULL, bytes bigint, unit_price price NOT NULL,
                    tags hstore, credits text[], search tsvector, lyrics text);
CREATE TABLE employee (employee_id int PRIMARY KEY, last_name text NOT NULL, first_name text NOT NULL,
                       title text, reports_to int REFERENCES employee, birth_date timestamp,
                       hire_date timestamp, address address, phone text, email email,
                       tenure tstzrange);
CREATE TABLE customer (customer_id int PRIMARY KEY, public_id uuid NOT NULL, first_name text NOT NULL,
                       last_name text NOT NULL, company text, address address, phone text,
                       email email NOT NULL, support_rep_id int REFERENCES employee,
                       last_seen_from inet, preferences jsonb);
CREATE TABLE invoice (invoice_id int, customer_id int NOT NULL REFERENCES customer,
                      invoice_date timestamptz NOT NULL, billing_address address, total price NOT NULL,
                      PRIMARY KEY (invoice_id, invoice_date)) PARTITION BY RANGE (invoice_date);
CREATE TABLE invoice_2026_01 PARTITION OF invoice FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
CREATE TABLE invoice_2026_02 PARTITION OF invoice FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
CREATE TABLE invoice_2026_03 PARTITION OF invoice FOR VALUES FROM ('2026-03-01') TO ('2026-04-01');
CREATE TABLE invoice_other PARTITION OF invoice DEFAULT;
CREATE TABLE invoice_line (invoice_line_id int PRIMARY KEY, invoice_id int NOT NULL,
                           track_id int NOT NULL REFERENCES track, unit_price price NOT NULL,
                           quantity int NOT NULL);
CREATE TABLE playlist (playlist_id int PRIMARY KEY, name text);
CREATE TABLE playlist_track (playlist_id int NOT NULL REFERENCES playlist, track_id int NOT NULL REFERENCES track);
ALTER TABLE playlist_track REPLICA IDENTITY FULL;
"""

TABLES = ("artist", "genre", "media_type", "album", "track", "employee", "customer", "invoice", "invoice_line",
          "playlist", "playlist_track")  # fmt: skip

KINDS = ("MPEG audio", "Protected AAC audio", "Protected MPEG-4 video", "AAC audio")
WORDS = ("rock", "blues", "O'Brien", "naïve", "日本", "quote\"d", "back\\slash", "tab\there", "", "NULL", "a=>b")


class Store:
    """Writes Chinook rows with seeded random values; keeps the ids it made, to update and delete."""

    def __init__(self, conn: psycopg.Connection, seed: int) -> None:
        self.conn, self.rng = conn, random.Random(seed)
        self.next_id: dict[str, int] = {}
        self.ids: dict[str, list[int]] = {t: [] for t in TABLES}

    def _id(self, table: str) -> int:
        self.next_id[table] = self.next_id.get(table, 0) + 1
        self.ids[table].append(self.next_id[table])
        return self.next_id[table]

    def word(self) -> str:
        return self.rng.choice(WORDS) + str(self.rng.randrange(100))

    def address(self) -> str | None:
        if self.rng.random() < 0.1:
            return None
        parts = [self.word(), self.word(), None if self.rng.random() < 0.3 else self.word(), "Brazil", "12345-678"]
        return "(" + ",".join("" if p is None else '"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"'
                              for p in parts) + ")"  # fmt: skip

    def exec(self, sql: str, params: list | None = None) -> None:
        self.conn.execute(sql, params)

    def seed(self, artists: int = 12, tracks: int = 60, customers: int = 20, invoices: int = 40) -> None:
        for table in ("artist", "genre", "playlist"):
            for _ in range(5 if table != "artist" else artists):
                self.exec(f"INSERT INTO {table} VALUES (%s, %s)", [self._id(table), self.word()])
        for kind in KINDS:
            self.exec("INSERT INTO media_type VALUES (%s, %s, %s)", [self._id("media_type"), kind.lower(), kind])
        for _ in range(artists * 2):
            self.add_album()
        for _ in range(tracks):
            self.add_track()
        manager = None
        for _ in range(6):
            manager = self.add_employee(manager)
        for _ in range(customers):
            self.add_customer()
        for _ in range(invoices):
            self.add_invoice()
        for _ in range(tracks):
            self.exec("INSERT INTO playlist_track VALUES (%s, %s)",
                      [self.rng.choice(self.ids["playlist"]), self.rng.choice(self.ids["track"])])  # fmt: skip

    def add_album(self) -> None:
        cover = self.rng.randbytes(self.rng.randrange(0, 64)) if self.rng.random() < 0.8 else None
        self.exec("INSERT INTO album VALUES (%s, %s, %s, %s, %s)",
                  [self._id("album"), self.word(), self.rng.choice(self.ids["artist"]), cover,
                   f"19{self.rng.randrange(50, 99)}-0{self.rng.randrange(1, 9)}-1{self.rng.randrange(0, 9)}"])  # fmt: skip

    def add_track(self) -> None:
        lyrics = "".join(self.rng.choice("abcdefghij klmnop\n") for _ in range(3000)) if self.rng.random() < 0.3 else None
        keys = [self.word() for _ in range(self.rng.randrange(4))]
        values = [self.rng.choice([None, "x", "NULL", "", self.word()]) for _ in keys]
        self.exec("""INSERT INTO track VALUES (%s, %s, %s, %s, %s, %s, make_interval(secs => %s), %s, %s,
                     hstore(%s::text[], %s::text[]), %s, to_tsvector('english', %s), %s)""",
                  [self._id("track"), self.word(), self.rng.choice(self.ids["album"] + [None]),
                   self.rng.choice(self.ids["media_type"]), self.rng.choice(self.ids["genre"] + [None]),
                   self.word() if self.rng.random() < 0.7 else None, self.rng.randrange(1, 600_000) / 1000,
                   self.rng.randrange(10**9) if self.rng.random() < 0.9 else None,
                   f"{self.rng.randrange(0, 300)}.{self.rng.randrange(100):02d}", keys, values,
                   [self.word(), None, self.word()][: self.rng.randrange(4)], f"{self.word()} {self.word()}",
                   lyrics])  # fmt: skip

    def add_employee(self, manager: int | None) -> int:
        eid = self._id("employee")
        self.exec("""INSERT INTO employee VALUES (%s, %s, %s, %s, %s, '1962-02-18 00:00:00', %s, %s, %s, %s,
                     tstzrange(%s, NULL))""",
                  [eid, self.word(), self.word(), self.word(), manager, f"2002-08-14 0{eid % 10}:00:00.123456",
                   self.address(), "+1 (780) 428-9482", f"e{eid}@Chinook.com", "2002-08-14 00:00+00"])  # fmt: skip
        return eid

    def add_customer(self) -> None:
        cid = self._id("customer")
        prefs = json.dumps({"newsletter": self.rng.choice([True, False, None]), "note": self.rng.choice(["é", "x", ""]),
                            "genres": [self.rng.randrange(5), 2.5]}, ensure_ascii=False)  # fmt: skip
        self.exec("INSERT INTO customer VALUES (%s, gen_random_uuid(), %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                  [cid, self.word(), self.word(), self.word() if self.rng.random() < 0.3 else None, self.address(),
                   None, f"C{cid}@Example.org", self.rng.choice(self.ids["employee"]),
                   f"10.{cid % 256}.0.{self.rng.randrange(256)}" if self.rng.random() < 0.8 else "::1", prefs])  # fmt: skip

    def invoice_date(self) -> str:
        month = self.rng.choice(["01", "02", "03", "05"])  # "05": the default partition
        return f"2026-{month}-{self.rng.randrange(10, 28)} {self.rng.randrange(24):02d}:15:00.5+02"

    def add_invoice(self) -> None:
        iid = self._id("invoice")
        self.exec("INSERT INTO invoice VALUES (%s, %s, %s, %s, 0)",
                  [iid, self.rng.choice(self.ids["customer"]), self.invoice_date(), self.address()])  # fmt: skip
        for _ in range(self.rng.randrange(1, 4)):
            self.exec("INSERT INTO invoice_line VALUES (%s, %s, %s, 0.99, %s)",
                      [self._id("invoice_line"), iid, self.rng.choice(self.ids["track"]), self.rng.randrange(1, 3)])  # fmt: skip
        self.exec("UPDATE invoice SET total = (SELECT coalesce(sum(unit_price * quantity), 0) FROM invoice_line"
                  " WHERE invoice_id = %s) WHERE invoice_id = %s", [iid, iid])  # fmt: skip

    def phase(self, steps: int, deletes: bool) -> None:
        """A mix of the store's daily changes; deletes only when ``deletes``."""
        rng = self.rng
        for _ in range(steps):
            pick = rng.randrange(10)
            track = rng.choice(self.ids["track"])
            if pick == 0:
                self.add_track()
            elif pick == 1:
                self.add_invoice()
            elif pick == 2:  # the lyrics (TOASTed) are left unchanged
                self.exec("UPDATE track SET unit_price = unit_price + 1, tags = tags || hstore(%s, NULL),"
                          " credits = array_append(credits, NULL) WHERE track_id = %s", [self.word(), track])  # fmt: skip
            elif pick == 3:  # an invoice moves to another month: another partition
                self.exec("UPDATE invoice SET invoice_date = %s WHERE invoice_id = %s",
                          [self.invoice_date(), rng.choice(self.ids["invoice"])])  # fmt: skip
            elif pick == 4:
                self.exec("UPDATE customer SET address = %s, preferences = preferences || '{\"vip\": true}',"
                          " last_seen_from = '192.168.1.7' WHERE customer_id = %s",
                          [self.address(), rng.choice(self.ids["customer"])])  # fmt: skip
            elif pick == 5:
                self.exec("UPDATE employee SET tenure = tstzrange(lower(tenure), now()), title = NULL"
                          " WHERE employee_id = %s", [rng.choice(self.ids["employee"])])  # fmt: skip
            elif pick == 6:
                self.exec("INSERT INTO playlist_track VALUES (%s, %s)", [rng.choice(self.ids["playlist"]), track])
            elif pick == 7 and deletes:  # one copy of a playlist entry (the table is a multiset)
                self.exec("DELETE FROM playlist_track WHERE ctid = (SELECT min(ctid) FROM playlist_track"
                          " WHERE track_id = %s)", [track])  # fmt: skip
            elif pick == 8 and deletes:
                line = rng.choice(self.ids["invoice_line"])
                self.exec("DELETE FROM invoice_line WHERE invoice_line_id = %s", [line])
            elif pick == 9 and deletes:
                self.exec("DELETE FROM invoice WHERE invoice_id = %s AND NOT EXISTS"
                          " (SELECT FROM invoice_line l WHERE l.invoice_id = invoice.invoice_id)",
                          [rng.choice(self.ids["invoice"])])  # fmt: skip
            else:
                self.exec("UPDATE album SET cover = NULL, title = title || '!' WHERE album_id = %s",
                          [rng.choice(self.ids["album"])])  # fmt: skip


@pytest.mark.parametrize("via_root", [False, True], ids=["leaves", "via-root"])
def test_chinook_snapshot_then_stream(spark, pg18_dsn, tmp_path, via_root):
    target = str(tmp_path / "lake")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("SET search_path = chinook, public")
        store = Store(conn, seed=36)
        store.seed()
        tables = ", ".join(f"chinook.{t}" for t in TABLES)
        conn.execute(f"CREATE PUBLICATION pub FOR TABLE {tables} WITH (publish_via_partition_root = {via_root})")
        out = run_once(pg18_dsn, "pub", "s", target)
        assert "not known to walspark" not in out
        assert_matches_publication(conn, spark, target, "pub", context="after the snapshot")
        for phase, deletes in (("inserts and updates", False), ("with deletes", True)):
            store.phase(150, deletes)
            out = run_once(pg18_dsn, "pub", "s", target)
            assert "not known to walspark" not in out
            assert_matches_publication(conn, spark, target, "pub", context=f"after the phase {phase!r}")
