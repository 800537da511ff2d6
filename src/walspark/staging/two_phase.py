"""Two-phase commit in the stager: a prepared transaction is kept from its PREPARE to its outcome.

:class:`TwoPhaseStaging` is the part of :class:`~.staging.Stager` that does this, with the
durable :class:`~.prepared.PreparedStore`. See docs/design/staging.md for why each step is safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from walspark.changes.assembly import CommittedTransaction, PreparedOutcome, PreparedTransaction
from walspark.protocol import format_lsn
from walspark.protocol.decoder import relation_ids
from walspark.staging.prepared import PreparedStore, PreparedStoreError

if TYPE_CHECKING:
    from pathlib import Path

    from walspark.storage import Location

__all__ = ["PreparedLostError", "TwoPhaseStaging", "release_committed_prepared"]

log = logging.getLogger(__name__)

_CHANGE_KINDS = frozenset(b"IUDT")
_R, _Y = ord("R"), ord("Y")

#: (lsn, in_stream, data, version): a Relation/Type message in force, as the stager keeps it.
_PreludeRow = tuple[int, bool, bytes, "int | None"]


def release_committed_prepared(staging: str | Path, checkpoint: str | Path) -> int:
    """After a query ended: delete the store's committed entries its last batch put in Delta.

    Spark tells the source that a batch is committed only when it plans the next one, so the
    last batch of a run (a ``--once`` run's, or one before Ctrl-C) never reaches the stager's
    ``commit``: its committed prepared transactions would stay on disk until the next run.
    The query's commit log says the same thing durably (a batch is logged there only after the
    sink returned), so the run releases the store through it once the query is over — the rule
    of :meth:`PreparedStore.release_through` unchanged: the watermark is written first, so the
    COMMIT PREPARED the next run receives again (the slot is confirmed lazily) is a known resend.
    Returns how many entries were deleted.
    """
    from walspark.staging.offsets import last_committed_end
    from walspark.storage import location

    directory = location(staging) / "prepared"
    end = last_committed_end(checkpoint)
    if end is None or not directory.list():
        return 0
    return PreparedStore(directory).load(tidy=False).release_through(end)


class PreparedLostError(PreparedStoreError):
    """A COMMIT PREPARED arrived for a transaction whose PREPARE this staging directory never kept."""


class _Deferred:
    """Messages computed when iteration reaches them (after the stored ones were staged)."""

    def __init__(self, make: Callable[[], list[tuple[int, bool, bytes]]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[tuple[int, bool, bytes]]:
        return iter(self.make())


class TwoPhaseStaging:
    """Mixin of :class:`~.staging.Stager`: the handling of PREPARE, COMMIT and ROLLBACK PREPARED."""

    # Provided by the Stager.
    slot: str
    directory: Location
    stats: dict[str, int]
    _prepared: PreparedStore
    _rels: dict[int, _PreludeRow]
    _types: dict[int, _PreludeRow]
    _cond: threading.Condition
    _expected_start: int | None
    _confirm_request: int
    _last_end: int

    if TYPE_CHECKING:  # the Stager's methods this part calls

        def _stage(self, txn: CommittedTransaction) -> None: ...
        def _relation(self, lsn: int, in_stream: bool, data: bytes) -> None: ...
        def _type(self, lsn: int, in_stream: bool, data: bytes) -> None: ...

    def _store_prepared(self, txn: PreparedTransaction) -> None:
        """PREPARE: store the transaction durably, then put its Relation/Type messages in force.

        Durable first: the slot may be confirmed past the PREPARE as soon as anything after it is
        staged and committed by Spark, and the server then never sends these messages again. The
        prelude carries the descriptions in force now of the relations it changes. Its own
        Relation messages are in force from now on because pgoutput counts them as sent (a
        later transaction of this connection does not describe the relation again). Whether its
        changes fit the query's schema is checked when its COMMIT PREPARED stages it.
        """
        try:
            touched: set[int] = set()
            for _lsn, in_stream, data in txn.messages():
                if data[0] in _CHANGE_KINDS:
                    touched.update(relation_ids(data, in_stream))
            rels, types = self._rels, self._types
            prelude = [row[:3] for row in types.values()] + [rels[r][:3] for r in sorted(touched) if r in rels]
            self._prepared.put(txn, prelude)
            self.stats["prepared"] += 1
            log.debug("stager of slot %s: stored prepared transaction %r (xid %d)", self.slot, txn.gid, txn.xid)
            for lsn, in_stream, data in txn.messages():
                if data[0] == _R:
                    self._relation(lsn, in_stream, data)
                elif data[0] == _Y:
                    self._type(lsn, in_stream, data)
        finally:
            txn.release()

    def _prepared_outcome(self, outcome: PreparedOutcome) -> None:
        """COMMIT PREPARED: stage the stored transaction at the commit's LSNs; ROLLBACK PREPARED: drop it."""
        if not outcome.committed:
            if self._prepared.drop(outcome.xid, outcome.gid):
                self.stats["rolled_back"] += 1
            return  # not stored: prepared before two-phase decoding began, so nothing of it was sent
        before = self._rels

        def restore() -> list[tuple[int, bool, bytes]]:
            # The stored descriptions are those of the PREPARE: what is in force now comes back after.
            return [
                row[:3]
                for rid, row in before.items()
                if (now := self._rels.get(rid)) is not None and now is not row and now[2] != row[2]
            ]

        entry = self._prepared.get(outcome.xid, outcome.gid)
        txn = None
        if entry is not None:
            try:
                txn = self._prepared.committed(
                    entry,
                    commit_lsn=outcome.commit_lsn,
                    end_lsn=outcome.end_lsn,
                    timestamp=outcome.timestamp,
                    epilogue=_Deferred(restore),
                )
            except FileNotFoundError:  # Spark committed past it just now and the store let it go
                txn = None
        if txn is None or entry is None:  # (entry None means txn None)
            with self._cond:
                known = max(self._prepared.watermark, self._expected_start or 0, self._confirm_request, self._last_end)
            if outcome.end_lsn <= known:  # staged and in Delta already: a resend
                self.stats["duplicates"] += 1
                return
            if self._prepared.complete:  # the server never sent its PREPARE: it changed nothing published
                log.debug(
                    "stager of slot %s: COMMIT PREPARED of %r without a PREPARE (an empty prepared transaction)",
                    self.slot,
                    outcome.gid,
                )
                self.stats["empty_prepared"] += 1
                return
            raise PreparedLostError(
                f"COMMIT PREPARED of transaction {outcome.gid!r} (xid {outcome.xid}) at "
                f"{format_lsn(outcome.commit_lsn)}, but its PREPARE is not in {self._prepared.directory}: the slot "
                "moved past the PREPARE without this staging directory keeping it (deleted, or another consumer of "
                f"slot {self.slot!r}); its changes cannot be read again — take a new snapshot into a new target"
            )
        self._stage(txn)  # releases it
        self._prepared.resolve(entry, outcome.end_lsn)
