"""The compiled row-change scan (``walspark_c``) against the pure-Python decoder: same messages, same parts.

Every row change the strategies draw — each kind, each protocol version, inside and outside
streamed blocks — and every truncation and single-byte change of one must be accepted by the
compiled scan exactly when the reference decodes it, with the same Xid, relation and
TupleData parts, gathered into the same kinds and values (``differential.py``).
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walspark.compiled import PURE_VARIABLE, speedups
from walspark.protocol import Insert, TupleData, encode_message

from .differential import check_gather_hostile, check_message_loop, check_row_change
from .strategies import cases

pytestmark = pytest.mark.skipif(speedups is None and os.environ.get(PURE_VARIABLE, "") not in ("", "0"),
                                reason=f"{PURE_VARIABLE} is set: the compiled path is off")

ROW_KINDS = st.sampled_from(["I", "U", "D"])


def test_the_compiled_path_is_built() -> None:
    """./dev setup builds walspark_c: a checkout whose build failed must not pass on the pure path alone."""
    assert speedups is not None, "walspark_c is not installed: run ./dev setup (or pip install ./c)"


@given(ROW_KINDS.flatmap(lambda kind: cases(kind=kind)))
@settings(max_examples=300, deadline=None)
def test_every_row_change_scans_like_the_reference(case) -> None:  # type: ignore[no-untyped-def]
    check_row_change(speedups, encode_message(case.message), case.protocol_version, case.in_stream)


@given(st.sampled_from(["B", "C", "R", "Y", "T", "M", "O", "S", "E", "c", "A", "b", "P", "K", "r", "p"])
       .flatmap(lambda kind: cases(kind=kind)))
@settings(max_examples=150, deadline=None)
def test_other_messages_are_left_to_the_reference(case) -> None:  # type: ignore[no-untyped-def]
    check_row_change(speedups, encode_message(case.message), case.protocol_version, case.in_stream,
                     case.parallel_abort)


def damaged(message: bytes, data: st.DataObject) -> bytes:
    """The message truncated, extended or with one byte changed."""
    encoded = bytearray(message)
    how = data.draw(st.sampled_from(["cut", "flip", "extend"]))
    if how == "cut":
        encoded = encoded[:data.draw(st.integers(0, len(encoded) - 1))]
    elif how == "flip":
        at = data.draw(st.integers(0, len(encoded) - 1))
        encoded[at] = data.draw(st.integers(0, 255))
    else:
        encoded += data.draw(st.binary(min_size=1, max_size=8))
    return bytes(encoded)


@given(ROW_KINDS.flatmap(lambda kind: cases(kind=kind)), st.data())
@settings(max_examples=400, deadline=None)
def test_damaged_row_changes_are_refused_like_the_reference(case, data) -> None:  # type: ignore[no-untyped-def]
    """Truncated, extended or with one byte changed: accepted only where the reference decodes it."""
    encoded = damaged(encode_message(case.message), data)
    check_row_change(speedups, encoded, case.protocol_version, case.in_stream)
    check_gather_hostile(speedups, encoded[1:])


@given(st.sampled_from(["I", "U", "D", "R", "T", "M"]).flatmap(lambda kind: cases(kind=kind)), st.data())
@settings(max_examples=300, deadline=None)
def test_the_message_loop_keeps_exactly_what_the_scan_accepts(case, data) -> None:  # type: ignore[no-untyped-def]
    payload = encode_message(case.message)
    if data.draw(st.booleans()):
        payload = damaged(payload, data)
    check_message_loop(speedups, payload, case.protocol_version, case.in_stream, numbered=data.draw(st.booleans()))


def test_the_message_loop_hands_back_what_it_does_not_know() -> None:
    """Items of another shape, numbers past C's fields, other types: handed back as they are, never crashed on."""
    insert = encode_message(Insert(None, 1, TupleData("t", (b"x",))))
    odd = [None, [1, 2, False, insert], (1, 2, False), (1, 2, False, insert, 5), ("1", 2, False, insert),
           (True, 2, False, insert), (2**31, 2, False, insert), (1, 2**63, False, insert),
           (1, -(2**63) - 1, False, insert),
           (1, 2.0, False, insert), (1, 2, None, insert), (1, 2, 1, insert), (1, 2, False, bytearray(insert)),
           (1, 2, False, memoryview(insert)), (1, 2, False, "I"), (1, 2, True, insert)]
    for item in odd:
        batch = speedups.RowBatch(None)
        assert speedups.add_row_changes({1: batch}, iter([item]), True, 1, 0, 0, 0, 0, 0) == (0, 0, item)
        assert len(batch) == 0
    # Not numbered: 3-tuples, numbered from the given position; a batch of another type is no batch.
    batch = speedups.RowBatch(None)
    items = [(5, False, insert)] * 3 + [(6, False, insert)]
    assert speedups.add_row_changes({1: batch}, iter(items), False, 1, 0, 0, 0, 0, 10) == (4, 14, None)
    assert batch.columns()[2] == [10, 11, 12, 13]
    assert speedups.add_row_changes({1: "batch"}, iter(items), False, 1, 0, 0, 0, 0, 0) == (0, 0, items[0])
    assert speedups.add_row_changes({}, iter(items), False, 1, 0, 0, 0, 0, 2**31) == (0, 2**31, items[0])
    # From Python: a number past its field is refused (False, nothing kept), a TupleData kept aside.
    assert not batch.add(2**63, 0, 0, 0, 0, 0, "I", None, None) and len(batch) == 4
    assert not batch.add(0, 0, 2**31, 0, 0, 0, "I", None, None) and not batch.add(0, 0, 0, 0, 0, None, "I", None, None)
    assert not batch.add(0, 0, 0, 0, 0, 0, "X", None, None)
    part = TupleData("t", (b"y",))
    assert batch.add(0, 0, 0, 0, 0, 0, "U", part, (insert, 6)) and len(batch) == 5
    assert batch.gather(True, 1) is None and batch.gather(False, 1) is None  # the pure path reads these
    assert batch.parts(True)[-1] is part and batch.parts(False)[-1] == (insert, 6)
    assert batch.add(0, 0, 0, 0, 0, 0, "T", None, None)
    assert speedups.RowBatch(None).gather(True, 1) == [(speedups.HAS_NULL * 0, 0, b"", b"", b"", b"\0\0\0\0", b"")]


@given(st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
def test_any_bytes_as_a_part_gather_like_the_reference_reader(data: bytes) -> None:
    check_gather_hostile(speedups, data)


def test_negative_and_huge_lengths_never_read_out_of_bounds() -> None:
    """A value length of -1 or 2**31 - 1 in a 20-byte message: refused, as the reference does."""
    head = b"I" + (16384).to_bytes(4, "big") + b"N" + (1).to_bytes(2, "big") + b"t"
    for length in (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x05"):
        message = head + length + b"abc"
        assert speedups.scan_row_change(message, False) is None
        check_row_change(speedups, message, 4, False)
        assert speedups.gather_columns([(message, 6)], 1) is None


def test_gather_refuses_what_it_was_not_given() -> None:
    """Wrong shapes of input are refused (None), not crashed on."""
    message = encode_message(Insert(None, 1, TupleData("tn", (b"x", None))))
    assert speedups.gather_columns([(message, 6)], 2) is not None
    assert speedups.gather_columns([(bytearray(message), 6)], 2) is None
    assert speedups.gather_columns([(message, -1)], 2) is None
    assert speedups.gather_columns([(message, len(message))], 2) is None
    assert speedups.gather_columns([(message,)], 2) is None
    assert speedups.gather_columns([[message, 6]], 2) is None
    assert speedups.gather_columns([(message, 6)], -1) is None
    assert speedups.gather_columns([], 3) == [(speedups.HAS_NULL * 0, 0, b"", b"", b"", b"\0\0\0\0", b"")] * 3


def test_fixed_width_refuses_what_does_not_fit() -> None:
    """Buffers shorter than the rows need, offsets outside the data, values of another size: None, never a
    read past the end."""
    four = (7).to_bytes(4, "big")
    offsets = b"".join(i.to_bytes(4, sys.byteorder, signed=True) for i in (0, 4, 8))
    assert speedups.fixed_width(None, offsets, four * 2, 2, 4, False) == (7).to_bytes(4, sys.byteorder) * 2
    assert speedups.fixed_width(b"\x02", offsets, four * 2, 2, 4, False) == bytes(4) + (7).to_bytes(4, sys.byteorder)
    assert speedups.fixed_width(None, offsets, four, 2, 4, False) is None  # the second value is past the data
    assert speedups.fixed_width(None, offsets[:8], four * 2, 2, 4, False) is None  # offsets for one row only
    assert speedups.fixed_width(b"", offsets, four * 2, 2, 4, False) is None  # no validity byte
    assert speedups.fixed_width(None, offsets, four * 2, 2, 8, False) is None  # values of another size
    assert speedups.fixed_width(None, offsets, four * 2, 2, 3, False) is None  # no such width
    assert speedups.fixed_width(None, offsets, four * 2, -1, 4, False) is None
    backwards = b"".join(i.to_bytes(4, sys.byteorder, signed=True) for i in (-4, 0))
    assert speedups.fixed_width(None, backwards, four, 1, 4, False) is None
    huge = b"".join(i.to_bytes(4, sys.byteorder, signed=True) for i in (2**31 - 4, 2**31 - 1))
    assert speedups.fixed_width(None, huge, four, 1, 4, False) is None
    assert speedups.fixed_width(None, offsets[:8], bytes.fromhex("7f800001"), 1, 4, True) is None  # signalling NaN


def test_numeric_decimal128_refuses_what_does_not_fit() -> None:
    """The same bounds for numeric: short buffers, offsets outside the data, a value shorter than its header says."""
    one = (1).to_bytes(2, "big") + bytes(6) + (7).to_bytes(2, "big")  # 7, one base-10000 digit
    offsets = b"".join(i.to_bytes(4, sys.byteorder, signed=True) for i in (0, 10))
    assert speedups.numeric_decimal128(None, offsets, one, 1, 10, 0) == (7).to_bytes(16, sys.byteorder)
    assert speedups.numeric_decimal128(b"\x00", offsets, one, 1, 10, 0) == bytes(16)  # NULL
    assert speedups.numeric_decimal128(None, offsets, one[:9], 1, 10, 0) is None  # past the data
    assert speedups.numeric_decimal128(None, offsets[:4], one, 1, 10, 0) is None  # no end offset
    assert speedups.numeric_decimal128(b"", offsets, one, 1, 10, 0) is None  # no validity byte
    short = b"".join(i.to_bytes(4, sys.byteorder, signed=True) for i in (0, 8))
    assert speedups.numeric_decimal128(None, short, one, 1, 10, 0) is None  # one digit said, none there
    assert speedups.numeric_decimal128(None, offsets, one, 1, 39, 0) is None  # no decimal128(39, 0)
    assert speedups.numeric_decimal128(None, offsets, one, 1, 10, 11) is None  # scale past precision
    assert speedups.numeric_decimal128(None, offsets, one, 1, 0, 0) is None  # 7 has more digits than 0
