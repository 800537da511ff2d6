"""Durable local files: write a sibling, fsync it, rename it into place, fsync the folder.

walspark's bookkeeping (segments, the prepared store, recorded stream shapes, the idle-confirm
mark, the snapshot record) must never be torn by a crash and must be on disk before the slot is
confirmed past what it records: a reader sees the old file or the new one, never a part. One
implementation keeps that rule the same everywhere (issue 15 moves these files behind a storage
layer that also serves object stores).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["fsync_dir", "replace_durably", "write_json_durably", "write_text_durably"]


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(tmp: Path, path: Path) -> None:
    """Rename a written, fsynced ``tmp`` onto ``path`` and make the rename durable."""
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_text_durably(path: Path, text: str, *, tmp: Path | None = None) -> None:
    """Replace ``path`` with ``text`` atomically and durably."""
    tmp = tmp if tmp is not None else path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    replace_durably(tmp, path)


def write_json_durably(path: Path, data: object, *, tmp: Path | None = None, indent: int | None = None) -> None:
    """Replace ``path`` with ``data`` as JSON, atomically and durably."""
    text = json.dumps(data, indent=indent) + ("\n" if indent is not None else "")
    write_text_durably(path, text, tmp=tmp)
