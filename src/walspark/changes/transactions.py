"""What the assembler hands out: finished transactions and the outcomes of prepared ones.

Plain data: the messages stay raw pgoutput bytes behind a :class:`MessageSource` (memory, a
spill file, or a consumer's durable copy), read lazily, so a transaction larger than memory
passes through. :mod:`.assembly` builds them from the stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from walspark.protocol import Message

from .spill import Entry, SpillError

__all__ = ["CommittedTransaction", "MessageSource", "NonTransactionalMessage", "PreparedOutcome", "PreparedTransaction"]


class MessageSource(Protocol):
    """Where a finished transaction's messages are read from: a :class:`~.spill.TxnBuffer`, or a
    consumer's own durable copy of a prepared transaction (see ``hand_over_prepared``)."""

    def __iter__(self) -> Iterator[Entry]: ...

    def close(self) -> None: ...


def _read(source: MessageSource) -> Iterator[tuple[int, bool, bytes]]:
    """``(lsn, in_stream, bytes)`` of each message; a :class:`~.spill.SpillError` releases the source.

    A spilled transaction's last writes reach the disk only when it is read back, so a full
    disk can surface here, after the commit. The transaction is then unreadable: its spill
    file is deleted at once rather than left on the full disk for a consumer that is
    unwinding from the error and may never release it.
    """
    try:
        for lsn, in_stream, _subxid, data in source:
            yield lsn, in_stream, data
    except SpillError:
        source.close()
        raise


class _BufferedMessages:
    """The messages behind a finished transaction, read lazily from its :class:`MessageSource`."""

    __slots__ = ()
    _buffer: MessageSource

    def messages(self) -> Iterator[tuple[int, bool, bytes]]:
        """The data messages; a :class:`~.spill.SpillError` here releases the transaction."""
        return _read(self._buffer)

    def release(self) -> None:
        """Free the memory or spill file behind this transaction (call when done with it)."""
        self._buffer.close()


@dataclass(frozen=True, slots=True)
class CommittedTransaction(_BufferedMessages):
    """One transaction that committed, with its data messages in the order they were sent.

    ``messages()`` yields ``(lsn, in_stream, pgoutput bytes)`` for the Relation, Type, Insert,
    Update, Delete, Truncate and transactional Message messages — not for the control messages
    (Begin, Commit, Stream …, Origin), whose facts are the fields here. ``in_stream`` says
    whether the bytes carry the streamed-block Xid field, which a decoder needs to know.
    Subtransactions that rolled back are already left out.
    """

    xid: int
    first_lsn: int
    commit_lsn: int
    end_lsn: int
    commit_timestamp: int
    origin: str | None
    origin_lsn: int | None
    gid: str | None
    streamed: bool
    count: int
    _buffer: MessageSource = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class PreparedTransaction(_BufferedMessages):
    """A transaction just prepared (``hand_over_prepared`` only): complete, but not yet committed.

    Its fate comes later as a :class:`PreparedOutcome` with the same ``xid`` and ``gid``. The
    consumer must keep the messages (durably, if the slot may move past ``end_lsn`` before the
    outcome arrives: the server will not send them again) and call :meth:`release`.
    """

    xid: int
    gid: str
    first_lsn: int
    prepare_lsn: int
    end_lsn: int
    prepare_timestamp: int
    origin: str | None
    origin_lsn: int | None
    streamed: bool
    count: int
    _buffer: MessageSource = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class PreparedOutcome:
    """Commit Prepared (``committed``) or Rollback Prepared of a transaction handed out at its Prepare.

    For a commit, ``commit_lsn``/``end_lsn``/``timestamp`` are the COMMIT PREPARED's: the
    transaction's changes take effect there, in commit order. For a rollback, ``end_lsn`` and
    ``timestamp`` are the ROLLBACK PREPARED's and ``commit_lsn`` is 0. ``lsn`` is where the
    message is in the stream.
    """

    lsn: int
    xid: int
    gid: str
    committed: bool
    commit_lsn: int
    end_lsn: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class NonTransactionalMessage:
    """A ``pg_logical_emit_message(false, …)`` message: delivered at once, outside any transaction."""

    lsn: int
    message: Message
