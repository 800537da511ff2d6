"""Composite types: record text/binary, registered types as structs, unregistered as text."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from walspark.values import TypeRegistry, UnknownTypeWarning, ValueConversionError, oids, to_arrow_array
from walspark.values.composite import format_record, parse_record_text

from .vectors import array_send, i32, numeric_send, record_send

COMP = 90001


def registry() -> TypeRegistry:
    reg = TypeRegistry()
    reg.register_composite(COMP, "public.item", [("id", oids.INT4, -1), ("name", oids.TEXT, -1),
                                                 ("price", oids.NUMERIC, ((5 << 16) | 2) + 4),
                                                 ("tags", oids.ARRAY_OF[oids.TEXT], -1)], array_oid=90002)
    return reg


def test_record_text_fields() -> None:
    assert parse_record_text('(1,"a b",,"","x""y\\\\z")') == ["1", "a b", None, "", 'x"y\\z']
    assert parse_record_text("()") == [None]


@pytest.mark.parametrize("bad", ["(1,2", "1,2)", '(1,"2)', "(1,2)x"])
def test_record_text_malformed(bad: str) -> None:
    with pytest.raises(ValueConversionError):
        parse_record_text(bad)


def test_registered_composite_both_formats() -> None:
    c = registry().resolve(COMP)
    text = b'(7,"a, b",12.50,"{x,\\"y z\\"}")'
    expected = {"id": 7, "name": "a, b", "price": Decimal("12.50"), "tags": ["x", "y z"]}
    assert c.decode_text(text) == expected
    binary = record_send([(oids.INT4, i32(7)), (oids.TEXT, b"a, b"), (oids.NUMERIC, numeric_send("12.50")),
                          (oids.ARRAY_OF[oids.TEXT], array_send(oids.TEXT, [2], [1], [b"x", b"y z"]))])
    assert c.decode_binary(binary) == expected
    assert c.arrow_type == pa.struct([("id", pa.int32()), ("name", pa.string()), ("price", pa.decimal128(5, 2)),
                                      ("tags", pa.list_(pa.string()))])
    assert to_arrow_array(c, "tb", [text, binary]).array.to_pylist() == [expected, expected]


def test_composite_nulls_and_arrays_of_composites() -> None:
    reg = registry()
    c = reg.resolve(COMP)
    assert c.decode_text(b"(,,,)") == {"id": None, "name": None, "price": None, "tags": None}
    arr = reg.resolve(90002)
    assert arr.decode_text(b'{"(1,a,1.00,{})",NULL}') == [
        {"id": 1, "name": "a", "price": Decimal("1.00"), "tags": []}, None]


def test_field_count_mismatch_is_an_error() -> None:
    with pytest.raises(ValueConversionError, match="fields"):
        registry().resolve(COMP).decode("t", b"(1,2)")


def test_unregistered_composite_is_kept_as_text() -> None:
    reg = TypeRegistry()
    with pytest.warns(UnknownTypeWarning):
        c = reg.resolve(COMP)
    assert c.decode_text(b"(1,x)") == "(1,x)"


@given(st.lists(st.one_of(st.none(), st.text(alphabet=st.characters(blacklist_characters="\x00",
                                                                      blacklist_categories=("Cs",)), max_size=6)),
                min_size=1, max_size=5))
def test_record_text_round_trip(fields: list[str | None]) -> None:
    assert parse_record_text(format_record(fields)) == fields
