"""Opening connections and turning driver errors into :mod:`walspark.source.errors`.

psycopg 3 for ordinary SQL, psycopg2 for the replication connection (COPY BOTH). See
docs/design/source.md for how errors are classified.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .dsn import dsn_params, redact_dsn, redact_secrets, with_defaults
from .errors import (
    AuthenticationFailed,
    ConnectionLost,
    DatabaseNotFound,
    InvalidDsn,
    PermissionDenied,
    PublicationNotFound,
    ReplicationError,
    SlotExists,
    SlotInUse,
    SlotInvalidated,
    SlotNotFound,
    SourceError,
    TlsFailed,
    WalLevelNotLogical,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["classify_error", "connect_replication", "connect_sql", "error_from_exception"]

log = logging.getLogger(__name__)

#: Added to every DSN that does not set them (see :mod:`walspark.source.dsn`).
DEFAULT_PARAMS = {"connect_timeout": "10", "application_name": "walspark"}

_RETRYABLE_STATES = {"55006", "57P01", "57P02", "57P03", "53300", "40001", "40P01"}
_RETRYABLE_TEXT = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "terminating connection",
    "server closed the connection",
    "connection refused",
    "could not connect",
    "timeout expired",
    "no connection to the server",
    "connection reset",
    "broken pipe",
    "ssl syscall error",
    "eof detected",
)


def classify_error(sqlstate: str | None, text: str, *, dsn: str | None = None, what: str = "") -> SourceError:
    """Map a server/driver error to the walspark error that says what to do about it."""
    text = redact_secrets(" ".join(str(text).split()), dsn)
    where = f" ({redact_dsn(dsn)})" if dsn else ""
    prefix = f"{what}: " if what else ""
    low = text.lower()
    state = sqlstate or ""

    def make(cls: type[SourceError], advice: str = "") -> SourceError:
        return cls(f"{prefix}{text}{where}{'; ' + advice if advice else ''}", sqlstate=sqlstate)

    if "replication slot" in low and "does not exist" in low:
        return make(SlotNotFound, "create it with `walspark slot create` (or check --slot and the database)")
    if "publication" in low and "does not exist" in low:
        return make(PublicationNotFound, "create it (CREATE PUBLICATION) in the slot's database")
    if state == "42710" or ("replication slot" in low and "already exists" in low):
        return make(SlotExists, "pick another name or drop the old slot")
    if "can no longer get changes" in low or "has been invalidated" in low or "was invalidated" in low:
        return make(
            SlotInvalidated,
            "the WAL it needed is gone: drop the slot (walspark slot drop) and run into a new --target "
            "(a new slot and snapshot)",
        )
    if "wal_level" in low:
        return make(WalLevelNotLogical, "set wal_level = logical and restart PostgreSQL")
    if state == "55006" or ("replication slot" in low and "is active for pid" in low):
        return make(SlotInUse)
    if "no password supplied" in low:  # libpq, before the server could say more
        return make(
            AuthenticationFailed,
            "the server asks for a password and none was given: set PGPASSWORD, add a line to ~/.pgpass, "
            "or add the password to the connection string (its password key, or user:password@ in a URI)",
        )
    if (
        state in ("28P01", "28000")
        or "password authentication failed" in low
        or "no pg_hba.conf entry" in low
        or "authentication failed" in low
        or ("role" in low and "does not exist" in low)
        or "password is required" in low
        or "pg_hba.conf rejects" in low
    ):
        return make(AuthenticationFailed, "check the user, password and pg_hba.conf")
    if (
        state == "42501"
        or "permission denied" in low
        or "must be superuser" in low
        or "must have replication" in low
        or "replication role" in low
        or "must be owner" in low
    ):
        return make(PermissionDenied, "the role needs the REPLICATION attribute (and ownership for DDL)")
    if state == "3D000" or ("database" in low and "does not exist" in low):
        return make(DatabaseNotFound, "check dbname in the connection string")
    if "invalid" in low and " value:" in low and not state:
        # libpq: 'invalid sslmode value: "x"' (also gssencmode, target_session_attrs...)
        return make(
            InvalidDsn,
            "fix that parameter in the connection string (sslmode: disable, allow, prefer, "
            "require, verify-ca or verify-full)",
        )
    if (
        "server does not support ssl" in low
        or "ssl was required" in low
        or "certificate verify failed" in low
        or "root certificate file" in low
        or ("ssl error" in low and "certificate" in low)
    ):
        return make(
            TlsFailed,
            "the server does not offer the TLS the DSN's sslmode requires: enable ssl on the "
            "server (with a certificate), or choose another sslmode",
        )
    if state in _RETRYABLE_STATES or state.startswith("08") or not state:
        if not state and not any(t in low for t in _RETRYABLE_TEXT):
            # No SQLSTATE and an unknown text: still a transport-level failure in practice.
            log.debug("unclassified connection error treated as retryable: %s", text)
        return make(ConnectionLost)
    return make(ReplicationError)


def error_from_exception(exc: BaseException, *, dsn: str | None = None, what: str = "") -> SourceError:
    """:func:`classify_error` for a psycopg / psycopg2 exception (or any exception)."""
    if isinstance(exc, SourceError):
        return exc
    sqlstate = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return classify_error(sqlstate, str(exc) or type(exc).__name__, dsn=dsn, what=what)


def connect_sql(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A psycopg 3 connection in autocommit mode; failures raise a walspark error."""
    import psycopg

    try:
        return psycopg.connect(with_defaults(dsn, **DEFAULT_PARAMS), autocommit=True, **kwargs)
    except ValueError as exc:  # malformed DSN (from with_defaults)
        raise InvalidDsn(str(exc)) from None
    except psycopg.Error as exc:
        raise error_from_exception(exc, dsn=dsn, what="cannot connect") from None


def with_session_settings(dsn: str) -> str:
    """``dsn`` with the settings walspark's text-format parsers rely on, as startup options.

    In text mode pgoutput renders values with the *walsender's* settings (DateStyle,
    IntervalStyle, extra_float_digits, bytea_output, client_encoding), so they are fixed for
    the replication connection. The user's own ``options`` come after ours, so they still win.
    """
    from psycopg.conninfo import make_conninfo

    from walspark.values import RECOMMENDED_SESSION_SETTINGS

    ours = " ".join(f"-c {name}={value}" for name, value in RECOMMENDED_SESSION_SETTINGS.items())
    theirs = dsn_params(dsn).get("options", "")
    return make_conninfo(dsn, options=f"{ours} {theirs}".strip())


def connect_replication(dsn: str) -> Any:
    """A psycopg2 ``LogicalReplicationConnection`` (``replication=database``, autocommit)."""
    import psycopg2
    import psycopg2.extras

    try:
        full = with_session_settings(with_defaults(dsn, **DEFAULT_PARAMS))
    except ValueError as exc:
        raise InvalidDsn(str(exc)) from None
    try:
        return psycopg2.connect(full, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    except psycopg2.Error as exc:
        raise error_from_exception(exc, dsn=dsn, what="cannot open replication connection") from None
