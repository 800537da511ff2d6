"""A ``--once`` run's backlog staged while its Spark session starts.

``walspark run --once`` begins it before the JVM (:func:`begin`): when the pending changes will be
applied from the driver (:mod:`walspark.pipeline.driver_batch`), the reader of those batches is
made at once, and its stager streams the backlog from the slot while Spark starts (seconds in a
new process). :func:`walspark.pipeline.queries.skip_query` claims it (:func:`claim`) and uses it
only if what it was made from still holds: the same source options, no table being copied (a
shape changed since is its stager's schema barrier, got past as ever). Otherwise it is stopped
before anything else reads the slot; what it staged stays, as a stopped stager's always does
(the next stager reads it), and the slot is confirmed by nothing it did. See
docs/design/pipeline.md §6.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from walspark.pipeline.settings import RunSettings
from walspark.staging.barrier import read_barrier

if TYPE_CHECKING:
    from walspark.pipeline.idle import Pending

__all__ = ["HeadStart", "barrier_before", "begin", "claim"]

log = logging.getLogger(__name__)

#: The head starts begun in this process and not yet claimed, by staging folder.
_begun: dict[str, HeadStart] = {}
#: The schema barrier each open head start found before its stager began, by staging folder.
_barriers: dict[str, Any] = {}
_lock = threading.Lock()


class HeadStart:
    """The reader of a run's driver batches, made and staging before the run needs it."""

    def __init__(self, settings: RunSettings, options: dict[str, str]) -> None:
        self.settings, self.options = settings, options
        self.found: Pending | None = None
        self.source: Any = None
        self.schema: Any = None
        self.reader: Any = None
        self.ahead: Any = None  # its DecodeAhead of the first batch, if it could tell where that starts
        self._thread = threading.Thread(target=self._run, name="walspark-head-start", daemon=True)

    def _run(self) -> None:
        from walspark.pipeline.driver_batch import DecodeAhead, enabled
        from walspark.pipeline.idle import pending
        from walspark.spark.datasource.source import PgoutputDataSource
        from walspark.spark.tablesync.state import SyncStore
        from walspark.staging.offsets import last_committed_end

        try:
            found = pending(self.settings, SyncStore(self.settings.layout))
            if found is None or (found.transactions and not enabled(self.settings, found)):
                return  # the run decides as it would have
            if found.transactions:
                self.source = PgoutputDataSource(self.options)
                self.schema = self.source.schema()
                reader: Any = self.source.streamReader(self.schema)  # a PgoutputStreamReader
                self.reader = reader  # stopped by close(), whatever follows
                reader.prepareForTriggerAvailableNow()  # its stager streams from here on
                begin = found.first_batch_end
                if begin is None:
                    begin = last_committed_end(self.settings.checkpoint)
                if begin is not None:  # the first batch's start: its transactions decoded as they are staged
                    self.ahead = DecodeAhead(reader, begin).start()
                log.debug("head start: %d transaction(s) pending, staged while Spark starts", found.transactions)
            self.found = found
        except Exception as exc:  # noqa: BLE001 - the run does it all again, and reports errors its way
            self.found = None  # not used: take() says so, close() stops what was started
            log.debug("no head start: %s", exc)

    def take(self, options: dict[str, str], store: Any) -> HeadStart | None:
        """Itself once its thread is done, if what it found and staged can serve a run of
        ``options`` now (the same options, no table being copied in ``store``); else None, its
        reader stopped. Its schema is the source's of seconds before: a shape that changed since
        is its stager's barrier, got past as the run's own reader's would be."""
        from walspark.pipeline.idle import copying

        self._thread.join()
        if self.found is None:
            self.close()
            return None
        if self.reader is not None:
            from walspark import _injection

            _injection.point("head-start-claimed")  # staged beyond the checkpoint, nothing logged or confirmed
        try:
            if options == self.options and not copying(store):
                return self
        except Exception as exc:  # noqa: BLE001 - not used: the run reads the slot itself
            log.debug("head start not used: %s", exc)
        log.debug("head start not used: the run's options or the tables being copied changed")
        self.close()
        return None

    def close(self) -> None:
        """Stop its reader's stager, if it has one (the slot released; staged segments kept)."""
        with _lock:
            _barriers.pop(self.settings.staging, None)
        self._thread.join()
        if self.ahead is not None:
            self.ahead.stop()
        if self.reader is not None:
            self.reader.stop()
            self.reader = None


def begin(settings: RunSettings) -> HeadStart | None:
    """Begin a head start for a ``--once`` run of ``settings`` (before its Spark session is made),
    or None: not a ``--once`` run, a run that snapshots or may make its slot again, or a target
    not on local disk. The caller closes it when the run ends (:meth:`HeadStart.close`)."""
    from walspark.pipeline.driver_batch import source_options
    from walspark.pipeline.preflight import needs_snapshot
    from walspark.storage import location

    if not settings.once or settings.on_slot_loss != "stop":
        return None
    if not all(location(p).is_local for p in (settings.target, settings.checkpoint, settings.staging)):
        return None
    try:
        if needs_snapshot(settings):
            return None
    except Exception as exc:  # noqa: BLE001 - the run reports it
        log.debug("no head start: %s", exc)
        return None
    head = HeadStart(settings, source_options(settings))
    with _lock:
        _begun[settings.staging] = head
        _barriers[settings.staging] = read_barrier(settings.staging)
    head._thread.start()
    return head


def barrier_before(settings: RunSettings) -> Any:
    """The schema barrier a previous run left in this run's staging folder (the one a restart
    must get past: :func:`walspark.pipeline.queries.check_progress`): as found before a head
    start's stager began, which may already have stopped at this run's own barrier."""
    with _lock:
        if settings.staging in _barriers:
            return _barriers[settings.staging]
    return read_barrier(settings.staging)


def claim(settings: RunSettings) -> HeadStart | None:
    """The head start begun for this run's staging folder, if any (once: the run owns it)."""
    with _lock:
        return _begun.pop(settings.staging, None)
