"""Typed messages → pgoutput bytes: the exact inverse of :mod:`walspark.protocol.decoder`.

For tests, fixtures and tools, not the hot path; a message that cannot be encoded raises
:class:`ValueError`. See docs/design/protocol.md.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

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

__all__ = ["encode_message", "encode_tuple"]

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">BQQq")
_U64 = struct.Struct(">Q")
_MESSAGE = struct.Struct(">BQ")
_COLUMN_TAIL = struct.Struct(">Ii")
_RELATION_TAIL = struct.Struct(">BH")
_TRUNCATE = struct.Struct(">iB")
_STREAM_START = struct.Struct(">IB")
_STREAM_COMMIT = struct.Struct(">IBQQq")
_STREAM_ABORT = struct.Struct(">II")
_STREAM_ABORT_V4 = struct.Struct(">IIQq")
_BEGIN_PREPARE = struct.Struct(">QQqI")
_PREPARE = struct.Struct(">BQQqI")
_ROLLBACK_PREPARED = struct.Struct(">BQQqqI")

_VALUED_KINDS: Final = frozenset("tb")
_EMPTY_KINDS: Final = frozenset("nu")


def _string(text: str, what: str) -> bytes:
    """A ``String``: UTF-8 plus NUL terminator. An embedded NUL would end the string early."""
    data = text.encode("utf-8")
    if b"\0" in data:
        raise ValueError(f"{what} contains a NUL character and cannot be sent as a String")
    return data + b"\0"


def _head(kind: bytes, xid: int | None) -> bytes:
    """Kind byte plus the Xid field that exists only inside streamed blocks (``xid`` not None)."""
    return kind if xid is None else kind + _U32.pack(xid)


def encode_tuple(tuple_data: TupleData) -> bytes:
    """A ``TupleData`` part: column count, then per column its kind and, for 't'/'b', length + bytes."""
    kinds, values = tuple_data.kinds, tuple_data.values
    if len(kinds) != len(values):
        raise ValueError(f"TupleData has {len(kinds)} kinds but {len(values)} values")
    parts = [_U16.pack(len(kinds))]
    for i, (kind, value) in enumerate(zip(kinds, values, strict=True)):
        if kind in _VALUED_KINDS:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise ValueError(f"TupleData column {i} of kind {kind!r} needs a bytes value")
            parts.append(kind.encode("ascii") + _I32.pack(len(value)))
            parts.append(bytes(value))
        elif kind in _EMPTY_KINDS:
            if value is not None:
                raise ValueError(f"TupleData column {i} of kind {kind!r} carries no value (must be None)")
            parts.append(kind.encode("ascii"))
        else:
            raise ValueError(f"TupleData column {i} has unknown kind {kind!r}")
    return b"".join(parts)


def _encode_begin(m: Begin) -> bytes:
    return b"B" + _BEGIN.pack(m.final_lsn, m.commit_timestamp, m.xid)


def _encode_commit(m: Commit) -> bytes:
    return b"C" + _COMMIT.pack(0, m.commit_lsn, m.end_lsn, m.commit_timestamp)


def _encode_origin(m: Origin) -> bytes:
    return b"O" + _U64.pack(m.commit_lsn) + _string(m.name, "origin name")


def _encode_message(m: Message) -> bytes:
    content = bytes(m.content)
    return b"".join(
        (
            _head(b"M", m.xid),
            _MESSAGE.pack(1 if m.transactional else 0, m.lsn),
            _string(m.prefix, "prefix"),
            _I32.pack(len(content)),
            content,
        )
    )


def _encode_relation(m: Relation) -> bytes:
    if len(m.replica_identity) != 1:
        raise ValueError(f"replica_identity must be one character, not {m.replica_identity!r}")
    parts = [
        _head(b"R", m.xid),
        _U32.pack(m.relation_id),
        _string(m.namespace, "namespace"),
        _string(m.relation_name, "relation name"),
        _RELATION_TAIL.pack(ord(m.replica_identity), len(m.columns)),
    ]
    for column in m.columns:
        parts.append(_U8.pack(column.flags))
        parts.append(_string(column.name, "column name"))
        parts.append(_COLUMN_TAIL.pack(column.type_oid, column.type_modifier))
    return b"".join(parts)


def _encode_type(m: Type) -> bytes:
    return b"".join(
        (
            _head(b"Y", m.xid),
            _U32.pack(m.type_oid),
            _string(m.namespace, "namespace"),
            _string(m.type_name, "type name"),
        )
    )


def _encode_insert(m: Insert) -> bytes:
    return b"".join((_head(b"I", m.xid), _U32.pack(m.relation_id), b"N", encode_tuple(m.new_tuple)))


def _encode_update(m: Update) -> bytes:
    parts = [_head(b"U", m.xid), _U32.pack(m.relation_id)]
    if m.key_tuple is not None and m.old_tuple is not None:
        raise ValueError("Update carries either key_tuple ('K') or old_tuple ('O'), never both")
    if m.key_tuple is not None:
        parts += (b"K", encode_tuple(m.key_tuple))
    elif m.old_tuple is not None:
        parts += (b"O", encode_tuple(m.old_tuple))
    parts += (b"N", encode_tuple(m.new_tuple))
    return b"".join(parts)


def _encode_delete(m: Delete) -> bytes:
    if (m.key_tuple is None) == (m.old_tuple is None):
        raise ValueError("Delete carries exactly one of key_tuple ('K') and old_tuple ('O')")
    tag, old = (b"K", m.key_tuple) if m.key_tuple is not None else (b"O", m.old_tuple)
    assert old is not None
    return b"".join((_head(b"D", m.xid), _U32.pack(m.relation_id), tag, encode_tuple(old)))


def _encode_truncate(m: Truncate) -> bytes:
    ids = tuple(m.relation_ids)
    return _head(b"T", m.xid) + _TRUNCATE.pack(len(ids), m.options) + struct.pack(f">{len(ids)}I", *ids)


def _encode_stream_start(m: StreamStart) -> bytes:
    return b"S" + _STREAM_START.pack(m.xid, 1 if m.first_segment else 0)


def _encode_stream_stop(m: StreamStop) -> bytes:
    return b"E"


def _encode_stream_commit(m: StreamCommit) -> bytes:
    return b"c" + _STREAM_COMMIT.pack(m.xid, 0, m.commit_lsn, m.end_lsn, m.commit_timestamp)


def _encode_stream_abort(m: StreamAbort) -> bytes:
    if (m.abort_lsn is None) != (m.abort_timestamp is None):
        raise ValueError("StreamAbort has abort_lsn and abort_timestamp both set (v4 parallel) or both None")
    if m.abort_lsn is None:
        return b"A" + _STREAM_ABORT.pack(m.xid, m.subxid)
    return b"A" + _STREAM_ABORT_V4.pack(m.xid, m.subxid, m.abort_lsn, m.abort_timestamp)


def _encode_begin_prepare(m: BeginPrepare) -> bytes:
    return b"b" + _BEGIN_PREPARE.pack(m.prepare_lsn, m.end_lsn, m.prepare_timestamp, m.xid) + _string(m.gid, "GID")


def _encode_prepare(m: Prepare) -> bytes:
    return b"P" + _PREPARE.pack(0, m.prepare_lsn, m.end_lsn, m.prepare_timestamp, m.xid) + _string(m.gid, "GID")


def _encode_commit_prepared(m: CommitPrepared) -> bytes:
    return b"K" + _PREPARE.pack(0, m.commit_lsn, m.end_lsn, m.commit_timestamp, m.xid) + _string(m.gid, "GID")


def _encode_rollback_prepared(m: RollbackPrepared) -> bytes:
    return (
        b"r"
        + _ROLLBACK_PREPARED.pack(
            0, m.prepare_end_lsn, m.rollback_end_lsn, m.prepare_timestamp, m.rollback_timestamp, m.xid
        )
        + _string(m.gid, "GID")
    )


def _encode_stream_prepare(m: StreamPrepare) -> bytes:
    return b"p" + _PREPARE.pack(0, m.prepare_lsn, m.end_lsn, m.prepare_timestamp, m.xid) + _string(m.gid, "GID")


_ENCODERS: Final[dict[type, Callable[[Any], bytes]]] = {
    Begin: _encode_begin,
    Commit: _encode_commit,
    Origin: _encode_origin,
    Message: _encode_message,
    Relation: _encode_relation,
    Type: _encode_type,
    Insert: _encode_insert,
    Update: _encode_update,
    Delete: _encode_delete,
    Truncate: _encode_truncate,
    StreamStart: _encode_stream_start,
    StreamStop: _encode_stream_stop,
    StreamCommit: _encode_stream_commit,
    StreamAbort: _encode_stream_abort,
    BeginPrepare: _encode_begin_prepare,
    Prepare: _encode_prepare,
    CommitPrepared: _encode_commit_prepared,
    RollbackPrepared: _encode_rollback_prepared,
    StreamPrepare: _encode_stream_prepare,
}


def encode_message(message: PgoutputMessage) -> bytes:
    """Encode one message into the bytes pgoutput sends for it.

    Raises :class:`ValueError` if the message cannot be represented on the wire
    (including integers outside their field's range), :class:`TypeError` for non-messages.
    """
    try:
        encode = _ENCODERS[type(message)]
    except KeyError:
        raise TypeError(f"not a pgoutput message: {type(message).__name__}") from None
    try:
        return encode(message)
    except struct.error as exc:
        raise ValueError(f"{type(message).__name__}: field out of range ({exc})") from None
    except UnicodeEncodeError as exc:
        raise ValueError(f"{type(message).__name__}: text is not encodable as UTF-8 ({exc.reason})") from None
