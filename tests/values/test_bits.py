"""bit and bit varying: strings of 0/1 from both formats."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.values import ValueConversionError, oids

from .vectors import codec, i32


def bit_send(bits: str) -> bytes:
    padded = bits + "0" * (-len(bits) % 8)
    return i32(len(bits)) + (int(padded, 2).to_bytes(len(padded) // 8, "big") if bits else b"")


@pytest.mark.parametrize("bits", ["", "1", "0000", "101010101", "0" * 17])
def test_bits(bits: str) -> None:
    for oid in (oids.BIT, oids.VARBIT):
        c = codec(oid)
        assert c.decode_text(bits.encode()) == bits
        assert c.decode_binary(bit_send(bits)) == bits


def test_bad_bits() -> None:
    with pytest.raises(ValueConversionError):
        codec(oids.VARBIT).decode("t", b"102")


@given(st.text(alphabet="01", max_size=70))
def test_bit_binary_round_trip(bits: str) -> None:
    assert codec(oids.VARBIT).decode_binary(bit_send(bits)) == bits
