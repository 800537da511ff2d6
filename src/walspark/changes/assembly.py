"""From a pgoutput message stream to whole committed transactions, in commit order.

Plain, streamed and two-phase transactions are held (spilled past a memory budget) until their
outcome is known; only control messages are decoded. See docs/design/changes.md.
"""

from __future__ import annotations

import itertools
import struct
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from walspark.protocol import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Message,
    Origin,
    Prepare,
    ProtocolError,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
)

from .spill import Entry, SpillError, TxnBuffer
from .transactions import (
    CommittedTransaction,
    MessageSource,
    NonTransactionalMessage,
    PreparedOutcome,
    PreparedTransaction,
)

#: Default memory budget for buffered transaction messages (bytes).
DEFAULT_MEMORY_BUDGET = 256 * 1024 * 1024

# Inside a streamed block every data message (Relation, Type, Insert, Update, Delete, Truncate,
# Message) carries the (sub)transaction's Xid right after the kind byte: the spec's
# "Int32 (TransactionId) Xid of the transaction (only present for streamed transactions)".
_STREAM_XID = struct.Struct(">I")
_DATA_KINDS = frozenset(b"RYIUDTM")
_MESSAGE_KIND = ord("M")
_SCHEMA_KINDS = frozenset(b"RY")


class AssemblyError(ProtocolError):
    """The messages are well formed but out of order (e.g. an Insert outside any transaction)."""


@dataclass(slots=True)
class _OpenTxn:
    xid: int
    first_lsn: int
    buffer: TxnBuffer
    streamed: bool
    commit_timestamp: int = 0
    origin: str | None = None
    origin_lsn: int | None = None
    gid: str | None = None
    prepare_lsn: int = 0


#: What :meth:`TransactionAssembler.feed` hands out.
Event = CommittedTransaction | NonTransactionalMessage | PreparedTransaction | PreparedOutcome


class TransactionAssembler:
    """Feed messages in stream order; get committed transactions in commit order.

    ``memory_budget`` bounds the bytes of buffered messages across all open transactions;
    past it, the largest in-memory buffers spill to files under ``spill_dir`` (a temporary
    directory by default). ``hand_over_prepared``: see the module docstring.
    """

    def __init__(
        self,
        protocol_version: int,
        *,
        streaming_parallel: bool | None = False,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        spill_dir: str | Path | None = None,
        hand_over_prepared: bool = False,
        window: bool = False,
    ) -> None:
        self.hand_over_prepared = hand_over_prepared
        self.window = window
        self.outcomes_before_window = 0  # Commit/Rollback Prepared of a Prepare before the window
        self._decoder = Decoder(protocol_version, streaming_parallel=streaming_parallel)
        self.memory_budget = memory_budget
        self._spill_dir = Path(spill_dir) if spill_dir is not None else None
        self._owned_spill_dir: tempfile.TemporaryDirectory[str] | None = None
        self._spill_names = itertools.count()
        self._current: _OpenTxn | None = None  # the plain or prepared transaction being received
        self._streamed: dict[int, _OpenTxn] = {}  # open streamed transactions by top-level xid
        self._stream_xid: int | None = None  # the streamed block we are inside, if any
        self._prepared: dict[str, _OpenTxn] = {}  # prepared, awaiting Commit/Rollback Prepared
        self._orphan_schema: list[tuple[int, bytes]] = []  # Relation/Type seen outside a transaction
        self.memory_bytes = 0
        self.peak_memory_bytes = 0
        self.spilled_transactions = 0
        self._failed: SpillError | None = None

    # -- feeding --------------------------------------------------------------------------------

    def feed(self, lsn: int, data: bytes) -> list[Event]:
        """Take one message; return the transactions (or standalone messages) it completes.

        A :class:`~.spill.SpillError` (spill disk full, say) loses part of an open transaction.
        The partly received transactions are released at once — their spill files deleted, not
        left on the full disk — and the assembler stays failed (every later ``feed`` raises the
        same error) until :meth:`reset`: carrying on would turn the rest of a transaction into
        garbage, or worse, let a later Stream Commit publish a streamed transaction whose changes
        were lost as an empty one. The consumer stops, or reconnects: the server then resends
        everything after the confirmed position, the failed transaction whole.
        """
        if self._failed is not None:
            raise self._failed
        try:
            return self._feed(lsn, data)
        except SpillError as exc:
            self.reset()
            self._failed = exc
            raise

    def _feed(self, lsn: int, data: bytes) -> list[Event]:
        kind = data[0] if data else -1
        if kind in _DATA_KINDS:
            return self._data(lsn, data, kind)
        message = self._decoder.decode(data, lsn=lsn)
        handler = _CONTROL[type(message)]
        return handler(self, lsn, message)

    def _data(self, lsn: int, data: bytes, kind: int) -> list[Event]:
        if kind == _MESSAGE_KIND:  # transactional or not is in its flags: decode it
            message = self._decoder.decode(data, lsn=lsn)
            assert isinstance(message, Message)
            if not message.transactional:
                return [NonTransactionalMessage(lsn, message)]
        if self._stream_xid is not None:
            if len(data) < 5:
                self._decoder.decode(data, lsn=lsn)  # raises the precise ProtocolError
            (subxid,) = _STREAM_XID.unpack_from(data, 1)
            streamed = self._streamed[self._stream_xid]
            self._account(streamed, streamed.buffer.append(lsn, True, subxid, data))
            return []
        txn = self._current
        if txn is None:
            if kind in _SCHEMA_KINDS:
                # A Relation/Type message from a transaction dropped as a duplicate after a
                # reconnect: the server sends each only once per connection, so it must
                # reach the next transaction's reader.
                self._orphan_schema.append((lsn, data))
                return []
            raise AssemblyError("change outside of a transaction", kind=chr(kind), offset=0, lsn=lsn)
        self._account(txn, txn.buffer.append(lsn, False, txn.xid, data))
        return []

    # -- control messages ---------------------------------------------------------------------

    def _begin(self, lsn: int, message: Begin) -> list[Event]:
        self._open_current(lsn, message.xid, "Begin")
        assert self._current is not None
        self._current.commit_timestamp = message.commit_timestamp
        return []

    def _begin_prepare(self, lsn: int, message: BeginPrepare) -> list[Event]:
        self._open_current(lsn, message.xid, "Begin Prepare")
        assert self._current is not None
        self._current.gid = message.gid
        return []

    def _open_current(self, lsn: int, xid: int, what: str) -> None:
        if self._current is not None or self._stream_xid is not None:
            raise AssemblyError(f"{what} inside another transaction", kind=what.replace(" ", ""), offset=0, lsn=lsn)
        self._current = self._new_txn(xid, lsn, streamed=False)

    def _new_txn(self, xid: int, lsn: int, *, streamed: bool) -> _OpenTxn:
        txn = _OpenTxn(xid, lsn, TxnBuffer(), streamed=streamed)
        for schema_lsn, data in self._orphan_schema:
            self._account(txn, txn.buffer.append(schema_lsn, False, xid, data))
        self._orphan_schema.clear()
        return txn

    def _origin(self, lsn: int, message: Origin) -> list[Event]:
        txn = self._streamed.get(self._stream_xid) if self._stream_xid is not None else self._current
        if txn is None:
            raise AssemblyError("Origin outside of a transaction", kind="Origin", offset=0, lsn=lsn)
        txn.origin, txn.origin_lsn = message.name, message.commit_lsn
        return []

    def _commit(self, lsn: int, message: Commit) -> list[Event]:
        txn = self._take_current(lsn, "Commit")
        return [self._committed(txn, message.commit_lsn, message.end_lsn, message.commit_timestamp)]

    def _prepare(self, lsn: int, message: Prepare) -> list[Event]:
        txn = self._take_current(lsn, "Prepare")
        return self._hold_prepared(txn, message)

    def _take_current(self, lsn: int, what: str) -> _OpenTxn:
        txn = self._current
        if txn is None:
            raise AssemblyError(f"{what} without a transaction", kind=what, offset=0, lsn=lsn)
        self._current = None
        return txn

    def _stream_start(self, lsn: int, message: StreamStart) -> list[Event]:
        if self._current is not None or self._stream_xid is not None:
            raise AssemblyError("Stream Start inside another transaction", kind="StreamStart", offset=0, lsn=lsn)
        self._stream_xid = message.xid
        if message.xid not in self._streamed:
            self._streamed[message.xid] = self._new_txn(message.xid, lsn, streamed=True)
        return []

    def _stream_stop(self, lsn: int, message: StreamStop) -> list[Event]:
        if self._stream_xid is None:
            raise AssemblyError("Stream Stop outside a streamed block", kind="StreamStop", offset=0, lsn=lsn)
        self._stream_xid = None
        return []

    def _stream_commit(self, lsn: int, message: StreamCommit) -> list[Event]:
        txn = self._take_streamed(lsn, message.xid, "StreamCommit")
        return [self._committed(txn, message.commit_lsn, message.end_lsn, message.commit_timestamp)]

    def _stream_abort(self, lsn: int, message: StreamAbort) -> list[Event]:
        if message.xid == message.subxid:
            txn = self._streamed.pop(message.xid, None)
            if txn is not None:
                self._release(txn)
        elif (txn := self._streamed.get(message.xid)) is not None:
            before = txn.buffer.memory_bytes
            txn.buffer.abort_subtransaction(message.subxid)
            self.memory_bytes -= before - txn.buffer.memory_bytes
        # An abort for an xid we never saw streamed is legal: it may have aborted before any
        # of its changes were sent (or before we connected); there is nothing to drop.
        return []

    def _stream_prepare(self, lsn: int, message: StreamPrepare) -> list[Event]:
        txn = self._take_streamed(lsn, message.xid, "StreamPrepare")
        return self._hold_prepared(txn, message)

    def _take_streamed(self, lsn: int, xid: int, what: str) -> _OpenTxn:
        if self._stream_xid is not None:
            raise AssemblyError(f"{what} inside a streamed block", kind=what, offset=0, lsn=lsn)
        txn = self._streamed.pop(xid, None)
        if txn is None:  # every change was in aborted subtransactions, or none was sent
            txn = _OpenTxn(xid, lsn, TxnBuffer(), streamed=True)
        return txn

    def _hold_prepared(self, txn: _OpenTxn, message: Prepare | StreamPrepare) -> list[Event]:
        txn.gid, txn.prepare_lsn = message.gid, message.prepare_lsn
        if not self.hand_over_prepared:
            self._prepared[message.gid] = txn
            return []
        self.memory_bytes -= txn.buffer.memory_bytes
        return [
            PreparedTransaction(
                xid=txn.xid,
                gid=message.gid,
                first_lsn=txn.first_lsn,
                prepare_lsn=message.prepare_lsn,
                end_lsn=message.end_lsn,
                prepare_timestamp=message.prepare_timestamp,
                origin=txn.origin,
                origin_lsn=txn.origin_lsn,
                streamed=txn.streamed,
                count=txn.buffer.count,
                _buffer=txn.buffer,
            )
        ]

    def _commit_prepared(self, lsn: int, message: CommitPrepared) -> list[Event]:
        txn = self._prepared.pop(message.gid, None)
        if txn is None and self.hand_over_prepared:
            return [
                PreparedOutcome(
                    lsn, message.xid, message.gid, True, message.commit_lsn, message.end_lsn, message.commit_timestamp
                )
            ]
        if txn is None and self.window:
            self.outcomes_before_window += 1
            return []
        if txn is None:
            raise AssemblyError(
                f"Commit Prepared for transaction {message.gid!r}, whose prepare was never received: "
                "its changes are unknown here (was the slot confirmed past its Prepare?)",
                kind="CommitPrepared",
                offset=0,
                lsn=lsn,
            )
        return [self._committed(txn, message.commit_lsn, message.end_lsn, message.commit_timestamp)]

    def _rollback_prepared(self, lsn: int, message: RollbackPrepared) -> list[Event]:
        txn = self._prepared.pop(message.gid, None)
        if txn is not None:
            self._release(txn)
        elif self.window:
            self.outcomes_before_window += 1
        if self.hand_over_prepared:
            return [
                PreparedOutcome(
                    lsn, message.xid, message.gid, False, 0, message.rollback_end_lsn, message.rollback_timestamp
                )
            ]
        return []

    # -- bookkeeping --------------------------------------------------------------------------

    def _committed(self, txn: _OpenTxn, commit_lsn: int, end_lsn: int, timestamp: int) -> CommittedTransaction:
        self.memory_bytes -= txn.buffer.memory_bytes
        return CommittedTransaction(
            xid=txn.xid,
            first_lsn=txn.first_lsn,
            commit_lsn=commit_lsn,
            end_lsn=end_lsn,
            commit_timestamp=timestamp,
            origin=txn.origin,
            origin_lsn=txn.origin_lsn,
            gid=txn.gid,
            streamed=txn.streamed,
            count=txn.buffer.count,
            _buffer=txn.buffer,
        )

    def _release(self, txn: _OpenTxn) -> None:
        self.memory_bytes -= txn.buffer.memory_bytes
        txn.buffer.close()

    def _account(self, txn: _OpenTxn, added: int) -> None:
        self.memory_bytes += added
        if self.memory_bytes > self.peak_memory_bytes:
            self.peak_memory_bytes = self.memory_bytes
        if self.memory_bytes > self.memory_budget:
            self._spill_largest()

    def _spill_largest(self) -> None:
        while self.memory_bytes > self.memory_budget // 2:
            candidates = [t for t in self._open() if not t.buffer.spilled and t.buffer.memory_bytes]
            if not candidates:
                return
            victim = max(candidates, key=lambda t: t.buffer.memory_bytes)
            self.memory_bytes -= victim.buffer.spill(self._spill_path(), f"txn-{victim.xid}-{next(self._spill_names)}")
            self.spilled_transactions += 1

    def _spill_path(self) -> Path:
        if self._spill_dir is None:
            self._owned_spill_dir = tempfile.TemporaryDirectory(prefix="walspark-spill-")
            self._spill_dir = Path(self._owned_spill_dir.name)
        return self._spill_dir

    def _open(self) -> Iterator[_OpenTxn]:
        if self._current is not None:
            yield self._current
        yield from self._streamed.values()
        yield from self._prepared.values()

    # -- what the consumer may confirm -------------------------------------------------------

    def confirm_floor(self) -> int | None:
        """The LSN the slot must not be confirmed past, or None if nothing constrains it.

        The server does not decode a PREPARE again after a reconnect once the slot is
        confirmed past the prepare record's start (only Commit Prepared follows then). While a
        prepared transaction is pending here — in memory, durable nowhere — the slot must stay
        at or before its prepare LSN, so that a reconnect brings the transaction back.
        """
        if not self._prepared:
            return None
        return min(txn.prepare_lsn for txn in self._prepared.values())

    @property
    def open_transactions(self) -> int:
        return sum(1 for _ in self._open())

    def reset(self) -> None:
        """Forget the partly received transactions, as after a dropped connection.

        The server resends them whole. Prepared transactions are complete and are kept: the
        resent copy of a prepare the consumer already holds is dropped as a duplicate (see
        :class:`walspark.source.dedup.DuplicateFilter`), and its Commit Prepared must find it.
        """
        partial = ([self._current] if self._current is not None else []) + list(self._streamed.values())
        for txn in partial:
            self._release(txn)
        self._current, self._stream_xid = None, None
        self._streamed.clear()
        self._orphan_schema.clear()
        self._decoder = Decoder(self._decoder.protocol_version, streaming_parallel=self._decoder.streaming_parallel)
        self._failed = None

    def close(self) -> None:
        """Drop everything, prepared transactions included, and the spill directory if ours."""
        self.reset()
        for txn in self._prepared.values():
            self._release(txn)
        self._prepared.clear()
        if self._owned_spill_dir is not None:
            self._owned_spill_dir.cleanup()
            self._owned_spill_dir, self._spill_dir = None, None


_CONTROL: dict[type, Callable[[TransactionAssembler, int, Any], list[Event]]] = {
    Begin: TransactionAssembler._begin,
    Commit: TransactionAssembler._commit,
    Origin: TransactionAssembler._origin,
    BeginPrepare: TransactionAssembler._begin_prepare,
    Prepare: TransactionAssembler._prepare,
    CommitPrepared: TransactionAssembler._commit_prepared,
    RollbackPrepared: TransactionAssembler._rollback_prepared,
    StreamStart: TransactionAssembler._stream_start,
    StreamStop: TransactionAssembler._stream_stop,
    StreamCommit: TransactionAssembler._stream_commit,
    StreamAbort: TransactionAssembler._stream_abort,
    StreamPrepare: TransactionAssembler._stream_prepare,
}

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "AssemblyError",
    "CommittedTransaction",
    "Entry",
    "MessageSource",
    "NonTransactionalMessage",
    "PreparedOutcome",
    "PreparedTransaction",
    "TransactionAssembler",
]
