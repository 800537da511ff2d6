"""Encoding and decoding are exact inverses, for every message kind and protocol version 1-4.

``decode(encode(m)) == m`` for every message the encoder accepts, and
``encode(decode(b)) == b`` for every byte string the decoder accepts (the second property
is also exercised on arbitrary bytes in ``test_fuzz``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walspark.protocol import Decoder, decode_message, encode_message

from .strategies import BUILDERS, KINDS, Case, cases


def _decode(case: Case, data: bytes):  # type: ignore[no-untyped-def]
    return decode_message(data, protocol_version=case.protocol_version, in_stream=case.in_stream,
                          parallel_abort=case.parallel_abort)


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_decode_inverts_encode(kind: str, data: st.DataObject) -> None:
    case = data.draw(cases(kind))
    encoded = encode_message(case.message)
    decoded = _decode(case, encoded)
    assert decoded == case.message
    assert type(decoded) is type(case.message)
    assert encode_message(decoded) == encoded


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_every_version_round_trips_its_kinds(version: int, data: st.DataObject) -> None:
    case = data.draw(cases(version=version))
    assert BUILDERS[type(case.message).KIND][0] <= version
    assert _decode(case, encode_message(case.message)) == case.message


@given(st.lists(cases(kind="I", version=4) | cases(kind="U", version=4) | cases(kind="D", version=4)
                | cases(kind="R", version=4) | cases(kind="M", version=4), max_size=6))
@settings(max_examples=50, deadline=None)
def test_stateful_decoder_round_trips_a_streamed_block(changes: list[Case]) -> None:
    """Inside Stream Start / Stream Stop the stateful Decoder expects (and keeps) the Xid."""
    from walspark.protocol import StreamStart, StreamStop

    decoder = Decoder(4, streaming_parallel=True)
    assert decoder.decode(encode_message(StreamStart(7, True))) == StreamStart(7, True)
    for case in changes:
        if case.message.xid is None:  # type: ignore[union-attr]
            continue  # a top-level change cannot sit inside a streamed block
        assert decoder.decode(encode_message(case.message)) == case.message
    assert decoder.decode(b"E") == StreamStop()
    assert not decoder.in_stream


@given(cases(kind="A", version=4))
def test_stream_abort_layout_by_length_when_options_unknown(case: Case) -> None:
    """``parallel_abort=None``: 9 bytes = short layout, 25 bytes = protocol-4 parallel layout."""
    assert decode_message(encode_message(case.message), protocol_version=4, in_stream=False,
                          parallel_abort=None) == case.message


@given(cases())
@settings(max_examples=200, deadline=None)
def test_memoryview_and_bytearray_inputs_decode_alike(case: Case) -> None:
    encoded = encode_message(case.message)
    for form in (bytearray(encoded), memoryview(encoded)):
        assert decode_message(form, protocol_version=case.protocol_version, in_stream=case.in_stream,
                              parallel_abort=case.parallel_abort) == case.message
