"""Text-mode values are rendered by the walsender with the settings walspark's parsers expect."""

from __future__ import annotations

import time

import psycopg

from walspark.protocol import Decoder, Insert
from walspark.source.options import StreamOptions
from walspark.source.stream import RawMessage, ReplicationStream


def test_walsender_renders_iso_dates_whatever_the_database_default(pg18_dsn):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        dbname = conn.info.dbname
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET DateStyle TO 'SQL, DMY'")
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET IntervalStyle TO 'sql_standard'")
        conn.execute("CREATE TABLE t (d date, ts timestamp, i interval)")
        conn.execute("CREATE PUBLICATION p FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        assert conn.execute("SHOW DateStyle").fetchone() == ("SQL, DMY",)  # what a plain session gets
        conn.execute("INSERT INTO t VALUES ('2024-02-29', '2024-02-29 13:14:15.5', '1 mon 2 days 03:04:05')")

    with ReplicationStream(pg18_dsn, "s", StreamOptions(("p",), binary=False)) as stream:
        decoder = Decoder(stream.options.proto_version)
        deadline = time.monotonic() + 30
        while True:
            item = stream.read(timeout=1.0)
            assert time.monotonic() < deadline
            if isinstance(item, RawMessage):
                message = decoder.decode(item.payload, lsn=item.data_start)
                if isinstance(message, Insert):
                    break
    assert message.new_tuple.values == (b"2024-02-29", b"2024-02-29 13:14:15.5", b"1 mon 2 days 03:04:05")
