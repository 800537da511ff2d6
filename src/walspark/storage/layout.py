"""Where everything of one target lives: its tables and walspark's own state.

One :class:`TargetLayout` per pipeline is the only code that spells a path under a target. See
docs/design/storage.md for how names become folders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from walspark.storage.location import Location, location
from walspark.storage.settings import StorageSettings

__all__ = ["CHANGES", "CHECKPOINTS", "HOME", "STAGING", "TargetLayout", "path_segment"]

#: walspark's own folder under the target, unless the state is kept elsewhere (``--state``).
HOME = "_walspark"
#: The folder under the target where an older walspark's change-log mode kept its change logs
#: (read once at a run's start, see :mod:`walspark.spark.lake.upgrade`; a schema of that name
#: keeps its encoded folder, ``%5Fchanges``, so that existing targets read on).
CHANGES = "_changes"
#: The state folder's folders of Spark's checkpoints and of the stager's segments (not Delta tables).
CHECKPOINTS, STAGING = "checkpoints", "staging"

_UNSAFE = re.compile(r"[%/\\:\x00-\x1f\x7f]|^\.")


def _encode(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group(0).encode("utf-8"))


def path_segment(name: str, *, schema: bool = False) -> str:
    """One PostgreSQL name as a folder name (see the module docstring for the rule)."""
    segment = _UNSAFE.sub(_encode, name)
    if schema and segment in (HOME, CHANGES):
        segment = "%5F" + segment[1:]
    return segment or "%00"  # PostgreSQL names are never empty; an empty segment would vanish


def _table_folder(root: str, schema: str, table: str) -> str:
    return f"{root}/{path_segment(schema, schema=True)}/{path_segment(table)}"


@dataclass(frozen=True, slots=True)
class TargetLayout:
    """The paths of one target: ``target`` holds the tables, ``state`` (default
    ``<target>/_walspark``) walspark's own files. Either may be a folder or an object-store URI."""

    target: str
    state: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", str(self.target).rstrip("/"))
        object.__setattr__(self, "state", str(self.state).rstrip("/") if self.state else None)

    # the tables

    def table(self, schema: str, table: str) -> str:
        """``<target>/<schema>/<table>``: where a source table's Delta table lives."""
        return _table_folder(self.target, schema, table)

    @property
    def changes(self) -> str:
        """``<target>/_changes``: the change logs of an older walspark's change-log mode."""
        return f"{self.target}/{CHANGES}"

    def change_log(self, schema: str, table: str) -> str:
        """``<target>/_changes/<schema>/<table>``: a table's change log (an older walspark's)."""
        return _table_folder(self.changes, schema, table)

    # walspark's state

    @property
    def home(self) -> str:
        """The state folder's URI: ``state`` if given, else ``<target>/_walspark``."""
        return self.state or f"{self.target}/{HOME}"

    def home_location(self, settings: StorageSettings | None = None) -> Location:
        """The state folder (``settings``: the object store's; default this process's)."""
        return location(self.home, settings)

    @property
    def progress(self) -> str:
        """The progress table (one row per table per applied batch)."""
        return f"{self.home}/progress"

    def checkpoint(self, slot: str) -> str:
        """The streaming query's checkpoint for ``slot``."""
        return f"{self.home}/{CHECKPOINTS}/{slot}"

    def staging(self, slot: str) -> str:
        """The stager's segments and marks for ``slot``."""
        return f"{self.home}/{STAGING}/{slot}"

    def status(self, slot: str | None = None) -> str:
        """The status documents' folder, or ``slot``'s document in it (``walspark status``)."""
        return f"{self.home}/status" + (f"/{slot}.json" if slot is not None else "")

    @property
    def metastore(self) -> str:
        """``metastore``: the embedded (Derby) Hive metastore of ``--catalog-schema``, with its
        ``metastore_db`` database, ``derby.log`` and the warehouse of its schemas."""
        return f"{self.home}/metastore"

    def maintenance_record(self) -> Location:
        """When the pipeline's tables were last maintained (``walspark run --maintenance-hours``)."""
        return self.home_location() / "maintenance.json"

    def snapshot_record(self, settings: StorageSettings | None = None) -> Location:
        """``snapshot.json``: the initial snapshot's record (in progress, or its consistent point)."""
        return self.home_location(settings) / "snapshot.json"

    def slot_loss(self, slot: str, settings: StorageSettings | None = None) -> Location:
        """``slot-loss/<slot>.json``: the last time ``slot`` was found lost and created again
        (``--on-slot-loss resnapshot``): where the new slot starts, and whether the re-creation ended."""
        return self.home_location(settings) / "slot-loss" / f"{slot}.json"

    def tablesync(self) -> Location:
        """The table sync's folder: ``state.json``, ``requests/``, ``pending/``, ``copies/`` and ``side/``."""
        return self.home_location() / "tablesync"

    def pending_log(self, schema: str, table: str, gen: int) -> str:
        """The pending change log (a Delta table) of one copy generation of a table being copied."""
        return (self.tablesync() / "pending" / path_segment(schema, schema=True) / path_segment(table) / f"g{gen}").uri

    def side_copy(self, schema: str, table: str, gen: int) -> str:
        """Where a re-copy of a table that has a Delta table is made (a Delta table), before it
        replaces the table in one commit at the hand-off: readers never see it half-copied."""
        return (self.tablesync() / "side" / path_segment(schema, schema=True) / path_segment(table) / f"g{gen}").uri

    def copy_plan(self, schema: str, table: str, gen: int) -> Location:
        """The chunk plan of one copy generation of a table (what a resumed copy continues)."""
        return self.tablesync() / "copies" / path_segment(schema, schema=True) / path_segment(table) / f"g{gen}.json"

    def fold_plan(self, schema: str, table: str) -> Location:
        """``folds/<schema>/<table>.json``: how far an older walspark folded a table's change log."""
        return self.home_location() / "folds" / path_segment(schema, schema=True) / f"{path_segment(table)}.json"
