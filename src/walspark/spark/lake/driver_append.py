"""Appends from the driver with delta-rs: the progress rows and a copy's chunks without a Spark job.

Only plain appends to local tables go this way; anything else is Spark's. See
docs/design/applying.md.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

from walspark.spark.lake.driver_log import local_path

log = logging.getLogger(__name__)

__all__ = ["DRIVER_APPENDS", "DriverAppendUnsupported", "append", "can_append", "compact", "file_count"]

#: ``0`` turns driver appends off (every append of the progress rows and copies goes through Spark).
DRIVER_APPENDS = "WALSPARK_DRIVER_APPENDS"

_refused: set[str] = set()
_lock = threading.Lock()


class DriverAppendUnsupported(Exception):
    """delta-rs cannot append to this table (a protocol feature it lacks): nothing was written."""


def can_append(path: str) -> bool:
    """Whether :func:`append` may write to the Delta table at ``path`` (local, not refused before)."""
    if os.environ.get(DRIVER_APPENDS, "1") == "0":
        return False
    try:
        import deltalake  # noqa: F401
    except ImportError:
        return False
    return local_path(path) is not None and path not in _refused


def append(path: str, rows: pa.Table, note: str | None = None, *, configuration: dict[str, str] | None = None,
           merge_schema: bool = False) -> None:  # fmt: skip
    """Append ``rows`` to the Delta table at ``path`` in one commit carrying ``note`` (its
    ``userMetadata``, as Spark's writes carry theirs); a missing table is created with the
    ``configuration`` properties; ``merge_schema``: columns the table lacks are added. Raises :class:`DriverAppendUnsupported` when delta-rs refuses
    the table before writing anything; the table is then left to Spark."""
    from deltalake import CommitProperties, write_deltalake
    from deltalake.exceptions import DeltaProtocolError

    local = local_path(path)
    assert local is not None, path
    properties = CommitProperties(custom_metadata={"userMetadata": note}) if note is not None else None
    try:
        write_deltalake(local, rows, mode="append", commit_properties=properties, configuration=configuration,
                        schema_mode="merge" if merge_schema else None)  # fmt: skip
    except DeltaProtocolError as exc:
        with _lock:
            _refused.add(path)
        log.warning("%s: appended through Spark from now on (delta-rs cannot write this table: %s)", path, exc)
        raise DriverAppendUnsupported(str(exc)) from exc


def file_count(path: str) -> int:
    """How many data files the Delta table at ``path`` references now (read from its log)."""
    from deltalake import DeltaTable

    local = local_path(path)
    assert local is not None, path
    return len(DeltaTable(local).file_uris())


def compact(path: str) -> None:
    """Bin-pack the small files of the Delta table at ``path`` (delta-rs's OPTIMIZE): what Delta's
    auto compaction does after Spark's appends, which delta-rs's appends do not trigger."""
    from deltalake import DeltaTable

    local = local_path(path)
    assert local is not None, path
    DeltaTable(local).optimize.compact()
