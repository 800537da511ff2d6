"""The replication source: slots, publications and a live pgoutput stream with safe feedback.

This package may import :mod:`walspark.protocol`, never Spark. See docs/design/source.md for its
modules.
"""

from __future__ import annotations

from .catalog import ColumnListConflict, PublishedColumn, PublishedTable, published_tables
from .dedup import DuplicateFilter
from .dsn import redact_dsn, redact_secrets
from .errors import (
    AuthenticationFailed,
    ConnectionLost,
    DatabaseNotFound,
    InvalidDsn,
    InvalidName,
    OptionError,
    PermissionDenied,
    PublicationNotFound,
    ReconnectExhausted,
    ReplicationError,
    SlotExists,
    SlotInUse,
    SlotInvalidated,
    SlotNotFound,
    SourceError,
    WalLevelNotLogical,
)
from .names import quote_repl_ident, quote_repl_literal, validate_publication_name, validate_slot_name
from .options import ResolvedOptions, StreamOptions, max_protocol_version
from .publications import (
    PublicationInfo,
    create_publication,
    drop_publication,
    get_publication,
    list_publications,
    missing_publications,
)
from .reconnect import ReconnectPolicy
from .slots import (
    CreatedSlot,
    SlotInfo,
    SlotSnapshot,
    create_slot,
    create_slot_with_snapshot,
    drop_slot,
    get_slot,
    list_slots,
)
from .stream import RawMessage, Reconnected, ReplicationStream, StreamItem, StreamPositions

__all__ = [
    "AuthenticationFailed",
    "ColumnListConflict",
    "ConnectionLost",
    "CreatedSlot",
    "DatabaseNotFound",
    "DuplicateFilter",
    "InvalidDsn",
    "InvalidName",
    "OptionError",
    "PermissionDenied",
    "PublicationInfo",
    "PublicationNotFound",
    "PublishedColumn",
    "PublishedTable",
    "RawMessage",
    "ReconnectExhausted",
    "ReconnectPolicy",
    "Reconnected",
    "ReplicationError",
    "ReplicationStream",
    "ResolvedOptions",
    "SlotExists",
    "SlotInUse",
    "SlotInfo",
    "SlotInvalidated",
    "SlotNotFound",
    "SlotSnapshot",
    "SourceError",
    "StreamItem",
    "StreamOptions",
    "StreamPositions",
    "WalLevelNotLogical",
    "create_publication",
    "create_slot",
    "create_slot_with_snapshot",
    "drop_publication",
    "drop_slot",
    "get_publication",
    "get_slot",
    "list_publications",
    "list_slots",
    "max_protocol_version",
    "missing_publications",
    "published_tables",
    "quote_repl_ident",
    "quote_repl_literal",
    "redact_dsn",
    "redact_secrets",
    "validate_publication_name",
    "validate_slot_name",
]
