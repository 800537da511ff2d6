"""Hypothesis strategies for every pgoutput message, valid for a given protocol version.

``wire_messages()`` draws a :class:`Case`: a message plus the decoder context it belongs
to (protocol version, inside a streamed block or not, Stream Abort layout), because the
same bytes decode differently in different contexts.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from walspark.protocol import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
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
    TupleData,
    Type,
    Update,
)

u8 = st.integers(0, 0xFF)
u32 = st.integers(0, 0xFFFFFFFF)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
lsns = st.integers(0, (1 << 64) - 1)
timestamps = st.integers(-(1 << 63), (1 << 63) - 1)
xids = st.integers(1, 0xFFFFFFFF)  # stream-related Xids are never InvalidTransactionId (0)
# Strings travel NUL-terminated and UTF-8 encoded: no NUL, no lone surrogates.
names = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=12)


@st.composite
def tuple_data(draw: st.DrawFn, max_columns: int = 8) -> TupleData:
    kinds = draw(st.text(alphabet="nutb", max_size=max_columns))
    values = tuple(draw(st.binary(max_size=24)) if k in "tb" else None for k in kinds)
    return TupleData(kinds, values)


relation_columns = st.builds(RelationColumn, u8, names, u32, i32)


@dataclass(frozen=True)
class Case:
    """A message and the context needed to decode its bytes."""

    message: PgoutputMessage
    protocol_version: int
    in_stream: bool
    parallel_abort: bool = False


# kind letter -> (first protocol version, builder(draw, version) -> Case)
def _stream_xid(draw: st.DrawFn, version: int) -> int | None:
    """Xid of an in-stream-capable message: only inside streamed blocks (protocol >= 2)."""
    return None if version < 2 else draw(st.none() | xids)


def _in_stream_case(message: PgoutputMessage, version: int) -> Case:
    return Case(message, version, in_stream=message.xid is not None)  # type: ignore[union-attr]


def _begin(draw: st.DrawFn, v: int) -> Case:
    return Case(Begin(draw(lsns), draw(timestamps), draw(u32)), v, False)


def _commit(draw: st.DrawFn, v: int) -> Case:
    return Case(Commit(draw(lsns), draw(lsns), draw(timestamps)), v, False)


def _origin(draw: st.DrawFn, v: int) -> Case:
    return Case(Origin(draw(lsns), draw(names)), v, v >= 2 and draw(st.booleans()))


def _message(draw: st.DrawFn, v: int) -> Case:
    m = Message(_stream_xid(draw, v), draw(st.booleans()), draw(lsns), draw(names), draw(st.binary(max_size=40)))
    return _in_stream_case(m, v)


def _relation(draw: st.DrawFn, v: int) -> Case:
    m = Relation(_stream_xid(draw, v), draw(u32), draw(names), draw(names),
                 draw(st.sampled_from("dnfi")), tuple(draw(st.lists(relation_columns, max_size=5))))
    return _in_stream_case(m, v)


def _type(draw: st.DrawFn, v: int) -> Case:
    return _in_stream_case(Type(_stream_xid(draw, v), draw(u32), draw(names), draw(names)), v)


def _insert(draw: st.DrawFn, v: int) -> Case:
    return _in_stream_case(Insert(_stream_xid(draw, v), draw(u32), draw(tuple_data())), v)


def _update(draw: st.DrawFn, v: int) -> Case:
    old_part = draw(st.sampled_from(["none", "K", "O"]))
    key = draw(tuple_data()) if old_part == "K" else None
    old = draw(tuple_data()) if old_part == "O" else None
    return _in_stream_case(Update(_stream_xid(draw, v), draw(u32), key, old, draw(tuple_data())), v)


def _delete(draw: st.DrawFn, v: int) -> Case:
    key_part = draw(st.booleans())
    td = draw(tuple_data())
    return _in_stream_case(Delete(_stream_xid(draw, v), draw(u32), td if key_part else None,
                                  None if key_part else td), v)


def _truncate(draw: st.DrawFn, v: int) -> Case:
    m = Truncate(_stream_xid(draw, v), draw(u8), tuple(draw(st.lists(u32, max_size=6))))
    return _in_stream_case(m, v)


def _stream_start(draw: st.DrawFn, v: int) -> Case:
    return Case(StreamStart(draw(xids), draw(st.booleans())), v, False)


def _stream_stop(draw: st.DrawFn, v: int) -> Case:
    return Case(StreamStop(), v, True)


def _stream_commit(draw: st.DrawFn, v: int) -> Case:
    return Case(StreamCommit(draw(xids), draw(lsns), draw(lsns), draw(timestamps)), v, False)


def _stream_abort(draw: st.DrawFn, v: int) -> Case:
    if v >= 4 and draw(st.booleans()):  # protocol 4 with streaming = parallel
        return Case(StreamAbort(draw(xids), draw(xids), draw(lsns), draw(timestamps)), v, False, True)
    return Case(StreamAbort(draw(xids), draw(xids)), v, False, False)


def _two_phase(cls: type) -> object:
    def build(draw: st.DrawFn, v: int) -> Case:
        return Case(cls(draw(lsns), draw(lsns), draw(timestamps), draw(u32), draw(names)), v, False)
    return build


def _rollback_prepared(draw: st.DrawFn, v: int) -> Case:
    m = RollbackPrepared(draw(lsns), draw(lsns), draw(timestamps), draw(timestamps), draw(u32), draw(names))
    return Case(m, v, False)


BUILDERS = {
    "B": (1, _begin),
    "C": (1, _commit),
    "O": (1, _origin),
    "M": (1, _message),
    "R": (1, _relation),
    "Y": (1, _type),
    "I": (1, _insert),
    "U": (1, _update),
    "D": (1, _delete),
    "T": (1, _truncate),
    "S": (2, _stream_start),
    "E": (2, _stream_stop),
    "c": (2, _stream_commit),
    "A": (2, _stream_abort),
    # The lowest version whose stream can hold the kind: a two-phase slot makes the server send
    # the two-phase messages at any protocol version (Stream Prepare wherever streaming is).
    "b": (1, _two_phase(BeginPrepare)),
    "P": (1, _two_phase(Prepare)),
    "K": (1, _two_phase(CommitPrepared)),
    "r": (1, _rollback_prepared),
    "p": (2, _two_phase(StreamPrepare)),
}
KINDS = sorted(BUILDERS)


@st.composite
def cases(draw: st.DrawFn, kind: str | None = None, version: int | None = None) -> Case:
    """A Case of the given kind (or any), for the given protocol version (or any that has it)."""
    if kind is None:
        kind = draw(st.sampled_from(KINDS if version is None else
                                    [k for k in KINDS if BUILDERS[k][0] <= version]))
    since, build = BUILDERS[kind]
    if version is None:
        version = draw(st.integers(since, 4))
    return build(draw, version)
