"""PostgreSQL's subscription TAP workloads (``src/test/subscription/t/*.pl``), ported as data.

Each :class:`Workload` is the publisher side of one TAP test (or of one subscription of it): the
setup SQL (tables, initial rows, the publication with the test's options), the publication a
``walspark run`` subscribes to, and the steps — the publisher SQL between two of the test's
catch-up points (where the Perl waits for the subscriber and checks it). The subscriber's checks
are ported through the oracle (every published table equals what the publication publishes);
only where the publication does not publish every action (``publish = insert``) do the TAP's own
expectations (:class:`Expect`) replace it for that table.

How a port departs from its ``.pl`` is said in its ``note``; the common departures:

- ``walspark run`` takes one publication, so a TAP subscription to several publications is
  ported as one publication holding the same tables with the same options and row filters, when
  the tables are disjoint and the options equal (pgoutput publishes each table exactly as it
  would have); where the union of publications is the point (OR-ed filters), it is not ported.
- A table the TAP creates, or adds to a publication, after the subscription is created here in
  the setup (a table joining the publication later is issue 14).
- Rows the TAP inserts on the subscriber, so that a TRUNCATE or DELETE has something to remove,
  are inserted on the publisher instead (the mirror then has the rows to lose).
- Catch-up points that only served subscriber-side checks (conflict logs, subscriber DDL,
  triggers, ALTER SUBSCRIPTION) are merged with the next one: each ``walspark run`` costs seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Expect:
    """A TAP check on one table, for tables the oracle cannot judge (their publication does not
    publish every change): ``SELECT <select> FROM <table>`` on the Delta table must give ``value``."""

    table: str  # schema.table
    select: tuple[str, ...]
    value: tuple[object, ...]


# A statement runs on the main session, or on a named second session (an interleaved transaction).
Statement = str | tuple[str, str]


@dataclass(frozen=True, slots=True)
class Step:
    """The publisher SQL up to one catch-up point of the TAP test."""

    sql: tuple[Statement, ...]
    expect: tuple[Expect, ...] = ()
    # tables whose mirror rightly differs from the publisher at this catch-up (PostgreSQL's own
    # subscriber differs too, e.g. a leaf TRUNCATE not replicated through the partition root):
    # checked by ``expect`` instead of the oracle here
    diverging: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Workload:
    """One TAP test's publisher workload, replicated through one publication."""

    name: str
    source: str  # the .pl file
    setup: str
    publication: str
    steps: tuple[Step, ...]
    walsender: str = ""  # -c settings for the walsender (what makes transactions stream)
    unmirrored: tuple[str, ...] = ()  # tables the publication does not mirror (checked by Expect)
    note: str = ""

    @property
    def slot(self) -> str:
        return "tap_" + "".join(c if c.isalnum() else "_" for c in self.name.lower())


STREAM_64KB = "-c logical_decoding_work_mem=64kB"
STREAM_IMMEDIATE = "-c debug_logical_replication_streaming=immediate"


def _s(*sql: Statement, expect: tuple[Expect, ...] = (), diverging: tuple[str, ...] = ()) -> Step:
    return Step(tuple(sql), expect, diverging)


# ----------------------------------------------------------------------------- 001_rep_changes

_001_SETUP = """
CREATE FUNCTION public.pg_get_replica_identity_index(int) RETURNS regclass LANGUAGE sql AS 'SELECT 1/0';
CREATE TABLE tab_notrep AS SELECT generate_series(1,10) AS a;
CREATE TABLE tab_ins AS SELECT generate_series(1,1002) AS a;
CREATE TABLE tab_full AS SELECT generate_series(1,10) AS a;
CREATE TABLE tab_full2 (x text);
INSERT INTO tab_full2 VALUES ('a'), ('b'), ('b');
CREATE TABLE tab_rep (a int primary key);
CREATE TABLE tab_mixed (a int primary key, b text, c numeric);
INSERT INTO tab_mixed (a, b, c) VALUES (1, 'foo', 1.1);
CREATE TABLE tab_include (a int, b text, CONSTRAINT covering PRIMARY KEY(a) INCLUDE(b));
CREATE TABLE tab_full_pk (a int primary key, b text);
ALTER TABLE tab_full_pk REPLICA IDENTITY FULL;
CREATE TABLE tab_nothing (a int);
ALTER TABLE tab_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE tab_no_replidentity_index(c1 int);
CREATE INDEX idx_no_replidentity_index ON tab_no_replidentity_index(c1);
CREATE TABLE tab_no_col();
INSERT INTO tab_no_col default VALUES;
CREATE PUBLICATION tap_pub;
CREATE PUBLICATION tap_pub_ins_only WITH (publish = insert);
ALTER PUBLICATION tap_pub ADD TABLE tab_rep, tab_full, tab_full2, tab_mixed, tab_include, tab_nothing,
  tab_full_pk, tab_no_replidentity_index, tab_no_col;
ALTER PUBLICATION tap_pub_ins_only ADD TABLE tab_ins;
"""

_001_TAB_INS_CHANGES = ("INSERT INTO tab_ins SELECT generate_series(1,50)",
                        "DELETE FROM tab_ins WHERE a > 20",
                        "UPDATE tab_ins SET a = -a")

W001 = Workload(
    "001_rep_changes", "001_rep_changes.pl", _001_SETUP, "tap_pub",
    (
        _s(*_001_TAB_INS_CHANGES,
           "INSERT INTO tab_rep SELECT generate_series(1,50)",
           "DELETE FROM tab_rep WHERE a > 20",
           "UPDATE tab_rep SET a = -a",
           "INSERT INTO tab_mixed VALUES (2, 'bar', 2.2)",
           "INSERT INTO tab_full_pk VALUES (1, 'foo'), (2, 'baz')",
           "INSERT INTO tab_nothing VALUES (generate_series(1,20))",
           "INSERT INTO tab_include SELECT generate_series(1,50)",
           "DELETE FROM tab_include WHERE a > 20",
           "UPDATE tab_include SET a = -a",
           "INSERT INTO tab_no_replidentity_index VALUES(1)",
           "INSERT INTO tab_no_col default VALUES"),
        # duplicate rows, then REPLICA IDENTITY FULL updates of them
        _s("INSERT INTO tab_full SELECT generate_series(1,10)",
           "ALTER TABLE tab_full REPLICA IDENTITY FULL",
           "ALTER TABLE tab_full2 REPLICA IDENTITY FULL",
           "ALTER TABLE tab_ins REPLICA IDENTITY FULL",
           "UPDATE tab_full SET a = a * a",
           "UPDATE tab_full2 SET x = 'bb' WHERE x = 'b'",
           "UPDATE tab_mixed SET b = 'baz' WHERE a = 1",
           "UPDATE tab_full_pk SET b = 'bar' WHERE a = 1"),
        # (the TAP deletes these rows on the subscriber first: conflicts there)
        _s("UPDATE tab_full_pk SET b = 'quux' WHERE a = 1",
           "UPDATE tab_full SET a = a + 1 WHERE a = 25",
           "DELETE FROM tab_full_pk WHERE a = 2"),
        _s("UPDATE tab_mixed SET b = repeat('xyzzy', 100000) WHERE a = 2"),  # a TOASTed value
        _s("UPDATE tab_mixed SET c = 3.3 WHERE a = 2"),  # the TOASTed value unchanged
        _s("UPDATE tab_mixed SET b = 'bar', c = 2.2 WHERE a = 2",
           "ALTER TABLE tab_mixed DROP COLUMN b",
           "UPDATE tab_mixed SET c = 11.11 WHERE a = 1"),
        _s("UPDATE tab_mixed SET c = 22.22 WHERE a = 2"),
        _s("INSERT INTO tab_ins SELECT generate_series(1001,1100)",
           "DELETE FROM tab_rep",
           "ALTER PUBLICATION tap_pub_ins_only SET (publish = 'insert, delete')",
           "DELETE FROM tab_ins WHERE a > 0",
           "INSERT INTO tab_full VALUES(0)",
           "INSERT INTO tab_notrep VALUES (11)"),
    ),
    note="subscription tap_sub's tap_pub; tap_pub_ins_only is 001_rep_changes:ins_only. The TAP's "
         "ALTER SUBSCRIPTION SET PUBLICATION (so DELETE FROM tab_rep is skipped there), publisher "
         "restart, ALTER PUBLICATION DROP/ADD TABLE (issue 14) and the temp1/temp2 two-publication "
         "subscription are left out; catch-ups that only checked subscriber conflicts are merged.")

W001_INS_ONLY = Workload(
    "001_rep_changes:ins_only", "001_rep_changes.pl", _001_SETUP, "tap_pub_ins_only",
    (
        _s(*_001_TAB_INS_CHANGES, expect=(Expect("public.tab_ins", ("count(*)", "min(a)", "max(a)"), (1052, 1, 1002)),)),
        _s("ALTER TABLE tab_ins REPLICA IDENTITY FULL",
           "INSERT INTO tab_ins SELECT generate_series(1001,1100)",
           expect=(Expect("public.tab_ins", ("count(*)", "min(a)", "max(a)"), (1152, 1, 1100)),)),
        # publish = 'insert, delete': a REPLICA IDENTITY FULL delete removes ONE of two equal rows
        _s("ALTER PUBLICATION tap_pub_ins_only SET (publish = 'insert, delete')",
           "DELETE FROM tab_ins WHERE a > 0",
           expect=(Expect("public.tab_ins", ("count(*)", "min(a)", "max(a)"), (1052, 1, 1002)),)),
    ),
    unmirrored=("public.tab_ins",),
    note="subscription tap_sub's tap_pub_ins_only (publish = insert): the TAP's own counts, since "
         "\"data are different on provider and subscriber\".")

# ----------------------------------------------------------------------------- 002_types

_002_SETUP = """
CREATE EXTENSION hstore WITH SCHEMA public;
CREATE TABLE public.tst_one_array (a INTEGER PRIMARY KEY, b INTEGER[]);
CREATE TABLE public.tst_arrays (a INTEGER[] PRIMARY KEY, b TEXT[], c FLOAT[], d INTERVAL[]);
CREATE TYPE public.tst_enum_t AS ENUM ('a', 'b', 'c', 'd', 'e');
CREATE TABLE public.tst_one_enum (a INTEGER PRIMARY KEY, b public.tst_enum_t);
CREATE TABLE public.tst_enums (a public.tst_enum_t PRIMARY KEY, b public.tst_enum_t[]);
CREATE TYPE public.tst_comp_basic_t AS (a FLOAT, b TEXT, c INTEGER);
CREATE TYPE public.tst_comp_enum_t AS (a FLOAT, b public.tst_enum_t, c INTEGER);
CREATE TYPE public.tst_comp_enum_array_t AS (a FLOAT, b public.tst_enum_t[], c INTEGER);
CREATE TABLE public.tst_one_comp (a INTEGER PRIMARY KEY, b public.tst_comp_basic_t);
CREATE TABLE public.tst_comps (a public.tst_comp_basic_t PRIMARY KEY, b public.tst_comp_basic_t[]);
CREATE TABLE public.tst_comp_enum (a INTEGER PRIMARY KEY, b public.tst_comp_enum_t);
CREATE TABLE public.tst_comp_enum_array (a public.tst_comp_enum_t PRIMARY KEY, b public.tst_comp_enum_t[]);
CREATE TABLE public.tst_comp_one_enum_array (a INTEGER PRIMARY KEY, b public.tst_comp_enum_array_t);
CREATE TABLE public.tst_comp_enum_what (a public.tst_comp_enum_array_t PRIMARY KEY, b public.tst_comp_enum_array_t[]);
CREATE TYPE public.tst_comp_mix_t AS (a public.tst_comp_basic_t, b public.tst_comp_basic_t[],
  c public.tst_enum_t, d public.tst_enum_t[]);
CREATE TABLE public.tst_comp_mix_array (a public.tst_comp_mix_t PRIMARY KEY, b public.tst_comp_mix_t[]);
CREATE TABLE public.tst_range (a INTEGER PRIMARY KEY, b int4range);
CREATE TABLE public.tst_range_array (a INTEGER PRIMARY KEY, b TSTZRANGE, c int8range[]);
CREATE TABLE public.tst_hstore (a INTEGER PRIMARY KEY, b public.hstore);
CREATE PUBLICATION tap_pub FOR ALL TABLES;
"""

_002_INSERTS = r"""
INSERT INTO tst_one_array (a, b) VALUES (1, '{1, 2, 3}'), (2, '{2, 3, 1}'), (3, '{3, 2, 1}'), (4, '{4, 3, 2}'),
  (5, '{5, NULL, 3}');
INSERT INTO tst_arrays (a, b, c, d) VALUES
  ('{1, 2, 3}', '{"a", "b", "c"}', '{1.1, 2.2, 3.3}', '{"1 day", "2 days", "3 days"}'),
  ('{2, 3, 1}', '{"b", "c", "a"}', '{2.2, 3.3, 1.1}', '{"2 minutes", "3 minutes", "1 minute"}'),
  ('{3, 1, 2}', '{"c", "a", "b"}', '{3.3, 1.1, 2.2}', '{"3 years", "1 year", "2 years"}'),
  ('{4, 1, 2}', '{"d", "a", "b"}', '{4.4, 1.1, 2.2}', '{"4 years", "1 year", "2 years"}'),
  ('{5, NULL, NULL}', '{"e", NULL, "b"}', '{5.5, 1.1, NULL}', '{"5 years", NULL, NULL}');
INSERT INTO tst_one_enum (a, b) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, NULL);
INSERT INTO tst_enums (a, b) VALUES ('a', '{b, c}'), ('b', '{c, a}'), ('c', '{b, a}'), ('d', '{c, b}'), ('e', '{d, NULL}');
INSERT INTO tst_one_comp (a, b) VALUES (1, ROW(1.0, 'a', 1)), (2, ROW(2.0, 'b', 2)), (3, ROW(3.0, 'c', 3)),
  (4, ROW(4.0, 'd', 4)), (5, ROW(NULL, NULL, 5));
INSERT INTO tst_comps (a, b) VALUES
  (ROW(1.0, 'a', 1), ARRAY[ROW(1, 'a', 1)::tst_comp_basic_t]),
  (ROW(2.0, 'b', 2), ARRAY[ROW(2, 'b', 2)::tst_comp_basic_t]),
  (ROW(3.0, 'c', 3), ARRAY[ROW(3, 'c', 3)::tst_comp_basic_t]),
  (ROW(4.0, 'd', 4), ARRAY[ROW(4, 'd', 3)::tst_comp_basic_t]),
  (ROW(5.0, 'e', NULL), ARRAY[NULL, ROW(5, NULL, 5)::tst_comp_basic_t]);
INSERT INTO tst_comp_enum (a, b) VALUES (1, ROW(1.0, 'a', 1)), (2, ROW(2.0, 'b', 2)), (3, ROW(3.0, 'c', 3)),
  (4, ROW(4.0, 'd', 4)), (5, ROW(NULL, 'e', NULL));
INSERT INTO tst_comp_enum_array (a, b) VALUES
  (ROW(1.0, 'a', 1), ARRAY[ROW(1, 'a', 1)::tst_comp_enum_t]),
  (ROW(2.0, 'b', 2), ARRAY[ROW(2, 'b', 2)::tst_comp_enum_t]),
  (ROW(3.0, 'c', 3), ARRAY[ROW(3, 'c', 3)::tst_comp_enum_t]),
  (ROW(4.0, 'd', 3), ARRAY[ROW(3, 'd', 3)::tst_comp_enum_t]),
  (ROW(5.0, 'e', 3), ARRAY[ROW(3, 'e', 3)::tst_comp_enum_t, NULL]);
INSERT INTO tst_comp_one_enum_array (a, b) VALUES (1, ROW(1.0, '{a, b, c}', 1)), (2, ROW(2.0, '{a, b, c}', 2)),
  (3, ROW(3.0, '{a, b, c}', 3)), (4, ROW(4.0, '{c, b, d}', 4)), (5, ROW(5.0, '{NULL, e, NULL}', 5));
INSERT INTO tst_comp_enum_what (a, b) VALUES
  (ROW(1.0, '{a, b, c}', 1), ARRAY[ROW(1, '{a, b, c}', 1)::tst_comp_enum_array_t]),
  (ROW(2.0, '{b, c, a}', 2), ARRAY[ROW(2, '{b, c, a}', 1)::tst_comp_enum_array_t]),
  (ROW(3.0, '{c, a, b}', 1), ARRAY[ROW(3, '{c, a, b}', 1)::tst_comp_enum_array_t]),
  (ROW(4.0, '{c, b, d}', 4), ARRAY[ROW(4, '{c, b, d}', 4)::tst_comp_enum_array_t]),
  (ROW(5.0, '{c, NULL, b}', NULL), ARRAY[ROW(5, '{c, e, b}', 1)::tst_comp_enum_array_t]);
INSERT INTO tst_comp_mix_array (a, b) VALUES
  (ROW(ROW(1,'a',1), ARRAY[ROW(1,'a',1)::tst_comp_basic_t, ROW(2,'b',2)::tst_comp_basic_t], 'a', '{a,b,NULL,c}'),
   ARRAY[ROW(ROW(1,'a',1), ARRAY[ROW(1,'a',1)::tst_comp_basic_t, ROW(2,'b',2)::tst_comp_basic_t, NULL], 'a',
             '{a,b,c}')::tst_comp_mix_t]);
INSERT INTO tst_range (a, b) VALUES (1, '[1, 10]'), (2, '[2, 20]'), (3, '[3, 30]'), (4, '[4, 40]'), (5, '[5, 50]');
INSERT INTO tst_range_array (a, b, c) VALUES
  (1, tstzrange('Mon Aug 04 00:00:00 2014 CEST'::timestamptz, 'infinity'), '{"[1,2]", "[10,20]"}'),
  (2, tstzrange('Mon Aug 04 00:00:00 2014 CEST'::timestamptz - interval '2 days',
                'Mon Aug 04 00:00:00 2014 CEST'::timestamptz), '{"[2,3]", "[20,30]"}'),
  (3, tstzrange('Mon Aug 04 00:00:00 2014 CEST'::timestamptz - interval '3 days',
                'Mon Aug 04 00:00:00 2014 CEST'::timestamptz), '{"[3,4]"}'),
  (4, tstzrange('Mon Aug 04 00:00:00 2014 CEST'::timestamptz - interval '4 days',
                'Mon Aug 04 00:00:00 2014 CEST'::timestamptz), '{"[4,5]", NULL, "[40,50]"}'),
  (5, NULL, NULL);
INSERT INTO tst_hstore (a, b) VALUES (1, '"a"=>"1"'), (2, '"zzz"=>"foo"'), (3, '"123"=>"321"'),
  (4, '"yellow horse"=>"moaned"');
"""

_002_UPDATES = r"""
UPDATE tst_one_array SET b = '{4, 5, 6}' WHERE a = 1;
UPDATE tst_one_array SET b = '{4, 5, 6, 1}' WHERE a > 3;
UPDATE tst_arrays SET b = '{"1a", "2b", "3c"}', c = '{1.0, 2.0, 3.0}',
  d = '{"1 day 1 second", "2 days 2 seconds", "3 days 3 second"}' WHERE a = '{1, 2, 3}';
UPDATE tst_arrays SET b = '{"c", "d", "e"}', c = '{3.0, 4.0, 5.0}',
  d = '{"3 day 1 second", "4 days 2 seconds", "5 days 3 second"}' WHERE a[1] > 3;
UPDATE tst_one_enum SET b = 'c' WHERE a = 1;
UPDATE tst_one_enum SET b = NULL WHERE a > 3;
UPDATE tst_enums SET b = '{e, NULL}' WHERE a = 'a';
UPDATE tst_enums SET b = '{e, d}' WHERE a > 'c';
UPDATE tst_one_comp SET b = ROW(1.0, 'A', 1) WHERE a = 1;
UPDATE tst_one_comp SET b = ROW(NULL, 'x', -1) WHERE a > 3;
UPDATE tst_comps SET b = ARRAY[ROW(9, 'x', -1)::tst_comp_basic_t] WHERE (a).a = 1.0;
UPDATE tst_comps SET b = ARRAY[NULL, ROW(9, 'x', NULL)::tst_comp_basic_t] WHERE (a).a > 3.9;
UPDATE tst_comp_enum SET b = ROW(1.0, NULL, NULL) WHERE a = 1;
UPDATE tst_comp_enum SET b = ROW(4.0, 'd', 44) WHERE a > 3;
UPDATE tst_comp_enum_array SET b = ARRAY[NULL, ROW(3, 'd', 3)::tst_comp_enum_t] WHERE a = ROW(1.0, 'a', 1)::tst_comp_enum_t;
UPDATE tst_comp_enum_array SET b = ARRAY[ROW(1, 'a', 1)::tst_comp_enum_t, ROW(2, 'b', 2)::tst_comp_enum_t] WHERE (a).a > 3;
UPDATE tst_comp_one_enum_array SET b = ROW(1.0, '{a, e, c}', NULL) WHERE a = 1;
UPDATE tst_comp_one_enum_array SET b = ROW(4.0, '{c, b, d}', 4) WHERE a > 3;
UPDATE tst_comp_enum_what SET b = ARRAY[NULL, ROW(1, '{a, b, c}', 1)::tst_comp_enum_array_t,
  ROW(NULL, '{a, e, c}', 2)::tst_comp_enum_array_t] WHERE (a).a = 1;
UPDATE tst_comp_enum_what SET b = ARRAY[ROW(5, '{a, b, c}', 5)::tst_comp_enum_array_t] WHERE (a).a > 3;
UPDATE tst_comp_mix_array SET b[2] = NULL WHERE ((a).a).a = 1;
UPDATE tst_range SET b = '[100, 1000]' WHERE a = 1;
UPDATE tst_range SET b = '(1, 90)' WHERE a > 3;
UPDATE tst_range_array SET c = '{"[100, 1000]"}' WHERE a = 1;
UPDATE tst_range_array SET b = tstzrange('Mon Aug 04 00:00:00 2014 CEST'::timestamptz, 'infinity'),
  c = '{NULL, "[11,9999999]"}' WHERE a > 3;
UPDATE tst_hstore SET b = '"updated"=>"value"' WHERE a < 3;
UPDATE tst_hstore SET b = '"also"=>"updated"' WHERE a = 3;
"""

_002_DELETES = r"""
DELETE FROM tst_one_array WHERE a = 1;
DELETE FROM tst_one_array WHERE b = '{2, 3, 1}';
DELETE FROM tst_arrays WHERE a = '{1, 2, 3}';
DELETE FROM tst_arrays WHERE a[1] = 2;
DELETE FROM tst_one_enum WHERE a = 1;
DELETE FROM tst_one_enum WHERE b = 'b';
DELETE FROM tst_enums WHERE a = 'a';
DELETE FROM tst_enums WHERE b[1] = 'b';
DELETE FROM tst_one_comp WHERE a = 1;
DELETE FROM tst_one_comp WHERE (b).a = 2.0;
DELETE FROM tst_comps WHERE (a).b = 'a';
DELETE FROM tst_comps WHERE ROW(3, 'c', 3)::tst_comp_basic_t = ANY(b);
DELETE FROM tst_comp_enum WHERE a = 1;
DELETE FROM tst_comp_enum WHERE (b).a = 2.0;
DELETE FROM tst_comp_enum_array WHERE a = ROW(1.0, 'a', 1)::tst_comp_enum_t;
DELETE FROM tst_comp_enum_array WHERE ROW(3, 'c', 3)::tst_comp_enum_t = ANY(b);
DELETE FROM tst_comp_one_enum_array WHERE a = 1;
DELETE FROM tst_comp_one_enum_array WHERE 'a' = ANY((b).b);
DELETE FROM tst_comp_enum_what WHERE (a).a = 1;
DELETE FROM tst_comp_enum_what WHERE (b[1]).b = '{c, a, b}';
DELETE FROM tst_comp_mix_array WHERE ((a).a).a = 1;
DELETE FROM tst_range WHERE a = 1;
DELETE FROM tst_range WHERE '[10,20]' && b;
DELETE FROM tst_range_array WHERE a = 1;
DELETE FROM tst_range_array WHERE tstzrange('Mon Aug 04 00:00:00 2014 CEST'::timestamptz,
  'Mon Aug 05 00:00:00 2014 CEST'::timestamptz) && b;
DELETE FROM tst_hstore WHERE a = 1;
"""

W002 = Workload("002_types", "002_types.pl", _002_SETUP, "tap_pub",
                (_s(_002_INSERTS), _s(_002_UPDATES), _s(_002_DELETES)),
                note="the TAP's expected text of every value is the oracle's comparison with the publisher")

# ----------------------------------------------------------------------------- 005-009

W005 = Workload(
    "005_encoding", "005_encoding.pl",
    "CREATE TABLE test1 (a int, b text); CREATE PUBLICATION mypub FOR ALL TABLES;", "mypub",
    (_s(r"INSERT INTO test1 VALUES (1, E'Mot\xc3\xb6rhead')"),),
    note="the subscriber's LATIN1 database does not apply: the UTF-8 value must arrive unchanged")

W006 = Workload(
    "006_rewrite", "006_rewrite.pl",
    "CREATE TABLE test1 (a int, b text); CREATE PUBLICATION mypub FOR ALL TABLES;", "mypub",
    (_s("INSERT INTO test1 (a, b) VALUES (1, 'one'), (2, 'two');"),
     _s("ALTER TABLE test1 ADD c int NOT NULL DEFAULT 0;"),  # a heap rewrite; rows 1, 2 now have c = 0
     _s("INSERT INTO test1 (a, b, c) VALUES (3, 'three', 33);")))

W007 = Workload(
    "007_ddl", "007_ddl.pl",
    "CREATE TABLE test1 (a int, b text); CREATE PUBLICATION mypub FOR ALL TABLES;", "mypub",
    (_s(),),
    note="the publisher side only: an empty published table and a catch-up with nothing to apply; "
         "the rest is subscription DDL")

W008 = Workload(
    "008_diff_schema", "008_diff_schema.pl",
    """CREATE TABLE test_tab (a int primary key, b varchar);
    INSERT INTO test_tab VALUES (1, 'foo'), (2, 'bar');
    CREATE TABLE test_tab2 (a int);
    CREATE PUBLICATION tap_pub FOR ALL TABLES;""", "tap_pub",
    (_s("UPDATE test_tab SET b = encode(sha256(b::bytea), 'hex')"),
     _s("UPDATE test_tab SET b = encode(sha256(a::text::bytea), 'hex')"),
     _s("INSERT INTO test_tab VALUES (3, 'baz')", "INSERT INTO test_tab2 VALUES (1)")),
    note="test_tab2 is created in the setup (the TAP creates it later, a table joining FOR ALL "
         "TABLES: issue 14); the subscriber's extra columns do not apply")

W009 = Workload(
    "009_matviews", "009_matviews.pl",
    """CREATE PUBLICATION mypub FOR ALL TABLES;
    CREATE TABLE test1 (a int PRIMARY KEY, b text);
    INSERT INTO test1 (a, b) VALUES (1, 'one'), (2, 'two');""", "mypub",
    (_s("CREATE MATERIALIZED VIEW testmv1 AS SELECT * FROM test1;"),),
    note="logical decoding produces changes for the materialized view's heap; they must be ignored")

# ----------------------------------------------------------------------------- 010_truncate

_010_SETUP = """
CREATE TABLE tab1 (a int PRIMARY KEY);
CREATE TABLE tab2 (a int PRIMARY KEY);
CREATE TABLE tab3 (a int PRIMARY KEY);
CREATE TABLE tab4 (x int PRIMARY KEY, y int REFERENCES tab3);
CREATE TABLE tab5 (a int);
CREATE PUBLICATION pub1 FOR TABLE tab1, tab3, tab4, tab5;
CREATE PUBLICATION pub2 FOR TABLE tab2 WITH (publish = insert);
"""

W010 = Workload(
    "010_truncate", "010_truncate.pl", _010_SETUP, "pub1",
    (_s("INSERT INTO tab1 VALUES (1), (2), (3)",
        "INSERT INTO tab3 VALUES (1), (2), (3)",
        "INSERT INTO tab4 VALUES (11, 1), (111, 1), (22, 2)"),
     _s("TRUNCATE tab1", "TRUNCATE tab1 RESTART IDENTITY"),
     _s("TRUNCATE tab3, tab4"),
     _s("INSERT INTO tab1 VALUES (1), (2), (3)", "INSERT INTO tab5 VALUES (1), (2), (3)"),
     _s("TRUNCATE tab1, tab2", "TRUNCATE tab5")),
    note="pub1, pub3 and pub5 (same options, disjoint tables) are one publication; the rows the TAP "
         "inserts on the subscriber are inserted on the publisher; synchronous_standby_names (server-"
         "wide) and the two subscriptions of tab5 are left out")

W010_PUB2 = Workload(
    "010_truncate:pub2", "010_truncate.pl", _010_SETUP, "pub2",
    (_s("INSERT INTO tab2 VALUES (1), (2), (3)", "TRUNCATE tab2",
        expect=(Expect("public.tab2", ("count(*)", "min(a)", "max(a)"), (3, 1, 3)),)),
     _s("ALTER PUBLICATION pub2 SET (publish = 'insert, truncate')", "TRUNCATE tab2",
        expect=(Expect("public.tab2", ("count(*)", "min(a)", "max(a)"), (0, None, None)),))),
    unmirrored=("public.tab2",),
    note="publish = insert: the TRUNCATE is not replicated until the publication publishes it")

# ----------------------------------------------------------------------------- 011, 012, 014

_011_SETUP = """
CREATE TABLE tab1 (a int PRIMARY KEY, b int GENERATED ALWAYS AS (a * 2) STORED);
INSERT INTO tab1 (a) VALUES (1), (2), (3);
CREATE PUBLICATION pub1 FOR ALL TABLES;
CREATE PUBLICATION pub_gen FOR ALL TABLES WITH (publish_generated_columns = stored);
"""
_011_STEPS = (_s("INSERT INTO tab1 VALUES (4), (5)", "UPDATE tab1 SET a = 6 WHERE a = 5"),)

W011 = Workload("011_generated", "011_generated.pl", _011_SETUP, "pub1", _011_STEPS,
                note="the generated column is not published (publish_generated_columns = none)")
W011_STORED = Workload(
    "011_generated:stored", "011_generated.pl", _011_SETUP, "pub_gen", _011_STEPS,
    note="PostgreSQL 18's 011_generated.pl also publishes stored generated columns "
         "(publish_generated_columns = stored): the snapshot and the stream must carry b")

W012 = Workload(
    "012_collation", "012_collation.pl",
    r"""CREATE TABLE tab1 (a text PRIMARY KEY, b text);
    INSERT INTO tab1 VALUES (U&'\00E4bc', 'foo');
    CREATE TABLE tab2 (a text, b text);
    ALTER TABLE tab2 REPLICA IDENTITY FULL;
    INSERT INTO tab2 VALUES (U&'\00E4bc', 'foo');
    CREATE PUBLICATION pub1 FOR ALL TABLES;""", "pub1",
    (_s("UPDATE tab1 SET b = 'bar' WHERE b = 'foo'"), _s("UPDATE tab2 SET b = 'bar' WHERE b = 'foo'")),
    note="the subscriber's nondeterministic collation does not apply; copy_data = false is a snapshot here")

W014 = Workload(
    "014_binary", "014_binary.pl",
    """CREATE TABLE public.test_numerical (a INTEGER PRIMARY KEY, b NUMERIC, c FLOAT, d BIGINT);
    CREATE TABLE public.test_arrays (a INTEGER[] PRIMARY KEY, b NUMERIC[], c TEXT[]);
    CREATE PUBLICATION tpub FOR ALL TABLES;
    INSERT INTO public.test_numerical (a, b, c, d) VALUES (1, 1.2, 1.3, 10), (2, 2.2, 2.3, 20);
    INSERT INTO public.test_arrays (a, b, c) VALUES ('{1,2,3}', '{1.1, 1.2, 1.3}', '{"one", "two", "three"}'),
      ('{3,1,2}', '{1.3, 1.1, 1.2}', '{"three", "one", "two"}');
    CREATE TYPE myvarchar;
    CREATE FUNCTION myvarcharin(cstring, oid, integer) RETURNS myvarchar
      LANGUAGE internal IMMUTABLE PARALLEL SAFE STRICT AS 'varcharin';
    CREATE FUNCTION myvarcharout(myvarchar) RETURNS cstring
      LANGUAGE internal IMMUTABLE PARALLEL SAFE STRICT AS 'varcharout';
    CREATE TYPE myvarchar (input = myvarcharin, output = myvarcharout);
    CREATE TABLE public.test_myvarchar (a myvarchar);
    INSERT INTO public.test_myvarchar (a) VALUES ('a');
    CREATE TABLE public.test_mismatching_types (a bigint PRIMARY KEY);
    INSERT INTO public.test_mismatching_types (a) VALUES (1), (2);""", "tpub",
    (_s("""INSERT INTO public.test_arrays (a, b, c) VALUES ('{2,1,3}', '{1.2, 1.1, 1.3}', '{"two", "one", "three"}'),
           ('{1,3,2}', '{1.1, 1.3, 1.2}', '{"one", "three", "two"}');
        INSERT INTO public.test_numerical (a, b, c, d) VALUES (3, 3.2, 3.3, 30), (4, 4.2, 4.3, 40);"""),
     _s("UPDATE public.test_arrays SET b[1] = 42, c = NULL; UPDATE public.test_numerical SET b = 42, c = NULL;"),
     _s("INSERT INTO public.test_numerical (a, b, c, d) VALUES (5, 5.2, 5.3, 50);",
        """INSERT INTO public.test_arrays (a, b, c) VALUES ('{2,3,1}', '{1.2, 1.3, 1.1}', '{"two", "three", "one"}');""",
        """CREATE FUNCTION myvarcharsend(myvarchar) RETURNS bytea
             LANGUAGE internal STABLE PARALLEL SAFE STRICT AS 'varcharsend';
           CREATE FUNCTION myvarcharrecv(internal, oid, integer) RETURNS myvarchar
             LANGUAGE internal STABLE PARALLEL SAFE STRICT AS 'varcharrecv';
           ALTER TYPE myvarchar SET (send = myvarcharsend, receive = myvarcharrecv);""",
        "INSERT INTO public.test_myvarchar (a) VALUES ('b')")),
    note="test_myvarchar (a type without send/receive: no binary COPY) and test_mismatching_types "
         "are created in the setup (the TAP adds them with REFRESH PUBLICATION); the row 'b' is added "
         "so the stream carries the type after it gains send/receive; the subscriber's binary on/off "
         "switches are merged")

# ----------------------------------------------------------------------------- 013_partition

#: 013's tables (shared with test_partitions.py): tab1 (its first partition's columns in another
#: order, a default partition) and the sub-partitioned tab4.
PARTITION_013_TAB1 = """
CREATE TABLE tab1 (a int PRIMARY KEY, b text) PARTITION BY LIST (a);
CREATE TABLE tab1_1 (b text, a int NOT NULL);
ALTER TABLE tab1 ATTACH PARTITION tab1_1 FOR VALUES IN (1, 2, 3);
CREATE TABLE tab1_2 PARTITION OF tab1 FOR VALUES IN (4, 5, 6);
CREATE TABLE tab1_def PARTITION OF tab1 DEFAULT;
"""
PARTITION_013_TAB4 = """
CREATE TABLE tab4 (a int PRIMARY KEY) PARTITION BY LIST (a);
CREATE TABLE tab4_1 PARTITION OF tab4 FOR VALUES IN (-1, 0, 1) PARTITION BY LIST (a);
CREATE TABLE tab4_1_1 PARTITION OF tab4_1 FOR VALUES IN (-1, 0, 1);
"""

W013 = Workload(
    "013_partition", "013_partition.pl",
    "CREATE PUBLICATION pub1; CREATE PUBLICATION pub_all FOR ALL TABLES;" + PARTITION_013_TAB1
    + "ALTER PUBLICATION pub1 ADD TABLE tab1, tab1_1;", "pub1",
    (_s("INSERT INTO tab1 VALUES (1)", "INSERT INTO tab1_1 (a) VALUES (3)", "INSERT INTO tab1_2 VALUES (5)",
        "INSERT INTO tab1 VALUES (0)"),
     _s("UPDATE tab1 SET a = 2 WHERE a = 1", "UPDATE tab1 SET a = 6 WHERE a = 5",
        "UPDATE tab1 SET a = 4 WHERE a = 6", "UPDATE tab1 SET a = 6 WHERE a = 4"),
     # updates that move a row to another partition: a delete and an insert
     _s("UPDATE tab1 SET a = 1 WHERE a = 0", "UPDATE tab1 SET a = 4 WHERE a = 1"),
     _s("DELETE FROM tab1 WHERE a IN (2, 3, 5)", "DELETE FROM tab1_2"),
     _s("INSERT INTO tab1 (a) VALUES (1), (2), (5)", "TRUNCATE tab1_2"),
     _s("TRUNCATE tab1", "INSERT INTO tab1 VALUES (1, 'foo'), (4, 'bar'), (10, 'baz')"),
     _s("UPDATE tab1 SET b = 'quux' WHERE a = 4", "DELETE FROM tab1")),
    note="replication through the leaf partitions (publish_via_partition_root off): subscription sub1 "
         "(pub1; sub2's pub_all publishes the same leaves). The rows subscriber1 holds before the "
         "TRUNCATE are inserted on the publisher; subscriber-side conflicts and triggers do not apply")

#: 013's tab2 (its first partition's columns in another order) and tab3 (for pub_viaroot, whose
#: tab3_1 goes as itself): shared with test_partitions.py.
PARTITION_013_TAB2_TAB3 = """
CREATE TABLE tab2 (a int PRIMARY KEY, b text) PARTITION BY LIST (a);
CREATE TABLE tab2_1 (b text, a int NOT NULL);
ALTER TABLE tab2 ATTACH PARTITION tab2_1 FOR VALUES IN (0, 1, 2, 3);
CREATE TABLE tab2_2 PARTITION OF tab2 FOR VALUES IN (5, 6);
CREATE TABLE tab3 (a int PRIMARY KEY, b text) PARTITION BY LIST (a);
CREATE TABLE tab3_1 PARTITION OF tab3 FOR VALUES IN (0, 1, 2, 3, 5, 6);
"""

_013_ROOT_SETUP = PARTITION_013_TAB1 + PARTITION_013_TAB4 + PARTITION_013_TAB2_TAB3 + """
CREATE TABLE tab5 (a int NOT NULL, b int);
CREATE UNIQUE INDEX tab5_a_idx ON tab5 (a);
ALTER TABLE tab5 REPLICA IDENTITY USING INDEX tab5_a_idx;
CREATE PUBLICATION pub_all FOR ALL TABLES WITH (publish_via_partition_root = true);
CREATE PUBLICATION pub_viaroot FOR TABLE tab2, tab2_1, tab3_1 WITH (publish_via_partition_root = true);
CREATE PUBLICATION pub_lower_level FOR TABLE tab4_1 WITH (publish_via_partition_root = true);
INSERT INTO tab2 VALUES (1);
INSERT INTO tab4 VALUES (-1);
"""

_COUNT_MIN_MAX_A = ("count(*)", "min(a)", "max(a)")


def _013_root_steps(truncate_kept: tuple[str, ...]) -> tuple[Step, ...]:
    """The root-identity part of 013; ``truncate_kept``: the published roots whose leaf TRUNCATE is
    not replicated (pgoutput sends a leaf's TRUNCATE only when the leaf itself is published)."""
    return (
        _s("INSERT INTO tab1 VALUES (1), (0)", "INSERT INTO tab1_1 (a) VALUES (3)", "INSERT INTO tab1_2 VALUES (5)",
           "INSERT INTO tab2 VALUES (0), (3), (5)", "INSERT INTO tab3 VALUES (1), (0), (3), (5)",
           "INSERT INTO tab4 VALUES (0)", "INSERT INTO tab4 VALUES (1)"),
        _s("UPDATE tab1 SET a = 6 WHERE a = 5", "UPDATE tab2 SET a = 6 WHERE a = 5", "UPDATE tab3 SET a = 6 WHERE a = 5"),
        _s("UPDATE tab1 SET a = 2 WHERE a = 6", "UPDATE tab2 SET a = 2 WHERE a = 6", "UPDATE tab3 SET a = 2 WHERE a = 6"),
        _s("DELETE FROM tab1", "DELETE FROM tab2", "DELETE FROM tab3"),
        _s("INSERT INTO tab1 VALUES (1), (2), (5)", "INSERT INTO tab2 VALUES (1), (2), (5)",
           "TRUNCATE tab1_2, tab2_1, tab3_1",  # not replicated through the roots
           expect=tuple(Expect(t, _COUNT_MIN_MAX_A, (3, 1, 5)) for t in truncate_kept),
           diverging=truncate_kept),
        _s("TRUNCATE tab1, tab2, tab3"),
        # the leaf-to-root map is rebuilt when the root gains a column
        _s("ALTER TABLE tab2 DROP b, ADD COLUMN c text DEFAULT 'pub_tab2', ADD b text",
           "INSERT INTO tab2 (a, b) VALUES (1, 'xxx'), (3, 'yyy'), (5, 'zzz')",
           "INSERT INTO tab2 (a, b, c) VALUES (6, 'aaa', 'xxx_c')"),
        _s("UPDATE tab2 SET b = 'quux' WHERE a = 5", "DELETE FROM tab2 WHERE a = 1",
           "UPDATE tab2 SET b = 'quux' WHERE a = 3"),
        _s("INSERT INTO tab5 VALUES (1, 1)", "UPDATE tab5 SET a = 2 WHERE a = 1", "UPDATE tab5 SET a = 3 WHERE a = 2"),
        _s("ALTER TABLE tab5 DROP COLUMN b, ADD COLUMN c INT", "ALTER TABLE tab5 ADD COLUMN b INT",
           "UPDATE tab5 SET c = 1 WHERE a = 3", "UPDATE tab5 SET a = 4 WHERE a = 3"),
    )


_013_ROOT_NOTE = ("replication through the partition root. tab5 is created in the setup (the TAP "
                  "adds it later: issue 14); catch-ups that only served subscriber conflicts, "
                  "subscriber DDL or the subscription's publication order are merged. "
                  "pub_lower_level alone is not ported (its point is the union with pub_all)")

W013_ROOT = Workload("013_partition:pub_all", "013_partition.pl", _013_ROOT_SETUP, "pub_all",
                     _013_root_steps(("public.tab1", "public.tab2")), note=_013_ROOT_NOTE)
W013_VIAROOT = Workload("013_partition:pub_viaroot", "013_partition.pl", _013_ROOT_SETUP, "pub_viaroot",
                        _013_root_steps(("public.tab2",))[:8],
                        note=_013_ROOT_NOTE + "; tab3_1's parent is not published: it goes as itself "
                                              "(tab5's steps publish nothing here and are left out)")

# ----------------------------------------------------------------------------- 015-019 streaming

_STREAM_SETUP_VARCHAR = """
CREATE TABLE test_tab (a int primary key, b varchar);
INSERT INTO test_tab VALUES (1, 'foo'), (2, 'bar');
CREATE PUBLICATION tap_pub FOR TABLE test_tab;
"""
_STREAM_SETUP_BYTEA = """
CREATE TABLE test_tab (a int primary key, b bytea);
INSERT INTO test_tab VALUES (1, 'foo'), (2, 'bar');
"""

W015 = Workload(
    "015_stream", "015_stream.pl", _STREAM_SETUP_VARCHAR, "tap_pub",
    (_s(("s2", """BEGIN;
        INSERT INTO test_tab SELECT i, md5(i::text) FROM generate_series(3, 5000) s(i);
        UPDATE test_tab SET b = md5(b) WHERE mod(a,2) = 0;
        DELETE FROM test_tab WHERE mod(a,3) = 0;"""),
        """BEGIN;
        INSERT INTO test_tab SELECT i, md5(i::text) FROM generate_series(5001, 9999) s(i);
        DELETE FROM test_tab WHERE a > 5000;
        COMMIT;""",
        ("s2", "COMMIT")),
     _s("""BEGIN;
        INSERT INTO test_tab SELECT i, md5(i::text) FROM generate_series(5001, 10000) s(i);
        UPDATE test_tab SET b = md5(b) WHERE mod(a,2) = 0;
        DELETE FROM test_tab WHERE mod(a,3) = 0;
        COMMIT;"""),
     _s("UPDATE test_tab SET b = md5(a::text)")),
    walsender=STREAM_64KB,
    note="two interleaved streamed transactions, a streamed one, then a small one")

def _016_subxact(first: int) -> str:
    """One subtransaction's DML of 016_stream_subxact.pl (rows ``first`` to ``first + 2``)."""
    return (f"INSERT INTO test_tab SELECT i, sha256(i::text::bytea) FROM generate_series({first}, {first + 2}) s(i);\n"
            "UPDATE test_tab SET b = sha256(b) WHERE mod(a,2) = 0;\nDELETE FROM test_tab WHERE mod(a,3) = 0;\n")


#: The top transaction and four savepoints s1-s4, each inserting three rows, updating and deleting.
_016_TXN = ("BEGIN;\n" + "".join(f"SAVEPOINT s{k};\n" * (k > 0) + _016_subxact(3 + 3 * k) for k in range(5))
            + "COMMIT;")

W016 = Workload(
    "016_stream_subxact", "016_stream_subxact.pl",
    _STREAM_SETUP_BYTEA + "CREATE PUBLICATION tap_pub FOR TABLE test_tab;", "tap_pub",
    (_s(_016_TXN), _s("DELETE FROM test_tab WHERE (a > 2)")),
    walsender=STREAM_IMMEDIATE,
    note="the TAP runs these two steps again with streaming = parallel, a subscriber option")

W017 = Workload(
    "017_stream_ddl", "017_stream_ddl.pl", _STREAM_SETUP_VARCHAR, "tap_pub",
    (_s("""BEGIN;
        INSERT INTO test_tab VALUES (3, sha256(3::text::bytea));
        ALTER TABLE test_tab ADD COLUMN c INT;
        SAVEPOINT s1;
        INSERT INTO test_tab VALUES (4, sha256(4::text::bytea), -4);
        COMMIT;""",
        """BEGIN;
        INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i FROM generate_series(5, 1000) s(i);
        ALTER TABLE test_tab ADD COLUMN d INT;
        SAVEPOINT s1;
        INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i, 2*i FROM generate_series(1001, 2000) s(i);
        COMMIT;""",
        """BEGIN;
        INSERT INTO test_tab VALUES (2001, sha256(2001::text::bytea), -2001, 2*2001);
        ALTER TABLE test_tab ADD COLUMN e INT;
        SAVEPOINT s1;
        INSERT INTO test_tab VALUES (2002, sha256(2002::text::bytea), -2002, 2*2002, -3*2002);
        COMMIT;"""),
     _s("""BEGIN;
        INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i, 2*i, -3*i FROM generate_series(2003,5000) s(i);
        ALTER TABLE test_tab ADD COLUMN f INT;
        COMMIT;""",
        """BEGIN;
        INSERT INTO test_tab SELECT i, sha256(i::text::bytea), -i, 2*i, -3*i, 4*i FROM generate_series(5001,5005) s(i);
        COMMIT;""")),
    walsender=STREAM_64KB)

W018 = Workload(
    "018_stream_subxact_abort", "018_stream_subxact_abort.pl",
    _STREAM_SETUP_BYTEA + "CREATE TABLE test_tab_2 (a int); CREATE PUBLICATION tap_pub FOR TABLE test_tab, test_tab_2;",
    "tap_pub",
    (_s("""BEGIN;
        INSERT INTO test_tab VALUES (3, sha256(3::text::bytea));
        SAVEPOINT s1;
        INSERT INTO test_tab VALUES (4, sha256(4::text::bytea));
        SAVEPOINT s2;
        INSERT INTO test_tab VALUES (5, sha256(5::text::bytea));
        SAVEPOINT s3;
        INSERT INTO test_tab VALUES (6, sha256(6::text::bytea));
        ROLLBACK TO s2;
        INSERT INTO test_tab VALUES (7, sha256(7::text::bytea));
        ROLLBACK TO s1;
        INSERT INTO test_tab VALUES (8, sha256(8::text::bytea));
        SAVEPOINT s4;
        INSERT INTO test_tab VALUES (9, sha256(9::text::bytea));
        SAVEPOINT s5;
        INSERT INTO test_tab VALUES (10, sha256(10::text::bytea));
        COMMIT;"""),
     _s("""BEGIN;
        INSERT INTO test_tab VALUES (11, sha256(11::text::bytea));
        SAVEPOINT s1;
        INSERT INTO test_tab VALUES (12, sha256(12::text::bytea));
        SAVEPOINT s2;
        INSERT INTO test_tab VALUES (13, sha256(13::text::bytea));
        SAVEPOINT s3;
        INSERT INTO test_tab VALUES (14, sha256(14::text::bytea));
        RELEASE s2;
        INSERT INTO test_tab VALUES (15, sha256(15::text::bytea));
        ROLLBACK TO s1;
        COMMIT;""",
        """BEGIN;
        INSERT INTO test_tab VALUES (16, sha256(16::text::bytea));
        SAVEPOINT s1;
        INSERT INTO test_tab VALUES (17, sha256(17::text::bytea));
        SAVEPOINT s2;
        INSERT INTO test_tab VALUES (18, sha256(18::text::bytea));
        ROLLBACK;"""),
     _s("DELETE FROM test_tab WHERE (a > 2)",
        "BEGIN; INSERT INTO test_tab_2 values(1); ROLLBACK;",
        "BEGIN; INSERT INTO test_tab_2 values(1); SAVEPOINT sp; INSERT INTO test_tab_2 values(1); ROLLBACK TO sp; COMMIT;")),
    walsender=STREAM_IMMEDIATE,
    note="the streaming = parallel rerun and the subscriber's serialization to files are subscriber-side; "
         "the aborted transaction is merged with the out-of-order rollbacks")

W019 = Workload(
    "019_stream_subxact_ddl_abort", "019_stream_subxact_ddl_abort.pl",
    _STREAM_SETUP_BYTEA + "CREATE PUBLICATION tap_pub FOR TABLE test_tab;", "tap_pub",
    (_s("""BEGIN;
        INSERT INTO test_tab VALUES (3, sha256(3::text::bytea));
        ALTER TABLE test_tab ADD COLUMN c INT;
        SAVEPOINT s1;
        INSERT INTO test_tab VALUES (4, sha256(4::text::bytea), -4);
        ALTER TABLE test_tab ADD COLUMN d INT;
        SAVEPOINT s2;
        INSERT INTO test_tab VALUES (5, sha256(5::text::bytea), -5, 5*2);
        ALTER TABLE test_tab ADD COLUMN e INT;
        SAVEPOINT s3;
        INSERT INTO test_tab VALUES (6, sha256(6::text::bytea), -6, 6*2, -6*3);
        ALTER TABLE test_tab DROP COLUMN c;
        ROLLBACK TO s1;
        INSERT INTO test_tab VALUES (4, sha256(4::text::bytea), 4);
        COMMIT;"""),),
    walsender=STREAM_IMMEDIATE)

# ----------------------------------------------------------------------------- 020, 025

W020 = Workload(
    "020_messages", "020_messages.pl",
    "CREATE TABLE tab_test (a int primary key); CREATE PUBLICATION tap_pub FOR TABLE tab_test;", "tap_pub",
    (_s("SELECT pg_logical_emit_message(true, 'pgoutput', 'a transactional message')",
        "INSERT INTO tab_test VALUES (1)",
        "SELECT pg_logical_emit_message(false, 'pgoutput', 'a non-transactional message')",
        "INSERT INTO tab_test VALUES (2)"),
     _s("""BEGIN;
        SELECT pg_logical_emit_message(false, 'pgoutput',
          'a non-transactional message is available even if the transaction is aborted 1');
        INSERT INTO tab_test VALUES (3);
        SELECT pg_logical_emit_message(true, 'pgoutput',
          'a transactional message is not available if the transaction is aborted');
        SELECT pg_logical_emit_message(false, 'pgoutput',
          'a non-transactional message is available even if the transaction is aborted 2');
        ROLLBACK;""", "SELECT pg_switch_wal()")),
    note="the TAP reads the slot with pg_logical_slot_*_changes; here the messages are in the "
         "stream walspark reads, beside the table's changes")

W025 = Workload(
    "025_rep_changes_for_schema", "025_rep_changes_for_schema.pl",
    """CREATE SCHEMA sch1;
    CREATE TABLE sch1.tab1 AS SELECT generate_series(1,10) AS a;
    CREATE TABLE sch1.tab2 AS SELECT generate_series(1,10) AS a;
    CREATE TABLE sch1.tab1_parent (a int PRIMARY KEY, b text) PARTITION BY LIST (a);
    CREATE TABLE public.tab1_child1 PARTITION OF sch1.tab1_parent FOR VALUES IN (1, 2, 3);
    CREATE TABLE public.tab1_child2 PARTITION OF sch1.tab1_parent FOR VALUES IN (4, 5, 6);
    INSERT INTO sch1.tab1_parent values (1),(4);
    CREATE PUBLICATION tap_pub_schema FOR TABLES IN SCHEMA sch1;""", "tap_pub_schema",
    (_s("INSERT INTO sch1.tab1 VALUES(generate_series(11,20))", "INSERT INTO sch1.tab1_parent values (2),(5)"),),
    note="tables created in, moved out of, or dropped from the schema later, and DROP TABLES IN SCHEMA, "
         "change the publication's tables: issue 14")

# ----------------------------------------------------------------------------- 028_row_filter

#: The 028 tables, their initial rows and the first catch-up's DML — shared with
#: test_row_filters.py, which publishes them through the TAP's several publications.
ROWFILTER_028_TABLES = """
CREATE TABLE tab_rowfilter_1 (a int primary key, b text);
ALTER TABLE tab_rowfilter_1 REPLICA IDENTITY FULL;
CREATE TABLE tab_rowfilter_2 (c int primary key);
CREATE TABLE tab_rowfilter_3 (a int primary key, b boolean);
CREATE TABLE tab_rowfilter_4 (c int primary key);
CREATE TABLE tab_rowfilter_partitioned (a int primary key, b integer) PARTITION BY RANGE(a);
CREATE TABLE tab_rowfilter_less_10k (LIKE tab_rowfilter_partitioned);
ALTER TABLE tab_rowfilter_partitioned ATTACH PARTITION tab_rowfilter_less_10k FOR VALUES FROM (MINVALUE) TO (10000);
CREATE TABLE tab_rowfilter_greater_10k (LIKE tab_rowfilter_partitioned);
ALTER TABLE tab_rowfilter_partitioned ATTACH PARTITION tab_rowfilter_greater_10k FOR VALUES FROM (10000) TO (MAXVALUE);
CREATE TABLE tab_rowfilter_partitioned_2 (a int primary key, b integer) PARTITION BY RANGE(a);
CREATE TABLE tab_rowfilter_partition (LIKE tab_rowfilter_partitioned_2);
ALTER TABLE tab_rowfilter_partitioned_2 ATTACH PARTITION tab_rowfilter_partition DEFAULT;
CREATE TABLE tab_rowfilter_toast (a text NOT NULL, b text NOT NULL);
ALTER TABLE tab_rowfilter_toast ALTER COLUMN a SET STORAGE EXTERNAL;
CREATE UNIQUE INDEX tab_rowfilter_toast_ri_index on tab_rowfilter_toast (a, b);
ALTER TABLE tab_rowfilter_toast REPLICA IDENTITY USING INDEX tab_rowfilter_toast_ri_index;
CREATE TABLE tab_rowfilter_inherited (a int);
CREATE TABLE tab_rowfilter_child (b text) INHERITS (tab_rowfilter_inherited);
CREATE TABLE tab_rowfilter_viaroot_part (a int) PARTITION BY RANGE (a);
CREATE TABLE tab_rowfilter_viaroot_part_1 PARTITION OF tab_rowfilter_viaroot_part FOR VALUES FROM (1) TO (20);
"""

ROWFILTER_028_INITIAL = """
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1, 'not replicated');
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1500, 'filtered');
INSERT INTO tab_rowfilter_1 (a, b) VALUES (1980, 'not filtered');
INSERT INTO tab_rowfilter_1 (a, b) SELECT x, 'test ' || x FROM generate_series(990,1002) x;
INSERT INTO tab_rowfilter_2 (c) SELECT generate_series(1, 20);
INSERT INTO tab_rowfilter_3 (a, b) SELECT x, (x % 3 = 0) FROM generate_series(1, 10) x;
INSERT INTO tab_rowfilter_4 (c) SELECT generate_series(1, 10);
INSERT INTO tab_rowfilter_partitioned (a, b) VALUES(1, 100),(7000, 101),(15000, 102),(5500, 300);
INSERT INTO tab_rowfilter_less_10k (a, b) VALUES(2, 200),(6005, 201);
INSERT INTO tab_rowfilter_greater_10k (a, b) VALUES(16000, 103);
INSERT INTO tab_rowfilter_partitioned_2 (a, b) VALUES(1, 1),(20, 20);
INSERT INTO tab_rowfilter_toast(a, b) VALUES(repeat('1234567890', 200), '1234567890');
INSERT INTO tab_rowfilter_inherited(a) VALUES(10),(20);
INSERT INTO tab_rowfilter_child(a, b) VALUES(0,'0'),(30,'30'),(40,'40');
"""

ROWFILTER_028_DML = (
    "INSERT INTO tab_rowfilter_1 (a, b) VALUES (800, 'test 800')",
    "INSERT INTO tab_rowfilter_1 (a, b) VALUES (1600, 'test 1600')",
    "INSERT INTO tab_rowfilter_1 (a, b) VALUES (1601, 'test 1601')",
    "INSERT INTO tab_rowfilter_1 (a, b) VALUES (1602, 'filtered')",
    "INSERT INTO tab_rowfilter_1 (a, b) VALUES (1700, 'test 1700')",
    "UPDATE tab_rowfilter_1 SET b = NULL WHERE a = 1600",  # leaves the filter: a DELETE
    "UPDATE tab_rowfilter_1 SET b = 'test 1601 updated' WHERE a = 1601",
    "UPDATE tab_rowfilter_1 SET b = 'test 1602 updated' WHERE a = 1602",  # enters it: an INSERT
    "DELETE FROM tab_rowfilter_1 WHERE a = 1700",
    "INSERT INTO tab_rowfilter_2 (c) VALUES (21), (22), (23), (24), (25)",
    "INSERT INTO tab_rowfilter_4 (c) VALUES (0), (11), (12)",
    "INSERT INTO tab_rowfilter_inherited (a) VALUES (14), (16)",
    "INSERT INTO tab_rowfilter_child (a, b) VALUES (13, '13'), (17, '17')",
)

#: The old row fails the filter, the new one passes, the TOASTed key unchanged: an INSERT.
ROWFILTER_028_TOAST_UPDATE = "UPDATE tab_rowfilter_toast SET b = '1'"

_028_SETUP = ROWFILTER_028_TABLES + """
CREATE PUBLICATION tap_pub_1 FOR TABLE tab_rowfilter_1 WHERE (a > 1000 AND b <> 'filtered'),
  tab_rowfilter_2 WHERE (c % 2 = 0), tab_rowfilter_3,
  tab_rowfilter_partitioned, tab_rowfilter_less_10k WHERE (a < 6000),
  tab_rowfilter_toast WHERE (a = repeat('1234567890', 200) AND b < '10'),
  tab_rowfilter_inherited WHERE (a > 15);
CREATE PUBLICATION tap_pub_viaroot_1 FOR TABLE tab_rowfilter_viaroot_part WHERE (a > 15)
  WITH (publish_via_partition_root);
""" + ROWFILTER_028_INITIAL

_028_STEPS = (
    _s(*ROWFILTER_028_DML, "INSERT INTO tab_rowfilter_viaroot_part (a) VALUES (14), (15), (16)"),
    _s("INSERT INTO tab_rowfilter_partitioned (a, b) VALUES(4000, 400),(4001, 401),(4002, 402)",
       "INSERT INTO tab_rowfilter_less_10k (a, b) VALUES(4500, 450)",
       "INSERT INTO tab_rowfilter_less_10k (a, b) VALUES(5600, 123)",
       "INSERT INTO tab_rowfilter_greater_10k (a, b) VALUES(14000, 1950)",
       "UPDATE tab_rowfilter_less_10k SET b = 30 WHERE a = 4001",
       "DELETE FROM tab_rowfilter_less_10k WHERE a = 4002"),
    _s(ROWFILTER_028_TOAST_UPDATE),
)

W028 = Workload(
    "028_row_filter", "028_row_filter.pl", _028_SETUP, "tap_pub_1", _028_STEPS,
    note="tap_pub_1, tap_pub_3, tap_pub_toast and tap_pub_inherits (same options, disjoint tables, "
         "the same filters) are one publication. The unions of publications (FOR ALL TABLES or "
         "tap_pub_2/4a/4b/5a/5b with a filtered one: OR-ed filters) need one subscription to "
         "several publications; the switch of tap_pub_3 to publish_via_partition_root changes the "
         "publication's tables (issue 14): its DML is kept")
W028_VIAROOT = Workload(
    "028_row_filter:viaroot", "028_row_filter.pl", _028_SETUP, "tap_pub_viaroot_1", _028_STEPS[:1],
    note="tap_pub_viaroot_1 alone (the TAP subscribes to it with tap_pub_viaroot_2): the root's filter")
#: 028's TABLES IN SCHEMA case (shared with test_row_filters.py, which adds tap_pub_x beside it).
ROWFILTER_028_IN_SCHEMA = """
CREATE SCHEMA schema_rf_x;
CREATE TABLE schema_rf_x.tab_rf_x (x int primary key);
CREATE TABLE schema_rf_x.tab_rf_partitioned (x int primary key) PARTITION BY RANGE(x);
CREATE TABLE public.tab_rf_partition (LIKE schema_rf_x.tab_rf_partitioned);
ALTER TABLE schema_rf_x.tab_rf_partitioned ATTACH PARTITION public.tab_rf_partition DEFAULT;
INSERT INTO schema_rf_x.tab_rf_x (x) VALUES (0), (5), (10), (15), (20);
INSERT INTO schema_rf_x.tab_rf_partitioned (x) VALUES (1), (20);
CREATE PUBLICATION tap_pub_allinschema FOR TABLES IN SCHEMA schema_rf_x, TABLE schema_rf_x.tab_rf_x WHERE (x > 10);
ALTER PUBLICATION tap_pub_allinschema ADD TABLE public.tab_rf_partition WHERE (x > 10);
"""
ROWFILTER_028_IN_SCHEMA_DML = ("INSERT INTO schema_rf_x.tab_rf_x (x) VALUES (-99), (99)",
                               "INSERT INTO schema_rf_x.tab_rf_partitioned (x) VALUES (5), (25)")

W028_SCHEMA = Workload(
    "028_row_filter:schema", "028_row_filter.pl", ROWFILTER_028_IN_SCHEMA, "tap_pub_allinschema",
    (_s(*ROWFILTER_028_IN_SCHEMA_DML),),
    note="the TABLES IN SCHEMA case: the schema's table is unfiltered, the partition in another schema "
         "filtered (the TAP's tap_pub_x beside it adds nothing to the union)")

# ----------------------------------------------------------------------------- 031_column_list

W031 = Workload(
    "031_column_list", "031_column_list.pl",
    """CREATE TABLE tab1 (a int PRIMARY KEY, "B" int, c int);
    CREATE TABLE tab3 ("a'" int PRIMARY KEY, "B" varchar, "c'" int);
    CREATE TABLE test_part (a int PRIMARY KEY, b text, c timestamptz) PARTITION BY LIST (a);
    CREATE TABLE test_part_1_1 PARTITION OF test_part FOR VALUES IN (1,2,3,4,5,6);
    CREATE TABLE test_part_2_1 PARTITION OF test_part FOR VALUES IN (7,8,9,10,11,12) PARTITION BY LIST (a);
    CREATE TABLE test_part_2_2 PARTITION OF test_part_2_1 FOR VALUES IN (7,8,9,10);
    CREATE TYPE test_typ AS ENUM ('blue', 'red');
    CREATE TABLE tab4 (a INT PRIMARY KEY, b test_typ, c int, d text);
    CREATE PUBLICATION pub1 FOR TABLE tab1 (a, "B"), tab3 ("a'", "c'"), test_part (a, b), tab4 (a, b, d)
      WITH (publish_via_partition_root = 'true');
    INSERT INTO tab1 VALUES (1, 2, 3); INSERT INTO tab1 VALUES (4, 5, 6);
    INSERT INTO tab3 VALUES (1, 2, 3); INSERT INTO tab3 VALUES (4, 5, 6);
    INSERT INTO tab4 VALUES (1, 'red', 3, 'oh my'); INSERT INTO tab4 VALUES (2, 'blue', 4, 'hello');
    INSERT INTO test_part VALUES (1, 'abc', '2021-07-04 12:00:00');
    INSERT INTO test_part VALUES (2, 'bcd', '2021-07-03 11:12:13');
    INSERT INTO test_part VALUES (7, 'abc', '2021-07-04 12:00:00');
    INSERT INTO test_part VALUES (8, 'bcd', '2021-07-03 11:12:13');""", "pub1",
    (_s("INSERT INTO tab1 VALUES (2, 3, 4); INSERT INTO tab1 VALUES (5, 6, 7);",
        "INSERT INTO tab3 VALUES (2, 3, 4); INSERT INTO tab3 VALUES (5, 6, 7);",
        "INSERT INTO tab4 VALUES (3, 'red', 5, 'foo'); INSERT INTO tab4 VALUES (4, 'blue', 6, 'bar');",
        """INSERT INTO test_part VALUES (3, 'xxx', '2022-02-01 10:00:00');
        INSERT INTO test_part VALUES (4, 'yyy', '2022-03-02 15:12:13');
        INSERT INTO test_part VALUES (9, 'zzz', '2022-04-03 21:00:00');
        INSERT INTO test_part VALUES (10, 'qqq', '2022-05-04 22:12:13');"""),
     _s("""UPDATE tab1 SET "B" = 2 * "B" where a = 1""",
        "UPDATE tab1 SET c = 2*c where a = 4",
        """UPDATE tab3 SET "B" = "B" || ' updated' where "a'" = 4""",
        """UPDATE tab3 SET "c'" = 2 * "c'" where "a'" = 1""",
        "UPDATE tab4 SET b = 'blue', c = c * 2, d = d || ' updated' where a = 1",
        "UPDATE tab4 SET b = 'red', c = c * 2, d = d || ' updated' where a = 2")),
    note="column lists, quoted names, an enum, a two-level partitioned table through its root. "
         "tab2 joins pub1 later (issue 14); tab5's two publications need one subscription to both; "
         "the rest of the file (partitions' replica identities, ALTER PUBLICATION SET TABLE column "
         "lists, publish_generated_columns) is not ported here")

W031_IDENTITY = Workload(
    "031_column_list:identity", "031_column_list.pl",
    """CREATE TABLE tab6 (a int PRIMARY KEY, b int, c int, d int);
    CREATE TABLE tab7 (a int PRIMARY KEY, b int, c int, d int);
    CREATE PUBLICATION pub4 FOR TABLE tab6 (a, b), tab7 (a, b);
    INSERT INTO tab6 VALUES (1, 22, 333, 4444);
    INSERT INTO tab7 VALUES (1, 22, 333, 4444);""", "pub4",
    (_s("INSERT INTO tab6 VALUES (2, 33, 444, 5555)", "UPDATE tab6 SET b = b * 2, c = c * 3, d = d * 4",
        "INSERT INTO tab7 VALUES (2, 33, 444, 5555)", "UPDATE tab7 SET b = b * 2, c = c * 3, d = d * 4"),
     # the primary key (the replica identity) moves to another column of the list
     _s("ALTER TABLE tab6 DROP CONSTRAINT tab6_pkey", "ALTER TABLE tab6 ADD PRIMARY KEY (b)",
        "INSERT INTO tab6 VALUES (3, 55, 666, 8888)", "UPDATE tab6 SET b = b * 2, c = c * 3, d = d * 4",
        "ALTER TABLE tab7 DROP CONSTRAINT tab7_pkey", "ALTER TABLE tab7 ADD PRIMARY KEY (a, b)",
        "INSERT INTO tab7 VALUES (3, 55, 666, 7777)", "UPDATE tab7 SET b = b * 2, c = c * 3, d = d * 4"),
     _s("""ALTER TABLE tab7 DROP CONSTRAINT tab7_pkey;
        INSERT INTO tab7 VALUES (4, 77, 888, 9999);
        ALTER TABLE tab7 ADD PRIMARY KEY (b, a);
        UPDATE tab7 SET b = b * 2, c = c * 3, d = d * 4;
        DELETE FROM tab7 WHERE a = 1;""")),
    note="pub4 (tab6) and pub5 (tab7), same options, are one publication; the catch-up the TAP "
         "spends on the subscriber's own primary-key change is merged")

# ----------------------------------------------------------------------------- 032, 100

W032 = Workload(
    "032_subscribe_use_index", "032_subscribe_use_index.pl",
    """CREATE TABLE test_replica_id_full (x int, y text);
    ALTER TABLE test_replica_id_full REPLICA IDENTITY FULL;
    INSERT INTO test_replica_id_full SELECT (i%10), (i%10)::text FROM generate_series(0,10) i;
    CREATE TABLE users_table_part(user_id bigint, value_1 int, value_2 int) PARTITION BY RANGE (value_1);
    CREATE TABLE users_table_part_0 PARTITION OF users_table_part FOR VALUES FROM (0) TO (10);
    CREATE TABLE users_table_part_1 PARTITION OF users_table_part FOR VALUES FROM (10) TO (20);
    ALTER TABLE users_table_part REPLICA IDENTITY FULL;
    ALTER TABLE users_table_part_0 REPLICA IDENTITY FULL;
    ALTER TABLE users_table_part_1 REPLICA IDENTITY FULL;
    INSERT INTO users_table_part SELECT (i%100), (i%20), i FROM generate_series(0,100) i;
    CREATE TABLE people (firstname text, lastname text);
    ALTER TABLE people REPLICA IDENTITY FULL;
    INSERT INTO people SELECT 'first_name_' || i::text, 'last_name_' || i::text FROM generate_series(0,200) i;
    CREATE PUBLICATION tap_pub_rep_full FOR TABLE test_replica_id_full, users_table_part, people;""",
    "tap_pub_rep_full",
    (_s("DELETE FROM test_replica_id_full WHERE x IN (5, 6)",
        "UPDATE test_replica_id_full SET x = 100, y = '200' WHERE x IN (1, 2)",
        "UPDATE users_table_part SET value_1 = 0 WHERE user_id = 4",  # moves rows between partitions
        "DELETE FROM users_table_part WHERE user_id = 1 and value_1 = 1",
        "DELETE FROM users_table_part WHERE user_id = 12 and value_1 = 12",
        "UPDATE people SET firstname = 'no-name' WHERE firstname = 'first_name_1'",
        "UPDATE people SET firstname = 'no-name' WHERE firstname = 'first_name_2' AND lastname = 'last_name_2'"),
     _s("DELETE FROM people WHERE firstname = 'first_name_3'",
        "DELETE FROM people WHERE firstname = 'first_name_4' AND lastname = 'last_name_4'")),
    note="the first three test cases (REPLICA IDENTITY FULL, duplicates, partitions) in one publication; "
         "which index the subscriber uses does not apply")

W100 = Workload(
    "100_bugs", "100_bugs.pl",
    """CREATE TABLE tab1 (a int PRIMARY KEY, b int);
    CREATE FUNCTION double(x int) RETURNS int IMMUTABLE LANGUAGE SQL AS 'select x * 2';
    CREATE INDEX ON tab1 (b) WHERE a > double(1);
    CREATE TABLE tab_replidentity_index(a int not null, b int not null);
    CREATE UNIQUE INDEX idx_replidentity_index_a ON tab_replidentity_index(a);
    CREATE UNIQUE INDEX idx_replidentity_index_b ON tab_replidentity_index(b);
    ALTER TABLE tab_replidentity_index REPLICA IDENTITY USING INDEX idx_replidentity_index_a;
    INSERT INTO tab_replidentity_index VALUES(1, 1),(2, 2);
    CREATE TABLE dropped_cols (a int, b_drop int, c int);
    ALTER TABLE dropped_cols REPLICA IDENTITY FULL;
    INSERT INTO dropped_cols VALUES (1, 1, 1);
    CREATE TABLE tab_default (a int);
    ALTER TABLE tab_default REPLICA IDENTITY FULL;
    INSERT INTO tab_default VALUES (1);
    ALTER TABLE tab_default ADD COLUMN b bool DEFAULT false NOT NULL;
    INSERT INTO tab_default VALUES (2, true);
    CREATE PUBLICATION pub1 FOR ALL TABLES;""", "pub1",
    (_s("INSERT INTO tab1 VALUES (1, 2)",  # bug #15114: an index predicate needing a snapshot
        "CREATE TEMPORARY TABLE tt1 AS SELECT 1 AS a; UPDATE tt1 SET a = 2;",
        "CREATE UNLOGGED TABLE tu1 AS SELECT 1 AS a; UPDATE tu1 SET a = 2;"),
     # the replica identity index changes, then UPDATE and DELETE under the new one
     _s("""ALTER TABLE tab_replidentity_index REPLICA IDENTITY USING INDEX idx_replidentity_index_b;
        UPDATE tab_replidentity_index SET a = -a WHERE a = 1;
        DELETE FROM tab_replidentity_index WHERE a = 2;"""),
     _s("ALTER TABLE dropped_cols DROP COLUMN b_drop", "UPDATE dropped_cols SET a = 100"),
     _s("UPDATE tab_default SET a = a + 1")),  # a value missing from the heap (ADD COLUMN ... DEFAULT)
    note="the sections' tables (tab1, tab_replidentity_index, dropped_cols, tab_default) in one FOR ALL "
         "TABLES publication; bug #16643 (a pre-made slot and ADD TABLE: issue 14), the cascade, and "
         "the schema rename (a new table joining FOR ALL TABLES: issue 14) are not ported")

WORKLOADS: tuple[Workload, ...] = (
    W001, W001_INS_ONLY, W002, W005, W006, W007, W008, W009, W010, W010_PUB2, W011, W011_STORED, W012,
    W013, W013_ROOT, W013_VIAROOT, W014, W015, W016, W017, W018, W019, W020, W025, W028, W028_VIAROOT,
    W028_SCHEMA, W031, W031_IDENTITY, W032, W100,
)

# Files (or parts) not ported, with the reason.
NOT_APPLICABLE: dict[str, str] = {
    "003_constraints.pl": "subscriber-side: foreign keys and (replica) triggers on the subscriber",
    "004_sync.pl": "subscriber-side: an initial sync that fails on a subscriber unique violation, then recovers",
    "021_alter_sub_pub.pl": "subscriber-side: ALTER SUBSCRIPTION ... SET/ADD/DROP PUBLICATION",
    "021_twophase.pl": "two-phase: covered by tests/scenarios/test_two_phase.py",
    "022_twophase_cascade.pl": "cascading subscribers (a subscriber that publishes again)",
    "023_twophase_stream.pl": "two-phase: covered by tests/scenarios/test_two_phase.py",
    "024_add_drop_pub.pl": "issue 14: tables joining and leaving the publication (ALTER SUBSCRIPTION ADD/DROP PUBLICATION)",
    "026_stats.pl": "subscriber-side: pg_stat_subscription_stats",
    "026_worker_stats.pl": "subscriber-side: worker statistics",
    "027_nosuperuser.pl": "subscriber-side: the subscription owner's privileges and row security on the subscriber",
    "029_on_error.pl": "subscriber-side: conflicts, skip_lsn and disable_on_error",
    "029_disable_on_error.pl": "subscriber-side: disable_on_error",
    "030_origin.pl": "origin filtering between two subscribers that publish to each other",
    "030_sequences.pl": "sequence synchronisation (not in PostgreSQL 18)",
    "032_apply_delay.pl": "subscriber-side: min_apply_delay",
    "033_run_as_table_owner.pl": "subscriber-side: run_as_owner privileges",
    "034_temporal.pl": "not ported yet: temporal primary keys (WITHOUT OVERLAPS) as replica identity",
    "035_conflicts.pl": "subscriber-side: conflict detection and logging",
    "036_sequences.pl": "sequence synchronisation (FOR ALL SEQUENCES is not in PostgreSQL 18)",
    "037_except.pl": "publication EXCEPT lists are not in PostgreSQL 18",
    "038_walsnd_shutdown_timeout.pl": "walsender shutdown timeout: server behaviour, no data",
}
