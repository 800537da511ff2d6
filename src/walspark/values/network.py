"""inet, cidr, macaddr, macaddr8: strings in PostgreSQL's canonical text form.

Why strings: Arrow and Spark have no network-address type, and the canonical text is
what users compare and join on. The binary decoders render exactly what network_out /
macaddr_out print, so text and binary modes produce equal values.
"""

from __future__ import annotations

from ._scan import Reader
from .errors import ValueConversionError

__all__ = ["decode_inet_binary", "decode_macaddr8_binary", "decode_macaddr_binary", "format_ipv6"]

_PGSQL_AF_INET = 2  # AF_INET + 0
_PGSQL_AF_INET6 = 3  # AF_INET + 1


def format_ipv6(addr: bytes) -> str:
    """An IPv6 address as PostgreSQL's inet_net_ntop prints it.

    Lower-case hex words without leading zeros; the first longest run of two or more
    zero words becomes ``::``; ``::a.b.c.d`` and ``::ffff:a.b.c.d`` keep the embedded
    IPv4 address dotted.
    """
    words = [int.from_bytes(addr[i : i + 2], "big") for i in range(0, 16, 2)]
    best_base, best_len = -1, 0
    cur_base, cur_len = -1, 0
    for i, w in enumerate(words + [1]):  # sentinel closes a trailing run
        if w == 0 and i < 8:
            if cur_base < 0:
                cur_base, cur_len = i, 1
            else:
                cur_len += 1
        elif cur_base >= 0:
            if best_base < 0 or cur_len > best_len:
                best_base, best_len = cur_base, cur_len
            cur_base = -1
    if best_len < 2:
        best_base = -1
    out: list[str] = []
    i = 0
    while i < 8:
        if i == best_base:
            out.append(":")
            i += best_len
            if i == 8:
                out.append(":")
            continue
        if i:
            out.append(":")
        if i == 6 and best_base == 0 and (best_len == 6 or (best_len == 5 and words[5] == 0xFFFF)):
            out.append(".".join(str(b) for b in addr[12:16]))
            break
        out.append(f"{words[i]:x}")
        i += 1
    return "".join(out)


def decode_inet_binary(data: bytes) -> str:
    """inet_send / cidr_send: family, bits, is_cidr, address length, address bytes.

    network_out prints the address and ``/bits`` when bits is not the full width or
    the value is a cidr.
    """
    r = Reader(data)
    family, bits, is_cidr, nb = r.u8(), r.u8(), r.u8(), r.u8()
    addr = r.raw(nb)
    r.expect_end()
    if family == _PGSQL_AF_INET and nb == 4:
        text, width = ".".join(str(b) for b in addr), 32
    elif family == _PGSQL_AF_INET6 and nb == 16:
        text, width = format_ipv6(addr), 128
    else:
        raise ValueConversionError("invalid inet/cidr binary value", value=data)
    if bits > width:
        raise ValueConversionError("invalid inet/cidr netmask", value=data)
    if is_cidr or bits != width:
        text += f"/{bits}"
    return text


def _mac(data: bytes, n: int) -> str:
    if len(data) != n:
        raise ValueConversionError(f"MAC address binary value must be {n} bytes", value=data)
    return ":".join(f"{b:02x}" for b in data)


def decode_macaddr_binary(data: bytes) -> str:
    """macaddr_send: 6 bytes; macaddr_out: ``08:00:2b:01:02:03``."""
    return _mac(data, 6)


def decode_macaddr8_binary(data: bytes) -> str:
    """macaddr8_send: 8 bytes; macaddr8_out: ``08:00:2b:01:02:03:04:05``."""
    return _mac(data, 8)
