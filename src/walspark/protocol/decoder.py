"""pgoutput bytes → typed messages.

One ``_decode_<message>`` function per message kind, each reading its layout field by field
as the PostgreSQL documentation lists it; shared parts (the optional in-stream Xid,
TupleData, NUL-terminated strings, fixed groups of integers, the "fixed head + GID" of the
two-phase messages) are read by one helper each.

Why a stateful :class:`Decoder`: the same kind byte has two layouts. Message, Relation,
Type, Insert, Update, Delete and Truncate carry an Xid only between Stream Start and
Stream Stop, and Stream Abort carries an abort LSN and timestamp only with protocol
version 4 and ``streaming = parallel``. Neither fact is in the message itself, so the
decoder must know the protocol version and options in force and track Stream Start /
Stream Stop. :func:`decode_message` is the stateless form for callers that track the
stream state themselves (e.g. executors decoding a segment of a capture file).
When the options are unknown (a capture written without walspark's metadata), protocol 4
with ``streaming_parallel=None`` decodes a stream of any version: no other layout differs
between versions, and the two Stream Abort layouts differ in length (9 or 25 bytes).

Error discipline: anything wrong with the bytes raises
:class:`~walspark.protocol.errors.ProtocolError` naming the message kind, the byte offset
inside the message and the message's LSN (if the caller passed it). Every length read from
the wire is checked against the bytes actually present before anything is sliced, so a
hostile length never causes a large allocation, and every loop is bounded by a count that
has been checked against the remaining buffer.

Speed: precompiled :class:`struct.Struct` readers with ``unpack_from`` on the original
``bytes`` (no ``BytesIO``, no re-slicing of the buffer), a 256-entry dispatch list indexed
by the kind byte, ``bytes.find`` for strings, and column values left undecoded. Row changes
(nearly all of a stream) and TupleData parts have an optimistic fast path that does no
checks inside its loop and, on anything unexpected, hands the message to the checked
reference path — so results and errors are those of the reference path, and the checks
cost nothing on valid input.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Final, TypeVar

from .errors import ProtocolError
from .messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    PgoutputMessage,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
)

__all__ = ["MAX_PROTOCOL_VERSION", "MIN_PROTOCOL_VERSION", "Decoder", "decode_message", "read_tuple_data"]

MIN_PROTOCOL_VERSION: Final = 1
MAX_PROTOCOL_VERSION: Final = 4

Buffer = bytes | bytearray | memoryview
_T = TypeVar("_T")
_DecodeFn = Callable[[bytes, "int | None", bool, "bool | None"], PgoutputMessage]


# --------------------------------------------------------------------------- low-level readers


_TYPE_NAMES: Final = {"B": "Int8", "b": "Int8", "H": "Int16", "h": "Int16",
                      "I": "Int32", "i": "Int32", "Q": "Int64", "q": "Int64"}


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
_STREAM_COMMIT = _Layout(("I", "Xid"), ("B", "flags"), ("Q", "commit LSN"), ("Q", "end LSN"),
                         ("q", "commit timestamp"))
_STREAM_ABORT = _Layout(("I", "Xid"), ("I", "subtransaction Xid"))
_STREAM_ABORT_V4 = _Layout(("I", "Xid"), ("I", "subtransaction Xid"), ("Q", "abort LSN"),
                           ("q", "abort timestamp"))
_BEGIN_PREPARE = _Layout(("Q", "prepare LSN"), ("Q", "end LSN"), ("q", "prepare timestamp"),
                         ("I", "Xid"))
_PREPARE = _Layout(("B", "flags"), ("Q", "prepare LSN"), ("Q", "end LSN"),
                   ("q", "prepare timestamp"), ("I", "Xid"))
_COMMIT_PREPARED = _Layout(("B", "flags"), ("Q", "commit LSN"), ("Q", "end LSN"),
                           ("q", "commit timestamp"), ("I", "Xid"))
_ROLLBACK_PREPARED = _Layout(("B", "flags"), ("Q", "prepare end LSN"), ("Q", "rollback end LSN"),
                             ("q", "prepare timestamp"), ("q", "rollback timestamp"), ("I", "Xid"))

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
            return _error(kind, pos + rel, lsn,
                          f"message truncated: {type_name} {name} needs {width} bytes, {left} left")
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
        raise _error(kind, pos - 2, lsn,
                     f"TupleData column count {ncols} does not fit the {end - pos} remaining bytes")
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
                raise _error(kind, pos, lsn,
                             f"TupleData column {i} has unknown kind {_show(k)} (expected 'n', 'u', 't' or 'b')")
            if kinds is None:
                kinds = bytearray(b"t" * ncols)
            kinds[i] = k
    except IndexError:
        raise _short(kind, buf, pos, _COLUMN_KIND, lsn) from None
    except struct.error:
        raise _short(kind, buf, pos + 1, _VALUE_LENGTH, lsn) from None
    return _new_tuple_data("t" * ncols if kinds is None else kinds.decode("ascii"), tuple(values)), pos


def _bad_value_length(kind: str, column: int, offset: int, length: int, remaining: int,
                      lsn: int | None) -> ProtocolError:
    if length >= 1 << 31:
        return _error(kind, offset, lsn, f"TupleData column {column} value length {length - (1 << 32)} is negative")
    return _error(kind, offset, lsn,
                  f"TupleData column {column} value length {length} is beyond the {remaining} remaining bytes")


def _read_head_and_gid(kind: str, buf: bytes, layout: _Layout, lsn: int | None,
                       has_flags: bool) -> tuple[tuple[int, ...], str]:
    """The two-phase layout: fixed fields (optionally led by an ``Int8(0)`` flags byte), then the GID."""
    fields = _head(kind, buf, 1, layout, lsn)
    if has_flags:
        _check_zero_flags(kind, fields[0], 1, lsn)
        fields = fields[1:]
    gid, pos = _read_string(kind, buf, 1 + layout.size, "GID", lsn)
    _end(kind, buf, pos, lsn)
    return fields, gid


# --------------------------------------------------------------------------- one function per message
#
# Signature of every _decode_*: (buf, lsn, in_stream, abort_info) -> message. ``buf`` is the
# whole message including the kind byte, so every offset is relative to the message start.


def _decode_begin(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Begin:
    if len(buf) != _BEGIN_LENGTH:
        _exact("Begin", buf, 1, _BEGIN, lsn)  # raises the precise error
    return _new_begin(*_BEGIN.unpack_from(buf, 1))


def _decode_commit(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Commit:
    if len(buf) != _COMMIT_LENGTH:
        _exact("Commit", buf, 1, _COMMIT, lsn)  # raises the precise error
    flags, commit_lsn, end_lsn, commit_timestamp = _COMMIT.unpack_from(buf, 1)
    if flags:
        _check_zero_flags("Commit", flags, 1, lsn)
    return _new_commit(commit_lsn, end_lsn, commit_timestamp)


def _decode_origin(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Origin:
    (commit_lsn,) = _head("Origin", buf, 1, _ORIGIN, lsn)
    name, pos = _read_string("Origin", buf, 9, "origin name", lsn)
    _end("Origin", buf, pos, lsn)
    return Origin(commit_lsn, name)


def _decode_message(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Message:
    if in_stream:
        xid, pos = _read_stream_xid("Message", buf, lsn)
    else:
        xid, pos = None, 1
    flags, message_lsn = _head("Message", buf, pos, _MESSAGE, lsn)
    if flags > 1:
        raise _error("Message", pos, lsn, f"flags must be 0 or 1 (transactional), got {flags}")
    prefix, pos = _read_string("Message", buf, pos + _MESSAGE.size, "prefix", lsn)
    (length,) = _head("Message", buf, pos, _CONTENT_LENGTH, lsn)
    remaining = len(buf) - pos - 4
    if length < 0 or length > remaining:
        raise _error("Message", pos, lsn, f"content length {length} is "
                     + ("negative" if length < 0 else f"beyond the {remaining} remaining bytes"))
    pos += 4
    _end("Message", buf, pos + length, lsn)
    return Message(xid, flags == 1, message_lsn, prefix, buf[pos:])


def _decode_relation(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Relation:
    if in_stream:
        xid, pos = _read_stream_xid("Relation", buf, lsn)
    else:
        xid, pos = None, 1
    (relation_id,) = _head("Relation", buf, pos, _OID, lsn)
    namespace, pos = _read_string("Relation", buf, pos + 4, "namespace", lsn)
    relation_name, pos = _read_string("Relation", buf, pos, "relation name", lsn)
    replica_identity, ncols = _head("Relation", buf, pos, _RELATION_TAIL, lsn)
    pos += _RELATION_TAIL.size
    # Each column needs at least flags + NUL + type OID + type modifier = 10 bytes.
    if ncols * 10 > len(buf) - pos:
        raise _error("Relation", pos - 2, lsn,
                     f"column count {ncols} does not fit the {len(buf) - pos} remaining bytes")
    columns = []
    for _ in range(ncols):
        (flags,) = _head("Relation", buf, pos, _COLUMN_FLAGS, lsn)
        name, pos = _read_string("Relation", buf, pos + 1, "column name", lsn)
        type_oid, type_modifier = _head("Relation", buf, pos, _COLUMN_TAIL, lsn)
        pos += _COLUMN_TAIL.size
        columns.append(RelationColumn(flags, name, type_oid, type_modifier))
    _end("Relation", buf, pos, lsn)
    return Relation(xid, relation_id, namespace, relation_name, chr(replica_identity), tuple(columns))


def _decode_type(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Type:
    if in_stream:
        xid, pos = _read_stream_xid("Type", buf, lsn)
    else:
        xid, pos = None, 1
    (type_oid,) = _head("Type", buf, pos, _TYPE_OID, lsn)
    namespace, pos = _read_string("Type", buf, pos + 4, "namespace", lsn)
    type_name, pos = _read_string("Type", buf, pos, "type name", lsn)
    _end("Type", buf, pos, lsn)
    return Type(xid, type_oid, namespace, type_name)


def _decode_insert(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Insert:
    if in_stream:
        xid, pos = _read_stream_xid("Insert", buf, lsn)
    else:
        xid, pos = None, 1
    if len(buf) < pos + 5:
        raise _short("Insert", buf, pos, _CHANGE_HEAD, lsn)
    relation_id, tag = _unpack_change_head(buf, pos)
    if tag != _N:
        raise _error("Insert", pos + 4, lsn, f"expected 'N' (new tuple), got {_show(tag)}")
    new_tuple, pos = _read_tuple("Insert", buf, pos + 5, lsn)
    if pos != len(buf):
        raise _trailing("Insert", pos, buf, lsn)
    return _new_insert(xid, relation_id, new_tuple)


def _decode_update(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Update:
    if in_stream:
        xid, pos = _read_stream_xid("Update", buf, lsn)
    else:
        xid, pos = None, 1
    if len(buf) < pos + 5:
        raise _short("Update", buf, pos, _CHANGE_HEAD, lsn)
    relation_id, tag = _unpack_change_head(buf, pos)
    pos += 5
    key_tuple = old_tuple = None
    if tag == _K or tag == _O:
        old, pos = _read_tuple("Update", buf, pos, lsn)
        if tag == _K:
            key_tuple = old
        else:
            old_tuple = old
        (second,) = _head("Update", buf, pos, _TUPLE_TAG, lsn)
        if second == _K or second == _O:
            raise _error("Update", pos, lsn,
                         f"{_show(tag)} part followed by {_show(second)}: 'K' and 'O' never both appear")
        tag = second
        pos += 1
    if tag != _N:
        raise _error("Update", pos - 1, lsn, f"expected 'K', 'O' or 'N', got {_show(tag)}")
    new_tuple, pos = _read_tuple("Update", buf, pos, lsn)
    if pos != len(buf):
        raise _trailing("Update", pos, buf, lsn)
    return _new_update(xid, relation_id, key_tuple, old_tuple, new_tuple)


def _decode_delete(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Delete:
    if in_stream:
        xid, pos = _read_stream_xid("Delete", buf, lsn)
    else:
        xid, pos = None, 1
    if len(buf) < pos + 5:
        raise _short("Delete", buf, pos, _CHANGE_HEAD, lsn)
    relation_id, tag = _unpack_change_head(buf, pos)
    if tag != _K and tag != _O:
        raise _error("Delete", pos + 4, lsn, f"expected 'K' or 'O', got {_show(tag)}")
    old, pos = _read_tuple("Delete", buf, pos + 5, lsn)
    if pos != len(buf):
        if buf[pos] == _K or buf[pos] == _O:
            raise _error("Delete", pos, lsn,
                         f"{_show(tag)} part followed by {_show(buf[pos])}: 'K' and 'O' never both appear")
        raise _trailing("Delete", pos, buf, lsn)
    if tag == _K:
        return _new_delete(xid, relation_id, old, None)
    return _new_delete(xid, relation_id, None, old)


def _row_change_fast_path(kind_byte: int, checked: _DecodeFn) -> _DecodeFn:
    """A one-pass decoder for the common shape of Insert / Update / Delete: one TupleData part.

    Row changes are nearly all of a replication stream, and nearly all of them are an
    Insert (``N``), an Update without old row (``N``) or a Delete (``K`` or ``O``): a fixed
    head and a single TupleData to the end of the message. This reads that shape with one
    ``unpack_from`` for relation OID, tag and column count and the column loop inlined,
    saving the calls and re-checks of the field-by-field path (about 15% of an Insert).

    It only ever returns what ``checked`` (the reference decoder of the kind) would return:
    anything else — an Update with an old row or key, an unexpected tag, an unknown column
    kind, a buffer that ends early, a length past the end, bytes left over, a zero Xid —
    goes to ``checked``, which decodes it or raises the precise error. The loop's safety
    argument is :func:`_read_tuple`'s: each iteration consumes a byte or fails.
    """
    is_update = kind_byte == _U
    is_delete = kind_byte == _D

    def decode(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> PgoutputMessage:
        try:
            if in_stream:
                xid: int | None = _unpack_u32(buf, 1)[0]
                relation_id, tag, ncols = _unpack_change_head_count(buf, 5)
                p = 12
            else:
                xid = None
                relation_id, tag, ncols = _unpack_change_head_count(buf, 1)
                p = 8
        except struct.error:
            return checked(buf, lsn, in_stream, abort_info)
        if (tag != _N) != is_delete or xid == 0:  # Update with K/O, or a tag the reference refuses
            return checked(buf, lsn, in_stream, abort_info)
        scanned = _scan_columns(buf, p, ncols)
        if scanned is None or scanned[1] != len(buf):
            return checked(buf, lsn, in_stream, abort_info)
        row = scanned[0]
        if is_delete:
            if tag == _K:
                return _new_delete(xid, relation_id, row, None)
            if tag == _O:
                return _new_delete(xid, relation_id, None, row)
            return checked(buf, lsn, in_stream, abort_info)
        if is_update:
            return _new_update(xid, relation_id, None, None, row)
        return _new_insert(xid, relation_id, row)

    decode.__name__ = decode.__qualname__ = f"{checked.__name__}_fast"
    return decode


_decode_insert_fast = _row_change_fast_path(ord("I"), _decode_insert)
_decode_update_fast = _row_change_fast_path(ord("U"), _decode_update)
_decode_delete_fast = _row_change_fast_path(ord("D"), _decode_delete)


def _decode_truncate(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Truncate:
    if in_stream:
        xid, pos = _read_stream_xid("Truncate", buf, lsn)
    else:
        xid, pos = None, 1
    count, options = _head("Truncate", buf, pos, _TRUNCATE, lsn)
    body = pos + _TRUNCATE.size
    remaining = len(buf) - body
    if count < 0 or count * 4 > remaining:
        raise _error("Truncate", pos, lsn, f"relation count {count} is "
                     + ("negative" if count < 0 else f"beyond the {remaining} remaining bytes"))
    _end("Truncate", buf, body + count * 4, lsn)
    relation_ids = struct.unpack_from(f">{count}I", buf, body)
    return Truncate(xid, options, relation_ids)


def _decode_stream_start(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> StreamStart:
    xid, first_segment = _exact("Stream Start", buf, 1, _STREAM_START, lsn)
    _check_stream_xid("Stream Start", xid, 1, lsn)
    if first_segment > 1:
        raise _error("Stream Start", 5, lsn, f"first-segment byte must be 0 or 1, got {first_segment}")
    return StreamStart(xid, first_segment == 1)


_STREAM_STOP: Final = StreamStop()


def _decode_stream_stop(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> StreamStop:
    _end("Stream Stop", buf, 1, lsn)
    return _STREAM_STOP


def _decode_stream_commit(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> StreamCommit:
    xid, flags, commit_lsn, end_lsn, commit_timestamp = _exact("Stream Commit", buf, 1, _STREAM_COMMIT, lsn)
    _check_stream_xid("Stream Commit", xid, 1, lsn)
    _check_zero_flags("Stream Commit", flags, 5, lsn)
    return StreamCommit(xid, commit_lsn, end_lsn, commit_timestamp)


def _decode_stream_abort(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> StreamAbort:
    # abort_info: True = v4 + streaming=parallel (25 bytes), False = 9 bytes,
    # None = "unknown options": the length decides (9 or 25; anything else is an error).
    if abort_info is None:
        abort_info = len(buf) > 1 + _STREAM_ABORT.size
    abort_lsn: int | None
    abort_timestamp: int | None
    if abort_info:
        xid, subxid, abort_lsn, abort_timestamp = _exact("Stream Abort", buf, 1, _STREAM_ABORT_V4, lsn)
    else:
        xid, subxid = _exact("Stream Abort", buf, 1, _STREAM_ABORT, lsn)
        abort_lsn = abort_timestamp = None
    _check_stream_xid("Stream Abort", xid, 1, lsn)
    _check_stream_xid("Stream Abort", subxid, 5, lsn)
    return StreamAbort(xid, subxid, abort_lsn, abort_timestamp)


def _decode_begin_prepare(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> BeginPrepare:
    (prepare_lsn, end_lsn, prepare_timestamp, xid), gid = _read_head_and_gid(
        "Begin Prepare", buf, _BEGIN_PREPARE, lsn, has_flags=False)
    return BeginPrepare(prepare_lsn, end_lsn, prepare_timestamp, xid, gid)


def _decode_prepare(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Prepare:
    (prepare_lsn, end_lsn, prepare_timestamp, xid), gid = _read_head_and_gid(
        "Prepare", buf, _PREPARE, lsn, has_flags=True)
    return Prepare(prepare_lsn, end_lsn, prepare_timestamp, xid, gid)


def _decode_commit_prepared(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> CommitPrepared:
    (commit_lsn, end_lsn, commit_timestamp, xid), gid = _read_head_and_gid(
        "Commit Prepared", buf, _COMMIT_PREPARED, lsn, has_flags=True)
    return CommitPrepared(commit_lsn, end_lsn, commit_timestamp, xid, gid)


def _decode_rollback_prepared(buf: bytes, lsn: int | None, in_stream: bool,
                              abort_info: bool | None) -> RollbackPrepared:
    (prepare_end_lsn, rollback_end_lsn, prepare_timestamp, rollback_timestamp, xid), gid = _read_head_and_gid(
        "Rollback Prepared", buf, _ROLLBACK_PREPARED, lsn, has_flags=True)
    return RollbackPrepared(prepare_end_lsn, rollback_end_lsn, prepare_timestamp, rollback_timestamp, xid, gid)


def _decode_stream_prepare(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> StreamPrepare:
    (prepare_lsn, end_lsn, prepare_timestamp, xid), gid = _read_head_and_gid(
        "Stream Prepare", buf, _PREPARE, lsn, has_flags=True)
    return StreamPrepare(prepare_lsn, end_lsn, prepare_timestamp, xid, gid)


# --------------------------------------------------------------------------- dispatch


class _Kind:
    """Where a message kind may appear: from which protocol version, inside/outside streamed blocks.

    ``since`` is the lowest ``proto_version`` at which PostgreSQL can *send* the kind, which
    is not always the version the documentation introduces it with (see ``_KINDS``).
    """

    __slots__ = ("byte", "decode", "in_stream", "name", "outside_stream", "since")

    def __init__(self, letter: str, name: str, decode: _DecodeFn, since: int,
                 *, in_stream: bool, outside_stream: bool = True) -> None:
        self.byte = ord(letter)
        self.name = name
        self.decode = decode
        self.since = since
        self.in_stream = in_stream
        self.outside_stream = outside_stream


_KINDS: Final = (
    _Kind("B", "Begin", _decode_begin, 1, in_stream=False),
    _Kind("C", "Commit", _decode_commit, 1, in_stream=False),
    # pgoutput sends Origin right after Stream Start, i.e. inside the block, without an Xid.
    _Kind("O", "Origin", _decode_origin, 1, in_stream=True),
    _Kind("M", "Message", _decode_message, 1, in_stream=True),
    _Kind("R", "Relation", _decode_relation, 1, in_stream=True),
    _Kind("Y", "Type", _decode_type, 1, in_stream=True),
    _Kind("I", "Insert", _decode_insert_fast, 1, in_stream=True),
    _Kind("U", "Update", _decode_update_fast, 1, in_stream=True),
    _Kind("D", "Delete", _decode_delete_fast, 1, in_stream=True),
    _Kind("T", "Truncate", _decode_truncate, 1, in_stream=True),
    _Kind("S", "Stream Start", _decode_stream_start, 2, in_stream=False),
    _Kind("E", "Stream Stop", _decode_stream_stop, 2, in_stream=True, outside_stream=False),
    _Kind("c", "Stream Commit", _decode_stream_commit, 2, in_stream=False),
    _Kind("A", "Stream Abort", _decode_stream_abort, 2, in_stream=False),
    # The two-phase messages are documented "since protocol version 3", but pgoutput sends
    # them whenever the *slot* decodes prepared transactions (created with two_phase = true):
    # the version check in pgoutput_startup guards only the ``two_phase`` option, and the
    # prepare callbacks write these messages whatever proto_version was asked. PostgreSQL
    # 15-18 send Begin Prepare / Prepare / Commit Prepared / Rollback Prepared at protocol
    # 1 and 2 from such a slot, and Stream Prepare wherever streaming is on (protocol 2+).
    _Kind("b", "Begin Prepare", _decode_begin_prepare, 1, in_stream=False),
    _Kind("P", "Prepare", _decode_prepare, 1, in_stream=False),
    _Kind("K", "Commit Prepared", _decode_commit_prepared, 1, in_stream=False),
    _Kind("r", "Rollback Prepared", _decode_rollback_prepared, 1, in_stream=False),
    _Kind("p", "Stream Prepare", _decode_stream_prepare, 2, in_stream=False),
)

_STREAM_START_BYTE: Final = ord("S")
_STREAM_STOP_BYTE: Final = ord("E")


def _refuse(name: str, reason: str) -> _DecodeFn:
    """A dispatch entry for a known kind that is not valid in this version / stream state."""

    def refuse(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> PgoutputMessage:
        raise _error(name, 0, lsn, reason)

    return refuse


def _label(byte: int) -> str:
    """The ``kind`` of an error about an unknown kind byte: the letter itself, or ``0xNN``."""
    return chr(byte) if 0x21 <= byte <= 0x7E else f"0x{byte:02X}"


def _decode_unknown(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> PgoutputMessage:
    raise _error(_label(buf[0]), 0, lsn, f"unknown message kind {_show(buf[0])}")


def _build_table(version: int, in_stream: bool) -> tuple[_DecodeFn, ...]:
    """The 256-entry dispatch list for one (protocol version, stream state) pair."""
    table: list[_DecodeFn] = [_decode_unknown] * 256
    for kind in _KINDS:
        if version < kind.since:
            entry = _refuse(kind.name, f"{kind.name} is never sent below protocol version {kind.since}; "
                                       f"this stream uses version {version}")
        elif in_stream and not kind.in_stream:
            entry = _refuse(kind.name, f"{kind.name} cannot appear inside a streamed block "
                                       "(between Stream Start and Stream Stop)")
        elif not in_stream and not kind.outside_stream:
            entry = _refuse(kind.name, f"{kind.name} outside a streamed block (no Stream Start before it)")
        else:
            entry = kind.decode
        table[kind.byte] = entry
    return tuple(table)


_TABLES: Final = {
    (version, in_stream): _build_table(version, in_stream)
    for version in range(MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION + 1)
    for in_stream in (False, True)
    if not (in_stream and version < 2)
}

# Belt and braces: the decode functions check every length explicitly, but should a check
# ever be missing, the low-level error is still turned into a ProtocolError at the boundary.
_LOW_LEVEL_ERRORS: Final = (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError)


def _as_bytes(data: Buffer) -> bytes:
    """One copy of a bytearray/memoryview into ``bytes`` so all readers work on one type."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected bytes, bytearray or memoryview, not {type(data).__name__}")


def _abort_info(protocol_version: int, parallel: bool | None) -> bool | None:
    if parallel and protocol_version < 4:
        raise ValueError("streaming=parallel (Stream Abort with abort LSN/timestamp) needs protocol version 4")
    if protocol_version < 4:
        return False
    return parallel


def _check_version(protocol_version: int) -> None:
    if not (isinstance(protocol_version, int)
            and MIN_PROTOCOL_VERSION <= protocol_version <= MAX_PROTOCOL_VERSION):
        raise ValueError(f"protocol_version must be {MIN_PROTOCOL_VERSION}..{MAX_PROTOCOL_VERSION}, "
                         f"not {protocol_version!r}")


def _internal(buf: bytes, lsn: int | None, exc: Exception) -> ProtocolError:
    kind = next((k.name for k in _KINDS if k.byte == buf[0]), _label(buf[0]))
    return ProtocolError(f"malformed message ({type(exc).__name__}: {exc})", kind=kind, offset=None, lsn=lsn)


def _empty(lsn: int | None) -> ProtocolError:
    return ProtocolError("empty message (no kind byte)", kind=None, offset=0, lsn=lsn)


class Decoder:
    """Decodes a sequence of pgoutput messages of one replication stream, in order.

    Args:
        protocol_version: the ``proto_version`` passed to START_REPLICATION (1-4). Kinds
            the server never sends at that version are refused (streamed-transaction
            messages below 2); the two-phase messages are accepted from 1 (Stream Prepare
            from 2), because a two-phase slot makes PostgreSQL send them at any version.
            Version 4 decodes everything any version can send: use it when the version
            is unknown.
        streaming_parallel: whether ``streaming = parallel`` was requested. With protocol
            version 4 this is the one thing that makes PostgreSQL append the abort LSN and
            abort timestamp to Stream Abort (``pgoutput``'s ``write_abort_info``); the
            message itself does not say so. ``None`` means "options unknown" (e.g. a
            capture file without metadata) and then the length decides: a 9-byte payload is
            the short layout, 25 bytes the long one, anything else is an error. Ignored
            (short layout) for protocol versions below 4; ``True`` with those is refused.
        in_stream: start inside a streamed block — for decoding a segment of a stream that
            was cut between Stream Start and Stream Stop.

    The decoder tracks Stream Start / Stream Stop itself; after a :class:`ProtocolError` its
    state is unchanged (the bad message had no effect).
    """

    __slots__ = ("_abort_info", "_in_stream", "_stream_xid", "_table", "protocol_version", "streaming_parallel")

    def __init__(self, protocol_version: int, *, streaming_parallel: bool | None = False,
                 in_stream: bool = False) -> None:
        _check_version(protocol_version)
        if in_stream and protocol_version < 2:
            raise ValueError("streamed blocks exist since protocol version 2")
        self.protocol_version = protocol_version
        self.streaming_parallel = streaming_parallel
        self._abort_info = _abort_info(protocol_version, streaming_parallel)
        self._in_stream = in_stream
        self._stream_xid: int | None = None
        self._table = _TABLES[(protocol_version, in_stream)]

    @property
    def in_stream(self) -> bool:
        """True between Stream Start and Stream Stop."""
        return self._in_stream

    @property
    def stream_xid(self) -> int | None:
        """The Xid of the Stream Start that opened the current block (None outside, or unknown)."""
        return self._stream_xid

    def decode(self, data: Buffer, lsn: int | None = None) -> PgoutputMessage:
        """Decode one message (the payload of an XLogData frame, or one ``data`` row of the SQL interface).

        ``lsn`` is only used to label errors; pass the message's LSN when you have it.
        """
        buf = data if data.__class__ is bytes else _as_bytes(data)
        try:
            kind = buf[0]
        except IndexError:
            raise _empty(lsn) from None
        try:
            message = self._table[kind](buf, lsn, self._in_stream, self._abort_info)
        except _LOW_LEVEL_ERRORS as exc:  # pragma: no cover - every path checks explicitly
            raise _internal(buf, lsn, exc) from exc
        if kind == _STREAM_START_BYTE:
            self._in_stream = True
            self._stream_xid = message.xid  # type: ignore[union-attr]
            self._table = _TABLES[(self.protocol_version, True)]
        elif kind == _STREAM_STOP_BYTE:
            self._in_stream = False
            self._stream_xid = None
            self._table = _TABLES[(self.protocol_version, False)]
        return message

    def __repr__(self) -> str:
        return (f"Decoder(protocol_version={self.protocol_version}, "
                f"streaming_parallel={self.streaming_parallel!r}, in_stream={self._in_stream})")


def decode_message(data: Buffer, *, protocol_version: int, in_stream: bool,
                   parallel_abort: bool | None = False, lsn: int | None = None) -> PgoutputMessage:
    """Decode one message without tracking state: the caller says whether it lies inside a streamed block.

    ``parallel_abort`` has the meaning of :class:`Decoder`'s ``streaming_parallel``
    (True/False/None = decide Stream Abort's layout by its length).
    """
    _check_version(protocol_version)
    if in_stream and protocol_version < 2:
        raise ValueError("streamed blocks exist since protocol version 2")
    abort_info = _abort_info(protocol_version, parallel_abort)
    buf = data if data.__class__ is bytes else _as_bytes(data)
    if not buf:
        raise _empty(lsn)
    try:
        return _TABLES[(protocol_version, bool(in_stream))][buf[0]](buf, lsn, bool(in_stream), abort_info)
    except _LOW_LEVEL_ERRORS as exc:  # pragma: no cover - every path checks explicitly
        raise _internal(buf, lsn, exc) from exc


def read_tuple_data(buf: bytes, pos: int, *, kind: str = "TupleData", lsn: int | None = None) -> TupleData:
    """The ``TupleData`` part starting at ``pos`` of a message (its Int16 column count).

    For callers that located the part themselves (the compiled hot path's scan): the same
    reader, results and errors as inside :func:`decode_message`.
    """
    return _read_tuple(kind, buf, pos, lsn)[0]
