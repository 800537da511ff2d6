"""Transaction buffers that move to local disk when memory runs short.

A transaction's messages must be held until its commit decides their fate (a streamed
transaction can abort, a subtransaction can roll back, a prepared one can be rolled back much
later), and a single transaction can be larger than memory. Each buffer keeps its messages in
a list until the assembler asks it to :meth:`TxnBuffer.spill`; from then on it appends them to a
file of its own and reads them back, in order, at commit.

Record format on disk (all big-endian): ``Int64 lsn, Int8 in_stream, Int32 subxid,
Int32 length, Byte[length] message``. The files are private scratch: written and read by one
process, deleted when the transaction ends.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_RECORD = struct.Struct(">QBIi")

#: Bytes of bookkeeping charged per buffered message on top of its payload (list slot,
#: tuple, bytes header): keeps the memory budget honest for many tiny messages.
OVERHEAD = 120

#: One buffered message: (lsn, in_stream, subxid, pgoutput bytes).
Entry = tuple[int, bool, int, bytes]


class SpillError(OSError):
    """The spill directory could not be written or read back (e.g. the disk is full)."""


class TxnBuffer:
    """The messages of one transaction, in arrival order, in memory or in a spill file."""

    __slots__ = ("_entries", "_path", "_file", "memory_bytes", "count", "aborted_subxids")

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._path: Path | None = None
        self._file: BinaryIO | None = None
        self.memory_bytes = 0
        self.count = 0
        self.aborted_subxids: set[int] = set()

    @property
    def spilled(self) -> bool:
        return self._path is not None

    def append(self, lsn: int, in_stream: bool, subxid: int, data: bytes) -> int:
        """Add a message; returns the bytes of memory it now takes (0 once spilled)."""
        self.count += 1
        if self._file is not None:
            self._write(lsn, in_stream, subxid, data)
            return 0
        self._entries.append((lsn, in_stream, subxid, data))
        size = len(data) + OVERHEAD
        self.memory_bytes += size
        return size

    def abort_subtransaction(self, subxid: int) -> None:
        """Forget the messages of a rolled-back subtransaction (now in memory, at read-back on disk)."""
        if self._file is None:
            kept = [entry for entry in self._entries if entry[2] != subxid]
            self.memory_bytes -= sum(len(entry[3]) + OVERHEAD for entry in self._entries if entry[2] == subxid)
            self.count -= len(self._entries) - len(kept)
            self._entries = kept
        else:
            self.aborted_subxids.add(subxid)

    def spill(self, directory: Path, name: str) -> int:
        """Move the buffered messages to ``directory/name``; returns the memory freed."""
        if self._file is not None:
            return 0
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / name
        try:
            self._file = open(self._path, "wb", buffering=1 << 20)  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise SpillError(exc.errno, f"cannot create spill file {self._path}: {exc.strerror}") from exc
        for entry in self._entries:
            self._write(*entry)
        freed, self.memory_bytes, self._entries = self.memory_bytes, 0, []
        return freed

    def _write(self, lsn: int, in_stream: bool, subxid: int, data: bytes) -> None:
        assert self._file is not None
        try:
            self._file.write(_RECORD.pack(lsn, in_stream, subxid, len(data)))
            self._file.write(data)
        except OSError as exc:
            raise SpillError(exc.errno, f"cannot write spill file {self._path}: {exc.strerror}") from exc

    def __iter__(self) -> Iterator[Entry]:
        """The messages in arrival order, without those of aborted subtransactions."""
        if self._file is None:
            yield from self._entries
            return
        try:
            self._file.flush()
        except OSError as exc:
            raise SpillError(exc.errno, f"cannot write spill file {self._path}: {exc.strerror}") from exc
        aborted = self.aborted_subxids
        with open(self._path, "rb", buffering=1 << 20) as reader:  # type: ignore[arg-type]
            while header := reader.read(_RECORD.size):
                if len(header) != _RECORD.size:
                    raise SpillError(0, f"spill file {self._path} is truncated")
                lsn, in_stream, subxid, length = _RECORD.unpack(header)
                data = reader.read(length)
                if len(data) != length:
                    raise SpillError(0, f"spill file {self._path} is truncated")
                if subxid not in aborted:
                    yield lsn, bool(in_stream), subxid, data

    def close(self) -> None:
        """Release memory and delete the spill file, if any."""
        self._entries = []
        self.memory_bytes = 0
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._path is not None:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None
