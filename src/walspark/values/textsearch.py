"""tsvector and tsquery: strings in PostgreSQL's text form, from either format.

Why text: lexemes, positions and weights have no Arrow/Spark equivalent worth a nested
type, and the text form is exact and re-loadable. The binary decoders render what
tsvectorout / tsqueryout print (including tsqueryout's operator-priority parentheses).
"""

from __future__ import annotations

from ._scan import Reader, to_str
from .errors import ValueConversionError

__all__ = ["decode_tsquery_binary", "decode_tsvector_binary", "quote_lexeme"]

_WEIGHTS = "DCBA"  # WordEntryPos weight 0..3
_QI_VAL, _QI_OPR = 1, 2
_OP_NOT, _OP_AND, _OP_OR, _OP_PHRASE = 1, 2, 3, 4
_PRIORITY = {_OP_NOT: 4, _OP_AND: 2, _OP_OR: 1, _OP_PHRASE: 3}


def quote_lexeme(lexeme: str) -> str:
    """Lexemes are single-quoted with ``'`` and ``\\`` doubled (tsvectorout, tsqueryout)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def decode_tsvector_binary(data: bytes) -> str:
    """tsvectorsend: int32 count; per lexeme a NUL-terminated string, uint16 npos and
    npos uint16 positions (weight in the top two bits, position in the low 14)."""
    r = Reader(data)
    count = r.i32()
    out: list[str] = []
    for _ in range(count):
        lexeme = to_str(r.cstring())
        npos = r.u16()
        text = quote_lexeme(lexeme)
        if npos:
            positions = []
            for _ in range(npos):
                wp = r.u16()
                weight = wp >> 14
                positions.append(f"{wp & 0x3FFF}{_WEIGHTS[weight] if weight else ''}")
            text += ":" + ",".join(positions)
        out.append(text)
    r.expect_end()
    return " ".join(out)


def decode_tsquery_binary(data: bytes) -> str:
    """tsquerysend: int32 item count, items in prefix (Polish) notation.

    Operand: uint8 type 1, uint8 weight bitmap, uint8 prefix flag, NUL-terminated text.
    Operator: uint8 type 2, uint8 operator (1 NOT, 2 AND, 3 OR, 4 PHRASE), and for
    PHRASE an int16 distance. Rendered as tsqueryout does.
    """
    r = Reader(data)
    count = r.i32()
    items: list[tuple] = []
    for _ in range(count):
        kind = r.u8()
        if kind == _QI_VAL:
            weight, prefix = r.u8(), r.u8()
            items.append((kind, weight, prefix, to_str(r.cstring())))
        elif kind == _QI_OPR:
            op = r.u8()
            if op not in _PRIORITY:
                raise ValueConversionError("invalid tsquery operator", value=data)
            items.append((kind, op, r.i16() if op == _OP_PHRASE else 1))
        else:
            raise ValueConversionError("invalid tsquery item", value=data)
    r.expect_end()
    if not items:
        return ""
    pos = 0

    def render(parent_priority: int, right_phrase: bool) -> str:
        nonlocal pos
        if pos >= len(items):
            raise ValueConversionError("malformed tsquery: missing operand", value=data)
        item = items[pos]
        pos += 1
        if item[0] == _QI_VAL:
            _, weight, prefix, text = item
            out = quote_lexeme(text)
            if weight or prefix:
                out += ":" + ("*" if prefix else "")
                out += "".join(c for bit, c in ((8, "A"), (4, "B"), (2, "C"), (1, "D")) if weight & bit)
            return out
        _, op, distance = item
        prio = _PRIORITY[op]
        if op == _OP_NOT:
            inner = "!" + render(prio, False)
            return f"( {inner} )" if prio < parent_priority else inner
        # Prefix notation stores the right operand first, then the left one.
        right = render(prio, op == _OP_PHRASE)
        left = render(prio, False)
        sym = {_OP_AND: "&", _OP_OR: "|"}.get(op) or ("<->" if distance == 1 else f"<{distance}>")
        out = f"{left} {sym} {right}"
        if prio < parent_priority or (op == _OP_PHRASE and right_phrase):
            out = f"( {out} )"
        return out

    text = render(-1, False)
    if pos != len(items):
        raise ValueConversionError("malformed tsquery: extra items", value=data)
    return text
