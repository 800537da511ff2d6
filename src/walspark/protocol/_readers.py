"""The low-level readers of :mod:`walspark.protocol.decoder`: layouts, TupleData, strings, errors.

Where the decoder's error discipline and speed are implemented once: each length is checked here
before anything is sliced (docs/design/protocol.md).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Final, TypeVar

from .errors import ProtocolError
from .messages import Begin, Commit, Delete, Insert, TupleData, Update

_T = TypeVar("_T")


# --------------------------------------------------------------------------- low-level readers


_TYPE_NAMES: Final = {
    "B": "Int8",
    "b": "Int8",
    "H": "Int16",
    "h": "Int16",
    "I": "Int32",
    "i": "Int32",
    "Q": "Int64",
    "q": "Int64",
}


class _Layout:
    """A big-endian group of integer fields read with one precompiled ``unpack_from``.

    The field names exist for error messages only: when the buffer is too short, the
    error names the first field that does not fit and its exact offset.
    """

    __slots__ = ("fields", "size", "unpack_from")

    def __init__(self, *fields: tuple[str, str]) -> None:
        compiled = struct.Struct(">" + "".join(code for code, _ in fields))
        self.unpack_from = compiled.unpack_from
        self.size = compiled.size
        described = []
        offset = 0
        for code, name in fields:
            width = struct.calcsize(">" + code)
            described.append((name, offset, width, _TYPE_NAMES[code]))
            offset += width
        self.fields: tuple[tuple[str, int, int, str], ...] = tuple(described)


# Field groups, named as in the protocol documentation.
_XID = _Layout(("I", "Xid"))
_BEGIN = _Layout(("Q", "final LSN"), ("q", "commit timestamp"), ("I", "Xid"))
_COMMIT = _Layout(("B", "flags"), ("Q", "commit LSN"), ("Q", "end LSN"), ("q", "commit timestamp"))
_ORIGIN = _Layout(("Q", "origin commit LSN"))
_MESSAGE = _Layout(("B", "flags"), ("Q", "message LSN"))
_CONTENT_LENGTH = _Layout(("i", "content length"))
_OID = _Layout(("I", "relation OID"))
_TYPE_OID = _Layout(("I", "type OID"))
_RELATION_TAIL = _Layout(("B", "replica identity"), ("H", "column count"))
_COLUMN_FLAGS = _Layout(("B", "column flags"))
_COLUMN_TAIL = _Layout(("I", "column type OID"), ("i", "column type modifier"))
_CHANGE_HEAD = _Layout(("I", "relation OID"), ("B", "tuple tag"))
_TUPLE_TAG = _Layout(("B", "tuple tag"))
_TUPLE_COUNT = _Layout(("H", "TupleData column count"))
_COLUMN_KIND = _Layout(("B", "TupleData column kind"))
_VALUE_LENGTH = _Layout(("i", "TupleData column value length"))
_TRUNCATE = _Layout(("i", "relation count"), ("B", "option bits"))
_STREAM_START = _Layout(("I", "Xid"), ("B", "first segment"))
_STREAM_COMMIT = _Layout(("I", "Xid"), ("B", "flags"), ("Q", "commit LSN"), ("Q", "end LSN"), ("q", "commit timestamp"))
_STREAM_ABORT = _Layout(("I", "Xid"), ("I", "subtransaction Xid"))
_STREAM_ABORT_V4 = _Layout(("I", "Xid"), ("I", "subtransaction Xid"), ("Q", "abort LSN"), ("q", "abort timestamp"))
_BEGIN_PREPARE = _Layout(("Q", "prepare LSN"), ("Q", "end LSN"), ("q", "prepare timestamp"), ("I", "Xid"))
_PREPARE = _Layout(("B", "flags"), ("Q", "prepare LSN"), ("Q", "end LSN"), ("q", "prepare timestamp"), ("I", "Xid"))
_COMMIT_PREPARED = _Layout(
    ("B", "flags"), ("Q", "commit LSN"), ("Q", "end LSN"), ("q", "commit timestamp"), ("I", "Xid")
)
_ROLLBACK_PREPARED = _Layout(
    ("B", "flags"),
    ("Q", "prepare end LSN"),
    ("Q", "rollback end LSN"),
    ("q", "prepare timestamp"),
    ("q", "rollback timestamp"),
    ("I", "Xid"),
)

_unpack_u16 = _TUPLE_COUNT.unpack_from
_unpack_u32 = _OID.unpack_from
_unpack_change_head = _CHANGE_HEAD.unpack_from
_unpack_skip_u32 = struct.Struct(">xI").unpack_from
_unpack_change_head_count = struct.Struct(">IBH").unpack_from  # relation OID, tuple tag, column count
_BEGIN_LENGTH: Final = 1 + _BEGIN.size
_COMMIT_LENGTH: Final = 1 + _COMMIT.size


def _maker(cls: type[_T]) -> Callable[..., _T]:
    """A positional constructor for a frozen slotted dataclass that skips its ``__init__``.

    A frozen dataclass's ``__init__`` assigns each field through ``object.__setattr__``
    (to get past its own frozen ``__setattr__``), which costs about twice what the object
    is worth on the hot path. Setting the slots through their member descriptors builds
    the identical object (same fields, equality, hash, immutability afterwards) in about
    half the time. Generated once per class, like dataclasses generates ``__init__``.
    Used only for the messages that make up the bulk of a stream.
    """
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    namespace: dict[str, object] = {"_new": object.__new__, "_cls": cls}
    namespace.update({f"_set_{name}": getattr(cls, name).__set__ for name in names})
    body = "".join(f"    _set_{name}(obj, {name})\n" for name in names)
    source = f"def make({', '.join(names)}):\n    obj = _new(_cls)\n{body}    return obj\n"
    exec(source, namespace)  # a fixed template over the dataclass's own field names
    return namespace["make"]  # type: ignore[return-value]


_new_tuple_data = _maker(TupleData)
_new_begin = _maker(Begin)
_new_commit = _maker(Commit)
_new_insert = _maker(Insert)
_new_update = _maker(Update)
_new_delete = _maker(Delete)

_N, _K, _O = ord("N"), ord("K"), ord("O")
_U, _D = ord("U"), ord("D")
_KIND_TEXT, _KIND_BINARY, _KIND_NULL, _KIND_UNCHANGED = ord("t"), ord("b"), ord("n"), ord("u")


def _show(byte: int) -> str:
    """A kind/tag byte as the protocol documentation writes it: ``'N'`` or ``0x00``."""
    return f"'{chr(byte)}'" if 0x21 <= byte <= 0x7E else f"0x{byte:02X}"


def _error(kind: str, offset: int, lsn: int | None, reason: str) -> ProtocolError:
    return ProtocolError(reason, kind=kind, offset=offset, lsn=lsn)


def _short(kind: str, buf: bytes, pos: int, layout: _Layout, lsn: int | None) -> ProtocolError:
    """Error for ``layout`` not fitting at ``pos``: names the first field that is cut off."""
    have = len(buf)
    for name, rel, width, type_name in layout.fields:
        if pos + rel + width > have:
            left = max(0, have - pos - rel)
            return _error(
                kind, pos + rel, lsn, f"message truncated: {type_name} {name} needs {width} bytes, {left} left"
            )
    return _error(kind, pos, lsn, "message truncated")  # pragma: no cover - caller checked


def _trailing(kind: str, pos: int, buf: bytes, lsn: int | None) -> ProtocolError:
    return _error(kind, pos, lsn, f"{len(buf) - pos} trailing bytes after the end of the message")


def _exact(kind: str, buf: bytes, start: int, layout: _Layout, lsn: int | None) -> tuple[int, ...]:
    """Read a message that is exactly ``layout`` after ``start`` — nothing missing, nothing extra."""
    end = start + layout.size
    if len(buf) != end:
        if len(buf) < end:
            raise _short(kind, buf, start, layout, lsn)
        raise _trailing(kind, end, buf, lsn)
    return layout.unpack_from(buf, start)


def _head(kind: str, buf: bytes, pos: int, layout: _Layout, lsn: int | None) -> tuple[int, ...]:
    """Read ``layout`` at ``pos`` where more data follows (so only shortness is an error)."""
    if len(buf) < pos + layout.size:
        raise _short(kind, buf, pos, layout, lsn)
    return layout.unpack_from(buf, pos)


def _end(kind: str, buf: bytes, pos: int, lsn: int | None) -> None:
    """Every message must be consumed exactly: bytes left over mean a misread layout."""
    if pos != len(buf):
        raise _trailing(kind, pos, buf, lsn)


def _check_zero_flags(kind: str, flags: int, offset: int, lsn: int | None) -> None:
    """``Int8(0)`` in the spec: PostgreSQL's own reader refuses anything else, and so do we."""
    if flags != 0:
        raise _error(kind, offset, lsn, f"flags byte must be 0 (currently unused), got {flags}")


def _check_stream_xid(kind: str, xid: int, offset: int, lsn: int | None) -> None:
    """Stream-related Xids are never ``InvalidTransactionId``; pgoutput writes an Xid only if valid."""
    if xid == 0:
        raise _error(kind, offset, lsn, "Xid is 0 (InvalidTransactionId) in a streamed transaction")


def _read_string(kind: str, buf: bytes, pos: int, what: str, lsn: int | None) -> tuple[str, int]:
    """A ``String``: UTF-8 bytes up to a NUL terminator. Returns the text and the next offset."""
    nul = buf.find(b"\0", pos)
    if nul < 0:
        raise _error(kind, pos, lsn, f"{what}: string without NUL terminator")
    try:
        text = buf[pos:nul].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(kind, pos + exc.start, lsn, f"{what}: invalid UTF-8 ({exc.reason})") from None
    return text, nul + 1


def _read_stream_xid(kind: str, buf: bytes, lsn: int | None) -> tuple[int, int]:
    """The ``Int32 (TransactionId)`` that follows the kind byte inside a streamed block.

    Called only when the decoder is inside a streamed block; outside, the field is absent.
    Returns the Xid and the offset of the next field.
    """
    if len(buf) < 5:
        raise _short(kind, buf, 1, _XID, lsn)
    xid = _unpack_u32(buf, 1)[0]
    _check_stream_xid(kind, xid, 1, lsn)
    return xid, 5


def _read_tuple(kind: str, buf: bytes, pos: int, lsn: int | None) -> tuple[TupleData, int]:
    """A ``TupleData`` part at ``pos``. Returns it and the offset just after it.

    This is the decoder's hot loop (about 70% of decoding a row change), so it is written
    for the valid case only: no bounds checks inside the loop, literal kind bytes, locals
    for everything it calls, the kinds string built only once a non-text column shows up
    (an all-text row gets ``"t" * n``). Anything unusual — an unknown kind, a buffer that
    ends early (``IndexError``/``struct.error``), a length that runs past the end (seen as
    ``pos > len(buf)`` afterwards; a negative length read unsigned is such a length) — hands
    the whole part to :func:`_read_tuple_checked`, the field-by-field reference reader,
    which raises the precise error. So valid input gives exactly the reference result, and
    invalid input exactly the reference error.

    Still bounded on hostile input: every iteration consumes at least one byte or fails
    on the next index, and slices never extend past the buffer.
    """
    try:
        ncols = _unpack_u16(buf, pos)[0]
    except struct.error:
        return _read_tuple_checked(kind, buf, pos, lsn)
    scanned = _scan_columns(buf, pos + 2, ncols)
    if scanned is None or scanned[1] > len(buf):
        return _read_tuple_checked(kind, buf, pos, lsn)
    return scanned


def _scan_columns(buf: bytes, p: int, ncols: int) -> tuple[TupleData, int] | None:
    """The hot loop shared by :func:`_read_tuple` and the row-change fast path.

    Reads ``ncols`` columns from ``p`` assuming valid input; returns None on anything
    unusual (unknown kind, buffer ending early) so the caller falls back to the checked
    reader. The returned offset may lie past the buffer (a length too large): callers check.
    """
    values: list[bytes | None] = []
    append = values.append
    read_length = _unpack_skip_u32  # the Int32 after the kind byte, read at the kind's offset
    kinds: bytearray | None = None
    try:
        for i in range(ncols):
            k = buf[p]
            if k == 116:  # 't'
                start = p + 5
                p = start + read_length(buf, p)[0]
                append(buf[start:p])
                continue
            if k == 110 or k == 117:  # 'n', 'u'
                p += 1
                append(None)
            elif k == 98:  # 'b'
                start = p + 5
                p = start + read_length(buf, p)[0]
                append(buf[start:p])
            else:
                return None
            if kinds is None:
                kinds = bytearray(b"t" * ncols)
            kinds[i] = k
    except (IndexError, struct.error):
        return None
    return _new_tuple_data("t" * ncols if kinds is None else kinds.decode("ascii"), tuple(values)), p


def _read_tuple_checked(kind: str, buf: bytes, pos: int, lsn: int | None) -> tuple[TupleData, int]:
    """The reference ``TupleData`` reader: checks every field before reading it.

    The loop runs at most ``column count`` times, and that count is first checked against
    the remaining bytes (each column needs at least its kind byte). Value lengths are
    checked before slicing. Truncation inside the loop is caught once, outside it, where
    ``pos`` still points at the column being read.
    """
    end = len(buf)
    if end - pos < 2:
        raise _short(kind, buf, pos, _TUPLE_COUNT, lsn)
    ncols = _unpack_u16(buf, pos)[0]
    pos += 2
    if ncols > end - pos:
        raise _error(kind, pos - 2, lsn, f"TupleData column count {ncols} does not fit the {end - pos} remaining bytes")
    values: list[bytes | None] = []
    append = values.append
    kinds: bytearray | None = None  # only allocated when a column is not 't'
    i = 0
    try:
        for i in range(ncols):
            k = buf[pos]
            if k == _KIND_TEXT or k == _KIND_BINARY:
                # Read unsigned: a negative Int32 becomes >= 2**31 and so can never fit the
                # buffer (messages are < 1 GB), which folds both checks into one comparison.
                start = pos + 5
                length = _unpack_u32(buf, pos + 1)[0]
                if start + length > end:
                    raise _bad_value_length(kind, i, pos + 1, length, end - start, lsn)
                pos = start + length
                append(buf[start:pos])
                if k == _KIND_TEXT:
                    continue
            elif k == _KIND_NULL or k == _KIND_UNCHANGED:
                pos += 1
                append(None)
            else:
                raise _error(
                    kind, pos, lsn, f"TupleData column {i} has unknown kind {_show(k)} (expected 'n', 'u', 't' or 'b')"
                )
            if kinds is None:
                kinds = bytearray(b"t" * ncols)
            kinds[i] = k
    except IndexError:
        raise _short(kind, buf, pos, _COLUMN_KIND, lsn) from None
    except struct.error:
        raise _short(kind, buf, pos + 1, _VALUE_LENGTH, lsn) from None
    return _new_tuple_data("t" * ncols if kinds is None else kinds.decode("ascii"), tuple(values)), pos


def _bad_value_length(
    kind: str, column: int, offset: int, length: int, remaining: int, lsn: int | None
) -> ProtocolError:
    if length >= 1 << 31:
        return _error(kind, offset, lsn, f"TupleData column {column} value length {length - (1 << 32)} is negative")
    return _error(
        kind, offset, lsn, f"TupleData column {column} value length {length} is beyond the {remaining} remaining bytes"
    )


def _read_head_and_gid(
    kind: str, buf: bytes, layout: _Layout, lsn: int | None, has_flags: bool
) -> tuple[tuple[int, ...], str]:
    """The two-phase layout: fixed fields (optionally led by an ``Int8(0)`` flags byte), then the GID."""
    fields = _head(kind, buf, 1, layout, lsn)
    if has_flags:
        _check_zero_flags(kind, fields[0], 1, lsn)
        fields = fields[1:]
    gid, pos = _read_string(kind, buf, 1 + layout.size, "GID", lsn)
    _end(kind, buf, pos, lsn)
    return fields, gid
