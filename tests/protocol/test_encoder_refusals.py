"""The encoder refuses messages that have no wire form, with ValueError (a caller bug, not bad input)."""

from __future__ import annotations

import pytest

from walspark.protocol import (
    Begin,
    Delete,
    Message,
    Relation,
    StreamAbort,
    Truncate,
    TupleData,
    Type,
    Update,
    encode_message,
    encode_tuple,
)

ROW = TupleData("t", (b"1",))


@pytest.mark.parametrize(("message", "match"), [
    (Update(None, 1, ROW, ROW, ROW), "never both"),
    (Delete(None, 1, None, None), "exactly one"),
    (Delete(None, 1, ROW, ROW), "exactly one"),
    (Type(None, 1, "pub\0lic", "t"), "NUL"),
    (Message(None, False, 1, "\udc80", b""), "UTF-8"),
    (Begin(1, 2, 1 << 32), "out of range"),
    (Begin(-1, 2, 3), "out of range"),
    (Truncate(None, 256, (1,)), "out of range"),
    (StreamAbort(1, 1, abort_lsn=5), "both set"),
    (Relation(None, 1, "s", "t", "dd", ()), "one character"),
])
def test_unencodable_messages(message: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_message(message)  # type: ignore[arg-type]


@pytest.mark.parametrize(("tuple_data", "match"), [
    (TupleData("tt", (b"1",)), "2 kinds but 1 values"),
    (TupleData("n", (b"1",)), "must be None"),
    (TupleData("t", (None,)), "needs a bytes value"),
    (TupleData("x", (None,)), "unknown kind"),
])
def test_inconsistent_tuple_data(tuple_data: TupleData, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_tuple(tuple_data)


def test_not_a_message() -> None:
    with pytest.raises(TypeError):
        encode_message(ROW)  # type: ignore[arg-type]
