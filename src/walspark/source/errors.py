"""Errors of :mod:`walspark.source`: one-line, actionable, never carrying a password.

A ``retryable`` flag tells a dropped connection from failures waiting cannot fix, which are
raised at once. See docs/design/source.md.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationFailed",
    "ConnectionLost",
    "DatabaseNotFound",
    "InvalidDsn",
    "InvalidName",
    "OptionError",
    "PermissionDenied",
    "PublicationNotFound",
    "ReconnectExhausted",
    "ReplicationError",
    "SlotExists",
    "SlotInUse",
    "SlotInvalidated",
    "SlotNotFound",
    "SourceError",
    "TlsFailed",
    "WalLevelNotLogical",
]


class SourceError(Exception):
    """Base class. ``retryable`` says whether reconnecting later may succeed.

    ``sqlstate`` is the server's error code when there was one (``"42704"``...), else None.
    The message is a single line (newlines from server text are folded) so that it fits a log
    line and a CLI error without hiding the cause on a second line nobody reads.
    """

    retryable: bool = False

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        message = " ".join(message.split())
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate


class InvalidName(SourceError, ValueError):
    """A slot or publication name PostgreSQL would reject (or silently truncate)."""


class InvalidDsn(SourceError, ValueError):
    """A connection string libpq cannot parse."""


class OptionError(SourceError, ValueError):
    """Replication options that the server cannot honour or that contradict each other."""


class SlotNotFound(SourceError):
    """The replication slot does not exist (in this database)."""


class SlotExists(SourceError):
    """A slot of that name already exists."""


class SlotInUse(SourceError):
    """Another walsender holds the slot; usually our own previous connection not yet gone."""

    retryable = True


class SlotInvalidated(SourceError):
    """The server removed WAL the slot needed (``wal_status = lost``) or invalidated it.

    The changes in between are gone for good: the only way forward is a new slot and a new
    snapshot of the tables.
    """


class PublicationNotFound(SourceError):
    """A publication named in the options does not exist in the slot's database."""


class PermissionDenied(SourceError):
    """The role may not do this (REPLICATION attribute, ownership, pg_hba)."""


class AuthenticationFailed(PermissionDenied):
    """Wrong password or no pg_hba.conf entry."""


class TlsFailed(SourceError):
    """The TLS the DSN's ``sslmode`` asks for cannot be set up (server without SSL, bad certificate).

    Not retryable: the server's configuration or the DSN has to change first.
    """


class DatabaseNotFound(SourceError):
    """The database in the DSN does not exist."""


class WalLevelNotLogical(SourceError):
    """``wal_level`` is not ``logical``: logical decoding is impossible until it is changed."""


class ReplicationError(SourceError):
    """Any other error reported by the server that retrying will not fix."""


class ConnectionLost(SourceError):
    """The connection failed or dropped (network, server restart, terminated walsender)."""

    retryable = True


class ReconnectExhausted(SourceError):
    """Reconnecting failed within the configured attempts/time; the last cause is chained."""
