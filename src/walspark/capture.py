"""Capture files: pgoutput messages at rest, exactly as a slot returned them.

Parquet or Arrow IPC, ``lsn`` and ``data`` in stream order, with the pgoutput options in the
schema metadata; files of other tools are read too. Captures make bugs reproducible and tests
independent of a server. See docs/data-source.md ("Capture files").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from walspark.protocol import MAX_PROTOCOL_VERSION, Decoder, Delete, Insert, ProtocolError, Update, parse_lsn

SCHEMA = pa.schema([pa.field("lsn", pa.int64(), nullable=False), pa.field("data", pa.binary(), nullable=False)])
_META_OPTIONS = b"walspark.pgoutput_options"
_META_SERVER = b"walspark.server_version_num"
_META_SLOT = b"walspark.slot"

#: Rows per written batch: large enough for Parquet to compress well, small enough to stream.
BATCH_ROWS = 65_536


class CaptureError(RuntimeError):
    """A capture file is missing, unreadable or not in the capture format."""


@dataclass(frozen=True, slots=True)
class CaptureInfo:
    """What a capture says about how its messages were produced."""

    options: Mapping[str, str] = field(default_factory=dict)
    server_version_num: int | None = None
    slot: str | None = None
    #: For a capture that does not say how it was made: whether its first tuple value is binary.
    seen_binary: bool = False

    @property
    def described(self) -> bool:
        """Whether the capture says which options produced it (``walspark capture`` always does)."""
        return "proto_version" in self.options

    @property
    def protocol_version(self) -> int:
        """pgoutput's ``proto_version``; when the capture does not say, 4 — it decodes every version."""
        return int(self.options.get("proto_version", MAX_PROTOCOL_VERSION))

    @property
    def streaming_parallel(self) -> bool | None:
        """Whether Stream Abort messages carry the v4 abort LSN and timestamp.

        ``None`` when the capture does not say: the decoder then tells the two layouts apart
        by their length (see :class:`~walspark.protocol.Decoder`).
        """
        if "streaming" in self.options:
            return self.options["streaming"] == "parallel"
        return False if self.described else None

    @property
    def binary(self) -> bool:
        """pgoutput's ``binary`` option: as the capture says, else as its first tuple value shows."""
        if self.described:
            return self.options.get("binary", "false") in ("true", "on", "1")
        return self.seen_binary

    def schema_metadata(self) -> dict[bytes, bytes]:
        meta = {_META_OPTIONS: json.dumps(dict(self.options), sort_keys=True).encode()}
        if self.server_version_num is not None:
            meta[_META_SERVER] = str(self.server_version_num).encode()
        if self.slot is not None:
            meta[_META_SLOT] = self.slot.encode()
        return meta

    @classmethod
    def from_schema(cls, schema: pa.Schema) -> CaptureInfo:
        meta = schema.metadata or {}
        options = json.loads(meta[_META_OPTIONS]) if _META_OPTIONS in meta else {}
        server = int(meta[_META_SERVER]) if _META_SERVER in meta else None
        slot = meta[_META_SLOT].decode() if _META_SLOT in meta else None
        return cls(options, server, slot)


def _is_ipc(path: Path) -> bool:
    return path.suffix in (".arrow", ".feather", ".ipc")


def _check_column_types(path: Path, schema: pa.Schema) -> None:
    """Refuse, with the column's name, a file whose ``lsn``/``data`` no reader here can turn into capture rows."""
    lsn, data = schema.field("lsn").type, schema.field("data").type
    if not (pa.types.is_integer(lsn) or pa.types.is_string(lsn) or pa.types.is_large_string(lsn)):
        raise CaptureError(f"{path}: column lsn is {lsn}; a capture needs an integer LSN or its X/Y text")
    if not (pa.types.is_binary(data) or pa.types.is_large_binary(data)):
        raise CaptureError(f"{path}: column data is {data}; a capture needs binary pgoutput messages")


def capture_rows(table: pa.Table | pa.RecordBatch, path: str | os.PathLike[str] = "capture") -> pa.RecordBatch:
    """``lsn`` (int64) and ``data`` (binary) of a capture's rows, whatever tool wrote them.

    ``walspark capture`` writes exactly that; another tool may have kept the SQL function's
    ``pg_lsn`` as ``X/Y`` text, used another integer type, or large binary. A null in either
    column is refused: no message has no LSN or no bytes.
    """
    lsn, data = table.column("lsn"), table.column("data")
    if isinstance(lsn, pa.ChunkedArray):
        lsn, data = lsn.combine_chunks(), data.combine_chunks()
    if lsn.null_count or data.null_count:
        raise CaptureError(f"{path}: a row has no {'lsn' if lsn.null_count else 'data'} (null)")
    if pa.types.is_string(lsn.type) or pa.types.is_large_string(lsn.type):
        try:
            lsn = pa.array([parse_lsn(text) for text in lsn.to_pylist()], pa.int64())
        except ValueError as exc:
            raise CaptureError(f"{path}: column lsn: {exc}") from None
    elif lsn.type != pa.int64():
        try:
            lsn = lsn.cast(pa.int64())
        except pa.ArrowInvalid as exc:
            raise CaptureError(f"{path}: column lsn: {exc}") from None
    if data.type != pa.binary():
        data = data.cast(pa.binary())
    return pa.record_batch([lsn, data], schema=SCHEMA)


def write_capture(
    path: str | os.PathLike[str], rows: Iterable[tuple[int, bytes]], info: CaptureInfo = CaptureInfo()
) -> int:
    """Write ``(lsn, message)`` rows, in stream order, to a capture file; returns the row count.

    Written to a temporary name and renamed at the end, so a capture that exists is complete.
    """
    path = Path(path)
    schema = SCHEMA.with_metadata(info.schema_metadata())
    partial = path.with_name(path.name + ".partial")
    count = 0
    writer: pq.ParquetWriter | ipc.RecordBatchFileWriter
    writer = ipc.new_file(str(partial), schema) if _is_ipc(path) else pq.ParquetWriter(str(partial), schema)
    try:
        lsns: list[int] = []
        datas: list[bytes] = []
        for lsn, data in rows:
            lsns.append(lsn)
            datas.append(data)
            if len(lsns) >= BATCH_ROWS:
                writer.write_batch(pa.record_batch([lsns, datas], schema=schema))
                count += len(lsns)
                lsns, datas = [], []
        if lsns or count == 0:
            writer.write_batch(pa.record_batch([lsns, datas], schema=schema))
            count += len(lsns)
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    writer.close()
    os.replace(partial, path)
    return count


class CaptureFile:
    """A capture opened for reading: its :class:`CaptureInfo` and its rows, batch by batch."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            if _is_ipc(self.path):
                self._ipc = ipc.open_file(pa.memory_map(str(self.path)))
                schema = self._ipc.schema
            else:
                self._parquet = pq.ParquetFile(str(self.path))
                schema = self._parquet.schema_arrow
        except (OSError, pa.ArrowInvalid) as exc:
            raise CaptureError(f"cannot read capture {self.path}: {exc}") from exc
        missing = [name for name in SCHEMA.names if name not in schema.names]
        if missing:
            raise CaptureError(f"{self.path} is not a capture file: no column {', '.join(missing)} (needs lsn, data)")
        _check_column_types(self.path, schema)
        info = CaptureInfo.from_schema(schema)
        if not info.described:
            info = replace(info, seen_binary=self._first_value_kind() == "b")
        self.info = info

    def _first_value_kind(self) -> str | None:
        """``'t'`` or ``'b'``: how the first row change sends its first value (None: no value at all).

        In binary mode pgoutput sends every value of a type with a binary send function (all
        built-in types have one) as ``'b'``, so the first value tells the mode. Only the
        messages up to the first row change with a value are decoded; a malformed one ends the
        search (``walspark decode`` reports it where it lies).
        """
        decoder = Decoder(MAX_PROTOCOL_VERSION, streaming_parallel=None)
        for batch in self.iter_batches():
            for lsn, data in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                try:
                    message = decoder.decode(data, lsn=lsn)
                except ProtocolError:
                    return None
                if isinstance(message, Insert | Update | Delete):
                    for name in ("new_tuple", "old_tuple", "key_tuple"):
                        part = getattr(message, name, None)
                        kind = next((k for k in part.kinds if k in "tb"), None) if part is not None else None
                        if kind is not None:
                            return kind
        return None

    @property
    def num_rows(self) -> int:
        if _is_ipc(self.path):
            return sum(self._ipc.get_batch(i).num_rows for i in range(self._ipc.num_record_batches))
        return self._parquet.metadata.num_rows

    def iter_batches(self, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """The rows as Arrow record batches of ``lsn`` (int64) and ``data`` (binary), in stream order."""
        if _is_ipc(self.path):
            for i in range(self._ipc.num_record_batches):
                yield capture_rows(self._ipc.get_batch(i), self.path)
        else:
            for batch in self._parquet.iter_batches(batch_size=batch_rows, columns=SCHEMA.names):
                yield capture_rows(batch, self.path)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        """``(lsn, message)`` pairs in stream order."""
        for batch in self.iter_batches():
            yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
