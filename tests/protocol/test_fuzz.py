"""Fuzzing: whatever the bytes, the decoder returns a message or raises ProtocolError — nothing else, no hang.

And when it does return a message, that message re-encodes to exactly the input bytes
(``encode(decode(b)) == b``): the decoder accepts only canonical encodings, so a
successfully decoded capture can always be reproduced byte for byte.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walspark.protocol import ProtocolError, decode_message, encode_message

from .strategies import KINDS, Case, cases

pytestmark = pytest.mark.timeout(120)

LSN = 0xABCDEF_0123
# (protocol version, inside a streamed block, Stream Abort layout) — every legal decoder context
CONTEXTS = [
    (version, in_stream, parallel)
    for version in (1, 2, 3, 4)
    for in_stream in (False, True)
    for parallel in (False, True, None)
    if not (in_stream and version < 2) and not (parallel and version < 4)
]
contexts = st.sampled_from(CONTEXTS)


def assert_decodes_or_fails_cleanly(data: bytes, context: tuple[int, bool, bool | None]) -> None:
    version, in_stream, parallel = context
    try:
        message = decode_message(data, protocol_version=version, in_stream=in_stream,
                                 parallel_abort=parallel, lsn=LSN)
    except ProtocolError as error:
        assert error.lsn == LSN
        assert error.offset is not None and 0 <= error.offset <= len(data), str(error)
        assert isinstance(str(error), str)
    else:
        assert encode_message(message) == data


@given(context=contexts, data=st.binary(max_size=120))
@settings(max_examples=400, deadline=None)
def test_random_bytes(context: tuple[int, bool, bool | None], data: bytes) -> None:
    assert_decodes_or_fails_cleanly(data, context)


@given(context=contexts, kind=st.sampled_from(KINDS), body=st.binary(max_size=80))
@settings(max_examples=600, deadline=None)
def test_random_bodies_behind_every_kind_byte(context: tuple[int, bool, bool | None], kind: str,
                                              body: bytes) -> None:
    assert_decodes_or_fails_cleanly(kind.encode() + body, context)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[Case, bytes]:
    case = draw(cases())
    data = bytearray(encode_message(case.message))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["truncate", "flip", "insert", "append", "big"]))
        if how == "truncate":
            del data[where:]
        elif how == "flip" and where < len(data):
            data[where] ^= draw(st.integers(1, 255))
        elif how == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=6))
        elif how == "append":
            data += draw(st.binary(min_size=1, max_size=6))
        elif how == "big":  # a length/count field turned huge or negative
            data[where:where + 4] = draw(st.sampled_from([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff",
                                                          b"\x80\x00\x00\x00", b"\x00\x01\x00\x00"]))
    return case, bytes(data)


@given(mutated(), st.booleans(), contexts)
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_valid_messages(sample: tuple[Case, bytes], own_context: bool,
                                other: tuple[int, bool, bool | None]) -> None:
    case, data = sample
    context = (case.protocol_version, case.in_stream, case.parallel_abort) if own_context else other
    assert_decodes_or_fails_cleanly(data, context)


def test_huge_counts_are_rejected_fast() -> None:
    """Counts claiming millions of items fail on the bounds check, before any loop or allocation."""
    import time

    samples = [
        b"I" + b"\0\0\0\1" + b"N" + b"\xff\xff" + b"n" * 100,
        b"T" + b"\x7f\xff\xff\xff" + b"\0" + b"\0" * 100,
        b"R" + b"\0\0\0\1" + b"s\0t\0d" + b"\xff\xff" + b"\0" * 100,
        b"M" + b"\0" + b"\0" * 8 + b"p\0" + b"\x7f\xff\xff\xff",
    ]
    start = time.perf_counter()
    for data in samples:
        with pytest.raises(ProtocolError):
            decode_message(data, protocol_version=1, in_stream=False)
    assert time.perf_counter() - start < 0.5
