"""Malformed messages: each fault raises ProtocolError naming the message kind, offset and LSN.

One test per fault listed in the codec's contract: truncation, trailing bytes, unknown
message kinds, unknown TupleData kinds, negative and oversized lengths, both 'K' and 'O',
non-zero ``Int8(0)`` flags, strings without NUL, invalid UTF-8, column counts that do not
fit, and Xid-in-stream / protocol-version rules.
"""

from __future__ import annotations

import pickle
import re

import pytest

from walspark.protocol import Decoder, ProtocolError, decode_message, format_lsn

from .test_message_layouts import LSN_A, TS, XID, Byte1, Int8, Int16, Int32, Int64, String

LSN = 0x16B3748  # the LSN every faulty message is reported at


def fails(data: bytes, *, kind: str | None, offset: int, match: str, version: int = 4,
          in_stream: bool = False, parallel_abort: bool | None = False) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        decode_message(data, protocol_version=version, in_stream=in_stream, parallel_abort=parallel_abort, lsn=LSN)
    error = info.value
    assert (error.kind, error.offset, error.lsn) == (kind, offset, LSN), str(error)
    assert re.search(match, error.reason), error.reason
    text = str(error)
    assert f"offset {offset}" in text and format_lsn(LSN) in text and "0/16B3748" in text
    if kind is not None:
        assert kind in text
    return error


INSERT_HEAD = Byte1("I") + Int32(16384) + Byte1("N")
BEGIN = Byte1("B") + Int64(LSN_A) + Int64(TS) + Int32(XID)


# ----------------------------------------------------------------------------- truncation


@pytest.mark.parametrize(("cut", "offset", "field"), [
    (1, 1, "final LSN"), (5, 1, "final LSN"), (9, 9, "commit timestamp"), (17, 17, "Xid"), (20, 17, "Xid"),
])
def test_truncated_fixed_message_names_the_cut_field(cut: int, offset: int, field: str) -> None:
    fails(BEGIN[:cut], kind="Begin", offset=offset, match=f"truncated: Int.. {field}")


def test_empty_message() -> None:
    fails(b"", kind=None, offset=0, match="empty message")


def test_truncated_tuple_value() -> None:
    data = INSERT_HEAD + Int16(1) + Byte1("t") + Int32(10) + b"abc"
    fails(data, kind="Insert", offset=9, match="length 10 is beyond the 3 remaining bytes")


def test_truncated_tuple_value_length() -> None:
    data = INSERT_HEAD + Int16(1) + Byte1("t") + b"\0\0"
    fails(data, kind="Insert", offset=9, match="truncated: Int32 TupleData column value length")


def test_truncated_column_kind_inside_loop() -> None:
    data = INSERT_HEAD + Int16(3) + Byte1("t") + Int32(0) + Byte1("n")
    fails(data, kind="Insert", offset=14, match="truncated: Int8 TupleData column kind")


def test_truncated_update_missing_new_tuple() -> None:
    data = Byte1("U") + Int32(1) + Byte1("K") + Int16(0)
    fails(data, kind="Update", offset=8, match="truncated: Int8 tuple tag")


def test_truncated_relation_column() -> None:
    data = (Byte1("R") + Int32(1) + String("s") + String("t") + Int8(ord("d")) + Int16(1)
            + Int8(1) + String("id") + Int32(23) + b"\xff\xff")  # type modifier cut after 2 bytes
    fails(data, kind="Relation", offset=20, match="truncated: Int32 column type modifier")


# ----------------------------------------------------------------------------- trailing bytes


@pytest.mark.parametrize(("data", "kind", "offset"), [
    (BEGIN + b"x", "Begin", 21),
    (INSERT_HEAD + Int16(0) + b"\0", "Insert", 8),
    (Byte1("Y") + Int32(1) + String("a") + String("b") + b"zz", "Type", 9),
    (Byte1("T") + Int32(1) + Int8(0) + Int32(5) + b"\1", "Truncate", 10),
    (Byte1("M") + Int8(0) + Int64(1) + String("p") + Int32(1) + b"ab", "Message", 17),
])
def test_trailing_bytes(data: bytes, kind: str, offset: int) -> None:
    fails(data, kind=kind, offset=offset, match="trailing bytes")


def test_trailing_bytes_after_stream_stop() -> None:
    fails(Byte1("E") + b"\0", kind="Stream Stop", offset=1, match="1 trailing bytes", in_stream=True)


# ----------------------------------------------------------------------------- kinds


@pytest.mark.parametrize(("data", "kind"), [(b"Z\0\0", "Z"), (b"\x00", "0x00"), (b"\xff abc", "0xFF")])
def test_unknown_message_kind(data: bytes, kind: str) -> None:
    fails(data, kind=kind, offset=0, match="unknown message kind")


def test_unknown_tuple_column_kind() -> None:
    data = INSERT_HEAD + Int16(2) + Byte1("n") + Byte1("x")
    fails(data, kind="Insert", offset=9, match="column 1 has unknown kind 'x'")


def test_insert_without_new_tuple_tag() -> None:
    fails(Byte1("I") + Int32(1) + Byte1("K") + Int16(0), kind="Insert", offset=5, match="expected 'N'")


def test_update_with_unexpected_tag() -> None:
    fails(Byte1("U") + Int32(1) + Byte1("X") + Int16(0), kind="Update", offset=5, match="expected 'K', 'O' or 'N'")


def test_delete_without_key_or_old_tuple() -> None:
    fails(Byte1("D") + Int32(1) + Byte1("N") + Int16(0), kind="Delete", offset=5, match="expected 'K' or 'O'")


# ----------------------------------------------------------------------------- lengths


def test_negative_tuple_value_length() -> None:
    data = INSERT_HEAD + Int16(1) + Byte1("b") + Int32(-1) + b"abcd"
    fails(data, kind="Insert", offset=9, match="value length -1 is negative")


def test_oversized_tuple_value_length_is_an_error_not_an_allocation() -> None:
    data = INSERT_HEAD + Int16(1) + Byte1("t") + Int32(0x7FFFFFFF)
    fails(data, kind="Insert", offset=9, match="length 2147483647 is beyond the 0 remaining bytes")


def test_negative_message_content_length() -> None:
    data = Byte1("M") + Int8(1) + Int64(1) + String("p") + Int32(-5)
    fails(data, kind="Message", offset=12, match="content length -5 is negative")


def test_oversized_message_content_length() -> None:
    data = Byte1("M") + Int8(1) + Int64(1) + String("p") + Int32(100) + b"short"
    fails(data, kind="Message", offset=12, match="content length 100 is beyond the 5 remaining")


def test_negative_truncate_relation_count() -> None:
    fails(Byte1("T") + Int32(-1) + Int8(0), kind="Truncate", offset=1, match="relation count -1 is negative")


def test_truncate_relation_count_beyond_buffer() -> None:
    fails(Byte1("T") + Int32(1000) + Int8(0) + Int32(1), kind="Truncate", offset=1,
          match="relation count 1000 is beyond the 4 remaining")


def test_tuple_column_count_that_cannot_fit() -> None:
    fails(INSERT_HEAD + Int16(65535) + Byte1("n"), kind="Insert", offset=6,
          match="column count 65535 does not fit the 1 remaining bytes")


def test_relation_column_count_that_cannot_fit() -> None:
    data = Byte1("R") + Int32(1) + String("s") + String("t") + Int8(ord("d")) + Int16(50) + b"\0" * 20
    fails(data, kind="Relation", offset=10, match="column count 50 does not fit the 20 remaining")


# ----------------------------------------------------------------------------- K and O


def test_update_with_both_key_and_old_tuple() -> None:
    data = Byte1("U") + Int32(1) + Byte1("K") + Int16(0) + Byte1("O") + Int16(0) + Byte1("N") + Int16(0)
    fails(data, kind="Update", offset=8, match="'K' part followed by 'O'")


def test_delete_with_both_key_and_old_tuple() -> None:
    data = Byte1("D") + Int32(1) + Byte1("O") + Int16(0) + Byte1("K") + Int16(0)
    fails(data, kind="Delete", offset=8, match="'O' part followed by 'K'")


# ----------------------------------------------------------------------------- flags


@pytest.mark.parametrize(("data", "kind", "offset"), [
    (Byte1("C") + Int8(1) + Int64(1) + Int64(2) + Int64(3), "Commit", 1),
    (Byte1("c") + Int32(XID) + Int8(2) + Int64(1) + Int64(2) + Int64(3), "Stream Commit", 5),
    (Byte1("P") + Int8(1) + Int64(1) + Int64(2) + Int64(3) + Int32(4) + String("g"), "Prepare", 1),
    (Byte1("K") + Int8(1) + Int64(1) + Int64(2) + Int64(3) + Int32(4) + String("g"), "Commit Prepared", 1),
    (Byte1("r") + Int8(9) + Int64(1) + Int64(2) + Int64(3) + Int64(4) + Int32(4) + String("g"),
     "Rollback Prepared", 1),
    (Byte1("p") + Int8(128) + Int64(1) + Int64(2) + Int64(3) + Int32(4) + String("g"), "Stream Prepare", 1),
])
def test_nonzero_unused_flags(data: bytes, kind: str, offset: int) -> None:
    fails(data, kind=kind, offset=offset, match="flags byte must be 0")


def test_message_flags_other_than_transactional() -> None:
    fails(Byte1("M") + Int8(2) + Int64(1) + String("p") + Int32(0), kind="Message", offset=1,
          match="flags must be 0 or 1")


def test_stream_start_first_segment_byte_other_than_0_or_1() -> None:
    fails(Byte1("S") + Int32(XID) + Int8(7), kind="Stream Start", offset=5, match="first-segment byte")


# ----------------------------------------------------------------------------- strings


@pytest.mark.parametrize(("data", "kind", "offset", "what"), [
    (Byte1("O") + Int64(1) + b"node", "Origin", 9, "origin name"),
    (Byte1("R") + Int32(1) + String("public") + b"orders", "Relation", 12, "relation name"),
    (Byte1("Y") + Int32(1) + b"public", "Type", 5, "namespace"),
    (Byte1("M") + Int8(0) + Int64(1) + b"prefix", "Message", 10, "prefix"),
    (Byte1("b") + Int64(1) + Int64(2) + Int64(3) + Int32(4) + b"gid", "Begin Prepare", 29, "GID"),
])
def test_string_without_nul_terminator(data: bytes, kind: str, offset: int, what: str) -> None:
    fails(data, kind=kind, offset=offset, match=f"{what}: string without NUL terminator")


@pytest.mark.parametrize(("data", "kind", "offset", "what"), [
    (Byte1("R") + Int32(1) + b"ok\xffno\0" + String("t") + Int8(100) + Int16(0), "Relation", 7, "namespace"),
    (Byte1("R") + Int32(1) + String("s") + String("t") + Int8(100) + Int16(1)
     + Int8(0) + b"\xc3\x28\0" + Int32(1) + Int32(1), "Relation", 13, "column name"),
    (Byte1("Y") + Int32(1) + String("s") + b"\xed\xa0\x80\0", "Type", 7, "type name"),  # surrogate
    (Byte1("O") + Int64(1) + b"\xc0\xaf\0", "Origin", 9, "origin name"),  # overlong '/'
    (Byte1("P") + Int8(0) + Int64(1) + Int64(2) + Int64(3) + Int32(4) + b"g\x80\0", "Prepare", 31, "GID"),
])
def test_invalid_utf8(data: bytes, kind: str, offset: int, what: str) -> None:
    fails(data, kind=kind, offset=offset, match=f"{what}: invalid UTF-8")


# ----------------------------------------------------------------------------- streaming rules


@pytest.mark.parametrize(("data", "kind"), [
    (BEGIN, "Begin"),
    (Byte1("C") + Int8(0) + Int64(1) + Int64(2) + Int64(3), "Commit"),
    (Byte1("S") + Int32(XID) + Int8(0), "Stream Start"),
    (Byte1("c") + Int32(XID) + Int8(0) + Int64(1) + Int64(2) + Int64(3), "Stream Commit"),
    (Byte1("A") + Int32(XID) + Int32(XID), "Stream Abort"),
    (Byte1("P") + Int8(0) + Int64(1) + Int64(2) + Int64(3) + Int32(4) + String("g"), "Prepare"),
])
def test_transaction_control_inside_a_streamed_block(data: bytes, kind: str) -> None:
    fails(data, kind=kind, offset=0, match="cannot appear inside a streamed block", in_stream=True)


def test_stream_stop_outside_a_streamed_block() -> None:
    fails(Byte1("E"), kind="Stream Stop", offset=0, match="outside a streamed block")


def test_streamed_change_with_invalid_xid() -> None:
    data = Byte1("I") + Int32(0) + Int32(16384) + Byte1("N") + Int16(0)
    fails(data, kind="Insert", offset=1, match="Xid is 0", in_stream=True)


def test_streamed_change_truncated_in_its_xid() -> None:
    fails(Byte1("D") + b"\0\0", kind="Delete", offset=1, match="truncated: Int32 Xid", in_stream=True)


def test_stream_start_with_invalid_xid() -> None:
    fails(Byte1("S") + Int32(0) + Int8(1), kind="Stream Start", offset=1, match="Xid is 0")


def test_stream_abort_with_invalid_subxid() -> None:
    fails(Byte1("A") + Int32(XID) + Int32(0), kind="Stream Abort", offset=5, match="Xid is 0")


@pytest.mark.parametrize(("data", "kind", "version", "since"), [
    (Byte1("S") + Int32(XID) + Int8(1), "Stream Start", 1, 2),
    (Byte1("E"), "Stream Stop", 1, 2),
    (Byte1("c") + Int32(XID) + Int8(0) + Int64(1) + Int64(2) + Int64(3), "Stream Commit", 1, 2),
    (Byte1("A") + Int32(XID) + Int32(XID), "Stream Abort", 1, 2),
    (Byte1("p") + Int8(0) + Int64(1) + Int64(2) + Int64(3) + Int32(4) + String("g"), "Stream Prepare", 1, 2),
])
def test_kind_the_server_never_sends_at_the_protocol_version(data: bytes, kind: str, version: int,
                                                              since: int) -> None:
    """Streaming needs protocol 2 (pgoutput refuses ``streaming`` below it), so does Stream Prepare."""
    fails(data, kind=kind, offset=0, version=version, match=f"never sent below protocol version {since}")


def test_stream_abort_v4_parallel_requires_abort_lsn_and_timestamp() -> None:
    short = Byte1("A") + Int32(XID) + Int32(XID)
    fails(short, kind="Stream Abort", offset=9, match="truncated: Int64 abort LSN", parallel_abort=True)


def test_stream_abort_without_parallel_rejects_abort_fields() -> None:
    long = Byte1("A") + Int32(XID) + Int32(XID) + Int64(LSN_A) + Int64(TS)
    fails(long, kind="Stream Abort", offset=9, match="16 trailing bytes", parallel_abort=False)
    fails(long, kind="Stream Abort", offset=9, version=3, match="16 trailing bytes", parallel_abort=None)


def test_stream_abort_by_length_accepts_only_9_or_25_bytes() -> None:
    odd = Byte1("A") + Int32(XID) + Int32(XID) + Int64(LSN_A)
    fails(odd, kind="Stream Abort", offset=17, match="abort timestamp", parallel_abort=None)


# ----------------------------------------------------------------------------- the error itself


def test_error_without_lsn_says_so() -> None:
    with pytest.raises(ProtocolError) as info:
        Decoder(1).decode(b"Z")
    assert str(info.value) == "Z at offset 0, LSN unknown: unknown message kind 'Z'"


def test_error_survives_pickling() -> None:
    error = ProtocolError("boom", kind="Insert", offset=3, lsn=LSN)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.kind, copy.offset, copy.lsn, copy.reason, str(copy)) == ("Insert", 3, LSN, "boom", str(error))


def test_invalid_decoder_configuration_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        Decoder(5)
    with pytest.raises(ValueError):
        Decoder(3, streaming_parallel=True)
    with pytest.raises(ValueError):
        decode_message(b"E", protocol_version=1, in_stream=True)
    with pytest.raises(TypeError):
        Decoder(1).decode("B")  # type: ignore[arg-type]
