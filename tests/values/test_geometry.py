"""Geometric types: binary rendered exactly as the *_out functions print."""

from __future__ import annotations

import math

import pytest

from walspark.values import oids

from .vectors import codec, f64, i32


@pytest.mark.parametrize(("oid", "binary", "text"), [
    (oids.POINT, f64(1) + f64(2), "(1,2)"),
    (oids.POINT, f64(1.5) + f64(-0.0), "(1.5,-0)"),
    (oids.POINT, f64(1e20) + f64(0.1), "(1e+20,0.1)"),
    (oids.POINT, f64(math.nan) + f64(math.inf), "(NaN,Infinity)"),
    (oids.LINE, f64(1) + f64(-1) + f64(0.5), "{1,-1,0.5}"),
    (oids.LSEG, f64(1) + f64(2) + f64(3) + f64(4), "[(1,2),(3,4)]"),
    (oids.BOX, f64(3) + f64(4) + f64(1) + f64(2), "(3,4),(1,2)"),
    (oids.PATH, b"\x00" + i32(2) + f64(1) + f64(2) + f64(3) + f64(4), "[(1,2),(3,4)]"),
    (oids.PATH, b"\x01" + i32(2) + f64(1) + f64(2) + f64(3) + f64(4), "((1,2),(3,4))"),
    (oids.POLYGON, i32(3) + f64(0) + f64(0) + f64(1) + f64(1) + f64(2) + f64(0), "((0,0),(1,1),(2,0))"),
    (oids.CIRCLE, f64(1) + f64(2) + f64(3.5), "<(1,2),3.5>"),
])
def test_geometry(oid: int, binary: bytes, text: str) -> None:
    c = codec(oid)
    assert c.decode_binary(binary) == text
    assert c.decode_text(text.encode()) == text
