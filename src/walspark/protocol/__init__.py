"""The pgoutput wire protocol, bytes ⇄ typed messages — pure Python, no I/O.

Every message of protocol versions 1 to 4 and the replication frames that carry them; all
malformed input raises :class:`ProtocolError` (with kind, offset and LSN). See
docs/design/protocol.md.
"""

from .decoder import MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, Decoder, decode_message, read_tuple_data
from .encoder import encode_message, encode_tuple
from .errors import ProtocolError
from .framing import Frame, PrimaryKeepalive, StandbyStatusUpdate, XLogData, decode_frame, encode_frame
from .lsn import (
    INVALID_LSN,
    MAX_LSN,
    PG_EPOCH,
    datetime_to_pg_timestamp,
    format_lsn,
    parse_lsn,
    pg_timestamp_to_datetime,
)
from .messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    PgoutputMessage,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleColumn,
    TupleData,
    Type,
    Update,
)

__all__ = [
    "INVALID_LSN",
    "MAX_LSN",
    "MAX_PROTOCOL_VERSION",
    "MIN_PROTOCOL_VERSION",
    "PG_EPOCH",
    "Begin",
    "BeginPrepare",
    "Commit",
    "CommitPrepared",
    "Decoder",
    "Delete",
    "Frame",
    "Insert",
    "LogicalMessage",
    "Message",
    "Origin",
    "PgoutputMessage",
    "Prepare",
    "PrimaryKeepalive",
    "ProtocolError",
    "Relation",
    "RelationColumn",
    "RollbackPrepared",
    "StandbyStatusUpdate",
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
    "XLogData",
    "datetime_to_pg_timestamp",
    "decode_frame",
    "decode_message",
    "encode_frame",
    "encode_message",
    "encode_tuple",
    "format_lsn",
    "parse_lsn",
    "pg_timestamp_to_datetime",
    "read_tuple_data",
]
