"""The stager's durable store of prepared transactions (two-phase commit).

A PREPARE is stored as one whole object before anything after it is staged, so before the slot
can be confirmed past it. Pure file I/O. See docs/design/staging.md for the layout and why a
resent or unknown COMMIT PREPARED is told apart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import struct
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from walspark.changes.assembly import CommittedTransaction, PreparedTransaction
from walspark.changes.spill import Entry
from walspark.protocol import format_lsn, parse_lsn
from walspark.storage import Location, location

__all__ = ["PreparedEntry", "PreparedStore", "PreparedStoreError"]

log = logging.getLogger(__name__)

_MAGIC = b"walspark-prepared 1\n"
_LEN = struct.Struct(">I")
_RECORD = struct.Struct(">QBi")
_NAME = re.compile(r"(\d{10})-([0-9a-f]{16})(?:\.([0-9A-F]{16}))?\.(prepared|committed)")
_WATERMARK = "committed-through"
_SINCE = "since.json"

#: One stored message: (lsn, in_stream, pgoutput bytes).
Message = tuple[int, bool, bytes]


class PreparedStoreError(RuntimeError):
    """An entry of the prepared-transaction store cannot be read (damaged, truncated)."""


def _mark_name(key: str, end_lsn: int) -> str:
    return f"{key}.{end_lsn:016X}.committed"


def _key(xid: int, gid: str) -> str:
    return f"{xid:010d}-{hashlib.sha256(gid.encode()).hexdigest()[:16]}"


@dataclass(frozen=True, slots=True)
class PreparedEntry:
    """One stored transaction: where it is and, once committed and staged, at which end LSN."""

    key: str
    path: Location
    committed_end: int | None = None


class _StoredMessages:
    """A stored entry's messages, read lazily (a prepared transaction can be larger than memory).

    The file is open from the start: Spark's commit may delete the entry meanwhile (a COMMIT
    PREPARED sent again while the first one's batch is being committed), and an open file
    stays readable. ``close`` closes it; the file itself belongs to the store.
    """

    def __init__(self, path: Location, xid: int, file: BinaryIO, body: int) -> None:
        self.path, self.xid, self.file, self.body = path, xid, file, body

    def __iter__(self) -> Iterator[Entry]:
        f = self.file
        f.seek(self.body)
        while header := f.read(_RECORD.size):
            if len(header) != _RECORD.size:
                raise PreparedStoreError(f"prepared transaction file {self.path} is truncated")
            lsn, in_stream, length = _RECORD.unpack(header)
            data = f.read(length)
            if len(data) != length:
                raise PreparedStoreError(f"prepared transaction file {self.path} is truncated")
            yield lsn, bool(in_stream), self.xid, data

    def close(self) -> None:
        self.file.close()


def _read_header(f, path: Location) -> dict:
    if f.read(len(_MAGIC)) != _MAGIC:
        raise PreparedStoreError(f"{path} is not a walspark prepared-transaction file")
    raw = f.read(_LEN.size)
    if len(raw) != _LEN.size:
        raise PreparedStoreError(f"prepared transaction file {path} is truncated")
    (n,) = _LEN.unpack(raw)
    return json.loads(f.read(n))


class PreparedStore:
    """Prepared transactions kept on disk from their PREPARE until Spark holds their commit.

    Thread-safe: the stager's thread stores and resolves, Spark's ``commit`` (main thread)
    releases.
    """

    def __init__(self, directory: str | Path | Location) -> None:
        self.directory = location(directory)
        self._lock = threading.Lock()
        self._entries: dict[str, PreparedEntry] = {}
        self._watermark = 0
        self._complete: bool | None = None

    # ------------------------------------------------------------------ life cycle

    def load(self, *, tidy: bool = True) -> PreparedStore:
        """Read the directory: temporary files of a crashed write go, committed entries Spark has go.

        ``tidy=False`` only reads (no file is deleted): for a reader outside the stager, which
        must not touch a write the stager may have under way.
        """
        self.directory.make_dirs()
        try:
            self._watermark = parse_lsn((self.directory / _WATERMARK).read_text().strip())
        except FileNotFoundError:
            self._watermark = 0
        since = (self.directory / _SINCE).read_json()
        self._complete = None if since is None else bool(since["complete"])
        data: dict[str, Location] = {}
        marks: dict[str, list[tuple[int, Location]]] = {}
        for path in self.directory.list():
            match = _NAME.fullmatch(path.name)
            if match is None:
                if tidy and path.name.endswith(".tmp"):
                    path.delete()
                continue
            key = f"{match.group(1)}-{match.group(2)}"
            if match.group(3):
                marks.setdefault(key, []).append((int(match.group(3), 16), path))
            else:
                data[key] = path
        entries: dict[str, PreparedEntry] = {}
        for key in sorted(data.keys() | marks.keys()):
            found = sorted(marks.get(key, []), key=lambda m: m[0])
            end = found[-1][0] if found else None
            stored = data.get(key)
            if end is not None and end <= self._watermark:  # Spark has it (a release cut short)
                if tidy:
                    if stored is not None:
                        stored.delete()
                    for _, mark in found:
                        mark.delete()
                continue
            if stored is None:  # an older store's committed entry: the mark holds the data
                stored = found[-1][1]
            elif tidy:
                for _, mark in found[:-1]:  # a crash between a new mark and the old one's removal
                    mark.delete()
            entries[key] = PreparedEntry(key, stored, end)
        with self._lock:
            self._entries = entries
        pending = sum(1 for e in entries.values() if e.committed_end is None)
        if entries:
            log.info(
                "prepared-transaction store %s: %d pending, %d committed awaiting Spark",
                self.directory,
                pending,
                len(entries) - pending,
            )
        return self

    def begin(self, *, slot_had_two_phase: bool, start_lsn: int) -> None:
        """The first stream of this store starts (the slot's two-phase state just before it).

        A slot that did not decode prepared transactions yet turns it on at this start
        (``two_phase_at`` = here): every PREPARE it sends from now on reaches this store. Written
        once, durably, before any PREPARE can arrive.
        """
        if self._complete is not None:
            return
        complete = not slot_had_two_phase
        (self.directory / _SINCE).write_json({"complete": complete, "first_stream_start": format_lsn(start_lsn)})
        self._complete = complete

    @property
    def complete(self) -> bool:
        """Whether every PREPARE the slot ever sent as such was offered to this store (see ``since.json``)."""
        return bool(self._complete)

    @property
    def watermark(self) -> int:
        """The highest Spark-committed end LSN at which a committed entry was deleted."""
        with self._lock:
            return self._watermark

    def pending(self) -> list[PreparedEntry]:
        with self._lock:
            return [e for e in self._entries.values() if e.committed_end is None]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # ------------------------------------------------------------------ the stager's thread

    def put(self, txn: PreparedTransaction, prelude: Iterable[Message]) -> PreparedEntry:
        """Write a prepared transaction durably (prelude first); returns once it is on disk.

        A PREPARE sent again (a restart before the slot moved past it) replaces the stored copy.
        """
        key = _key(txn.xid, txn.gid)
        prelude = list(prelude)
        final = self.directory / f"{key}.prepared"
        tmp = f"{key}.prepared.tmp"
        header = json.dumps(
            {
                "xid": txn.xid,
                "gid": txn.gid,
                "first_lsn": format_lsn(txn.first_lsn),
                "prepare_lsn": format_lsn(txn.prepare_lsn),
                "end_lsn": format_lsn(txn.end_lsn),
                "prepare_timestamp": txn.prepare_timestamp,
                "origin": txn.origin,
                "origin_lsn": None if txn.origin_lsn is None else format_lsn(txn.origin_lsn),
                "streamed": txn.streamed,
                "count": len(prelude) + txn.count,
            }
        ).encode()
        body = bytearray(_MAGIC + _LEN.pack(len(header)) + header)
        for lsn, in_stream, data in (*prelude, *txn.messages()):
            body += _RECORD.pack(lsn, in_stream, len(data))
            body += data
        with self._lock:
            old = self._entries.get(key)
        if old is not None:  # a committed mark would outlive the copy it marks
            self._drop_marks(old)
        final.write(body, tmp_name=tmp)
        entry = PreparedEntry(key, final)
        with self._lock:
            self._entries[key] = entry
        if old is not None and old.path != final:
            old.path.delete()
        return entry

    def get(self, xid: int, gid: str) -> PreparedEntry | None:
        with self._lock:
            return self._entries.get(_key(xid, gid))

    def committed(
        self, entry: PreparedEntry, *, commit_lsn: int, end_lsn: int, timestamp: int, epilogue: Iterable[Message] = ()
    ) -> CommittedTransaction:
        """The stored transaction as committed at a COMMIT PREPARED (its LSNs and time).

        ``epilogue``: messages to read after the stored ones (evaluated lazily, at the end).
        Raises FileNotFoundError if the entry was released meanwhile (see :meth:`release_through`).
        Call ``release()`` on the result.
        """
        f = entry.path.open_read()  # closed by the transaction's release()
        try:
            meta = _read_header(f, entry.path)
        except BaseException:
            f.close()
            raise
        xid = int(meta["xid"])
        source = _LazyTail(_StoredMessages(entry.path, xid, f, f.tell()), epilogue)
        origin_lsn = meta.get("origin_lsn")
        return CommittedTransaction(
            xid=xid,
            first_lsn=parse_lsn(meta["first_lsn"]),
            commit_lsn=commit_lsn,
            end_lsn=end_lsn,
            commit_timestamp=timestamp,
            origin=meta.get("origin"),
            origin_lsn=None if origin_lsn is None else parse_lsn(origin_lsn),
            gid=meta["gid"],
            streamed=bool(meta.get("streamed")),
            count=int(meta.get("count", 0)),
            _buffer=source,
        )

    def resolve(self, entry: PreparedEntry, end_lsn: int) -> None:
        """The transaction is staged at ``end_lsn``: keep it only until Spark commits that far."""
        if entry.committed_end == end_lsn:
            return
        (self.directory / _mark_name(entry.key, end_lsn)).write(b"")
        self._drop_marks(entry)
        with self._lock:
            self._entries[entry.key] = PreparedEntry(entry.key, entry.path, end_lsn)

    def _drop_marks(self, entry: PreparedEntry) -> None:
        if entry.committed_end is not None and entry.path.name.endswith(".prepared"):
            (self.directory / _mark_name(entry.key, entry.committed_end)).delete()

    def drop(self, xid: int, gid: str) -> bool:
        """ROLLBACK PREPARED: forget the transaction. Returns whether it was stored."""
        with self._lock:
            entry = self._entries.pop(_key(xid, gid), None)
        if entry is None:
            return False
        entry.path.delete()
        self._drop_marks(entry)
        return True

    # ------------------------------------------------------------------ Spark's commit

    def release_through(self, end: int) -> int:
        """Spark committed everything up to ``end``: delete the committed entries at or below it.

        The watermark is written (durably) before any entry goes, so that a later COMMIT
        PREPARED for a deleted entry is recognised as one Spark already has. Returns how many
        entries were deleted.
        """
        with self._lock:
            doomed = [e for e in self._entries.values() if e.committed_end is not None and e.committed_end <= end]
            if not doomed:
                return 0
            if end > self._watermark:
                (self.directory / _WATERMARK).write_text(format_lsn(end))
                self._watermark = end
            for e in doomed:
                del self._entries[e.key]
        for e in doomed:  # the data first: a mark left by a crash here is below the watermark
            e.path.delete()
            self._drop_marks(e)
        return len(doomed)


class _LazyTail:
    """A message source followed by messages computed only once the first is exhausted."""

    def __init__(self, head: _StoredMessages, tail: Iterable[Message]) -> None:
        self.head, self.tail = head, tail

    def __iter__(self) -> Iterator[Entry]:
        yield from self.head
        for lsn, in_stream, data in self.tail:
            yield lsn, in_stream, self.head.xid, data

    def close(self) -> None:
        self.head.close()
