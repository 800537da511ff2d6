"""pgoutput options for ``START_REPLICATION``, negotiated from the server's version.

By default the newest protocol the server speaks; a combination it cannot honour raises
:class:`~walspark.source.errors.OptionError` before any connection. See docs/design/source.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from walspark.protocol.lsn import format_lsn

from .errors import OptionError
from .names import (
    publication_names_value,
    quote_repl_ident,
    quote_repl_literal,
    validate_publication_name,
    validate_slot_name,
)

__all__ = ["ResolvedOptions", "StreamOptions", "max_protocol_version", "start_replication_command"]

Streaming = Literal["off", "on", "parallel"]
OriginFilter = Literal["any", "none"]


def max_protocol_version(server_version_num: int) -> int:
    """The newest pgoutput protocol version a server speaks (``server_version_num`` like 180001)."""
    major = server_version_num // 10000
    if major >= 16:
        return 4
    if major == 15:
        return 3
    if major == 14:
        return 2
    return 1


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """What the caller asks for; ``None`` means "the best the server offers".

    Attributes:
        publication_names: publications to stream (at least one; any valid identifier).
        proto_version: pgoutput protocol version, default the newest the server speaks.
        binary: send column values in binary format (PostgreSQL ≥ 14).
        messages: include ``pg_logical_emit_message`` messages (PostgreSQL ≥ 14).
        streaming: ``"off"``, ``"on"``, ``"parallel"`` (or a bool). Default ``"on"`` when the
            protocol is ≥ 2: large transactions are streamed before commit so that neither the
            server nor we hold them whole. ``"parallel"`` needs protocol 4; its only visible
            effect is that Stream Abort carries the abort LSN and time.
        two_phase: decode prepared transactions at PREPARE (protocol ≥ 3); ``None`` means on
            where the protocol allows it (≥ 3, PostgreSQL 15+), off otherwise. PostgreSQL then
            enables two-phase on the slot for good (``two_phase_at`` = where that stream
            started): a consumer must then handle Begin Prepare … Prepare, Commit Prepared and
            Rollback Prepared, and keep a prepared transaction until its outcome.
        origin: ``"any"`` or ``"none"`` (only changes without a replication origin),
            PostgreSQL ≥ 16.
    """

    publication_names: tuple[str, ...]
    proto_version: int | None = None
    binary: bool = False
    messages: bool = False
    streaming: Streaming | bool | None = None
    two_phase: bool | None = False
    origin: OriginFilter | None = None

    def __post_init__(self) -> None:
        names = self.publication_names
        if isinstance(names, str):
            names = (names,)
        object.__setattr__(self, "publication_names", tuple(validate_publication_name(n) for n in names))
        if not self.publication_names:
            raise OptionError("at least one publication name is required")
        if isinstance(self.streaming, bool):
            object.__setattr__(self, "streaming", "on" if self.streaming else "off")
        if self.streaming not in (None, "off", "on", "parallel"):
            raise OptionError(f"streaming must be 'off', 'on' or 'parallel', not {self.streaming!r}")
        if self.origin not in (None, "any", "none"):
            raise OptionError(f"origin must be 'any' or 'none', not {self.origin!r}")
        if self.proto_version is not None and self.proto_version not in (1, 2, 3, 4):
            raise OptionError(f"proto_version must be 1-4, not {self.proto_version!r}")

    def resolve(self, server_version_num: int) -> ResolvedOptions:
        """Concrete options for a server, or :class:`OptionError` saying what cannot work."""
        major = server_version_num // 10000
        if major < 10:
            raise OptionError(f"PostgreSQL {major} is not supported (logical replication with pgoutput needs 10+)")
        top = max_protocol_version(server_version_num)
        proto = self.proto_version if self.proto_version is not None else top
        if proto > top:
            raise OptionError(f"proto_version {proto} needs a newer server: PostgreSQL {major} speaks up to {top}")
        # a bool was made "on"/"off" when the options were made
        streaming: Streaming = self.streaming if isinstance(self.streaming, str) else ("on" if proto >= 2 else "off")
        if streaming != "off" and proto < 2:
            raise OptionError(f"streaming={streaming} needs proto_version >= 2 (PostgreSQL 14+), got {proto}")
        if streaming == "parallel" and proto < 4:
            raise OptionError(f"streaming=parallel needs proto_version 4 (PostgreSQL 16+), got {proto}")
        two_phase = self.two_phase if self.two_phase is not None else proto >= 3
        if two_phase and proto < 3:
            raise OptionError(f"two_phase needs proto_version >= 3 (PostgreSQL 15+), got {proto}")
        if (self.binary or self.messages) and major < 14:
            raise OptionError(f"binary and messages need PostgreSQL 14+, server is {major}")
        if self.origin is not None and major < 16:
            raise OptionError(f"origin needs PostgreSQL 16+, server is {major}")
        return ResolvedOptions(
            publication_names=self.publication_names,
            proto_version=proto,
            binary=self.binary,
            messages=self.messages,
            streaming=streaming,
            two_phase=two_phase,
            origin=self.origin,
            server_major=major,
        )


@dataclass(frozen=True, slots=True)
class ResolvedOptions:
    """The options actually sent; also what a decoder of this stream must be configured with."""

    publication_names: tuple[str, ...]
    proto_version: int
    binary: bool
    messages: bool
    streaming: Streaming
    two_phase: bool
    origin: OriginFilter | None
    server_major: int

    @property
    def streaming_parallel(self) -> bool:
        """For :class:`walspark.protocol.decoder.Decoder`'s ``streaming_parallel``."""
        return self.streaming == "parallel"

    def plugin_options(self) -> list[tuple[str, str]]:
        """``(name, value)`` pairs for pgoutput, only those this server knows."""
        opts = [
            ("proto_version", str(self.proto_version)),
            ("publication_names", publication_names_value(self.publication_names)),
        ]
        if self.server_major >= 14:
            opts += [("binary", _bool(self.binary)), ("messages", _bool(self.messages))]
            # 14/15 parse streaming as a boolean; 16+ also accept "parallel".
            if self.server_major >= 16:
                opts.append(("streaming", self.streaming))
            else:
                opts.append(("streaming", _bool(self.streaming == "on")))
        if self.server_major >= 15:
            opts.append(("two_phase", _bool(self.two_phase)))
        if self.origin is not None:
            opts.append(("origin", self.origin))
        return opts


def _bool(value: bool) -> str:
    return "true" if value else "false"


def start_replication_command(slot: str, start_lsn: int, options: ResolvedOptions) -> str:
    """``START_REPLICATION SLOT "slot" LOGICAL X/Y ("opt" 'value', ...)``, fully quoted."""
    validate_slot_name(slot)
    opts = ", ".join(f"{k} {quote_repl_literal(v)}" for k, v in options.plugin_options())
    return f"START_REPLICATION SLOT {quote_repl_ident(slot)} LOGICAL {format_lsn(start_lsn)} ({opts})"
