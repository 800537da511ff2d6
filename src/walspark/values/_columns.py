"""Raw columns and the whole-column conversions that the codecs use where they are exact.

Each conversion declines with :class:`_Fallback` so that the codec's per-value path, the
reference, decides. See docs/design/values.md.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from types import ModuleType
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from walspark import compiled

Raw = bytes  # pgoutput hands values over as bytes
#: A column of raw values: bytes per row (None for no value), or the same as an Arrow binary
#: array (the compiled hot path builds that from the message buffers, no object per value).
RawColumn: TypeAlias = Sequence[Raw | None] | pa.BinaryArray


class _Fallback(Exception):
    """A vectorised path declines a column (e.g. it holds a sentinel); use the per-value one."""


#: The Arrow type of each struct format that the compiled path byte-swaps into place.
_FIXED_WIDTH = {"h": pa.int16(), "i": pa.int32(), "q": pa.int64(), "f": pa.float32(), "d": pa.float64()}


def unpack_column(values: RawColumn, fmt: str, arrow_type: pa.DataType,
                  speedups: ModuleType | None = compiled.speedups) -> pa.Array:  # fmt: skip
    """Fixed-size big-endian binary values -> an Arrow array, in one struct call.

    With the compiled path (``speedups``), an Arrow binary array of them is byte-swapped in C
    straight into the Arrow array's buffer instead: no Python object per value. Anything it
    declines takes the struct path, which is the reference.

    Raises _Fallback when a value has the wrong size, so that the per-value path reports it.
    """
    size = struct.calcsize(">" + fmt)
    if (speedups is not None and isinstance(values, pa.BinaryArray) and values.offset == 0
            and _FIXED_WIDTH.get(fmt) == arrow_type):  # fmt: skip
        validity, offsets, data = values.buffers()
        swapped = speedups.fixed_width(validity, offsets, data, len(values), size, fmt in "fd")
        if swapped is not None:
            return pa.Array.from_buffers(arrow_type, len(values), [validity, pa.py_buffer(swapped)], values.null_count)
    values = raw_list(values)
    present = [v for v in values if v is not None]
    if any(len(v) != size for v in present):
        raise _Fallback
    it = iter(struct.unpack(f">{len(present)}{fmt}", b"".join(present)))
    try:
        return pa.array([None if v is None else next(it) for v in values], type=arrow_type)
    except (pa.ArrowInvalid, OverflowError):
        raise _Fallback from None


def decimal_column(values: RawColumn, arrow_type: pa.DataType,
                   speedups: ModuleType | None = compiled.speedups) -> pa.Array:  # fmt: skip
    """numeric binary values -> Arrow decimal128, each summed into its 128-bit integer in C.

    Only on the compiled path, for an Arrow binary array; raises _Fallback (the per-value
    path, which is the reference: Decimal, the column's policy, the precise error) for
    anything else and for anything the C code declines (NaN, ±Infinity, a value that does not
    fit exactly, bytes numeric_send never sends).
    """
    if speedups is None or not isinstance(values, pa.BinaryArray) or values.offset:
        raise _Fallback
    validity, offsets, data = values.buffers()
    out = speedups.numeric_decimal128(validity, offsets, data, len(values), arrow_type.precision, arrow_type.scale)
    if out is None:
        raise _Fallback
    return pa.Array.from_buffers(arrow_type, len(values), [validity, pa.py_buffer(out)], values.null_count)


def shifted_column(values: RawColumn, fmt: str, storage: pa.DataType, offset: int,
                   sentinels: tuple[int, int], arrow_type: pa.DataType,
                   speedups: ModuleType | None = compiled.speedups) -> pa.Array:  # fmt: skip
    """date/timestamp binary -> Arrow: PostgreSQL's count from 2000 shifted to 1970.

    Declines (so the per-value path applies the infinity policy) when the column holds
    ±infinity or a value the shift would overflow.
    """
    raw = unpack_column(values, fmt, storage, speedups)
    lo, hi = pc.min_max(raw).values()
    if lo.is_valid and (lo.as_py() in sentinels or hi.as_py() in sentinels):
        raise _Fallback
    try:
        return pc.add_checked(raw, pa.scalar(offset, storage)).cast(arrow_type)
    except pa.ArrowInvalid:
        raise _Fallback from None


def raw_array(values: RawColumn) -> pa.BinaryArray:
    """A column of raw values as an Arrow binary array (as it is, when it already is one)."""
    return values if isinstance(values, pa.BinaryArray) else pa.array(values, type=pa.binary())


def raw_array_from_buffers(
    length: int, validity: bytes, offsets: bytes, data: bytes, null_count: int
) -> pa.BinaryArray:
    """The Arrow binary array of buffers gathered elsewhere (``walspark_c``), wrapped without a copy."""
    return pa.Array.from_buffers(pa.binary(), length, [pa.py_buffer(validity), pa.py_buffer(offsets),
                                                       pa.py_buffer(data)], null_count)  # fmt: skip


def raw_list(values: RawColumn) -> Sequence[Raw | None]:
    """A column of raw values as bytes per row, for the per-value paths."""
    return values.to_pylist() if isinstance(values, pa.Array) else values


def _utf8_array(values: RawColumn) -> pa.Array:
    """bytes -> Arrow string array, with Arrow's vectorised UTF-8 validation."""
    return raw_array(values).cast(pa.string())
