"""The stager learns from the driver that a batch reached Spark's commit log, so its slot is confirmed then.

Spark calls a source's ``commit(end)`` only when it plans the next batch; :class:`CommitNotes`
notes each batch's end from the query's progress events instead. See docs/design/staging.md.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from walspark.protocol import parse_lsn
from walspark.staging.stager import note_committed_end

__all__ = ["CommitNotes", "is_query_progress"]

log = logging.getLogger(__name__)


def is_query_progress(progress: Any, query_name: str | None, since: datetime) -> bool:
    """Whether a progress event is of the query named ``query_name`` (None: any), for a batch begun
    at ``since`` or later (events reach listeners asynchronously: an earlier run's may come late)."""
    if query_name is not None and getattr(progress, "name", query_name) != query_name:
        return False  # another query of the session
    started = getattr(progress, "timestamp", None)
    return not started or datetime.fromisoformat(started) >= since


class CommitNotes:
    """Notes each committed batch's end for the stager of ``staging``; :attr:`listener` is the
    Spark streaming listener to add, :meth:`catch_up` the ended query's last batches."""

    def __init__(self, staging: str, query_name: str | None = None) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        self.staging, self.query_name = staging, query_name
        self.since = datetime.now(UTC)
        self._warned = False
        notes = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                notes.batch(event.progress)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.listener = _Listener()

    def batch(self, progress: Any) -> None:
        """Note the end of the batch ``progress`` reports (a listener must never fail the query)."""
        if not is_query_progress(progress, self.query_name, self.since):
            return
        try:
            note_committed_end(self.staging, parse_lsn(json.loads(progress.sources[0].endOffset)["lsn"]))
        except Exception as exc:  # noqa: BLE001 - the slot is then confirmed at the next batch instead
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            log.log(level, "could not note batch %s's end for the stager (the slot is confirmed at the next "
                           "batch instead): %s", getattr(progress, "batchId", "?"), exc)  # fmt: skip

    def catch_up(self, query: Any) -> None:
        """Note the ended ``query``'s batches whose events the listener may not have had yet."""
        try:
            recent = list(query.recentProgress)
        except Exception:
            log.debug("could not read the query's recent progress", exc_info=True)
            return
        for progress in recent:
            self.batch(progress)
