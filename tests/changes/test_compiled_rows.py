"""Change rows built on the compiled hot path equal those of the pure-Python path, errors included.

``ChangeRowBuilder`` with ``walspark_c`` scans row changes in C and gathers their values into
Arrow buffers; without it, it decodes message objects and lists of bytes. Both must give the
same record batches for any transaction — every TupleData kind, key and old parts, streamed
Xids, text and binary values, NULLs and unchanged TOAST — and raise the same error (type and
message) for values a type cannot take. Checked on drawn transactions and on a real server's
stream of a table with many types.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import psycopg
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walspark.changes.rows import ChangeRowBuilder, TransactionFacts
from walspark.compiled import PURE_VARIABLE, speedups
from walspark.protocol import Delete, Insert, Relation, RelationColumn, TupleData, Update, encode_message
from walspark.values import oids

from test_rows_server import assemble  # tests/changes is on sys.path (no package)

pytestmark = pytest.mark.skipif(speedups is None and os.environ.get(PURE_VARIABLE, "") not in ("", "0"),
                                reason=f"{PURE_VARIABLE} is set: the compiled path is off")

#: Per type: valid text forms, valid binary forms.
VALUES: dict[int, tuple[list[bytes], list[bytes]]] = {
    oids.INT4: ([b"42", b"-7", b"2147483647"], [(42).to_bytes(4, "big"), (-1).to_bytes(4, "big", signed=True)]),
    oids.INT8: ([b"9000000000", b"0"], [(9_000_000_000).to_bytes(8, "big")]),
    oids.TEXT: ([b"hello", "\u00e9t\u00e9".encode(), b""], [b"bin text", b""]),
    oids.NUMERIC: ([b"10.50", b"NaN", b"-0.001"], []),
    oids.BOOL: ([b"t", b"f"], [b"\x01", b"\x00"]),
    oids.FLOAT8: ([b"1.5", b"Infinity", b"-0"], [bytes.fromhex("3ff8000000000000")]),
    oids.TIMESTAMPTZ: ([b"2024-01-02 03:04:05.123456+00", b"infinity"], [(0).to_bytes(8, "big")]),
    oids.DATE: ([b"2024-01-02", b"-infinity"], [(1).to_bytes(4, "big")]),
    oids.BYTEA: ([b"\\x0102ff"], [b"\x01\x02\xff"]),
    oids.UUID: ([b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"], [bytes(range(16))]),
    oids.JSONB: ([b'{"a": [1, 2]}'], [b'\x01{"a": 1}']),
    oids.ARRAY_OF[oids.INT4]: ([b"{1,2,NULL}", b"{}"], []),
}
TYPES = sorted(VALUES)
RELATION_ID = 16384


@st.composite
def transactions(draw: st.DrawFn) -> tuple[bool, int, list[tuple[bool, bytes]]]:
    """(binary, protocol version, [(in_stream, message bytes)]): a Relation, then row changes."""
    binary = draw(st.booleans())
    version = draw(st.integers(1, 4))
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=6))
    columns = tuple(RelationColumn(1 if i == 0 else 0, f"c{i}", oid, -1) for i, oid in enumerate(types))
    identity = draw(st.sampled_from(["d", "f"]))
    in_stream = version >= 2 and draw(st.booleans())
    xid = draw(st.integers(1, 1000)) if in_stream else None
    messages = [(in_stream, encode_message(Relation(xid, RELATION_ID, "public", "t", identity, columns)))]

    def row() -> TupleData:
        kinds, values = [], []
        for oid in types:
            text, raw = VALUES[oid]
            kind = draw(st.sampled_from("tttbnu" if binary and raw else "tttnu"))
            pool = raw if kind == "b" else text
            value = None
            if kind in "tb":  # mostly valid values, now and then bytes the type cannot take
                value = draw(st.sampled_from(pool) | st.binary(max_size=6)) if draw(st.integers(0, 9)) == 0 \
                    else draw(st.sampled_from(pool))
            kinds.append(kind)
            values.append(value)
        return TupleData("".join(kinds), tuple(values))

    for _ in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from("IUD"))
        if op == "I":
            message = Insert(xid, RELATION_ID, row())
        elif op == "U":
            old = draw(st.sampled_from(["none", "K", "O"]))
            message = Update(xid, RELATION_ID, row() if old == "K" else None, row() if old == "O" else None, row())
        else:
            key = draw(st.booleans())
            part = row()
            message = Delete(xid, RELATION_ID, part if key else None, None if key else part)
        messages.append((in_stream, encode_message(message)))
    return binary, version, messages


def outcome(build: Callable[[], list]) -> object:
    """The batches a build gives, or its error as (type, message)."""
    try:
        return [(version.version, batch) for version, batch in build()]
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return type(exc), str(exc)


def build_both(version: int, binary: bool, feed: Callable[[ChangeRowBuilder], None]) -> tuple[object, object]:
    results = []
    for modules in (None, speedups):
        builder = ChangeRowBuilder(version, binary=binary, speedups=modules)

        def run(builder: ChangeRowBuilder = builder) -> list:
            feed(builder)
            return builder.build()

        results.append(outcome(run))
    return results[0], results[1]


def same(a: pa.Array, b: pa.Array) -> bool:
    """Arrow equality, with NaN equal to NaN (compared bit for bit)."""
    if a.type != b.type:
        return False
    if pa.types.is_floating(a.type):
        bits = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[a.type.bit_width]
        return a.is_null().equals(b.is_null()) and a.view(bits).equals(b.view(bits))
    if pa.types.is_struct(a.type):
        return a.is_null().equals(b.is_null()) and all(
            same(a.field(i), b.field(i)) for i in range(a.type.num_fields))
    return a.equals(b)


def assert_same(pure: object, fast: object) -> None:
    if isinstance(pure, tuple):
        assert pure == fast, f"pure raised {pure}, compiled gave {fast}"
        return
    assert isinstance(fast, list) and len(pure) == len(fast), (pure, fast)
    for (v1, b1), (v2, b2) in zip(pure, fast):
        assert v1 == v2 and b1.schema == b2.schema, (b1.schema, b2.schema)
        for name in b1.schema.names:
            c1, c2 = b1.column(name), b2.column(name)
            if pa.types.is_struct(c1.type):
                for sub in range(c1.type.num_fields):
                    f1, f2 = c1.field(sub), c2.field(sub)
                    assert same(f1, f2), f"{name}.{c1.type.field(sub).name}: pure {f1} compiled {f2}"
            assert same(c1, c2), f"{name}: pure {c1} compiled {c2}"


@given(transactions())
@settings(max_examples=250, deadline=None)
def test_drawn_transactions_build_the_same_rows_or_the_same_error(drawn) -> None:  # type: ignore[no-untyped-def]
    binary, version, messages = drawn
    facts = TransactionFacts(7, 0x1000, 0)
    pure, fast = build_both(version, binary, lambda b: b.add_numbered(
        facts, [(seq, 0x100 + seq, s, data) for seq, (s, data) in enumerate(messages)]))
    assert_same(pure, fast)


DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE TABLE many (id int PRIMARY KEY, i2 smallint, i8 bigint, f4 real, f8 double precision,
  n numeric(12,3), b boolean, t text, vc varchar(10), by bytea, d date, ts timestamp, tz timestamptz,
  u uuid, j jsonb, a int[], ta text[], iv interval, r int4range, m mood, big text);
ALTER TABLE many ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE PUBLICATION pub FOR TABLE many;
"""


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_a_real_stream_of_many_types_builds_the_same_rows(pg18_dsn, binary):
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(DDL)
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        conn.execute("""
            INSERT INTO many SELECT g, g, g * 1000000000::bigint, g / 3.0, g / 7.0, g / 8.0, g % 2 = 0, 'row ' || g,
              left('v' || g, 10), decode(md5(g::text), 'hex'), date '2024-01-01' + g, timestamp '2024-01-01' + g * interval '1 h',
              timestamptz '2024-01-01 00:00+00' + g * interval '1 min', md5(g::text)::uuid,
              jsonb_build_object('g', g), ARRAY[g, NULL, g + 1], ARRAY['a' || g, NULL], g * interval '1 s',
              int4range(g, g + 10), CASE WHEN g % 2 = 0 THEN 'sad' ELSE 'ok' END::mood,
              CASE WHEN g % 50 = 0 THEN repeat('x', 300000) END
            FROM generate_series(1, 500) g""")
        conn.execute("INSERT INTO many (id, f8, d, tz) VALUES (0, 'NaN', 'infinity', '-infinity')")
        conn.execute("UPDATE many SET t = t || '!' WHERE id % 10 = 0")  # big stays unchanged TOAST
        conn.execute("ALTER TABLE many REPLICA IDENTITY FULL")
        conn.execute("UPDATE many SET i2 = -i2 WHERE id % 7 = 0")
        conn.execute("DELETE FROM many WHERE id % 11 = 0")
    options = {"proto_version": "4", "publication_names": "pub", "binary": "true" if binary else "false"}
    _, txns = assemble(pg18_dsn, options)
    pure, fast = build_both(4, binary, lambda b: [b.add_transaction(t) for t in txns])
    assert isinstance(pure, list) and sum(batch.num_rows for _, batch in pure) > 500, pure
    assert_same(pure, fast)
