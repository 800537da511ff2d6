"""Streaming-replication CopyData framing: XLogData ``w``, primary keepalive ``k``, standby status update ``r``.

Same conventions as the message codec (docs/design/protocol.md).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Final, TypeAlias

from .errors import ProtocolError
from .lsn import pg_timestamp_to_datetime

__all__ = [
    "Frame",
    "PrimaryKeepalive",
    "StandbyStatusUpdate",
    "XLogData",
    "decode_frame",
    "encode_frame",
]

_XLOGDATA: Final = struct.Struct(">QQq")
_KEEPALIVE: Final = struct.Struct(">QqB")
_STATUS: Final = struct.Struct(">QQQqB")

_XLOGDATA_FIELDS: Final = (("WAL data start", 8), ("WAL end", 8), ("server clock", 8))
_KEEPALIVE_FIELDS: Final = (("WAL end", 8), ("server clock", 8), ("reply-requested byte", 1))
_STATUS_FIELDS: Final = (
    ("written LSN", 8),
    ("flushed LSN", 8),
    ("applied LSN", 8),
    ("client clock", 8),
    ("reply-requested byte", 1),
)

Buffer = bytes | bytearray | memoryview


def _as_bytes(data: Buffer) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected bytes, bytearray or memoryview, not {type(data).__name__}")


def _check_header(kind: str, letter: int, buf: bytes, fields: tuple[tuple[str, int], ...], exact: bool) -> None:
    """Kind byte, then enough bytes for ``fields`` (and, if ``exact``, nothing more)."""
    if not buf or buf[0] != letter:
        got = f"0x{buf[0]:02X}" if buf else "nothing"
        raise ProtocolError(f"expected kind byte {chr(letter)!r}, got {got}", kind=kind, offset=0)
    offset = 1
    for name, width in fields:
        if offset + width > len(buf):
            raise ProtocolError(
                f"frame truncated: {name} needs {width} bytes, {max(0, len(buf) - offset)} left",
                kind=kind,
                offset=offset,
            )
        offset += width
    if exact and len(buf) != offset:
        raise ProtocolError(f"{len(buf) - offset} trailing bytes after the end of the frame", kind=kind, offset=offset)


def _reply_flag(kind: str, value: int, offset: int, lsn: int | None) -> bool:
    if value > 1:
        raise ProtocolError(f"reply-requested byte must be 0 or 1, got {value}", kind=kind, offset=offset, lsn=lsn)
    return value == 1


@dataclass(frozen=True, slots=True)
class XLogData:
    """``w``: one pgoutput message (``payload``) starting at WAL position ``data_start``."""

    KIND: ClassVar[str] = "w"

    data_start: int
    wal_end: int
    send_time: int
    payload: bytes

    @property
    def send_datetime(self) -> datetime:
        return pg_timestamp_to_datetime(self.send_time)

    @classmethod
    def decode(cls, data: Buffer) -> XLogData:
        buf = _as_bytes(data)
        _check_header("XLogData", 0x77, buf, _XLOGDATA_FIELDS, exact=False)
        data_start, wal_end, send_time = _XLOGDATA.unpack_from(buf, 1)
        return cls(data_start, wal_end, send_time, buf[1 + _XLOGDATA.size :])

    def encode(self) -> bytes:
        return b"w" + _pack("XLogData", _XLOGDATA, self.data_start, self.wal_end, self.send_time) + bytes(self.payload)


@dataclass(frozen=True, slots=True)
class PrimaryKeepalive:
    """``k``: the server's heartbeat; ``reply_requested`` asks for an immediate status update."""

    KIND: ClassVar[str] = "k"

    wal_end: int
    send_time: int
    reply_requested: bool

    @property
    def send_datetime(self) -> datetime:
        return pg_timestamp_to_datetime(self.send_time)

    @classmethod
    def decode(cls, data: Buffer) -> PrimaryKeepalive:
        buf = _as_bytes(data)
        _check_header("PrimaryKeepalive", 0x6B, buf, _KEEPALIVE_FIELDS, exact=True)
        wal_end, send_time, reply = _KEEPALIVE.unpack_from(buf, 1)
        return cls(wal_end, send_time, _reply_flag("PrimaryKeepalive", reply, 17, wal_end))

    def encode(self) -> bytes:
        return b"k" + _pack(
            "PrimaryKeepalive", _KEEPALIVE, self.wal_end, self.send_time, 1 if self.reply_requested else 0
        )


@dataclass(frozen=True, slots=True)
class StandbyStatusUpdate:
    """``r``: the client's progress report. ``flushed`` becomes the slot's ``confirmed_flush_lsn``."""

    KIND: ClassVar[str] = "r"

    written: int
    flushed: int
    applied: int
    client_time: int
    reply_requested: bool = False

    @property
    def client_datetime(self) -> datetime:
        return pg_timestamp_to_datetime(self.client_time)

    @classmethod
    def decode(cls, data: Buffer) -> StandbyStatusUpdate:
        buf = _as_bytes(data)
        _check_header("StandbyStatusUpdate", 0x72, buf, _STATUS_FIELDS, exact=True)
        written, flushed, applied, client_time, reply = _STATUS.unpack_from(buf, 1)
        return cls(written, flushed, applied, client_time, _reply_flag("StandbyStatusUpdate", reply, 33, flushed))

    def encode(self) -> bytes:
        return b"r" + _pack(
            "StandbyStatusUpdate",
            _STATUS,
            self.written,
            self.flushed,
            self.applied,
            self.client_time,
            1 if self.reply_requested else 0,
        )


def _pack(kind: str, layout: struct.Struct, *values: int) -> bytes:
    try:
        return layout.pack(*values)
    except struct.error as exc:
        raise ValueError(f"{kind}: field out of range ({exc})") from None


Frame: TypeAlias = XLogData | PrimaryKeepalive | StandbyStatusUpdate

_FRAMES: Final[dict[int, type[XLogData] | type[PrimaryKeepalive] | type[StandbyStatusUpdate]]] = {
    0x77: XLogData,
    0x6B: PrimaryKeepalive,
    0x72: StandbyStatusUpdate,
}


def decode_frame(data: Buffer) -> Frame:
    """Decode one CopyData payload of a replication connection, dispatching on its kind byte."""
    buf = _as_bytes(data)
    if not buf:
        raise ProtocolError("empty CopyData payload (no kind byte)", kind=None, offset=0)
    frame = _FRAMES.get(buf[0])
    if frame is None:
        label = chr(buf[0]) if 0x21 <= buf[0] <= 0x7E else f"0x{buf[0]:02X}"
        raise ProtocolError(
            f"unknown replication frame kind {label!r} (expected 'w', 'k' or 'r')", kind=label, offset=0
        )
    return frame.decode(buf)


def encode_frame(frame: Frame) -> bytes:
    """Encode a frame; :class:`ValueError` if a field is out of range."""
    return frame.encode()
