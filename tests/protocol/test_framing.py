"""Replication CopyData frames: XLogData 'w', primary keepalive 'k', standby status update 'r'."""

from __future__ import annotations

import struct
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walspark.protocol import (
    Begin,
    Decoder,
    PrimaryKeepalive,
    ProtocolError,
    StandbyStatusUpdate,
    XLogData,
    decode_frame,
    encode_frame,
    encode_message,
)

lsns = st.integers(0, (1 << 64) - 1)
clocks = st.integers(-(1 << 63), (1 << 63) - 1)


def Int64(v: int) -> bytes:
    return struct.pack(">q" if v < 0 else ">Q", v)


def test_xlogdata_layout() -> None:
    payload = encode_message(Begin(0x16B3800, 0, 42))
    data = (b"w"
            + Int64(0x16B3748)     # start of the WAL data in this message
            + Int64(0x16B3900)     # current end of WAL on the server
            + Int64(757382400000000)  # server clock
            + payload)
    frame = decode_frame(data)
    assert frame == XLogData(data_start=0x16B3748, wal_end=0x16B3900, send_time=757382400000000, payload=payload)
    assert frame.send_datetime == datetime(2024, 1, 1, tzinfo=UTC)
    assert encode_frame(frame) == data
    assert Decoder(1).decode(frame.payload, lsn=frame.data_start) == Begin(0x16B3800, 0, 42)


def test_primary_keepalive_layout() -> None:
    data = b"k" + Int64(0x16B3900) + Int64(5) + b"\x01"
    frame = decode_frame(data)
    assert frame == PrimaryKeepalive(wal_end=0x16B3900, send_time=5, reply_requested=True)
    assert encode_frame(frame) == data


def test_standby_status_update_layout() -> None:
    data = b"r" + Int64(30) + Int64(20) + Int64(10) + Int64(-1) + b"\x00"
    frame = StandbyStatusUpdate.decode(data)
    assert frame == StandbyStatusUpdate(written=30, flushed=20, applied=10, client_time=-1, reply_requested=False)
    assert frame.encode() == data
    assert decode_frame(data) == frame


@given(st.builds(XLogData, lsns, lsns, clocks, st.binary(max_size=40))
       | st.builds(PrimaryKeepalive, lsns, clocks, st.booleans())
       | st.builds(StandbyStatusUpdate, lsns, lsns, lsns, clocks, st.booleans()))
@settings(max_examples=200)
def test_frames_round_trip(frame: XLogData | PrimaryKeepalive | StandbyStatusUpdate) -> None:
    data = encode_frame(frame)
    assert decode_frame(data) == frame
    assert encode_frame(decode_frame(data)) == data


@pytest.mark.parametrize(("data", "kind", "offset", "match"), [
    (b"", None, 0, "empty CopyData"),
    (b"x" + bytes(30), "x", 0, "unknown replication frame kind"),
    (b"w" + bytes(20), "XLogData", 17, "server clock needs 8 bytes, 4 left"),
    (b"k" + bytes(16), "PrimaryKeepalive", 17, "reply-requested byte needs 1 bytes, 0 left"),
    (b"k" + bytes(18), "PrimaryKeepalive", 18, "1 trailing bytes"),
    (b"k" + bytes(16) + b"\x02", "PrimaryKeepalive", 17, "must be 0 or 1"),
    (b"r" + bytes(3), "StandbyStatusUpdate", 1, "written LSN needs 8 bytes, 3 left"),
    (b"r" + bytes(34), "StandbyStatusUpdate", 34, "1 trailing bytes"),
])
def test_malformed_frames(data: bytes, kind: str | None, offset: int, match: str) -> None:
    with pytest.raises(ProtocolError, match=match) as info:
        decode_frame(data)
    assert (info.value.kind, info.value.offset) == (kind, offset)


def test_frame_class_checks_its_own_kind_byte() -> None:
    with pytest.raises(ProtocolError, match="expected kind byte 'k'"):
        PrimaryKeepalive.decode(b"r" + bytes(33))


@given(st.binary(max_size=60))
@settings(max_examples=300)
def test_random_frames_fail_cleanly(data: bytes) -> None:
    try:
        frame = decode_frame(data)
    except ProtocolError as error:
        assert error.offset is not None and 0 <= error.offset <= len(data)
    else:
        assert encode_frame(frame) == data


def test_out_of_range_fields_are_refused_on_encode() -> None:
    with pytest.raises(ValueError):
        encode_frame(StandbyStatusUpdate(-1, 0, 0, 0))
