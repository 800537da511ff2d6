"""The durable per-table sync states and re-copy requests under ``<target>/_walspark/tablesync/``.

One small JSON document, replaced atomically. See docs/design/table-sync.md for the state
machine.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from walspark.spark.lake.tables import is_delta_table
from walspark.storage import Location, TargetLayout

__all__ = ["COPIED", "COPYING", "LEFT", "READY", "SyncState", "SyncStore", "request_resnapshot"]

COPYING = "copying"
COPIED = "copied"
READY = "ready"
LEFT = "left"

Table = tuple[str, str]


@dataclass(frozen=True, slots=True)
class SyncState:
    """One table's sync state (see the module docstring)."""

    schema: str
    table: str
    state: str
    #: Copy generation: each new copy of the table gets the next one (scopes its pending log and
    #: the transaction ids of its hand-off, so a second copy never collides with the first).
    gen: int = 0
    #: The copy's consistent point C: changes with commit LSN >= C are not in the copy.
    since: int | None = None
    #: The highest batch whose changes of this table went into the pending log that the hand-off
    #: applied: a replay of such a batch must not apply them again.
    handed_through: int | None = None
    #: Publication membership the table was last seen with (relation oid, pg_publication_rel /
    #: _namespace oids): a drop and re-add of the table changes it even between two checks.
    signature: tuple[str, ...] = ()
    rows: int | None = None
    #: A copy resumed after a crash holds chunks read in several snapshots: ``(C, Delta version)``
    #: of each, and the key columns its chunks are ranges of. Until the stream has passed the last
    #: C, a change counts as copied when its commit LSN is below the C of the snapshot its key was
    #: read in (:func:`walspark.spark.tablesync.copying.without_copied`). Empty: one snapshot, ``since``.
    cuts: tuple[tuple[int, int], ...] = ()
    cut_keys: tuple[str, ...] = ()
    #: Wall-clock times (seconds since the epoch) of the copy's start and its commit, for humans
    #: and tests.
    copy_started: float | None = None
    copy_done: float | None = None
    #: The copy was made beside the table (``TargetLayout.side_copy``: a re-copy of a table that had
    #: a Delta table) and replaces it in one commit at the hand-off; ``swapped`` once it has.
    side: bool = False
    swapped: bool = False

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def syncing(self) -> bool:
        """Changes of the table go to its pending log, not to its Delta table."""
        return self.state in (COPYING, COPIED)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["signature"] = list(self.signature)
        d["cuts"] = [list(c) for c in self.cuts]
        d["cut_keys"] = list(self.cut_keys)
        return d

    @staticmethod
    def from_dict(d: dict[str, object]) -> SyncState:
        fields: dict[str, Any] = dict(d)
        fields["signature"] = tuple(fields.get("signature") or ())
        fields["cuts"] = tuple(tuple(c) for c in fields.get("cuts") or ())
        fields["cut_keys"] = tuple(fields.get("cut_keys") or ())
        return SyncState(**fields)


@dataclass
class SyncStore:
    """Reads and replaces ``state.json``; thread-safe (the sink and copy threads both write)."""

    layout: TargetLayout
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _states: dict[Table, SyncState] | None = field(default=None, repr=False)

    @property
    def path(self) -> Location:
        return self.layout.tablesync() / "state.json"

    @property
    def requests(self) -> Location:
        return self.layout.tablesync() / "requests"

    def _load(self) -> dict[Table, SyncState]:
        if self._states is None:
            states: dict[Table, SyncState] = {}
            data = self.path.read_json()
            if data is not None:
                for d in data["tables"]:
                    s = SyncState.from_dict(d)
                    states[(s.schema, s.table)] = s
            self._states = states
        return self._states

    def get(self, schema: str, table: str) -> SyncState | None:
        with self._lock:
            return self._load().get((schema, table))

    def all(self) -> list[SyncState]:
        with self._lock:
            return list(self._load().values())

    def put(self, *states: SyncState) -> None:
        """Record these states durably (the file is replaced as a whole)."""
        with self._lock:
            current = dict(self._load())
            for s in states:
                current[(s.schema, s.table)] = s
            self.path.write_json({"tables": [s.to_dict() for s in current.values()]}, indent=1)
            self._states = current

    def update(self, schema: str, table: str, **changes: object) -> SyncState:
        with self._lock:
            state = replace(self._load()[(schema, table)], **changes)  # type: ignore[arg-type]
            self.put(state)
            return state

    def reset(self) -> None:
        """Forget every state, pending log and unfinished copy: a new initial snapshot copied every
        table again (its batch ids start a new checkpoint history, so ``handed_through`` would
        mislead), or a lost slot's changes staged for a copy must not reach the next one."""
        with self._lock:
            for folder in ("pending", "copies", "side"):
                (self.layout.tablesync() / folder).delete_tree()
            self.path.delete()
            self._states = None

    # requests (written by ``walspark resnapshot``, consumed by the running pipeline)

    def pending_requests(self) -> Iterator[tuple[Location, list[Table], str]]:
        """Each request file, its tables and why they are to be copied again."""
        for path in self.requests.list():
            if not path.name.endswith(".json"):
                continue
            try:
                request = json.loads(path.read_bytes())
                tables = [tuple(t) for t in request["tables"]]
            except (OSError, ValueError, KeyError):
                continue  # a file being written by hand; only renamed files count
            yield path, tables, str(request.get("why") or "is to be re-copied (walspark resnapshot)")


class UnknownTable(ValueError):
    """A table asked to be copied again is not one of the pipeline's."""


def _names(tables: Iterable[Table]) -> str:
    return ", ".join(f"{s}.{t}" for s, t in tables)


def request_resnapshot(layout: TargetLayout, tables: Iterable[Table], published: Iterable[Table] | None = None,
                       publication: str = "", *, why: str | None = None) -> Location:  # fmt: skip
    """Ask the pipeline writing ``layout`` to re-copy ``tables`` (durably; a running ``walspark run``
    picks it up within its check interval, otherwise the next one does). A write-once object with
    a unique name: no two requests can overwrite each other, on any store.

    A request the run would only ignore is :class:`UnknownTable`: with ``published`` (the tables
    ``publication`` publishes, from the source), a table not among them; without, a table the
    pipeline does not know (neither its table sync's state nor a Delta table under ``target``) or
    one that left the publication. ``why`` is what the run says of each table (default: the
    ``walspark resnapshot`` request)."""
    store = SyncStore(layout)
    tables = list(tables)
    states = {(s.schema, s.table): s for s in store.all()}
    if published is not None:
        have = {tuple(t) for t in published}
        unknown = [t for t in tables if t not in have]
        if unknown:
            their = ", ".join(sorted(f"{s}.{t}" for s, t in have)[:20]) or "none"
            raise UnknownTable(f"{_names(unknown)}: not published by publication {publication!r} (its tables: "
                               f"{their}); check the name, or publish the table (ALTER PUBLICATION {publication} ADD TABLE "
                               f"{_names(unknown[:1])}), which copies it")  # fmt: skip
    else:
        left = [t for t in tables if t in states and states[t].state == LEFT]
        if left:
            raise UnknownTable(f"{_names(left)}: left the publication, so the pipeline no longer copies it (its "
                               "Delta table is kept as it was); add it again (ALTER PUBLICATION ... ADD TABLE), "
                               "which re-copies it")  # fmt: skip
        unknown = [t for t in tables if t not in states and not is_delta_table(layout.table(*t))]
        if unknown:
            have_ = ", ".join(sorted(f"{s}.{t}" for s, t in states)[:20]) or "none recorded yet"
            raise UnknownTable(f"{_names(unknown)}: not a table of the pipeline writing {layout.target} (its "
                               f"tables: {have_}); a table added to the publication is copied when the pipeline "
                               "sees it")  # fmt: skip
    path = store.requests / f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
    request: dict[str, object] = {"tables": [list(t) for t in tables], "requested_at": time.time(), "pid": os.getpid()}
    if why:
        request["why"] = why
    path.write_json(request)
    return path
