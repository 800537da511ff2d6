"""Drop transactions a resumed stream delivers a second time.

The rule: drop a transaction whose commit LSN is at or before the last commit LSN already
delivered. See docs/design/source.md for the details that matter.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from walspark.protocol.decoder import decode_message
from walspark.protocol.encoder import encode_message
from walspark.protocol.messages import (
    Begin,
    BeginPrepare,
    CommitPrepared,
    Message,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
)

from .stream import RawMessage, Reconnected, StreamItem

__all__ = ["DuplicateFilter"]

_B, _C, _b, _P, _K, _r = (ord(c) for c in "BCbPKr")
_S, _E, _c, _A, _p, _M = (ord(c) for c in "SEcApM")
_R, _Y = ord("R"), ord("Y")
_HEADER_KINDS = frozenset((_B, _C, _b, _P, _K, _r, _S, _c, _A, _p, _M))


class DuplicateFilter:
    """Stateful filter over a stream's items; see the module docstring.

    Args:
        protocol_version: the stream's pgoutput protocol version (``stream.options.proto_version``).
        delivered_lsn: end LSN of the last commit the consumer already has (from its own
            progress bookkeeping), or 0.
        streaming_parallel: ``stream.options.streaming_parallel`` (Stream Abort layout).
        max_remembered_xids: bound on the xids remembered for streamed duplicates.
    """

    def __init__(
        self,
        protocol_version: int,
        *,
        delivered_lsn: int = 0,
        streaming_parallel: bool = False,
        max_remembered_xids: int = 100_000,
    ) -> None:
        self.protocol_version = protocol_version
        self.streaming_parallel = streaming_parallel
        self.delivered_lsn = delivered_lsn
        self.dropped_transactions = 0
        self._max_xids = max_remembered_xids
        self._delivered_xids: dict[int, int] = {}  # xid -> end LSN of its delivered commit/prepare
        self._reset_connection_state()

    def _reset_connection_state(self) -> None:
        self._in_txn = False  # between Begin/Begin Prepare and Commit/Prepare
        self._dropping_txn = False
        self._txn_xid: int | None = None
        self._in_block = False  # between Stream Start and Stream Stop
        self._dropping_block = False
        self._passed_stream_xids: set[int] = set()

    # ------------------------------------------------------------------ API

    def filter(self, items: Iterable[StreamItem]) -> Iterator[StreamItem]:
        """Yield the items to keep, in order."""
        for item in items:
            kept = self.feed(item)
            if kept is not None:
                yield kept

    def feed(self, item: StreamItem) -> StreamItem | None:
        """The item to pass on (possibly rewritten), or None to drop it."""
        if item.__class__ is Reconnected:
            self._reset_connection_state()
            return item
        assert isinstance(item, RawMessage)
        payload = item.payload
        if not payload:
            return item
        kind = payload[0]
        if self._in_block:
            return self._feed_block(item, kind)
        if self._in_txn:
            return self._feed_txn(item, kind)
        if kind not in _HEADER_KINDS:
            return item
        message = self._decode(item, in_stream=False)
        if kind == _B or kind == _b:
            assert isinstance(message, (Begin, BeginPrepare))
            self._in_txn = True
            self._txn_xid = message.xid
            start = message.final_lsn if isinstance(message, Begin) else message.prepare_lsn
            self._dropping_txn = start < self.delivered_lsn or message.xid in self._delivered_xids
            if self._dropping_txn:
                self.dropped_transactions += 1
                return None
            return item
        if kind == _S:
            assert isinstance(message, StreamStart)
            self._in_block = True
            self._dropping_block = message.xid in self._delivered_xids
            if self._dropping_block:
                return None
            self._passed_stream_xids.add(message.xid)
            return item
        if kind == _c or kind == _p:
            assert isinstance(message, (StreamCommit, StreamPrepare))
            start = message.commit_lsn if isinstance(message, StreamCommit) else message.prepare_lsn
            if start < self.delivered_lsn or message.xid in self._delivered_xids:
                self.dropped_transactions += 1
                if message.xid in self._passed_stream_xids:
                    self._passed_stream_xids.discard(message.xid)
                    return self._synthetic_abort(item, message)
                return None
            self._passed_stream_xids.discard(message.xid)
            self._delivered(message.xid, message.end_lsn)
            return item
        if kind == _A:
            assert isinstance(message, StreamAbort)
            if message.xid in self._delivered_xids and message.xid not in self._passed_stream_xids:
                return None
            if message.xid == message.subxid:
                self._passed_stream_xids.discard(message.xid)
            return item
        if kind == _K:
            assert isinstance(message, CommitPrepared)
            if message.commit_lsn < self.delivered_lsn:
                self.dropped_transactions += 1
                return None
            self._delivered(message.xid, message.end_lsn)
            return item
        if kind == _r:
            assert isinstance(message, RollbackPrepared)
            if message.rollback_end_lsn <= self.delivered_lsn:
                self.dropped_transactions += 1
                return None
            self._delivered(message.xid, message.rollback_end_lsn)
            return item
        if kind == _M:
            assert isinstance(message, Message)
            if message.lsn < self.delivered_lsn:
                return None
            self.delivered_lsn = max(self.delivered_lsn, message.lsn + 1)
            return item
        return item  # a stray Commit/Prepare outside a transaction: not ours to judge

    # ------------------------------------------------------------------ internals

    def _feed_txn(self, item: RawMessage, kind: int) -> RawMessage | None:
        if kind == _C or kind == _P:
            self._in_txn = False
            if self._dropping_txn:
                self._dropping_txn = False
                return None
            message = self._decode(item, in_stream=False)
            if self._txn_xid is not None:
                self._delivered(self._txn_xid, message.end_lsn)
            else:
                self.delivered_lsn = max(self.delivered_lsn, message.end_lsn)
            return item
        if self._dropping_txn:
            return item if kind == _R or kind == _Y else None
        return item

    def _feed_block(self, item: RawMessage, kind: int) -> RawMessage | None:
        if kind == _E:
            self._in_block = False
            if self._dropping_block:
                self._dropping_block = False
                return None
            return item
        if self._dropping_block:
            if kind == _R or kind == _Y:  # keep the schema, without the in-block Xid field
                payload = item.payload
                return RawMessage(item.data_start, item.wal_end, item.send_time, payload[:1] + payload[5:])
            return None
        return item

    def _delivered(self, xid: int, end_lsn: int) -> None:
        if end_lsn > self.delivered_lsn:
            self.delivered_lsn = end_lsn
        self._delivered_xids.pop(xid, None)
        self._delivered_xids[xid] = end_lsn
        if len(self._delivered_xids) > self._max_xids:
            del self._delivered_xids[next(iter(self._delivered_xids))]

    def _decode(self, item: RawMessage, *, in_stream: bool):
        return decode_message(
            item.payload,
            protocol_version=self.protocol_version,
            in_stream=in_stream,
            parallel_abort=self.streaming_parallel if self.protocol_version >= 4 else False,
            lsn=item.data_start,
        )

    def _synthetic_abort(self, item: RawMessage, message: StreamCommit | StreamPrepare) -> RawMessage:
        if self.streaming_parallel and self.protocol_version >= 4:
            ts = message.commit_timestamp if isinstance(message, StreamCommit) else message.prepare_timestamp
            start = message.commit_lsn if isinstance(message, StreamCommit) else message.prepare_lsn
            abort = StreamAbort(message.xid, message.xid, start, ts)
        else:
            abort = StreamAbort(message.xid, message.xid)
        return RawMessage(item.data_start, item.wal_end, item.send_time, encode_message(abort))
