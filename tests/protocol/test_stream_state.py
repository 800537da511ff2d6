"""The stateful Decoder follows Stream Start / Stream Stop, which decides where Xids appear."""

from __future__ import annotations

import pytest

from walspark.protocol import (
    Begin,
    Commit,
    Decoder,
    Insert,
    Origin,
    ProtocolError,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    TupleData,
    encode_message,
)

ROW = TupleData("t", (b"1",))


def test_a_streamed_transaction_then_a_regular_one() -> None:
    stream = [
        StreamStart(xid=900, first_segment=True),
        Origin(commit_lsn=5, name="upstream"),          # sent inside the block, without an Xid
        Insert(xid=900, relation_id=1, new_tuple=ROW),
        Insert(xid=901, relation_id=1, new_tuple=ROW),  # a subtransaction's change
        StreamStop(),
        StreamStart(xid=900, first_segment=False),
        Insert(xid=900, relation_id=1, new_tuple=ROW),
        StreamStop(),
        StreamAbort(xid=900, subxid=901),
        StreamCommit(xid=900, commit_lsn=10, end_lsn=11, commit_timestamp=12),
        Begin(final_lsn=20, commit_timestamp=21, xid=902),
        Insert(xid=None, relation_id=1, new_tuple=ROW),
        Commit(commit_lsn=20, end_lsn=22, commit_timestamp=21),
    ]
    decoder = Decoder(2)
    states = []
    for message in stream:
        assert decoder.decode(encode_message(message)) == message
        states.append((decoder.in_stream, decoder.stream_xid))
    assert states[0] == (True, 900) and states[4] == (False, None) and states[-1] == (False, None)


def test_the_same_bytes_mean_different_things_inside_and_outside_a_block() -> None:
    # Outside: relation OID 0x00000384, 'N', TupleData with 0 columns.
    data = b"I" + (900).to_bytes(4, "big") + b"N\0\0"
    assert Decoder(2).decode(data) == Insert(None, 900, TupleData("", ()))
    # Inside: the same first four bytes are the Xid, and the message is then truncated.
    with pytest.raises(ProtocolError, match="truncated"):
        Decoder(2, in_stream=True).decode(data)


def test_a_failed_message_leaves_the_state_unchanged() -> None:
    decoder = Decoder(2)
    with pytest.raises(ProtocolError):
        decoder.decode(b"S\0\0\0\0\1")  # Xid 0
    assert not decoder.in_stream
    decoder.decode(encode_message(StreamStart(5, True)))
    with pytest.raises(ProtocolError, match="cannot appear inside a streamed block"):
        decoder.decode(encode_message(StreamStart(6, True)))
    assert decoder.in_stream and decoder.stream_xid == 5


def test_stream_abort_layout_follows_the_streaming_option() -> None:
    long_abort = StreamAbort(1, 2, abort_lsn=3, abort_timestamp=4)
    assert Decoder(4, streaming_parallel=True).decode(encode_message(long_abort)) == long_abort
    assert Decoder(4, streaming_parallel=None).decode(encode_message(long_abort)) == long_abort
    with pytest.raises(ProtocolError, match="trailing"):
        Decoder(4).decode(encode_message(long_abort))
    with pytest.raises(ProtocolError, match="abort LSN"):
        Decoder(4, streaming_parallel=True).decode(encode_message(StreamAbort(1, 2)))


def test_decoder_accepts_memoryview_payload_slices() -> None:
    frame = b"w" + bytes(24) + encode_message(Begin(1, 2, 3))
    assert Decoder(1).decode(memoryview(frame)[25:], lsn=1) == Begin(1, 2, 3)


def test_repr_shows_configuration_and_state() -> None:
    assert repr(Decoder(4, streaming_parallel=True)) == \
        "Decoder(protocol_version=4, streaming_parallel=True, in_stream=False)"
