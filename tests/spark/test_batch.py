"""Batch reads: a capture file decoded in parallel partitions, and a peek of a live slot."""

from __future__ import annotations

import decimal

import psycopg
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from walspark.capture import CaptureFile, CaptureInfo, write_capture
from walspark.source.sqlinterface import slot_changes

from .support import Workload, create_source, per_table, slot_confirmed

pytestmark = pytest.mark.spark

OPTIONS = {"proto_version": "4", "publication_names": "pub", "streaming": "on"}


def _rows(df, table: str | None = None):
    """(table, op, key, seq) in per-table commit order, like sink_changes."""
    out = []
    for r in df.orderBy("_commit_lsn", "_seq").collect():
        key = "id" if r["_table"] == "acct" else "k"
        if table:
            new, old = (r.asDict() if r["_op"] != "D" else None), r["_old"]
        else:
            name = f"{r['_schema']}.{r['_table']}"
            new, old = r[name], r[name + ":old"]
        if r["_op"] == "T":
            out.append((r["_table"], "T", None, None))
        else:
            out.append((r["_table"], r["_op"], old[key], None) if r["_op"] == "D"
                       else (r["_table"], r["_op"], new[key], new["seq"]))
    return out


def test_capture_is_read_in_parallel_partitions_with_every_change_once(spark, source_dsn, tmp_path):
    work = Workload(source_dsn)
    work.run(150)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        # a large transaction, streamed by the server (small logical_decoding_work_mem), with a
        # rolled-back savepoint in the middle: its changes must not appear
        conn.execute("ALTER SYSTEM SET logical_decoding_work_mem = '64kB'")
        conn.execute("SELECT pg_reload_conf()")
        with conn.transaction():
            for _ in range(60):
                work.txn(conn)
            conn.execute("SAVEPOINT sp")
            conn.execute("INSERT INTO acct SELECT g, 'gone', 0, -1 FROM generate_series(900000, 903000) g")
            conn.execute("ROLLBACK TO SAVEPOINT sp")
        conn.execute("ALTER TABLE acct ADD COLUMN note text")  # a second shape of acct in the capture
    work.run(100)
    capture = tmp_path / "c.parquet"
    with psycopg.connect(source_dsn) as conn:
        write_capture(capture, slot_changes(conn, "s", OPTIONS), CaptureInfo(OPTIONS, conn.info.server_version, "s"))
        conn.rollback()
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM RESET logical_decoding_work_mem")
        conn.execute("SELECT pg_reload_conf()")

    df = spark.read.format("pgoutput").option("partitionRows", "600").load(str(capture))
    parts = df.rdd.getNumPartitions()
    assert parts >= 4
    assert df.schema["public.acct"].dataType.fieldNames() == ["id", "owner", "balance", "seq", "note"]
    by_partition = dict(df.groupBy(F.spark_partition_id().alias("p")).count().collect())
    assert len([p for p, n in by_partition.items() if n]) >= 3  # the work really is spread over the tasks

    got = _rows(df)
    assert per_table(got) == per_table(work.changes)
    assert len(got) == len(work.changes)
    single = spark.read.format("pgoutput").option("numPartitions", "1").load(str(capture))
    assert single.rdd.getNumPartitions() == 1
    assert sorted(map(str, _rows(single))) == sorted(map(str, got))
    ipc_capture = tmp_path / "c.arrow"  # the same capture as Arrow IPC
    write_capture(ipc_capture, CaptureFile(capture), CaptureFile(capture).info)
    as_ipc = spark.read.format("pgoutput").option("numPartitions", "3").load(str(ipc_capture))
    assert as_ipc.rdd.getNumPartitions() >= 2 and _rows(as_ipc) == got  # cuts only where no transaction is open

    acct = spark.read.format("pgoutput").option("table", "public.acct").load(str(capture))
    assert acct.schema["balance"].dataType == T.DecimalType(12, 2)
    assert acct.schema["_old"].dataType.fieldNames() == ["id", "owner", "balance", "seq", "note"]
    first = acct.where("_op = 'I'").orderBy("_commit_lsn", "_seq").first()
    assert first["id"] == 1 and first["balance"] == decimal.Decimal("0.25") and first["note"] is None
    assert per_table(_rows(acct, "acct"))["acct"] == per_table(work.changes)["acct"]
    ev = spark.read.format("pgoutput").option("table", "ev").load(str(capture))
    assert ev.schema["tags"].dataType == T.ArrayType(T.StringType(), True)
    assert ev.schema["at"].dataType == T.TimestampType()
    assert ev.where("_op = 'I'").count() == sum(1 for c in work.changes if c[0] == "ev")


def test_peek_reads_the_slot_without_consuming_it(spark, source_dsn):
    work = Workload(source_dsn)
    work.run(40)
    with psycopg.connect(source_dsn, autocommit=True) as conn:  # user types come from the catalog
        conn.execute("CREATE TYPE mood AS ENUM ('ok', 'sad')")
        conn.execute("CREATE DOMAIN posint AS int CHECK (VALUE > 0)")
        conn.execute("CREATE TABLE feel (id posint PRIMARY KEY, m mood, ms mood[])")
        conn.execute("ALTER PUBLICATION pub ADD TABLE feel")
        conn.execute("INSERT INTO feel VALUES (7, 'sad', ARRAY['ok', 'sad']::mood[])")
        conn.execute("TRUNCATE ev")
    before = slot_confirmed(source_dsn)
    reader = spark.read.format("pgoutput").options(dsn=source_dsn, slot="s", publication="pub", peek="true")
    df = reader.load()
    assert df.schema.fieldNames()[-6:] == ["public.acct", "public.acct:old", "public.ev", "public.ev:old",
                                           "public.feel", "public.feel:old"]
    assert df.schema["public.feel"].dataType.simpleString() == "struct<id:int,m:string,ms:array<string>>"
    got = per_table(_rows(df.where("_table <> 'feel'")))
    assert got["acct"] == per_table(work.changes)["acct"]
    assert got["ev"] == per_table(work.changes)["ev"] + [("T", None, None)]
    feel = df.where("_table = 'feel'").select("`public.feel`.*").collect()
    assert [r.asDict() for r in feel] == [{"id": 7, "m": "sad", "ms": ["ok", "sad"]}]
    acct = reader.option("table", "acct").load()
    assert acct.schema["seq"].dataType == T.LongType()
    assert per_table(_rows(acct, "acct"))["acct"] == per_table(work.changes)["acct"]
    assert slot_confirmed(source_dsn) == before
    with pytest.raises(Exception, match="peek=true"):
        spark.read.format("pgoutput").options(dsn=source_dsn, slot="s", publication="pub").load().count()


@pytest.mark.pg15
def test_peek_on_postgresql_15_protocol_3(spark, pg15_dsn):
    create_source(pg15_dsn)
    with psycopg.connect(pg15_dsn, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION pub SET TABLE acct (id, owner, seq), ev")  # a column list (15+)
    work = Workload(pg15_dsn)
    work.run(10)
    acct = (spark.read.format("pgoutput").options(dsn=pg15_dsn, slot="s", publication="pub", peek="true")
            .option("table", "acct").load())
    assert acct.schema.fieldNames()[11:14] == ["id", "owner", "seq"]  # only the published columns
    assert per_table(_rows(acct, "acct"))["acct"] == per_table(work.changes)["acct"]


def test_arrow_facts_and_table_split_equal_spark_s(spark, source_dsn, tmp_path):
    """Change-log mode reads a batch once as Arrow on the driver (issue 16): its facts and its
    per-table rows must be exactly what the Spark aggregation and projection give."""
    from walspark.spark.lake.facts import arrow_tables_facts, tables_facts
    from walspark.spark.lake.frames import arrow_table_changes, table_changes, table_changes_schema

    work = Workload(source_dsn)
    work.run(20)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE acct REPLICA IDENTITY FULL")  # a second identity within the batch
        work.txn(conn)
        conn.execute("TRUNCATE ev")
        work.txn(conn)
        conn.execute("TRUNCATE ev")
        conn.execute("UPDATE acct SET id = id + 100000 WHERE id = 3")
    capture = tmp_path / "c.parquet"
    with psycopg.connect(source_dsn) as conn:
        write_capture(capture, slot_changes(conn, "s", OPTIONS), CaptureInfo(OPTIONS, conn.info.server_version, "s"))
        conn.rollback()
    keys = {("public", "ev"): ("id",)}
    both = spark.read.format("pgoutput").load(str(capture))
    acct = spark.read.format("pgoutput").option("table", "public.acct").load(str(capture))
    for df in (both, acct):
        arrow = df.toArrow()
        got = arrow_tables_facts(arrow, lambda s, t: keys.get((s, t)))
        want = tables_facts(df, lambda s, t: keys.get((s, t)))
        assert got == want
        assert got[("public", "acct")].identities == 2
    assert len(got := arrow_tables_facts(both.toArrow(), lambda s, t: None)[("public", "ev")].truncates) == 2, got
    # the changes by operation the pipeline counts (its metrics): the workload's, plus the key update
    ops = {t: dict(f.ops) for (_, t), f in arrow_tables_facts(both.toArrow(), lambda s, t: None).items()}
    issued = {t: {op: sum(1 for c in work.changes if c[:2] == (t, op)) for op in "IUD"} for t in ("acct", "ev")}
    issued["acct"]["U"] += 1
    issued["ev"]["T"] = 2
    assert ops == {t: {op: n for op, n in counts.items() if n} for t, counts in issued.items()}, (ops, issued)
    arrow = both.toArrow()
    for table in ("acct", "ev"):
        spark_rows = table_changes(both, "public", table).toArrow()
        arrow_rows = arrow_table_changes(arrow, "public", table)
        # the schema the driver gives a table's rows made from Arrow: the projection's own
        assert table_changes_schema(both.schema, "public", table) == table_changes(both, "public", table).schema
        assert table_changes_schema(acct.schema, "public", "acct") == acct.schema
        assert arrow_rows.schema.names == spark_rows.schema.names
        assert arrow_rows.to_pylist() == spark_rows.to_pylist()
