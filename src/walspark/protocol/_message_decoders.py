"""One decode function per pgoutput message kind, for :mod:`walspark.protocol.decoder`'s dispatch.

Why a module of its own: these functions are the protocol documentation's message layouts,
one each, read with the helpers of :mod:`._readers`; the dispatch that picks one by kind
byte, protocol version and stream state (and the public :class:`~.decoder.Decoder`) is in
:mod:`walspark.protocol.decoder`, which is the only user of this module.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from ._readers import (
    _BEGIN,
    _BEGIN_LENGTH,
    _BEGIN_PREPARE,
    _CHANGE_HEAD,
    _COLUMN_FLAGS,
    _COLUMN_TAIL,
    _COMMIT,
    _COMMIT_LENGTH,
    _COMMIT_PREPARED,
    _CONTENT_LENGTH,
    _D,
    _K,
    _MESSAGE,
    _N,
    _O,
    _OID,
    _ORIGIN,
    _PREPARE,
    _RELATION_TAIL,
    _ROLLBACK_PREPARED,
    _STREAM_ABORT,
    _STREAM_ABORT_V4,
    _STREAM_COMMIT,
    _STREAM_START,
    _TRUNCATE,
    _TUPLE_TAG,
    _TYPE_OID,
    _U,
    _check_stream_xid,
    _check_zero_flags,
    _end,
    _error,
    _exact,
    _head,
    _new_begin,
    _new_commit,
    _new_delete,
    _new_insert,
    _new_update,
    _read_head_and_gid,
    _read_stream_xid,
    _read_string,
    _read_tuple,
    _scan_columns,
    _short,
    _show,
    _trailing,
    _unpack_change_head,
    _unpack_change_head_count,
    _unpack_u32,
)
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
    Type,
    Update,
)

_DecodeFn = Callable[[bytes, "int | None", bool, "bool | None"], PgoutputMessage]


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
        raise _error(
            "Message",
            pos,
            lsn,
            f"content length {length} is " + ("negative" if length < 0 else f"beyond the {remaining} remaining bytes"),
        )
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
        raise _error(
            "Relation", pos - 2, lsn, f"column count {ncols} does not fit the {len(buf) - pos} remaining bytes"
        )
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
            raise _error(
                "Update", pos, lsn, f"{_show(tag)} part followed by {_show(second)}: 'K' and 'O' never both appear"
            )
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
            raise _error(
                "Delete", pos, lsn, f"{_show(tag)} part followed by {_show(buf[pos])}: 'K' and 'O' never both appear"
            )
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
        raise _error(
            "Truncate",
            pos,
            lsn,
            f"relation count {count} is " + ("negative" if count < 0 else f"beyond the {remaining} remaining bytes"),
        )
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
        "Begin Prepare", buf, _BEGIN_PREPARE, lsn, has_flags=False
    )
    return BeginPrepare(prepare_lsn, end_lsn, prepare_timestamp, xid, gid)


def _decode_prepare(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> Prepare:
    (prepare_lsn, end_lsn, prepare_timestamp, xid), gid = _read_head_and_gid(
        "Prepare", buf, _PREPARE, lsn, has_flags=True
    )
    return Prepare(prepare_lsn, end_lsn, prepare_timestamp, xid, gid)


def _decode_commit_prepared(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> CommitPrepared:
    (commit_lsn, end_lsn, commit_timestamp, xid), gid = _read_head_and_gid(
        "Commit Prepared", buf, _COMMIT_PREPARED, lsn, has_flags=True
    )
    return CommitPrepared(commit_lsn, end_lsn, commit_timestamp, xid, gid)


def _decode_rollback_prepared(
    buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None
) -> RollbackPrepared:
    (prepare_end_lsn, rollback_end_lsn, prepare_timestamp, rollback_timestamp, xid), gid = _read_head_and_gid(
        "Rollback Prepared", buf, _ROLLBACK_PREPARED, lsn, has_flags=True
    )
    return RollbackPrepared(prepare_end_lsn, rollback_end_lsn, prepare_timestamp, rollback_timestamp, xid, gid)


def _decode_stream_prepare(buf: bytes, lsn: int | None, in_stream: bool, abort_info: bool | None) -> StreamPrepare:
    (prepare_lsn, end_lsn, prepare_timestamp, xid), gid = _read_head_and_gid(
        "Stream Prepare", buf, _PREPARE, lsn, has_flags=True
    )
    return StreamPrepare(prepare_lsn, end_lsn, prepare_timestamp, xid, gid)
