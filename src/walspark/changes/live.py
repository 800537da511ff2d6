"""A live slot as a sequence of committed transactions: stream → duplicate filter → assembler.

The three pieces each hold one rule; this module is where they meet (docs/design/changes.md).
"""

from __future__ import annotations

from collections.abc import Iterator

from walspark.source.dedup import DuplicateFilter
from walspark.source.stream import RawMessage, Reconnected, ReplicationStream

from .assembly import DEFAULT_MEMORY_BUDGET, Event, TransactionAssembler


class LiveTransactions:
    """Iterate a replication stream's committed transactions (and non-transactional messages).

    ``delivered_lsn`` is the end LSN of the last transaction the consumer already has (from its
    progress bookkeeping): anything at or before it is dropped. Call :meth:`confirm` with a
    transaction's ``end_lsn`` once it is durable; the assembler's :meth:`confirm_floor` holds the
    slot before prepared transactions that are still pending.
    """

    def __init__(
        self,
        stream: ReplicationStream,
        *,
        delivered_lsn: int = 0,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        spill_dir: str | None = None,
    ) -> None:
        self.stream = stream
        self._delivered_lsn = delivered_lsn
        self._memory_budget = memory_budget
        self._spill_dir = spill_dir
        self.assembler: TransactionAssembler | None = None
        self._filter: DuplicateFilter | None = None

    def _setup(self) -> None:
        self.stream.open()
        options = self.stream.options
        assert options is not None
        self.assembler = TransactionAssembler(
            options.proto_version,
            streaming_parallel=options.streaming_parallel,
            memory_budget=self._memory_budget,
            spill_dir=self._spill_dir,
        )
        self._filter = DuplicateFilter(
            options.proto_version, delivered_lsn=self._delivered_lsn, streaming_parallel=options.streaming_parallel
        )

    def read(self, timeout: float | None = None) -> list[Event] | None:
        """The events completed by the next stream item; None if ``timeout`` passed with none."""
        if self.assembler is None:
            self._setup()
        assert self.assembler is not None and self._filter is not None
        item = self.stream.read(timeout)
        if item is None:
            return None
        passed = self._filter.feed(item)
        if isinstance(passed, Reconnected):
            self.assembler.reset()  # a partly received transaction is resent whole
        elif isinstance(passed, RawMessage):
            return self.assembler.feed(passed.data_start, passed.payload)
        return []

    def __iter__(self) -> Iterator[Event]:
        while True:
            events = self.read(None)
            if events:
                yield from events

    def confirm(self, end_lsn: int) -> None:
        """Declare everything up to ``end_lsn`` durable (held below pending prepared transactions)."""
        floor = self.assembler.confirm_floor() if self.assembler is not None else None
        self.stream.confirm(end_lsn if floor is None else min(end_lsn, floor))

    def close(self) -> None:
        """Drop the buffered transactions and close the stream — the stream even if the first fails.

        A stream left open keeps its slot active: a restarted consumer could not take it over.
        """
        try:
            if self.assembler is not None:
                self.assembler.close()
        finally:
            self.stream.close()
