"""Change rows built on the compiled hot path equal those of the pure-Python path, errors included.

``ChangeRowBuilder`` with ``walspark_c`` scans row changes in C and gathers their values into
Arrow buffers; without it, it decodes message objects and lists of bytes. Both must give the
same record batches for any transaction — every TupleData kind, key and old parts, streamed
Xids, text and binary values, NULLs and unchanged TOAST — and raise the same error (type and
message; kind, offset and LSN for a ProtocolError) for values a type cannot take and messages
the decoder refuses. Checked on drawn transactions, on drawn sessions of many transactions on
one builder, and on a real server's stream of a table with many types (the values' own compiled
conversions: ``tests/values/test_compiled_values.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import psycopg
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rows_server import assemble  # tests/changes is on sys.path (no package)

from walspark.changes.rows import ChangeRowBuilder, TransactionFacts
from walspark.compiled import PURE_VARIABLE, speedups
from walspark.protocol import (
    Delete,
    Insert,
    Message,
    Relation,
    RelationColumn,
    Truncate,
    TupleData,
    Type,
    Update,
    encode_message,
)
from walspark.values import TypeRegistry, oids

pytestmark = pytest.mark.skipif(speedups is None and os.environ.get(PURE_VARIABLE, "") not in ("", "0"),
                                reason=f"{PURE_VARIABLE} is set: the compiled path is off")

#: Per type: valid text forms, valid binary forms.
VALUES: dict[int, tuple[list[bytes], list[bytes]]] = {
    oids.INT2: ([b"-32768", b"7"], [(-2).to_bytes(2, "big", signed=True)]),
    oids.INT4: ([b"42", b"-7", b"2147483647"], [(42).to_bytes(4, "big"), (-1).to_bytes(4, "big", signed=True)]),
    oids.INT8: ([b"9000000000", b"0"], [(9_000_000_000).to_bytes(8, "big")]),
    oids.TEXT: ([b"hello", "\u00e9t\u00e9".encode(), b""], [b"bin text", b""]),
    oids.NUMERIC: ([b"10.50", b"NaN", b"-0.001"], []),
    oids.BOOL: ([b"t", b"f"], [b"\x01", b"\x00"]),
    oids.FLOAT4: ([b"0.5", b"NaN"], [bytes.fromhex("3fc00000"), bytes.fromhex("7f800001"), bytes.fromhex("ffc00001")]),
    oids.FLOAT8: ([b"1.5", b"Infinity", b"-0"], [bytes.fromhex("3ff8000000000000"), bytes.fromhex("7ff0000000000001")]),
    oids.TIMESTAMPTZ: ([b"2024-01-02 03:04:05.123456+00", b"infinity"],
                       [(0).to_bytes(8, "big"), (2**63 - 1).to_bytes(8, "big")]),
    oids.DATE: ([b"2024-01-02", b"-infinity"], [(1).to_bytes(4, "big"), (-(2**31)).to_bytes(4, "big", signed=True)]),
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

    for _ in range(draw(st.integers(1, 12))):
        messages.append((in_stream, encode_message(row_change(draw, xid, RELATION_ID, types, binary))))
    return binary, version, messages


def drawn_row(draw: st.DrawFn, types: list[int], binary: bool) -> TupleData:
    """A TupleData of the types: every kind, mostly valid values, now and then bytes the type cannot take."""
    kinds, values = [], []
    for oid in types:
        text, raw = VALUES[oid]
        kind = draw(st.sampled_from("tttbnu" if binary and raw else "tttnu"))
        pool = raw if kind == "b" else text
        value = None
        if kind in "tb":
            value = draw(st.sampled_from(pool) | st.binary(max_size=6)) if draw(st.integers(0, 9)) == 0 \
                else draw(st.sampled_from(pool))
        kinds.append(kind)
        values.append(value)
    return TupleData("".join(kinds), tuple(values))


def row_change(draw: st.DrawFn, xid: int | None, relation_id: int, types: list[int],
               binary: bool) -> Insert | Update | Delete:  # fmt: skip
    """An Insert, an Update (with no old part, a key or an old row) or a Delete (key or old row)."""
    op = draw(st.sampled_from("IUD"))
    if op == "I":
        return Insert(xid, relation_id, drawn_row(draw, types, binary))
    if op == "U":
        old = draw(st.sampled_from(["none", "K", "O"]))
        return Update(xid, relation_id, drawn_row(draw, types, binary) if old == "K" else None,
                      drawn_row(draw, types, binary) if old == "O" else None, drawn_row(draw, types, binary))
    part = drawn_row(draw, types, binary)
    key = draw(st.booleans())
    return Delete(xid, relation_id, part if key else None, None if key else part)


def outcome(build: Callable[[], list]) -> object:
    """The batches a build gives, or its error as (type, message, kind, offset, LSN)."""
    try:
        return [(version.version, batch) for version, batch in build()]
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return (type(exc), str(exc), *(getattr(exc, name, None) for name in ("kind", "offset", "lsn")))


def run_both(version: int, binary: bool, run: Callable[[ChangeRowBuilder], list]) -> tuple[object, object]:
    """``run`` on a pure and on a compiled builder (each with a registry of its own): its batches or its error."""
    results = []
    for modules in (None, speedups):
        builder = ChangeRowBuilder(version, binary=binary, speedups=modules, registry=TypeRegistry())
        results.append(outcome(lambda builder=builder: run(builder)))
    return results[0], results[1]


def build_both(version: int, binary: bool, feed: Callable[[ChangeRowBuilder], object]) -> tuple[object, object]:
    def run(builder: ChangeRowBuilder) -> list:
        feed(builder)
        return builder.build()

    return run_both(version, binary, run)


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


#: Numbers at and just past what the compiled rows keep in C fields (int64, int32): the builder
#: must then go back to Python lists and give what the pure path gives, rows or error.
ODD_NUMBERS = [2**63 - 1, 2**63, -1, 2**31 - 1, 2**31, -(2**63) - 1]
OTHER_RELATION = 16385
#: A change of a relation no Relation message ever described.
UNKNOWN_RELATION = 16399


@st.composite
def sessions(draw: st.DrawFn) -> tuple[bool, int, list[tuple]]:
    """(binary, protocol version, steps) on one builder, as a Spark task drives it.

    Steps: ``("add", facts, items, numbered)`` — one transaction's messages over two relations,
    whose shapes change on the way (a column more; the same Relation sent again), with
    Truncates, Types, logical messages, a change of a relation never described, now and then an
    LSN, a position or a fact past what C fields hold, a memoryview or bytearray message, an int
    for in_stream, or an origin that is not a str; ``("seed", Relation, version)`` — a Relation
    put in force from outside (a segment's prelude); ``("build",)`` — a build in the middle.
    """
    binary = draw(st.booleans())
    version = draw(st.integers(1, 4))
    base = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3))
    shapes = {RELATION_ID: [base, base + [draw(st.sampled_from(TYPES))]],
              OTHER_RELATION: [draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3))]}
    in_force: dict[int, list[int]] = {}

    def relation(xid: int | None, relation_id: int, types: list[int]) -> Relation:
        columns = tuple(RelationColumn(1 if i == 0 else 0, f"c{i}", oid, -1) for i, oid in enumerate(types))
        return Relation(xid, relation_id, "public", f"t{relation_id}", "d", columns)

    def rare(strategy: st.SearchStrategy, usual: object) -> object:
        return draw(strategy) if draw(st.integers(0, 14)) == 0 else usual

    steps: list[tuple] = []
    for relation_id in sorted(shapes):  # described from the start, mostly (else: the reference's error)
        if rare(st.just(False), True):
            in_force[relation_id] = shapes[relation_id][0]
            steps.append(("seed", relation(None, relation_id, in_force[relation_id]), None))
    events = ["row", "row", "row", "row", "other row", "relation", "truncate", "type", "message"]
    events += rare(st.just(["unknown"]), [])  # now and then a session ends in the reference's error
    for _ in range(draw(st.integers(1, 5))):
        what = draw(st.sampled_from(["add", "add", "add", "seed", "build"]))
        if what == "build":
            steps.append(("build",))
            continue
        if what == "seed":
            relation_id = draw(st.sampled_from(sorted(shapes)))
            types = draw(st.sampled_from(shapes[relation_id]))
            in_force[relation_id] = types
            steps.append(("seed", relation(None, relation_id, types), draw(st.none() | st.integers(1, 5))))
            continue
        facts = TransactionFacts(draw(st.integers(1, 2**32 - 1)), rare(st.sampled_from(ODD_NUMBERS), 0x5000),
                                 rare(st.sampled_from([2**63 - 946_684_800_000_000, -(2**62)]), 1000),
                                 rare(st.sampled_from([5, "origin b"]), draw(st.sampled_from([None, "origin a"]))))
        in_stream = version >= 2 and draw(st.booleans())
        xid = facts.xid if in_stream else None
        items = []
        for seq in range(draw(st.integers(1, 10))):
            event = draw(st.sampled_from(events))
            if event in ("row", "other row", "unknown"):
                relation_id = {"row": RELATION_ID, "other row": OTHER_RELATION, "unknown": UNKNOWN_RELATION}[event]
                types = in_force.get(relation_id, shapes.get(relation_id, [base])[0])
                message: object = row_change(draw, xid, relation_id, types, binary)
            elif event == "relation":
                relation_id = draw(st.sampled_from(sorted(shapes)))
                in_force[relation_id] = draw(st.sampled_from(shapes[relation_id]))
                message = relation(xid, relation_id, in_force[relation_id])
            elif event == "truncate":
                message = Truncate(xid, 0, tuple(draw(st.lists(st.sampled_from(sorted(shapes)), min_size=1,
                                                               max_size=2, unique=True))))  # fmt: skip
            elif event == "type":
                message = Type(xid, 99_999, "public", "thing")
            else:
                message = Message(xid, True, 0x4000, "prefix", b"content")
            data = encode_message(message)  # type: ignore[arg-type]
            items.append((rare(st.sampled_from([2**31, -(2**31) - 1]), seq),
                          rare(st.sampled_from(ODD_NUMBERS), 0x4000 + seq), rare(st.just(int(in_stream)), in_stream),
                          rare(st.sampled_from([bytearray, memoryview]), bytes)(data)))  # fmt: skip
        numbered = draw(st.booleans())
        steps.append(("add", facts, items if numbered else [item[1:] for item in items], numbered))
    return binary, version, steps


def run_session(steps: list[tuple]) -> Callable[[ChangeRowBuilder], list]:
    def run(builder: ChangeRowBuilder) -> list:
        out = []
        for step in steps:
            if step[0] == "build":
                out += builder.build()
            elif step[0] == "seed":
                _, relation, version = step
                builder.relations.apply(relation) if version is None else builder.relations.seed(relation, version)
            else:
                _, facts, items, numbered = step
                (builder.add_numbered if numbered else builder.add)(facts, iter(items))
        return out + builder.build()

    return run


@given(sessions())
@settings(max_examples=200, deadline=None)
def test_drawn_sessions_build_the_same_rows_or_the_same_error(drawn) -> None:  # type: ignore[no-untyped-def]
    """Many transactions on one builder: relations that change shape or come from outside, every
    message kind, numbers past C's fields, odd inputs — both paths give the same batches or error."""
    binary, version, steps = drawn
    pure, fast = run_both(version, binary, run_session(steps))
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
