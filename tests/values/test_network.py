"""inet, cidr, macaddr, macaddr8: canonical text from both formats."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.values import ValueConversionError, oids
from walspark.values.network import decode_inet_binary, format_ipv6

from .vectors import codec


def inet_send(text: str, is_cidr: bool = False) -> bytes:
    net = ipaddress.ip_interface(text)
    fam = 2 if net.version == 4 else 3
    return bytes([fam, net.network.prefixlen, int(is_cidr), len(net.ip.packed)]) + net.ip.packed


@pytest.mark.parametrize(("text", "binary_src", "is_cidr"), [
    ("10.1.2.3", "10.1.2.3/32", False),
    ("10.1.2.3/8", "10.1.2.3/8", False),
    ("10.0.0.0/8", "10.0.0.0/8", True),
    ("192.168.1.0/32", "192.168.1.0/32", True),  # cidr always shows its mask
    ("::2", "::2/128", False),
    ("::1.2.3.4", "::1.2.3.4/128", False),
    ("::ffff:1.2.3.4", "::ffff:1.2.3.4/128", False),
    ("1:0:0:1::1", "1:0:0:1:0:0:0:1/128", False),
    ("1:0:1:0:1:0:1:0", "1:0:1:0:1:0:1:0/128", False),
    ("fe80::1/64", "fe80::1/64", False),
    ("2001:db8::/32", "2001:db8::/32", True),
    ("::/0", "::/0", True),
    ("2001:db8::1:0:0:1", "2001:db8:0:0:1:0:0:1/128", False),  # first longest run wins
])
def test_inet_cidr(text: str, binary_src: str, is_cidr: bool) -> None:
    c = codec(oids.CIDR if is_cidr else oids.INET)
    assert c.decode_text(text.encode()) == text
    assert c.decode_binary(inet_send(binary_src, is_cidr)) == text


def test_macaddrs() -> None:
    assert codec(oids.MACADDR).decode_binary(bytes.fromhex("08002b010203")) == "08:00:2b:01:02:03"
    assert codec(oids.MACADDR8).decode_binary(bytes.fromhex("08002b0102030405")) == "08:00:2b:01:02:03:04:05"
    with pytest.raises(ValueConversionError):
        codec(oids.MACADDR).decode("b", b"\x00")


def test_bad_inet_binary() -> None:
    with pytest.raises(ValueConversionError):
        decode_inet_binary(bytes([2, 40, 0, 4, 1, 2, 3, 4]))
    with pytest.raises(ValueConversionError):
        decode_inet_binary(bytes([9, 8, 0, 4, 1, 2, 3, 4]))


@given(st.binary(min_size=16, max_size=16))
def test_ipv6_text_reads_back(addr: bytes) -> None:
    assert ipaddress.IPv6Address(format_ipv6(addr)).packed == addr
