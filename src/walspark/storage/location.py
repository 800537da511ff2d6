"""One file or folder of walspark's state, on a local disk or an object store, by URI.

Only operations atomic on every store are offered: an object is written whole, in one call. See
docs/design/storage.md.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from walspark.storage.settings import StorageSettings, current_settings

__all__ = ["Location", "location"]

_S3 = ("s3a", "s3", "s3n")


def location(uri: str | os.PathLike[str] | Location, settings: StorageSettings | None = None) -> Location:
    """The :class:`Location` of ``uri`` (``settings``: this process's Spark session's, else the environment's)."""
    if isinstance(uri, Location):
        return uri
    text = os.fspath(uri)
    scheme = urlsplit(text).scheme.lower() if "://" in text or text.startswith("file:") else ""
    if scheme in ("", "file"):
        if text.startswith("file://"):
            text = text[len("file://") :]
        elif text.startswith("file:"):
            text = text[len("file:") :]
        return Location(None, os.fspath(Path(text)), "")
    parts = urlsplit(text)
    settings = settings if settings is not None else current_settings()
    fs, root = _filesystem(scheme, parts.netloc, settings)
    path = (root + "/" + parts.path.lstrip("/")).rstrip("/") if root else parts.path.rstrip("/")
    return Location(fs, path, f"{scheme}://{parts.netloc}", settings)


@functools.lru_cache(maxsize=32)
def _filesystem(scheme: str, netloc: str, settings: StorageSettings) -> tuple[Any, str]:
    """A filesystem for one bucket/container/cluster, and the path prefix of its root (cached)."""
    import pyarrow.fs as pafs

    if scheme in _S3:
        kwargs: dict[str, Any] = {}
        if settings.access_key:
            kwargs.update(
                access_key=settings.access_key, secret_key=settings.secret_key, session_token=settings.session_token
            )
        if settings.endpoint:
            endpoint = settings.endpoint
            if "://" in endpoint:
                proto, endpoint = endpoint.split("://", 1)
                kwargs["scheme"] = proto
            elif settings.ssl is False:
                kwargs["scheme"] = "http"
            kwargs["endpoint_override"] = endpoint.rstrip("/")
        if settings.region or settings.endpoint:
            kwargs["region"] = settings.region or "us-east-1"
        kwargs["force_virtual_addressing"] = not settings.path_style and not settings.endpoint
        return pafs.S3FileSystem(**kwargs), netloc
    if scheme == "gs":
        return pafs.GcsFileSystem(), netloc
    if scheme in ("abfss", "abfs"):
        container, _, host = netloc.partition("@")
        return pafs.AzureFileSystem(account_name=host.split(".", 1)[0]), container
    if scheme == "hdfs":
        host, _, port = netloc.partition(":")
        return pafs.HadoopFileSystem(host or "default", int(port or 0)), ""
    raise ValueError(f"walspark cannot keep its state on {scheme}:// (file, s3a, gs, abfss and hdfs are supported)")


class Location:
    """A file or folder: ``fs is None`` on the local disk (``path`` an OS path), else a
    :mod:`pyarrow.fs` filesystem and its path (``prefix`` the URI scheme and authority)."""

    __slots__ = ("fs", "path", "prefix", "settings")

    def __init__(self, fs: Any, path: str, prefix: str, settings: StorageSettings | None = None) -> None:
        self.fs, self.path, self.prefix, self.settings = fs, path, prefix, settings

    # ------------------------------------------------------------------ names

    @property
    def is_local(self) -> bool:
        return self.fs is None

    @property
    def local_path(self) -> Path | None:
        return Path(self.path) if self.fs is None else None

    @property
    def uri(self) -> str:
        """The location as a URI (an OS path when local)."""
        if self.fs is None:
            return self.path
        if self.prefix.startswith("hdfs"):
            return self.prefix + self.path
        _, _, key = self.path.partition("/")  # bucket or container first
        return f"{self.prefix}/{key}" if key else self.prefix

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/" if self.fs is not None else os.sep, 1)[-1]

    def __truediv__(self, name: str) -> Location:
        if self.fs is None:
            return Location(None, os.path.join(self.path, name), "")
        return Location(self.fs, f"{self.path}/{name}", self.prefix, self.settings)

    @property
    def parent(self) -> Location:
        if self.fs is None:
            return Location(None, os.path.dirname(self.path), "")
        return Location(self.fs, self.path.rsplit("/", 1)[0], self.prefix, self.settings)

    def __repr__(self) -> str:  # the URI only: settings (and their secrets) are never shown
        return f"Location({self.uri!r})"

    def __str__(self) -> str:
        return self.uri

    def __fspath__(self) -> str:
        if self.fs is not None:
            raise TypeError(f"{self.uri} is not a local path")
        return self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and (self.prefix, self.path) == (other.prefix, other.path)

    def __hash__(self) -> int:
        return hash((self.prefix, self.path))

    def __reduce__(self) -> tuple[Any, ...]:  # executors rebuild their filesystem from the settings
        return (location, (self.uri, self.settings if self.settings is not None else StorageSettings()))

    # ------------------------------------------------------------------ reads

    def exists(self) -> bool:
        if self.fs is None:
            return os.path.exists(self.path)
        import pyarrow.fs as pafs

        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        if self.fs is None:
            return os.path.isdir(self.path)
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(self.path)
        return info.type == pafs.FileType.Directory or (info.type == pafs.FileType.NotFound and bool(self.list()))

    def size(self) -> int:
        """Bytes of the file (FileNotFoundError if it is gone)."""
        if self.fs is None:
            return os.stat(self.path).st_size
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(self.uri)
        return int(info.size or 0)

    def read_bytes(self) -> bytes:
        """The whole file (FileNotFoundError if missing)."""
        if self.fs is None:
            with open(self.path, "rb") as f:
                return f.read()
        try:
            with self.fs.open_input_stream(self.path) as f:
                return f.read()
        except OSError as exc:
            if not self.exists():
                raise FileNotFoundError(self.uri) from exc
            raise

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def read_json(self, default: Any = None) -> Any:
        """The file parsed as JSON, or ``default`` when it does not exist."""
        try:
            return json.loads(self.read_bytes())
        except FileNotFoundError:
            return default

    def list(self) -> list[Location]:
        """The entries directly under this folder, by name (none if it does not exist)."""
        if self.fs is None:
            try:
                names = sorted(os.listdir(self.path))
            except (FileNotFoundError, NotADirectoryError):
                return []
            return [self / n for n in names]
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(
            (Location(self.fs, i.path.rstrip("/"), self.prefix, self.settings) for i in infos), key=lambda loc: loc.name
        )

    def tree_files(self) -> dict[str, int]:
        """Every file under this folder, at any depth: its path below the folder and its bytes
        (empty if the folder does not exist). One listing on an object store."""
        if self.fs is None:
            found: dict[str, int] = {}
            for root, _dirs, files in os.walk(self.path):
                for name in files:
                    full = os.path.join(root, name)
                    try:
                        found[os.path.relpath(full, self.path)] = os.stat(full).st_size
                    except FileNotFoundError:  # removed while walking
                        pass
            return found
        import pyarrow.fs as pafs

        base = self.path.rstrip("/") + "/"
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True, recursive=True))
        return {i.path[len(base) :]: int(i.size or 0) for i in infos if i.type == pafs.FileType.File}

    def open_arrow(self) -> Any:
        """A random-access Arrow input (memory-mapped when local), for Arrow IPC files."""
        import pyarrow as pa

        if self.fs is None:
            return pa.memory_map(self.path)
        return self.fs.open_input_file(self.path)

    def open_read(self) -> BinaryIO:
        """A binary file to read sequentially; it stays readable if the object is deleted meanwhile
        (an object store's copy is first brought to a local temporary file)."""
        if self.fs is None:
            return open(self.path, "rb", buffering=1 << 20)
        spool = tempfile.TemporaryFile()  # returned to the caller, who closes it
        try:
            with self.fs.open_input_stream(self.path) as src:
                while chunk := src.read(8 << 20):
                    spool.write(chunk)
        except BaseException:
            spool.close()
            if not self.exists():
                raise FileNotFoundError(self.uri) from None
            raise
        spool.seek(0)
        return spool

    # ------------------------------------------------------------------ writes

    def make_dirs(self) -> Location:
        """Create the folder (object stores have none: nothing to do there)."""
        if self.fs is None:
            os.makedirs(self.path, exist_ok=True)
        elif self.prefix.startswith(("hdfs", "abfs")):
            self.fs.create_dir(self.path, recursive=True)
        return self

    def write(self, data: bytes | bytearray | memoryview, *, durable: bool = True, tmp_name: str | None = None) -> None:
        """Replace the file with ``data``, atomically: a reader sees the old content or the new one.

        Local: a sibling (``tmp_name``, default ``<name>.tmp``) written, fsynced, renamed into
        place, the folder fsynced (``durable=False``: no fsyncs, for notes that only save time).
        Object store: one PUT of the whole content, already built (a stream is never closed
        half-written, which would publish a torn object).
        """
        if self.fs is None:
            folder = os.path.dirname(self.path) or "."
            tmp = os.path.join(folder, tmp_name or self.name + ".tmp")
            os.makedirs(folder, exist_ok=True)  # as on object stores, a file needs no folder made first
            with open(tmp, "wb") as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, self.path)
            if durable:
                fsync_dir(folder)
            return
        stream = self.fs.open_output_stream(self.path)
        stream.write(data)  # on failure the stream is left to be discarded, never completed
        stream.close()

    def write_text(self, text: str, **kwargs: Any) -> None:
        self.write(text.encode(), **kwargs)

    def write_json(self, data: Any, *, indent: int | None = None, **kwargs: Any) -> None:
        self.write_text(json.dumps(data, indent=indent) + ("\n" if indent is not None else ""), **kwargs)

    def delete(self, *, missing_ok: bool = True) -> bool:
        """Remove the file; returns whether it existed."""
        try:
            if self.fs is None:
                os.unlink(self.path)
            else:
                if not missing_ok and not self.exists():
                    raise FileNotFoundError(self.uri)
                self.fs.delete_file(self.path)
            return True
        except FileNotFoundError:
            if missing_ok:
                return False
            raise

    def delete_tree(self) -> None:
        """Remove the folder and everything under it (nothing if it does not exist)."""
        if self.fs is None:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        try:
            self.fs.delete_dir(self.path)
        except (FileNotFoundError, OSError):
            for child in self.list():
                if child.list():
                    child.delete_tree()
                else:
                    child.delete()


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or unlink inside a local ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
