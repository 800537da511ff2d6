"""Typed pgoutput messages: one frozen dataclass per message of the logical replication protocol.

Field values are kept exactly as on the wire, so that encoding a decoded message reproduces the
original bytes. See docs/design/protocol.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, NamedTuple, TypeAlias

from .lsn import pg_timestamp_to_datetime

__all__ = [
    "Begin",
    "BeginPrepare",
    "Commit",
    "CommitPrepared",
    "Delete",
    "Insert",
    "LogicalMessage",
    "Message",
    "Origin",
    "PgoutputMessage",
    "Prepare",
    "Relation",
    "RelationColumn",
    "RollbackPrepared",
    "StreamAbort",
    "StreamCommit",
    "StreamPrepare",
    "StreamStart",
    "StreamStop",
    "Truncate",
    "TupleColumn",
    "TupleData",
    "Type",
    "Update",
]


# --------------------------------------------------------------------------- tuple data


class TupleColumn(NamedTuple):
    """One column of a :class:`TupleData`, as a (kind, value) pair."""

    kind: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class TupleData:
    """The TupleData message part: one entry per published column, in Relation order.

    Stored column-wise rather than as a tuple of per-column objects, because a row is
    decoded far more often than it is inspected and the values layer consumes it
    column by column anyway:

    * ``kinds``: a ``str`` with one character per column —
      ``'n'`` NULL, ``'u'`` unchanged TOASTed value (not sent), ``'t'`` text, ``'b'`` binary;
    * ``values``: a tuple of the same length; the raw value bytes for ``'t'``/``'b'``
      columns, ``None`` for ``'n'``/``'u'`` columns.

    An unchanged TOAST value (``'u'``) is *not* NULL: the decoder keeps the distinction and
    so must every consumer.
    """

    kinds: str
    values: tuple[bytes | None, ...]

    NULL: ClassVar[str] = "n"
    UNCHANGED: ClassVar[str] = "u"
    TEXT: ClassVar[str] = "t"
    BINARY: ClassVar[str] = "b"

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def columns(self) -> tuple[TupleColumn, ...]:
        """The columns as (kind, value) pairs — convenient for inspection, built on demand."""
        return tuple(map(TupleColumn, self.kinds, self.values))

    @classmethod
    def from_columns(cls, columns: Iterable[tuple[str, bytes | None]]) -> TupleData:
        """Build from (kind, value) pairs, e.g. ``[("t", b"1"), ("n", None)]``."""
        pairs = tuple(columns)
        return cls("".join(kind for kind, _ in pairs), tuple(value for _, value in pairs))


# --------------------------------------------------------------------------- transaction control


class _CommitTime:
    """``commit_time``: the ``commit_timestamp`` field as an aware datetime (UTC), on request."""

    __slots__ = ()
    commit_timestamp: int

    @property
    def commit_time(self) -> datetime:
        return pg_timestamp_to_datetime(self.commit_timestamp)


@dataclass(frozen=True, slots=True)
class Begin(_CommitTime):
    """``B``: start of a (non-streamed) transaction."""

    KIND: ClassVar[str] = "B"

    final_lsn: int
    commit_timestamp: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit(_CommitTime):
    """``C``: end of a (non-streamed) transaction. The flags byte must be 0 and is not kept."""

    KIND: ClassVar[str] = "C"

    commit_lsn: int
    end_lsn: int
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class Origin:
    """``O``: the transaction came from another node (replication origin).

    ``commit_lsn`` is the LSN of the commit on the origin server.
    """

    KIND: ClassVar[str] = "O"

    commit_lsn: int
    name: str


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True, slots=True)
class RelationColumn:
    """One column description of a :class:`Relation` message."""

    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        """Part of the replica identity (flag bit 1); every column is, with REPLICA IDENTITY FULL."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation:
    """``R``: description of a published table, sent before its first change (and after DDL).

    ``namespace`` is the raw wire value: the empty string stands for ``pg_catalog``
    (see :attr:`schema`). ``replica_identity`` is ``relreplident`` as a one-character
    string: ``'d'`` default, ``'n'`` nothing, ``'f'`` full, ``'i'`` index.
    """

    KIND: ClassVar[str] = "R"

    xid: int | None
    relation_id: int
    namespace: str
    relation_name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]

    @property
    def schema(self) -> str:
        """The namespace with PostgreSQL's shorthand undone (empty string means ``pg_catalog``)."""
        return self.namespace or "pg_catalog"


@dataclass(frozen=True, slots=True)
class Type:
    """``Y``: description of a (non-built-in) data type used by a published column."""

    KIND: ClassVar[str] = "Y"

    xid: int | None
    type_oid: int
    namespace: str
    type_name: str

    @property
    def schema(self) -> str:
        """The namespace with PostgreSQL's shorthand undone (empty string means ``pg_catalog``)."""
        return self.namespace or "pg_catalog"


# --------------------------------------------------------------------------- changes


@dataclass(frozen=True, slots=True)
class Insert:
    """``I``: a new row (``N`` tuple)."""

    KIND: ClassVar[str] = "I"

    xid: int | None
    relation_id: int
    new_tuple: TupleData


@dataclass(frozen=True, slots=True)
class Update:
    """``U``: a changed row.

    At most one of ``key_tuple`` (``K``: the old replica-identity key, sent when the key
    changed) and ``old_tuple`` (``O``: the whole old row, REPLICA IDENTITY FULL) is set.
    """

    KIND: ClassVar[str] = "U"

    xid: int | None
    relation_id: int
    key_tuple: TupleData | None
    old_tuple: TupleData | None
    new_tuple: TupleData


@dataclass(frozen=True, slots=True)
class Delete:
    """``D``: a removed row. Exactly one of ``key_tuple`` (``K``) and ``old_tuple`` (``O``) is set."""

    KIND: ClassVar[str] = "D"

    xid: int | None
    relation_id: int
    key_tuple: TupleData | None
    old_tuple: TupleData | None


@dataclass(frozen=True, slots=True)
class Truncate:
    """``T``: TRUNCATE of one or more relations; ``options`` is the raw option bit set."""

    KIND: ClassVar[str] = "T"

    CASCADE: ClassVar[int] = 1
    RESTART_IDENTITY: ClassVar[int] = 2

    xid: int | None
    options: int
    relation_ids: tuple[int, ...]

    @property
    def cascade(self) -> bool:
        return bool(self.options & 1)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & 2)


@dataclass(frozen=True, slots=True)
class Message:
    """``M``: a logical decoding message (``pg_logical_emit_message``).

    The wire flags byte is 0 or 1; it is kept as ``transactional``.
    """

    KIND: ClassVar[str] = "M"

    xid: int | None
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


#: Alias that does not shadow the generic word "message" in user code.
LogicalMessage = Message


# --------------------------------------------------------------------------- streaming (v2+)


@dataclass(frozen=True, slots=True)
class StreamStart:
    """``S``: a block of changes of an in-progress transaction follows (protocol ≥ 2)."""

    KIND: ClassVar[str] = "S"

    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    """``E``: end of a streamed block."""

    KIND: ClassVar[str] = "E"


@dataclass(frozen=True, slots=True)
class StreamCommit(_CommitTime):
    """``c``: a streamed transaction committed. The flags byte must be 0 and is not kept."""

    KIND: ClassVar[str] = "c"

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class StreamAbort:
    """``A``: a streamed (sub)transaction aborted; ``subxid == xid`` for a top-level abort.

    ``abort_lsn``/``abort_timestamp`` are sent only with protocol version 4 and
    ``streaming = parallel``; otherwise both are ``None``.
    """

    KIND: ClassVar[str] = "A"

    xid: int
    subxid: int
    abort_lsn: int | None = None
    abort_timestamp: int | None = None

    @property
    def abort_time(self) -> datetime | None:
        if self.abort_timestamp is None:
            return None
        return pg_timestamp_to_datetime(self.abort_timestamp)


# ------------------------------------------------ two-phase (v3+, or any version from a two-phase slot)


@dataclass(frozen=True, slots=True)
class _PrepareLayout:
    """The fields Begin Prepare, Prepare and Stream Prepare share (the spec gives them one layout)."""

    prepare_lsn: int
    end_lsn: int
    prepare_timestamp: int
    xid: int
    gid: str

    @property
    def prepare_time(self) -> datetime:
        return pg_timestamp_to_datetime(self.prepare_timestamp)


@dataclass(frozen=True, slots=True)
class BeginPrepare(_PrepareLayout):
    """``b``: start of a transaction that will be prepared (PREPARE TRANSACTION)."""

    KIND: ClassVar[str] = "b"


@dataclass(frozen=True, slots=True)
class Prepare(_PrepareLayout):
    """``P``: the transaction was prepared. The flags byte must be 0 and is not kept."""

    KIND: ClassVar[str] = "P"


@dataclass(frozen=True, slots=True)
class CommitPrepared(_CommitTime):
    """``K``: COMMIT PREPARED. The flags byte must be 0 and is not kept."""

    KIND: ClassVar[str] = "K"

    commit_lsn: int
    end_lsn: int
    commit_timestamp: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class RollbackPrepared:
    """``r``: ROLLBACK PREPARED. The flags byte must be 0 and is not kept."""

    KIND: ClassVar[str] = "r"

    prepare_end_lsn: int
    rollback_end_lsn: int
    prepare_timestamp: int
    rollback_timestamp: int
    xid: int
    gid: str

    @property
    def prepare_time(self) -> datetime:
        return pg_timestamp_to_datetime(self.prepare_timestamp)

    @property
    def rollback_time(self) -> datetime:
        return pg_timestamp_to_datetime(self.rollback_timestamp)


@dataclass(frozen=True, slots=True)
class StreamPrepare(_PrepareLayout):
    """``p``: a streamed transaction was prepared (same layout as Prepare)."""

    KIND: ClassVar[str] = "p"


PgoutputMessage: TypeAlias = (
    Begin
    | Commit
    | Origin
    | Relation
    | Type
    | Insert
    | Update
    | Delete
    | Truncate
    | Message
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
    | BeginPrepare
    | Prepare
    | CommitPrepared
    | RollbackPrepared
    | StreamPrepare
)
"""Any decoded pgoutput message."""
