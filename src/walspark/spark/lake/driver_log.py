"""Reads of a local Delta table's log from the driver with delta-rs: no JVM call, no Spark job.

Every function returns None when it cannot answer, and the caller then asks Spark, so an answer
from here is the one Spark would give. See docs/design/applying.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

__all__ = ["keep", "local_path", "properties", "read_columns", "schema", "take"]

_lock = threading.Lock()
#: Tables as delta-rs last saw them, by local path, with the identity of their log's first commit:
#: the next read or write takes only the commits since (``update_incremental``) instead of
#: replaying the log from its last checkpoint, tens of milliseconds a table and batch (a batch
#: reads a table's schema and properties and merges into it). A table deleted and made again at
#: the same path has another first commit file, and is read afresh.
_seen: dict[str, tuple[tuple[int, int, int], Any]] = {}


def local_path(path: str) -> str | None:
    """``path`` as a local file system path, or None where delta-rs is not to be used: an object
    store's URI, or a path holding ``%`` (delta-rs decodes ``%XX`` in local paths, even in a
    ``file:`` URI's escapes, and would look for another folder: walspark's folder names keep
    ``%2F`` for a ``/`` in a table's name)."""
    if path.startswith("file:"):
        path = path.removeprefix("file:").removeprefix("//")
    return None if "://" in path or "%" in path else path


def take(local: str) -> tuple[tuple[int, int, int] | None, Any]:
    """The ``deltalake.DeltaTable`` at ``local``, caught up from where this process last saw it,
    or read afresh; and its log's identity (None: not to be kept). Taken out of the cache while in
    use, so two threads never share one (a second one reads its own); :func:`keep` puts it back."""
    from deltalake import DeltaTable

    try:
        st = os.stat(os.path.join(local, "_delta_log", f"{0:020d}.json"))
        identity: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        identity = None  # its first commit cleaned up: nothing to tell a new table by
    with _lock:
        seen = _seen.pop(local, None)
    if seen is not None and identity is not None and seen[0] == identity:
        table = seen[1]
        table.update_incremental()
        return identity, table
    return identity, DeltaTable(local)


def keep(local: str, identity: tuple[int, int, int] | None, table: Any) -> None:
    """Put a table :func:`take` gave back into the cache (one whose log has no identity is not kept)."""
    if identity is not None:
        with _lock:
            _seen[local] = (identity, table)


@contextlib.contextmanager
def _open(path: str) -> Iterator[Any]:
    """The table at ``path`` as delta-rs sees it, kept for the next read or write; raises
    ``LookupError`` when it is not one, and ``RuntimeError`` when delta-rs cannot answer (not
    installed, remote, unreadable)."""
    local = local_path(path)
    if local is None:
        raise RuntimeError("not a local path")
    try:
        from deltalake.exceptions import TableNotFoundError
    except ImportError as exc:
        raise RuntimeError("delta-rs is not installed") from exc
    try:
        identity, table = take(local)
    except TableNotFoundError as exc:
        raise LookupError(path) from exc
    except Exception as exc:  # anything else is Spark's to answer
        log.debug("delta-rs cannot read %s: %s", path, exc)
        raise RuntimeError(str(exc)) from exc
    yield table
    keep(local, identity, table)


def properties(path: str) -> dict[str, str] | None:
    """The table's properties (``TBLPROPERTIES`` of its newest version); None: ask Spark
    (also when no table is there, which Spark reports in its own words)."""
    try:
        with _open(path) as table:
            return dict(table.metadata().configuration)
    except (LookupError, RuntimeError):
        return None


def schema(path: str) -> dict | None:
    """The table's schema as Delta's log holds it (Spark's StructType JSON), without column
    mapping's internal field metadata, which Spark's readers do not show either; None: ask Spark."""
    import json

    try:
        with _open(path) as table:
            struct = json.loads(table.schema().to_json())
    except (LookupError, RuntimeError):
        return None
    for f in struct.get("fields", ()):
        f["metadata"] = {k: v for k, v in (f.get("metadata") or {}).items() if not k.startswith("delta.columnMapping.")}
    return struct


def read_columns(path: str, columns: Sequence[str]) -> pa.Table | None:
    """``columns`` of every row of the table (a small table: walspark's own); None: ask Spark.

    Tables with reader features delta-rs lacks are refused by delta-rs itself, never misread.
    """
    try:
        with _open(path) as table:
            return table.to_pyarrow_table(columns=list(columns))
    except (LookupError, RuntimeError):
        return None
    except Exception as exc:  # noqa: BLE001
        log.debug("delta-rs cannot read the rows of %s: %s", path, exc)
        return None


def query(path: str, sql: str) -> pa.Table:
    """``sql`` over the local table at ``path``, registered as ``t``, through delta-rs's SQL engine
    (which maps column-mapped names back, unlike its plain Arrow read); raises delta-rs's errors."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    reader = QueryBuilder().register("t", DeltaTable(path)).execute(sql)
    return pa.RecordBatchReader.from_stream(reader).read_all()
