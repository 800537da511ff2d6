"""Arrays: a real parser for array_out's text, array_send's binary, and an encoder.

Nested lists, or a :class:`PgArray` carrying lower bounds other than 1. See docs/design/values.md
for both formats.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ._scan import Reader, to_str
from .errors import ValueConversionError

__all__ = [
    "ParsedArray",
    "PgArray",
    "decode_array_binary",
    "format_array",
    "nest",
    "parse_array_text",
    "parse_vector_text",
]

T = TypeVar("T")
_MAXDIM = 6  # PostgreSQL's MAXDIM


@dataclass(frozen=True, slots=True)
class ParsedArray:
    """An array's shape and its elements, flat in row-major order, not yet decoded."""

    dims: tuple[int, ...]
    lower_bounds: tuple[int, ...]
    elements: list[Any]

    def map(self, fn: Callable[[Any], Any]) -> ParsedArray:
        """Decode every non-NULL element with ``fn`` (NULL stays None)."""
        return ParsedArray(self.dims, self.lower_bounds, [None if e is None else fn(e) for e in self.elements])

    def nested(self) -> list[Any]:
        return nest(self.elements, self.dims)

    @property
    def default_bounds(self) -> bool:
        return all(lb == 1 for lb in self.lower_bounds)


@dataclass(frozen=True, slots=True)
class PgArray:
    """An array whose lower bounds are not all 1 (e.g. ``[2:3]={1,2}``)."""

    values: list[Any]
    lower_bounds: tuple[int, ...]


def nest(flat: Sequence[T], dims: Sequence[int]) -> list[Any]:
    """Row-major flat elements -> nested lists of shape ``dims`` (``[]`` for no dims)."""
    if not dims:
        return []
    out: list[Any] = list(flat)
    for d in reversed(dims[1:]):
        out = [out[i : i + d] for i in range(0, len(out), d)] if d else []
    return out


_DECORATION = re.compile(r"\s*((?:\[\s*[+-]?[0-9]+\s*(?::\s*[+-]?[0-9]+\s*)?\]\s*)+)=\s*")
_BOUND = re.compile(r"\[\s*([+-]?[0-9]+)\s*(?::\s*([+-]?[0-9]+)\s*)?\]")
_SPACE = " \t\n\r\v\f"


def parse_array_text(data: bytes | str, delim: str = ",") -> ParsedArray:
    """Parse array_out text into shape and raw element strings (None for NULL)."""
    s = to_str(data)
    lower: tuple[int, ...] | None = None
    decl_dims: tuple[int, ...] | None = None
    pos = 0
    m = _DECORATION.match(s)
    if m:
        lbs, dims = [], []
        for lo, hi in _BOUND.findall(m.group(1)):
            lo_i, hi_i = (int(lo), int(hi)) if hi else (1, int(lo))
            if hi_i < lo_i - 1:
                raise ValueConversionError("array upper bound below lower bound", value=s)
            lbs.append(lo_i)
            dims.append(hi_i - lo_i + 1)
        lower, decl_dims = tuple(lbs), tuple(dims)
        pos = m.end()
    body = s[pos:].strip(_SPACE)
    if not body.startswith("{") or not body.endswith("}"):
        raise ValueConversionError("array text must be enclosed in braces", value=s)
    # Guarded fast path: one dimension, no quoting or escaping anywhere, so no element
    # can contain the delimiter and splitting on it is exact.
    inner = body[1:-1]
    if not any(c in inner for c in '{}"\\'):
        if inner.strip(_SPACE) == "":
            elements: list[str | None] = []
            dims_found: tuple[int, ...] = ()
        else:
            elements = []
            for raw in inner.split(delim):
                e = raw.strip(_SPACE)
                if not e:
                    raise ValueConversionError("empty unquoted array element", value=s)
                elements.append(None if e.upper() == "NULL" else e)
            dims_found = (len(elements),)
    else:
        elements, dims_found = _parse_nested(body, delim, s)
    if decl_dims is not None and lower is not None:
        if decl_dims != dims_found:
            raise ValueConversionError("array dimensions do not match the decoration", value=s)
        return ParsedArray(dims_found, lower, elements)
    return ParsedArray(dims_found, (1,) * len(dims_found), elements)


def _parse_nested(body: str, delim: str, whole: str) -> tuple[list[str | None], tuple[int, ...]]:
    n = len(body)
    elements: list[str | None] = []
    counts: dict[int, int] = {}  # depth -> items per sub-array at that depth
    leaf_depth: list[int] = []
    pos = 0

    def err(msg: str) -> ValueConversionError:
        return ValueConversionError(f"malformed array text: {msg}", value=whole)

    def skip_ws(i: int) -> int:
        while i < n and body[i] in _SPACE:
            i += 1
        return i

    def level(i: int, depth: int) -> int:
        if depth > _MAXDIM:
            raise err("too many dimensions")
        assert body[i] == "{"
        i = skip_ws(i + 1)
        items = 0
        if i < n and body[i] == "}":
            if depth != 1:
                # '{{},{}}' is accepted by array_in as an empty array; keep it simple.
                counts.setdefault(depth, 0)
            return i + 1
        while True:
            i = skip_ws(i)
            if i >= n:
                raise err("unexpected end")
            if body[i] == "{":
                i = level(i, depth + 1)
            else:
                if leaf_depth and leaf_depth[0] != depth:
                    raise err("elements at different nesting depths")
                if not leaf_depth:
                    leaf_depth.append(depth)
                i = element(i)
            items += 1
            i = skip_ws(i)
            if i >= n:
                raise err("unexpected end")
            if body[i] == delim:
                i += 1
                continue
            if body[i] == "}":
                break
            raise err(f"unexpected character {body[i]!r}")
        prev = counts.setdefault(depth, items)
        if prev != items:
            raise err("sub-arrays have different lengths")
        return i + 1

    def element(i: int) -> int:
        if body[i] == '"':
            i += 1
            parts: list[str] = []
            while True:
                j = i
                while j < n and body[j] not in '"\\':
                    j += 1
                if j >= n:
                    raise err("unterminated quoted element")
                parts.append(body[i:j])
                if body[j] == '"':
                    elements.append("".join(parts))
                    return j + 1
                if j + 1 >= n:
                    raise err("dangling backslash")
                parts.append(body[j + 1])
                i = j + 2
        escaped = False
        last_kept = 0  # length of buf up to the last escaped or non-blank character
        buf: list[str] = []
        while i < n:
            c = body[i]
            if c == "\\":
                if i + 1 >= n:
                    raise err("dangling backslash")
                buf.append(body[i + 1])
                escaped = True
                last_kept = len(buf)
                i += 2
                continue
            if c == delim or c == "}":
                break
            if c in '{"':
                raise err(f"unexpected {c!r} in unquoted element")
            buf.append(c)
            if c not in _SPACE:
                last_kept = len(buf)
            i += 1
        text = "".join(buf[:last_kept])
        if not text and not escaped:
            raise err("empty unquoted element")
        elements.append(None if not escaped and text.upper() == "NULL" else text)
        return i

    pos = level(0, 1)
    if pos != n:
        raise err("text after the closing brace")
    if not elements:
        return [], ()
    depth = leaf_depth[0]
    dims = tuple(counts[d] for d in range(1, depth + 1))
    total = 1
    for d in dims:
        total *= d
    if total != len(elements):
        raise err("sub-arrays have different lengths")
    return elements, dims


def parse_vector_text(data: bytes | str) -> ParsedArray:
    """int2vector / oidvector text: integers separated by blanks (lower bound 0)."""
    parts = to_str(data).split()
    return ParsedArray((len(parts),) if parts else (), (0,) if parts else (), list(parts))


def decode_array_binary(data: bytes, expected_elem_oid: int | None = None) -> ParsedArray:
    """array_send -> shape and raw element bytes (None for NULL)."""
    r = Reader(data)
    ndim, _flags, elem_oid = r.i32(), r.i32(), r.u32()
    if not 0 <= ndim <= _MAXDIM:
        raise ValueConversionError(f"invalid array dimension count {ndim}", value=data)
    if expected_elem_oid is not None and elem_oid != expected_elem_oid:
        raise ValueConversionError(
            f"array element type {elem_oid} does not match expected {expected_elem_oid}", value=data
        )
    dims, lbs = [], []
    total = 1 if ndim else 0
    for _ in range(ndim):
        d, lb = r.i32(), r.i32()
        if d < 0:
            raise ValueConversionError("negative array dimension", value=data)
        dims.append(d)
        lbs.append(lb)
        total *= d
    elements = [r.counted() for _ in range(total)]
    r.expect_end()
    if total == 0:
        return ParsedArray((), (), [])
    return ParsedArray(tuple(dims), tuple(lbs), elements)


_NEEDS_QUOTE = re.compile(r'[{}"\\\s]')


def _quote_element(text: str, delim: str) -> str:
    if text == "" or text.upper() == "NULL" or delim in text or _NEEDS_QUOTE.search(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def format_array(
    value: Sequence[Any],
    format_element: Callable[[Any], str] = str,
    *,
    delim: str = ",",
    lower_bounds: Sequence[int] | None = None,
    ndim: int | None = None,
) -> str:
    """Render nested lists as array_out does (the encoder for round-trip tests).

    ``ndim`` says how many list levels are dimensions (default: descend while the first
    item is a list), so that elements which are themselves lists are not mistaken for
    sub-arrays.
    """
    if ndim is None:
        ndim, probe = 0, value
        while isinstance(probe, list):
            ndim += 1
            if not probe:
                break
            probe = probe[0]

    def render(v: Any, depth: int) -> str:
        if depth < ndim:
            return "{" + delim.join(render(x, depth + 1) for x in v) + "}"
        return "NULL" if v is None else _quote_element(format_element(v), delim)

    if not value:
        return "{}"
    text = render(value, 0)
    if lower_bounds is not None and any(lb != 1 for lb in lower_bounds):
        dims, probe = [], value
        for _ in range(ndim):
            dims.append(len(probe))
            probe = probe[0] if probe else []
        text = "".join(f"[{lb}:{lb + d - 1}]" for lb, d in zip(lower_bounds, dims)) + "=" + text
    return text
