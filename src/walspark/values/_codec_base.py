"""The base :class:`Codec` and :data:`UNCHANGED_TOAST`: what every codec shares.

Why a module of its own: the scalar codecs (:mod:`walspark.values.codecs`) and the container
codecs (:mod:`._container_codecs`, which delegate to an element's codec) both derive from
:class:`Codec`, so it lives below both; :mod:`walspark.values.codecs` re-exports it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ._columns import Raw, RawColumn, raw_list
from .errors import ValueConversionError

Fn = Callable[[Any], Any]
_CONVERSION_ERRORS = (ValueError, struct.error, IndexError, TypeError, OverflowError, ArithmeticError)


class _UnchangedToast:
    """The value of a ``'u'`` TupleData column: not sent because it did not change.

    Deliberately not None: an unchanged TOAST value is not NULL, and code that treats it as
    NULL overwrites real data (the most reported bug of CDC tools).
    """

    __slots__ = ()
    _instance: _UnchangedToast | None = None

    def __new__(cls) -> _UnchangedToast:
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


#: Returned by :meth:`Codec.decode` for kind ``'u'`` (compare with ``is``).
UNCHANGED_TOAST = _UnchangedToast()


class Codec:
    """Base class; see :mod:`walspark.values.codecs`. Subclasses set the decoding functions."""

    __slots__ = ("arrow_type", "delimiter", "name", "oid")

    def __init__(self, oid: int, name: str, arrow_type: pa.DataType, delimiter: str = ",") -> None:
        self.oid = oid
        self.name = name
        self.arrow_type = arrow_type
        self.delimiter = delimiter  # pg_type.typdelim, used when this is an array element

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} oid={self.oid} arrow={self.arrow_type}>"

    # -- per value -----------------------------------------------------------------
    def decode_text(self, data: Raw) -> Any:
        raise NotImplementedError

    def decode_binary(self, data: Raw) -> Any:
        raise NotImplementedError

    def text_storage(self, data: Raw) -> Any:
        return self.decode_text(data)

    def binary_storage(self, data: Raw) -> Any:
        return self.decode_binary(data)

    def decode(self, kind: str, data: Raw | None) -> Any:
        """One TupleData column: 't'/'b' decode, 'n' gives None, 'u' gives UNCHANGED_TOAST."""
        if kind == "t":
            return self._wrap(self.decode_text, data)
        if kind == "b":
            return self._wrap(self.decode_binary, data)
        if kind == "u":
            return UNCHANGED_TOAST
        if kind == "n":
            return None
        raise ValueConversionError(f"unknown TupleData column kind {kind!r}", type_name=self.name, type_oid=self.oid)

    # -- per column ------------------------------------------------------------------
    def arrow_from_text(self, values: RawColumn) -> pa.Array:
        return self._build(self.text_storage, values)

    def arrow_from_binary(self, values: RawColumn) -> pa.Array:
        return self._build(self.binary_storage, values)

    # -- helpers ---------------------------------------------------------------------
    def _wrap(self, fn: Fn, data: Any) -> Any:
        try:
            return fn(data)
        except ValueConversionError as exc:
            raise exc.with_context(type_name=self.name, type_oid=self.oid) from None
        except _CONVERSION_ERRORS as exc:
            raise ValueConversionError(
                f"cannot decode: {exc}",
                type_name=self.name,
                type_oid=self.oid,
                value=bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else data,
            ) from exc

    def _build(self, fn: Fn, values: RawColumn) -> pa.Array:
        values = raw_list(values)

        def run() -> list[Any]:
            return [None if v is None else fn(v) for v in values]

        items = self._wrap(lambda _: run(), None)
        try:
            return pa.array(items, type=self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise ValueConversionError(
                f"value does not fit {self.arrow_type}: {exc}", type_name=self.name, type_oid=self.oid
            ) from exc
