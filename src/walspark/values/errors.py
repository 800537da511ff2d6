"""Errors raised when a PostgreSQL value cannot be represented exactly.

Why one error type: the pipeline must stop (or route a row aside) when a value would
otherwise be rounded, truncated or nulled silently. Every such place raises
:class:`ValueConversionError`, a :class:`ValueError`, naming the column and the type so
the operator knows which per-column policy to change.
"""

from __future__ import annotations

__all__ = ["ValueConversionError"]


class ValueConversionError(ValueError):
    """A PostgreSQL value that cannot be decoded or represented without loss.

    The message names the column (when known), the PostgreSQL type and OID, and a short
    excerpt of the raw value, so that the fix (a per-column policy) is obvious.
    """

    def __init__(
        self,
        message: str,
        *,
        column: str | None = None,
        type_name: str | None = None,
        type_oid: int | None = None,
        value: bytes | str | None = None,
    ) -> None:
        self.reason = message
        self.column = column
        self.type_name = type_name
        self.type_oid = type_oid
        self.value = value
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.column is not None:
            where.append(f"column {self.column!r}")
        if self.type_name is not None or self.type_oid is not None:
            where.append(f"type {self.type_name or '?'} (oid {self.type_oid})")
        text = ", ".join(where)
        out = f"{text}: {self.reason}" if text else self.reason
        if self.value is not None:
            raw = self.value if isinstance(self.value, str) else repr(self.value)
            if len(raw) > 80:
                raw = raw[:77] + "..."
            out += f" [value: {raw}]"
        return out

    def with_context(
        self,
        *,
        column: str | None = None,
        type_name: str | None = None,
        type_oid: int | None = None,
        value: bytes | str | None = None,
    ) -> ValueConversionError:
        """Return a copy with missing context filled in (existing context wins)."""
        return ValueConversionError(
            self.reason,
            column=self.column if self.column is not None else column,
            type_name=self.type_name if self.type_name is not None else type_name,
            type_oid=self.type_oid if self.type_oid is not None else type_oid,
            value=self.value if self.value is not None else value,
        )
