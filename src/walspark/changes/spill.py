"""Transaction buffers that move to local disk when memory runs short.

The files are private scratch, written and read by one process. See docs/design/changes.md for
their record format.
"""

from __future__ import annotations

import errno
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
    """The spill directory could not be written or read back (e.g. the disk is full).

    Its text is one line that names the file and its directory, what ran out and what to do:
    an operator reads it in a log or a CLI error, far from this code. ``str()`` is that text
    alone, without :class:`OSError`'s ``[Errno n]`` prefix (``errno`` is still set).
    """

    def __str__(self) -> str:
        return str(self.strerror) if self.strerror else super().__str__()


#: What ran out, for the errors a full or limited spill directory produces.
_RAN_OUT = {
    errno.ENOSPC: "the file system is full",
    errno.EFBIG: "the file size limit (ulimit -f) was reached",
    errno.EDQUOT: "the disk quota is exhausted",
}

_ADVICE = (
    "free space there, raise the memory budget (so that fewer transactions spill) or point the spill "
    "directory elsewhere"
)


def spill_error(exc: OSError, action: str, path: Path) -> SpillError:
    """A :class:`SpillError` for ``exc``, raised while trying to ``action`` the spill file ``path``."""
    what = _RAN_OUT.get(exc.errno or 0)
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = f"spill directory {path.parent}"
    detail = f"{what} in {where}" if what else where
    return SpillError(exc.errno or 0, f"cannot {action} spill file {path}: {reason} ({detail}); {_ADVICE}")


class TxnBuffer:
    """The messages of one transaction, in arrival order, in memory or in a spill file."""

    __slots__ = ("_entries", "_file", "_path", "aborted_subxids", "count", "memory_bytes")

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
        path = directory / name
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "wb", buffering=1 << 20)  # closed in close()
        except OSError as exc:
            raise spill_error(exc, "create", path) from exc
        self._path = path
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
            raise spill_error(exc, "write", self._path) from exc  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Entry]:
        """The messages in arrival order, without those of aborted subtransactions."""
        if self._file is None:
            yield from self._entries
            return
        try:
            self._file.flush()
        except OSError as exc:
            raise spill_error(exc, "write", self._path) from exc  # type: ignore[arg-type]
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
        """Release memory and delete the spill file, if any.

        Never raises for the file: closing flushes the write buffer, which fails again on the
        full disk that made the transaction fail in the first place — and the data is being
        thrown away anyway. Raising here would skip the unlink (leaving the partial file on the
        full disk) and, further up, the closing of the replication connection.
        """
        self._entries = []
        self.memory_bytes = 0
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError:
                pass
        if self._path is not None:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None
