"""tsvector and tsquery: binary rendered as tsvectorout/tsqueryout print."""

from __future__ import annotations

import struct

import pytest

from walspark.values import oids

from .vectors import codec, i32


def test_tsvector_binary_vector_from_the_server() -> None:
    # SELECT tsvectorsend('a:1A b:2,3 c')
    raw = b"\x00\x00\x00\x03a\x00\x00\x01\xc0\x01b\x00\x00\x02\x00\x02\x00\x03c\x00\x00\x00"
    assert codec(oids.TSVECTOR).decode_binary(raw) == "'a':1A 'b':2,3 'c'"


def test_tsvector_quoting() -> None:
    raw = i32(2) + b"it's" + b"\x00" + struct.pack(">HH", 1, (1 << 14) | 5) + b"a\\b\x00\x00\x00"
    assert codec(oids.TSVECTOR).decode_binary(raw) == "'it''s':5C 'a\\\\b'"
    assert codec(oids.TSVECTOR).decode_text(b"'it''s':5C") == "'it''s':5C"


def _val(text: str, weight: int = 0, prefix: int = 0) -> bytes:
    return bytes([1, weight, prefix]) + text.encode() + b"\x00"


def _op(op: int, distance: int | None = None) -> bytes:
    return bytes([2, op]) + (struct.pack(">h", distance) if distance is not None else b"")


@pytest.mark.parametrize(("items", "text"), [
    # SELECT tsquerysend('a & !b <2> (c | d:*AB)')
    ([_op(2), _op(4, 2), _op(3), _val("d", 12, 1), _val("c"), _op(1), _val("b"), _val("a")],
     "'a' & !'b' <2> ( 'c' | 'd':*AB )"),
    ([_op(1), _op(3), _val("b"), _val("a")], "!( 'a' | 'b' )"),
    ([_op(4, 1), _op(4, 1), _val("c"), _val("b"), _val("a")], "'a' <-> ( 'b' <-> 'c' )"),
    ([_op(4, 1), _val("c"), _op(4, 1), _val("b"), _val("a")], "'a' <-> 'b' <-> 'c'"),
    ([_op(2), _val("z", 8), _val("x y")], "'x y' & 'z':A"),
    ([], ""),
])
def test_tsquery_binary(items: list[bytes], text: str) -> None:
    assert codec(oids.TSQUERY).decode_binary(i32(len(items)) + b"".join(items)) == text
