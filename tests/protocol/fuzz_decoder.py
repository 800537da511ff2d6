"""Coverage-guided fuzz target (atheris / libFuzzer) for walspark's whole decoding surface.

Why a second fuzzer next to the hypothesis tests (``test_fuzz.py``): hypothesis draws
inputs blindly from strategies, so it only reaches the branches its strategies happen to
aim at. libFuzzer watches which lines each input reaches and keeps mutating the inputs that
reach new ones, so over minutes it walks into corners nobody wrote a strategy for — a
length field that is exactly one short, a nested array header that claims six dimensions.

The contract under test: whatever the bytes,

* ``walspark.protocol`` (messages under every protocol version and decoder context, the
  stateful :class:`~walspark.protocol.Decoder` over a sequence of messages, the XLogData /
  keepalive / standby-status framing) returns a value or raises
  :class:`~walspark.protocol.ProtocolError` carrying the kind, an offset inside the input and
  the LSN it was given; a message that decodes re-encodes to exactly the input bytes;
* the compiled hot path (``walspark_c``, where it is installed) accepts exactly the row
  changes the pure decoder decodes and gathers their values into the same kinds and bytes,
  never reading out of bounds whatever the bytes (``tests/protocol/differential.py``);
* ``walspark.values`` (every built-in type, arrays, ranges, multiranges, registered enums,
  domains and composites, text and binary, one value and a whole Arrow column) returns a
  value or raises :class:`~walspark.values.ValueConversionError`.

Anything else escaping (``IndexError``, ``struct.error``, ``RecursionError``, a plain
``ValueError``...) or a hang is a bug: atheris reports it as a crash and writes the input.
So is a project error that only wraps a low-level one (a ProtocolError without offset from
the decoder's last-resort guard, a ValueConversionError caused by an IndexError): the
explicit check that should have caught the bytes is missing.

The first byte of the input picks the surface, the next one or two the context (protocol
version, stream state, type, format, column options, and for values whether one byte of the
value is repeated 20 000 times, so super-linear parsing shows up as a hang), the rest is the
data — the same scheme as the hypothesis tests, so every path is reachable from one input.

Run it as a script (libFuzzer flags pass through; empty corpus directories are seeded
with real encoded messages and values first)::

    python tests/protocol/fuzz_decoder.py -max_total_time=300 /tmp/walspark-corpus
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["walspark"]):
    from walspark.protocol import (
        Decoder,
        PrimaryKeepalive,
        ProtocolError,
        StandbyStatusUpdate,
        XLogData,
        decode_frame,
        decode_message,
        encode_frame,
        encode_message,
    )
    from walspark.values import ColumnOptions, NumericPolicy, TypeRegistry, ValueConversionError, oids, to_arrow_array
    from walspark.values.registry import BUILTIN_TYPE_NAMES

from walspark.compiled import speedups as SPEEDUPS  # C code: nothing for atheris to instrument

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.protocol.differential import check_gather_hostile, check_row_change

LSN = 0x1234_5678_9ABC

# ---------------------------------------------------------------------------- surfaces
SURFACE_MESSAGE, SURFACE_STREAM, SURFACE_FRAME, SURFACE_VALUE = range(4)

# Every legal decoder context: (protocol version, inside a streamed block, Stream Abort layout).
CONTEXTS: list[tuple[int, bool, bool | None]] = [
    (version, in_stream, parallel)
    for version in (1, 2, 3, 4)
    for in_stream in (False, True)
    for parallel in (False, True, None)
    if not (in_stream and version < 2) and not (parallel and version < 4)
]

# User types registered on the fuzz registry, so composites, enums, domains and user
# ranges are decoded too (OIDs above the built-in range, as a database would assign them).
ENUM_OID, DOMAIN_OID, COMPOSITE_OID, NESTED_OID, RANGE_OID, MULTIRANGE_OID = range(90001, 90007)
ENUM_ARRAY_OID, COMPOSITE_ARRAY_OID = 90011, 90013

TYPE_OIDS: list[int] = sorted(BUILTIN_TYPE_NAMES) + [
    ENUM_OID, DOMAIN_OID, COMPOSITE_OID, NESTED_OID, RANGE_OID, MULTIRANGE_OID, ENUM_ARRAY_OID,
    COMPOSITE_ARRAY_OID,
]

# Typmods that change a codec: numeric(10,2), numeric(50,5), timestamp(3)/varchar(5), bit(8).
TYPMODS = [-1, ((10 << 16) | 2) + 4, ((50 << 16) | 5) + 4, 3, 9, 8]

OPTIONS = [
    ColumnOptions(),
    ColumnOptions(numeric=NumericPolicy(mode="decimal", precision=12, scale=3), infinity="error"),
    ColumnOptions(numeric=NumericPolicy(mode="string"), infinity="null", array_ndims=2),
    ColumnOptions(numeric=NumericPolicy(mode="decimal", on_special="null"), array_ndims=3,
                  array_ignore_bounds=True, money_frac_digits=0),
]

# Multi-row columns are split on this marker, so one input can be a column of values; each
# row's first byte picks its TupleData kind.
ROW_SEPARATOR = b"\xfe\xfe"
COLUMN_KINDS = "tbnu"
AMPLIFY = 20_000
MISSING_CHECK_ERRORS = (IndexError, struct.error, TypeError, KeyError, AttributeError)
BUFFER_TYPES: list[Callable[[bytes], bytes | bytearray | memoryview]] = [bytes, bytearray, memoryview]
# In the stream surface, messages are separated by this marker.
MESSAGE_SEPARATOR = b"\xff\x00\xff"


def make_registry() -> TypeRegistry:
    """The registry every value input is decoded with (built-ins plus one of each user kind)."""
    registry = TypeRegistry()
    registry.register_enum(ENUM_OID, "mood", array_oid=ENUM_ARRAY_OID)
    registry.register_domain(DOMAIN_OID, oids.NUMERIC, "price", base_typmod=((12 << 16) | 2) + 4)
    registry.register_composite(COMPOSITE_OID, "item", [("id", oids.INT4, -1), ("name", oids.TEXT, -1),
                                                         ("price", DOMAIN_OID, -1),
                                                         ("at", oids.TIMESTAMPTZ, -1)],
                                array_oid=COMPOSITE_ARRAY_OID)
    registry.register_composite(NESTED_OID, "order", [("items", COMPOSITE_ARRAY_OID, -1),
                                                      ("tags", oids.ARRAY_OF[oids.TEXT], -1),
                                                      ("span", oids.INT4RANGE, -1)])
    registry.register_range(RANGE_OID, DOMAIN_OID, "pricerange", multirange_oid=MULTIRANGE_OID)
    return registry


REGISTRY = make_registry()


# ---------------------------------------------------------------------------- the checks
def _check_protocol_error(error: ProtocolError, data: bytes, lsn: int | None) -> None:
    """A ProtocolError must locate the fault: kind set, offset inside the input, our LSN."""
    assert error.lsn == lsn, f"error lost the LSN: {error!r}"
    # offset None is what the decoder's last-resort guard gives a low-level exception that
    # slipped past the explicit checks: a missing check, so a finding even though it is a
    # ProtocolError.
    assert error.offset is not None, f"low-level error caught only at the boundary: {error!r}"
    assert 0 <= error.offset <= len(data), f"offset outside input: {error!r}"
    assert error.kind is not None or error.offset == 0, f"error names no kind: {error!r}"
    str(error)


def check_message(data: bytes) -> None:
    """One message under the context chosen by ``data[0]``; must round-trip if it decodes."""
    if not data:
        return
    version, in_stream, parallel = CONTEXTS[data[0] % len(CONTEXTS)]
    payload = data[1:]
    # The decoders accept any buffer (a psycopg CopyData is a memoryview); the higher bits of
    # the context byte pick the buffer type, so the conversion paths are fuzzed too.
    buffer = BUFFER_TYPES[(data[0] // len(CONTEXTS)) % len(BUFFER_TYPES)](payload)
    if SPEEDUPS is not None:
        check_row_change(SPEEDUPS, payload, version, in_stream, parallel)
        check_gather_hostile(SPEEDUPS, payload)
    try:
        message = decode_message(buffer, protocol_version=version, in_stream=in_stream,
                                 parallel_abort=parallel, lsn=LSN)
    except ProtocolError as error:
        _check_protocol_error(error, payload, LSN)
        return
    assert encode_message(message) == payload, f"decoded {message!r} does not re-encode to the input"


def check_stream(data: bytes) -> None:
    """A sequence of messages through one stateful Decoder (Stream Start/Stop change the layouts)."""
    if not data:
        return
    version, in_stream, parallel = CONTEXTS[data[0] % len(CONTEXTS)]
    decoder = Decoder(version, streaming_parallel=parallel, in_stream=in_stream)
    for index, payload in enumerate(data[1:].split(MESSAGE_SEPARATOR)):
        before = (decoder.in_stream, decoder.stream_xid)
        try:
            message = decoder.decode(payload, lsn=index)
        except ProtocolError as error:
            _check_protocol_error(error, payload, index)
            assert (decoder.in_stream, decoder.stream_xid) == before, "a failed message changed the state"
            continue
        assert encode_message(message) == payload, f"decoded {message!r} does not re-encode to the input"


def check_frame(data: bytes) -> None:
    """A CopyData frame; an XLogData frame's payload is decoded as a message too.

    Each frame class's own ``decode`` is tried on the same bytes as well: callers that know
    the kind use it directly, and it must refuse a frame of another kind just as cleanly.
    """
    for decode in (XLogData.decode, PrimaryKeepalive.decode, StandbyStatusUpdate.decode):
        try:
            decode(data)
        except ProtocolError as error:
            assert error.offset is not None and 0 <= error.offset <= len(data), f"offset outside input: {error!r}"
            str(error)
    try:
        frame = decode_frame(memoryview(data))
    except ProtocolError as error:
        assert error.offset is not None and 0 <= error.offset <= len(data), f"offset outside input: {error!r}"
        str(error)
        return
    assert encode_frame(frame) == data, f"decoded {frame!r} does not re-encode to the input"
    if isinstance(frame, XLogData) and frame.payload:
        check_message(frame.payload)


def check_value(data: bytes) -> None:
    """A value (or a column of values) of a type, typmod, options and format chosen by the input."""
    if len(data) < 3:
        return
    oid = TYPE_OIDS[data[0] % len(TYPE_OIDS)]
    selector = data[1]
    typmod = TYPMODS[selector % len(TYPMODS)]
    options = OPTIONS[(selector // len(TYPMODS)) % len(OPTIONS)]
    mode = data[2]
    binary = bool(mode & 1)
    raw = data[3:]
    if mode & 4 and len(raw) >= 2:
        # Amplified: raw[0] picks a byte of the value, repeated AMPLIFY times. Super-linear
        # parsing (a regex that backtracks over a run of digits, a quadratic loop) costs
        # microseconds on libFuzzer's short inputs; over a 20 000-byte run it becomes a hang
        # that -timeout reports.
        at = raw[0] % (len(raw) - 1) + 1
        raw = raw[1:at] + raw[at:at + 1] * AMPLIFY + raw[at + 1:]
    try:
        codec = REGISTRY.resolve(oid, typmod, options, binary=binary)
    except ValueConversionError:
        return
    try:
        if mode & 2:  # a whole Arrow column: each row is <kind selector><bytes>, text and binary mixed
            kinds: list[str] = []
            values: list[bytes | None] = []
            for row in raw.split(ROW_SEPARATOR):
                kind = COLUMN_KINDS[row[0] % len(COLUMN_KINDS)] if row else "n"
                kinds.append(kind)
                values.append(row[1:] if kind in "tb" else None)
            to_arrow_array(codec, kinds, values, column="c")
        else:
            codec.decode("b" if binary else "t", raw)
    except ValueConversionError as error:
        # Codecs turn ValueError/ArithmeticError from int(), Decimal, datetime... into this
        # error by design; an IndexError, struct.error or TypeError underneath means a decoder
        # read past its input or mixed up types: a missing check, so a finding.
        assert not isinstance(error.__cause__, MISSING_CHECK_ERRORS), f"{error!r} from {error.__cause__!r}"
        str(error)


CHECKS: list[Callable[[bytes], None]] = [check_message, check_stream, check_frame, check_value]


def test_one_input(data: bytes) -> None:
    """libFuzzer entry point: ``data[0]`` picks the surface, the rest is its input."""
    if not data:
        return
    CHECKS[data[0] % len(CHECKS)](data[1:])


# ---------------------------------------------------------------------------- seed corpus
def _message_seeds(count: int) -> Iterator[bytes]:
    """Real encoded messages of every kind and context, drawn (deterministically) by hypothesis."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.protocol.strategies import KINDS, cases

    drawn: list[bytes] = []

    @given(st.sampled_from(KINDS).flatmap(lambda kind: cases(kind=kind)))
    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    def draw(case: Any) -> None:
        context = CONTEXTS.index((case.protocol_version, case.in_stream,
                                  case.parallel_abort if case.protocol_version >= 4 else False))
        drawn.append(bytes([context]) + encode_message(case.message))

    draw()
    for seed in drawn:
        yield bytes([SURFACE_MESSAGE]) + seed
    # Streams: a streamed block with a row change inside, then its commit.
    from walspark.protocol import Insert, StreamCommit, StreamStart, StreamStop, TupleData

    block = [StreamStart(7, True), Insert(7, 16384, TupleData("tnu", (b"42", None, None))), StreamStop(),
             StreamCommit(7, 100, 200, 0)]
    context = CONTEXTS.index((4, False, True))
    yield bytes([SURFACE_STREAM, context]) + MESSAGE_SEPARATOR.join(encode_message(m) for m in block)
    # Frames: an XLogData carrying a message, a keepalive, a standby status update.
    yield bytes([SURFACE_FRAME]) + XLogData(0x16B3748, 0x16B3900, 757382400000000, drawn[0][1:]).encode()
    yield bytes([SURFACE_FRAME]) + b"k" + struct.pack(">QqB", 0x16B3900, 757382400000000, 1)
    yield bytes([SURFACE_FRAME]) + b"r" + struct.pack(">QQQqB", 1, 2, 3, 757382400000000, 0)


def _value_seeds() -> Iterator[bytes]:
    """Valid text and binary forms of many types, built from the send-function encoders."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.values.vectors import array_send, f64, i16, i32, i64, numeric_send, range_send, record_send, u32

    def header(oid: int, binary: bool, column: bool, amplified: bool = False) -> bytes:
        mode = (1 if binary else 0) | (2 if column else 0) | (4 if amplified else 0)
        return bytes([SURFACE_VALUE, TYPE_OIDS.index(oid), 0, mode])

    def row(kind: str, raw: bytes = b"") -> bytes:
        return bytes([COLUMN_KINDS.index(kind)]) + raw

    def multirange(*ranges: bytes) -> bytes:
        return i32(len(ranges)) + b"".join(i32(len(r)) + r for r in ranges)

    array_of = oids.ARRAY_OF
    ts = i64(757382400000000)  # 2024-01-01 00:00:00 UTC
    values: list[tuple[int, bytes, bytes]] = [  # (oid, text form, binary form)
        (oids.NUMERIC, b"-1234.5600", numeric_send("-1234.5600")),
        (oids.NUMERIC, b"NaN", numeric_send("NaN")),
        (oids.NUMERIC, b"0.000001", numeric_send("0.000001")),
        (oids.MONEY, b"-$1,234.56", i64(-123456)),
        (oids.TIMESTAMPTZ, b"2024-02-29 13:45:00.123456+05:30", i64(762529500123456)),
        (oids.TIMESTAMP, b"infinity", i64((1 << 63) - 1)),
        (oids.TIMESTAMP, b"0044-03-15 12:00:00 BC", i64(-82511985600000000)),
        (oids.DATE, b"2024-02-29", i32(8825)),
        (oids.TIME, b"23:59:59.999999", i64(86399999999)),
        (oids.TIMETZ, b"12:00:00-08", i64(43200000000) + i32(28800)),
        (oids.INTERVAL, b"1 year 2 mons -3 days 04:05:06.789", i64(14706789000) + i32(-3) + i32(14)),
        (oids.INTERVAL, b"P1Y2M3DT4H5M6.5S", i64(14706500000) + i32(3) + i32(14)),
        (oids.JSONB, b'{"a": [1, 2.5, null]}', b'\x01{"a": [1, 2.5, null]}'),
        (oids.JSONPATH, b'$."a"[*]', b"\x01$.\"a\"[*]"),
        (oids.INET, b"192.168.0.1/24", bytes([2, 24, 0, 4, 192, 168, 0, 1])),
        (oids.INET, b"2001:db8::1/64", bytes([3, 64, 0, 16]) + bytes.fromhex("20010db8000000000000000000000001")),
        (oids.CIDR, b"10.0.0.0/8", bytes([2, 8, 1, 4, 10, 0, 0, 0])),
        (oids.MACADDR, b"08:00:2b:01:02:03", bytes.fromhex("08002b010203")),
        (oids.MACADDR8, b"08:00:2b:01:02:03:04:05", bytes.fromhex("08002b0102030405")),
        (oids.UUID, b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", bytes.fromhex("a0eebc999c0b4ef8bb6d6bb9bd380a11")),
        (oids.BOOL, b"t", b"\x01"),
        (oids.INT2, b"-32768", i16(-32768)),
        (oids.INT8, b"9223372036854775807", i64((1 << 63) - 1)),
        (oids.OID, b"4294967295", u32(0xFFFFFFFF)),
        (oids.XID8, b"42", i64(42)),
        (oids.FLOAT4, b"1.5", struct.pack(">f", 1.5)),
        (oids.FLOAT8, b"-Infinity", f64(float("-inf"))),
        (oids.BYTEA, b"\\xdeadbeef", bytes.fromhex("deadbeef")),
        (oids.CHAR, b"x", b"x"),
        (oids.BIT, b"10110", i32(5) + b"\xb0"),
        (oids.VARBIT, b"1", i32(1) + b"\x80"),
        (oids.TID, b"(1,2)", u32(1) + i16(2)),
        (oids.PG_LSN, b"16/B374D848", i64(0x16B374D848)),
        (oids.PG_SNAPSHOT, b"10:20:10,14", i32(2) + i64(10) + i64(20) + i64(10) + i64(14)),
        (oids.POINT, b"(1.5,-2)", f64(1.5) + f64(-2)),
        (oids.LINE, b"{1,-1,0}", f64(1) + f64(-1) + f64(0)),
        (oids.LSEG, b"[(0,0),(1,1)]", f64(0) + f64(0) + f64(1) + f64(1)),
        (oids.BOX, b"(1,1),(0,0)", f64(1) + f64(1) + f64(0) + f64(0)),
        (oids.PATH, b"[(0,0),(1,1)]", b"\x00" + i32(2) + f64(0) + f64(0) + f64(1) + f64(1)),
        (oids.POLYGON, b"((0,0),(1,0),(0,1))", i32(3) + f64(0) + f64(0) + f64(1) + f64(0) + f64(0) + f64(1)),
        (oids.CIRCLE, b"<(0,0),2>", f64(0) + f64(0) + f64(2)),
        (oids.TSVECTOR, b"'cat':1A 'fat':2", i32(2) + b"cat\0" + i16(1) + struct.pack(">H", 0xC001) + b"fat\0" + i16(1) + i16(2)),
        (oids.TSQUERY, b"'fat' & 'rat':*",
         i32(3) + b"\x02\x02" + b"\x01\x00\x01rat\0" + b"\x01\x00\x00fat\0"),
        (array_of[oids.INT4], b"{1,NULL,3}", array_send(oids.INT4, [3], [1], [i32(1), None, i32(3)])),
        (array_of[oids.INT4], b"[0:1]={7,8}", array_send(oids.INT4, [2], [0], [i32(7), i32(8)])),
        (array_of[oids.TEXT], b'{{"a b",c},{"\\"",NULL}}',
         array_send(oids.TEXT, [2, 2], [1, 1], [b"a b", b"c", b'"', None])),
        (array_of[oids.NUMERIC], b"{1.5,NaN}", array_send(oids.NUMERIC, [2], [1], [numeric_send("1.5"),
                                                                                  numeric_send("NaN")])),
        (array_of[oids.TIMESTAMPTZ], b'{"2024-01-01 00:00:00+00"}', array_send(oids.TIMESTAMPTZ, [1], [1], [ts])),
        (array_of[oids.BOX], b"{(1,1),(0,0);(2,2),(1,1)}",
         array_send(oids.BOX, [2], [1], [f64(1) * 2 + f64(0) * 2, f64(2) * 2 + f64(1) * 2])),
        (oids.INT2VECTOR, b"1 2 3", array_send(oids.INT2, [3], [0], [i16(1), i16(2), i16(3)])),
        (oids.INT4RANGE, b"[1,10)", range_send(i32(1), i32(10), True, False)),
        (oids.TSTZRANGE, b'["2024-01-01 00:00:00+00",infinity)', range_send(ts, i64((1 << 63) - 1), True, False)),
        (oids.NUMRANGE, b"empty", b"\x01"),
        (oids.ARRAY_OF[oids.INT4RANGE], b'{"[1,2)",empty}',
         array_send(oids.INT4RANGE, [2], [1], [range_send(i32(1), i32(2), True, False), b"\x01"])),
        (oids.INT4MULTIRANGE, b"{[1,2),[5,7)}",
         multirange(range_send(i32(1), i32(2), True, False), range_send(i32(5), i32(7), True, False))),
        (ENUM_OID, b"happy", b"happy"),
        (ENUM_ARRAY_OID, b"{happy,sad}", array_send(ENUM_OID, [2], [1], [b"happy", b"sad"])),
        (DOMAIN_OID, b"9.99", numeric_send("9.99")),
        (RANGE_OID, b"[1.00,2.50]", range_send(numeric_send("1.00"), numeric_send("2.50"), True, True)),
        (MULTIRANGE_OID, b"{[1.00,2.50]}", multirange(range_send(numeric_send("1.00"), numeric_send("2.50"),
                                                                 True, True))),
        (COMPOSITE_OID, b'(1,"x y",9.99,"2024-01-01 00:00:00+00")',
         record_send([(oids.INT4, i32(1)), (oids.TEXT, b"x y"), (DOMAIN_OID, numeric_send("9.99")),
                      (oids.TIMESTAMPTZ, ts)])),
        (NESTED_OID, b'("{""(1,a,,)""}","{x,\\"\\"}","[1,3)")',
         record_send([(COMPOSITE_ARRAY_OID,
                       array_send(COMPOSITE_OID, [1], [1], [record_send([(oids.INT4, i32(1)), (oids.TEXT, b"a"),
                                                                          (DOMAIN_OID, None),
                                                                          (oids.TIMESTAMPTZ, None)])])),
                      (oids.ARRAY_OF[oids.TEXT], array_send(oids.TEXT, [2], [1], [b"x", b'"'])),
                      (oids.INT4RANGE, range_send(i32(1), i32(3), True, False))])),
    ]
    for oid, text, binary in values:
        yield header(oid, False, False) + text
        yield header(oid, True, False) + binary
        for at in sorted({0, len(text) // 2, len(text) - 1}):  # a few bytes of each text form
            yield header(oid, False, False, amplified=True) + bytes([at]) + text
        yield header(oid, True, True) + ROW_SEPARATOR.join(
            [row("t", text), row("b", binary), row("n"), row("u"), row("b", binary)])


def write_seed_corpus(directory: Path, messages: int = 300) -> int:
    """Write the seed corpus into ``directory`` (one file per input); returns the number written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = 0
    for index, data in enumerate([*_message_seeds(messages), *_value_seeds()]):
        (directory / f"seed-{index:04d}").write_bytes(data)
        written += 1
    return written


# ---------------------------------------------------------------------------- script
DEFAULT_FLAGS = ["-max_len=2048", "-timeout=20", "-rss_limit_mb=3072", "-print_final_stats=1"]


def main(argv: list[str]) -> None:
    """Seed empty corpus directories, add default libFuzzer flags the caller did not set, fuzz."""
    given = {arg.split("=", 1)[0] for arg in argv[1:] if arg.startswith("-")}
    flags = [flag for flag in DEFAULT_FLAGS if flag.split("=", 1)[0] not in given]
    for arg in argv[1:]:
        if not arg.startswith("-"):
            corpus = Path(arg)  # a corpus directory, or a crash file to replay
            if not corpus.exists() or (corpus.is_dir() and not any(corpus.iterdir())):
                print(f"seeding {corpus}: {write_seed_corpus(corpus)} inputs", file=sys.stderr)
    atheris.Setup([argv[0], *flags, *argv[1:]], test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
