"""The compiled hot path against the pure-Python reference on one message.

Shared by the differential tests (``test_compiled.py``) and the coverage-guided fuzzer
(``fuzz_decoder.py``), so both hold the compiled path to one contract: ``scan_row_change``
accepts exactly the row changes ``decode_message`` decodes, locates their TupleData parts
where the reference reads them, ``gather_columns`` turns each part into the same kinds and
values, and the message loop (``add_row_changes``) keeps exactly what the scan accepts.
Whatever the bytes, none of them crashes or reads out of bounds.
"""

from __future__ import annotations

import sys
from types import ModuleType

import pyarrow as pa

from walspark.protocol import Delete, Insert, ProtocolError, TupleData, Update, decode_message, read_tuple_data


def gathered_rows(speedups: ModuleType, parts: list[tuple[bytes, int] | None], ncols: int) -> list[TupleData] | None:
    """``gather_columns`` read back into TupleData rows (absent rows as all-NULL), or None."""
    columns = speedups.gather_columns(parts, ncols)
    if columns is None:
        return None
    n = len(parts)
    kinds = [bytearray(n) for _ in range(ncols)] if ncols else []
    values: list[list[bytes | None]] = []
    for j, (flags, null_count, column_kinds, validity, unchanged, offsets, data) in enumerate(columns):
        raw = pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(validity), pa.py_buffer(offsets),
                                                     pa.py_buffer(data)], null_count)  # fmt: skip
        raw.validate(full=True)
        values.append(raw.to_pylist())
        kinds[j][:] = column_kinds
        assert null_count == sum(1 for k in column_kinds if k in b"nu"), (j, column_kinds, null_count)
        marks = pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(unchanged)]).to_pylist()
        assert marks == [k == ord("u") for k in column_kinds], (j, column_kinds, marks)
        present = {chr(k) for k in column_kinds}
        expected_flags = sum(bit for kind, bit in (("t", speedups.HAS_TEXT), ("b", speedups.HAS_BINARY),
                                                   ("u", speedups.HAS_UNCHANGED), ("n", speedups.HAS_NULL))
                             if kind in present)  # fmt: skip
        assert flags == expected_flags, (j, flags, present)
    return [TupleData("".join(chr(kinds[j][i]) for j in range(ncols)), tuple(values[j][i] for j in range(ncols)))
            for i in range(n)]


def check_row_change(speedups: ModuleType, payload: bytes, version: int, in_stream: bool,
                     parallel: bool | None = False) -> None:
    """Compiled scan and gather == pure decode, for any bytes in any legal decoder context."""
    check_message_loop(speedups, payload, version, in_stream)
    try:
        message = decode_message(payload, protocol_version=version, in_stream=in_stream, parallel_abort=parallel)
    except ProtocolError:
        message = None
    head = speedups.scan_row_change(payload, in_stream)
    if not isinstance(message, (Insert, Update, Delete)):
        assert head is None, f"the compiled scan accepts what the reference refuses: {payload!r} -> {head}"
        return
    assert head is not None, f"the compiled scan refuses {message!r}"
    kind, xid, relation_id, key_pos, old_pos, new_pos = head
    assert (kind, xid, relation_id) == (payload[0], message.xid, message.relation_id), (head, message)
    for name, pos in (("key_tuple", key_pos), ("old_tuple", old_pos), ("new_tuple", new_pos)):
        expected = getattr(message, name, None)
        if expected is None:
            assert pos == -1, (name, head, message)
            continue
        assert read_tuple_data(payload, pos) == expected, (name, head, message)
        width = len(expected.kinds)
        assert gathered_rows(speedups, [(payload, pos), None], width) == [
            expected, TupleData("n" * width, (None,) * width)], (name, message)
        if width:  # a part of another width does not fit the relation: the pure path decides
            assert speedups.gather_columns([(payload, pos)], width + 1) is None


def check_message_loop(speedups: ModuleType, payload: bytes, version: int, in_stream: bool, *,
                       numbered: bool = True) -> None:
    """``add_row_changes`` keeps a message as a row exactly when the scan (held to the reference
    by :func:`check_row_change`) accepts it as a row change, with the parts where the scan found
    them and the numbers it was given; it hands anything else back untouched, and stops there."""
    head = speedups.scan_row_change(payload, in_stream) if version >= 2 or not in_stream else None
    batch = speedups.RowBatch("version")
    item = (7, 0x1234, in_stream, payload) if numbered else (0x1234, in_stream, payload)
    after = (8, 0x1235, False, b"R") if numbered else (0x1235, False, b"R")  # a message it never keeps
    added, seq, left = speedups.add_row_changes({16384 if head is None else head[2]: batch}, iter([item, after]),
                                                numbered, version, 0x5000, 99, -5, 2, 7)  # fmt: skip
    if head is None:
        assert (added, seq, left) == (0, 7, item) and len(batch) == 0, (payload, added, left)
        return
    assert (added, seq, left) == (1, 8, after) and len(batch) == 1, (payload, added, left)
    _, _, _, key_pos, old_pos, new_pos = head
    old = old_pos if old_pos >= 0 else key_pos
    assert batch.parts(True) == [None if new_pos < 0 else (payload, new_pos)], payload
    assert batch.parts(False) == [None if old < 0 else (payload, old)], payload
    assert batch.absent(True) == bytes([new_pos < 0]) and batch.absent(False) == bytes([old < 0]), payload
    assert batch.columns() == ([0x5000], [0x1234], [7], [99], [-5], [2], [chr(payload[0])])
    envelope = batch.envelope()
    assert [int.from_bytes(b, sys.byteorder, signed=True) for b in envelope[:6]] == [0x5000, 0x1234, 7, 99, -5, 2]
    assert envelope[6:] == ((0).to_bytes(4, sys.byteorder) + (1).to_bytes(4, sys.byteorder), payload[:1], 2)


def check_gather_hostile(speedups: ModuleType, payload: bytes) -> None:
    """``gather_columns`` on unchecked bytes: a result equal to the reference reader's, or None."""
    for pos in range(min(len(payload), 4)):
        try:
            expected: TupleData | None = read_tuple_data(payload, pos)
        except ProtocolError:
            expected = None
        width = len(expected.kinds) if expected is not None else (payload[pos] << 8 | payload[pos + 1]
                                                                   if pos + 1 < len(payload) else 0)  # fmt: skip
        rows = gathered_rows(speedups, [(payload, pos)], width)
        if expected is None:
            assert rows is None, (payload, pos, rows)
        else:
            assert rows == [expected], (payload, pos, rows, expected)
