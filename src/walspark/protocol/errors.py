"""The single error type of :mod:`walspark.protocol`.

Every malformed message or frame is a :class:`ProtocolError` naming the message, the offset in
it and the LSN. See docs/design/protocol.md.
"""

from __future__ import annotations

from .lsn import MAX_LSN, format_lsn

__all__ = ["ProtocolError"]


class ProtocolError(Exception):
    """Malformed or out-of-context replication data.

    Attributes:
        kind: message kind name (``"Insert"``, ``"XLogData"``) or, for an unknown kind,
            the kind byte as a printable letter or ``0xNN``; ``None`` if not even that is known.
        offset: byte offset inside the message (0 = the kind byte) where decoding failed.
        lsn: LSN of the message if the caller supplied it, else ``None``.
        reason: what was wrong, in words.
    """

    kind: str | None
    offset: int | None
    lsn: int | None
    reason: str

    def __init__(
        self,
        reason: str,
        *,
        kind: str | None = None,
        offset: int | None = None,
        lsn: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.offset = offset
        self.lsn = lsn

    def __str__(self) -> str:
        kind = self.kind if self.kind is not None else "unknown message"
        offset = str(self.offset) if self.offset is not None else "?"
        lsn = self.lsn
        if isinstance(lsn, int) and 0 <= lsn <= MAX_LSN:
            lsn_text = format_lsn(lsn)
        else:
            lsn_text = "unknown" if lsn is None else repr(lsn)
        return f"{kind} at offset {offset}, LSN {lsn_text}: {self.reason}"

    def __repr__(self) -> str:
        return f"ProtocolError({self.reason!r}, kind={self.kind!r}, offset={self.offset!r}, lsn={self.lsn!r})"

    def __reduce__(self):
        # Keyword-only attributes are lost by Exception's default pickling; errors raised on
        # Spark executors must survive the trip back to the driver intact.
        return (_rebuild, (self.reason, self.kind, self.offset, self.lsn))


def _rebuild(reason: str, kind: str | None, offset: int | None, lsn: int | None) -> ProtocolError:
    """Unpickling helper for :meth:`ProtocolError.__reduce__`."""
    return ProtocolError(reason, kind=kind, offset=offset, lsn=lsn)
