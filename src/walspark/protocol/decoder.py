"""pgoutput bytes → typed messages.

A stateful :class:`Decoder` (the same kind byte has two layouts, by stream state and options)
and the stateless :func:`decode_message`; strict on bad bytes, fast on good ones. See
docs/design/protocol.md.
"""

from __future__ import annotations

import struct
from typing import Final

from ._message_decoders import (
    _decode_begin,
    _decode_begin_prepare,
    _decode_commit,
    _decode_commit_prepared,
    _decode_delete_fast,
    _decode_insert_fast,
    _decode_message,
    _decode_origin,
    _decode_prepare,
    _decode_relation,
    _decode_rollback_prepared,
    _decode_stream_abort,
    _decode_stream_commit,
    _decode_stream_prepare,
    _decode_stream_start,
    _decode_stream_stop,
    _decode_truncate,
    _decode_type,
    _decode_update_fast,
    _DecodeFn,
)
from ._readers import _error, _read_tuple, _show
from .errors import ProtocolError
from .messages import PgoutputMessage, TupleData

__all__ = [
    "MAX_PROTOCOL_VERSION",
    "MIN_PROTOCOL_VERSION",
    "Decoder",
    "decode_message",
    "read_tuple_data",
    "relation_ids",
]

MIN_PROTOCOL_VERSION: Final = 1
MAX_PROTOCOL_VERSION: Final = 4

Buffer = bytes | bytearray | memoryview


# --------------------------------------------------------------------------- dispatch


class _Kind:
    """Where a message kind may appear: from which protocol version, inside/outside streamed blocks.

    ``since`` is the lowest ``proto_version`` at which PostgreSQL can *send* the kind, which
    is not always the version the documentation introduces it with (see ``_KINDS``).
    """

    __slots__ = ("byte", "decode", "in_stream", "name", "outside_stream", "since")

    def __init__(
        self, letter: str, name: str, decode: _DecodeFn, since: int, *, in_stream: bool, outside_stream: bool = True
    ) -> None:
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
            entry = _refuse(
                kind.name,
                f"{kind.name} is never sent below protocol version {kind.since}; this stream uses version {version}",
            )
        elif in_stream and not kind.in_stream:
            entry = _refuse(
                kind.name, f"{kind.name} cannot appear inside a streamed block (between Stream Start and Stream Stop)"
            )
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
    if not (isinstance(protocol_version, int) and MIN_PROTOCOL_VERSION <= protocol_version <= MAX_PROTOCOL_VERSION):
        raise ValueError(
            f"protocol_version must be {MIN_PROTOCOL_VERSION}..{MAX_PROTOCOL_VERSION}, not {protocol_version!r}"
        )


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

    def __init__(
        self, protocol_version: int, *, streaming_parallel: bool | None = False, in_stream: bool = False
    ) -> None:
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
        return (
            f"Decoder(protocol_version={self.protocol_version}, "
            f"streaming_parallel={self.streaming_parallel!r}, in_stream={self._in_stream})"
        )


def decode_message(
    data: Buffer, *, protocol_version: int, in_stream: bool, parallel_abort: bool | None = False, lsn: int | None = None
) -> PgoutputMessage:
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


def relation_ids(data: bytes, in_stream: bool) -> tuple[int, ...]:
    """The relation ids a change message is about, from its header bytes alone (no decode): one
    for an Insert, Update or Delete, each truncated one for a Truncate, none for other kinds."""
    o = 5 if in_stream else 1  # the kind byte, then the xid inside a streamed block
    kind = data[0]
    if kind in (0x49, 0x55, 0x44):  # I, U, D
        return (int.from_bytes(data[o : o + 4], "big"),)
    if kind == 0x54:  # T: count, options, the ids
        count = int.from_bytes(data[o : o + 4], "big")
        base = o + 5
        return tuple(int.from_bytes(data[base + 4 * i : base + 4 * i + 4], "big") for i in range(count))
    return ()
