"""point, line, lseg, box, path, polygon, circle: strings in PostgreSQL's text form.

Why text: Spark has no planar-geometry type matching PostgreSQL's (and Spark's own
geometry types are WKB-based, with other semantics). The binary decoders render what
the *_out functions print, using float8out's shortest exact digits, so both formats
give the same string (with extra_float_digits >= 1, the default).
"""

from __future__ import annotations

from ._scan import Reader
from .errors import ValueConversionError
from .scalars import format_float8 as _f

__all__ = [
    "decode_box_binary",
    "decode_circle_binary",
    "decode_line_binary",
    "decode_lseg_binary",
    "decode_path_binary",
    "decode_point_binary",
    "decode_polygon_binary",
]


def _pt(r: Reader) -> str:
    x = r.f64()
    y = r.f64()
    return f"({_f(x)},{_f(y)})"


def _points(r: Reader) -> str:
    n = r.i32()
    if n < 0:
        raise ValueConversionError("invalid point count", value=r.data)
    return ",".join(_pt(r) for _ in range(n))


def _done(r: Reader, text: str) -> str:
    r.expect_end()
    return text


def decode_point_binary(data: bytes) -> str:
    """point_send: float8 x, y -> ``(x,y)``."""
    r = Reader(data)
    return _done(r, _pt(r))


def decode_line_binary(data: bytes) -> str:
    """line_send: float8 A, B, C -> ``{A,B,C}``."""
    r = Reader(data)
    return _done(r, "{" + ",".join(_f(r.f64()) for _ in range(3)) + "}")


def decode_lseg_binary(data: bytes) -> str:
    """lseg_send: two points -> ``[(x1,y1),(x2,y2)]``."""
    r = Reader(data)
    return _done(r, f"[{_pt(r)},{_pt(r)}]")


def decode_box_binary(data: bytes) -> str:
    """box_send: high point then low point -> ``(x1,y1),(x2,y2)``."""
    r = Reader(data)
    return _done(r, f"{_pt(r)},{_pt(r)}")


def decode_path_binary(data: bytes) -> str:
    """path_send: uint8 closed, int32 npts, points -> ``((...))`` closed, ``[(...)]`` open."""
    r = Reader(data)
    closed = r.u8()
    pts = _points(r)
    return _done(r, f"({pts})" if closed else f"[{pts}]")


def decode_polygon_binary(data: bytes) -> str:
    """poly_send: int32 npts, points -> ``((x1,y1),...)``."""
    r = Reader(data)
    return _done(r, f"({_points(r)})")


def decode_circle_binary(data: bytes) -> str:
    """circle_send: center point, float8 radius -> ``<(x,y),r>``."""
    r = Reader(data)
    center = _pt(r)
    return _done(r, f"<{center},{_f(r.f64())}>")
