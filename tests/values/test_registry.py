"""The registry: enums, domains, user ranges, unknown types (one warning, never a crash)."""

from __future__ import annotations

import logging
import warnings

import pyarrow as pa
import pytest

from walspark.values import ColumnOptions, Range, TypeRegistry, UnknownTypeWarning, oids, to_arrow_array


def test_enum() -> None:
    reg = TypeRegistry()
    reg.register_enum(70001, "public.mood", array_oid=70002)
    c = reg.resolve(70001)
    assert c.arrow_type == pa.string()
    assert c.decode_text(b"happy") == c.decode_binary(b"happy") == "happy"
    assert reg.resolve(70002).decode_text(b"{sad,ok}") == ["sad", "ok"]


def test_domain_decodes_as_base_with_typmod() -> None:
    reg = TypeRegistry()
    reg.register_domain(70010, oids.NUMERIC, "public.price", base_typmod=((10 << 16) | 2) + 4)
    reg.register_domain(70011, 70010, "public.positive_price")  # domain over a domain
    c = reg.resolve(70011)
    assert c.arrow_type == pa.decimal128(10, 2)
    assert to_arrow_array(c, "t", [b"1.50"]).array.to_pylist()[0].as_tuple().exponent == -2


def test_citext_like_extension_as_text_domain() -> None:
    reg = TypeRegistry()
    reg.register_domain(70020, oids.TEXT, "citext")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reg.resolve(70020, binary=True).decode_binary(b"Hello") == "Hello"


def test_user_range_and_multirange() -> None:
    reg = TypeRegistry()
    reg.register_range(70030, oids.FLOAT8, "public.floatrange", multirange_oid=70031)
    assert reg.resolve(70030).decode_text(b"[1.5,2.5)") == Range(1.5, 2.5, True, False)
    assert reg.resolve(70031).decode_text(b"{[1,2)}") == [Range(1.0, 2.0, True, False)]


def test_unknown_type_warns_once_and_keeps_text(caplog: pytest.LogCaptureFixture) -> None:
    reg = TypeRegistry()
    reg.note_type(70040, "public", "hstore")
    with caplog.at_level(logging.WARNING, logger="walspark.values"):
        with pytest.warns(UnknownTypeWarning, match=r"public\.hstore.*70040"):
            c = reg.resolve(70040)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second resolve must not warn again
            reg.resolve(70040)
            reg.resolve(70040, 5, ColumnOptions(array_ndims=2))
    assert sum("70040" in r.message for r in caplog.records) == 1
    assert c.arrow_type == pa.string()
    col = to_arrow_array(c, "tn", [b'"a"=>"1"', None]).array
    assert col.to_pylist() == ['"a"=>"1"', None]


def test_unknown_type_in_binary_mode_is_a_binary_column() -> None:
    reg = TypeRegistry()
    with pytest.warns(UnknownTypeWarning):
        c = reg.resolve(70050, binary=True)
    assert c.arrow_type == pa.binary()
    col = to_arrow_array(c, "bt", [b"\x00\x01raw", b"text form"]).array
    assert col.to_pylist() == [b"\x00\x01raw", b"text form"]


def test_unknown_array_element_falls_back_too() -> None:
    reg = TypeRegistry()
    reg.register_array(70061, 70060)
    with pytest.warns(UnknownTypeWarning):
        c = reg.resolve(70061)
    assert c.decode_text(b'{"(1,2)",x}') == ["(1,2)", "x"]


def test_every_builtin_resolves_without_warning() -> None:
    reg = TypeRegistry()
    all_oids = set(oids.ARRAY_OF) | set(oids.ARRAY_OF.values())
    all_oids -= {oids.RECORD, oids.ARRAY_OF[oids.RECORD]}  # anonymous records are not column types
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for oid in sorted(all_oids):
            assert reg.resolve(oid).arrow_type is not None, oid
            assert reg.type_name(oid) != f"oid {oid}", oid


def test_codecs_are_cached_per_options() -> None:
    reg = TypeRegistry()
    assert reg.resolve(oids.INT4) is reg.resolve(oids.INT4)
    a = reg.resolve(oids.ARRAY_OF[oids.INT4], -1, ColumnOptions(array_ndims=1))
    b = reg.resolve(oids.ARRAY_OF[oids.INT4], -1, ColumnOptions(array_ndims=2))
    assert a.arrow_type != b.arrow_type


def test_option_validation() -> None:
    with pytest.raises(ValueError):
        ColumnOptions(infinity="clamp")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ColumnOptions(array_ndims=0)


def test_register_catalog_rows() -> None:
    from walspark.values import register_catalog_rows

    rows = [
        (80001, "public", "mood", "e", 80002, 0, -1, None, None, None),
        (80003, "shop", "price", "d", 80004, oids.NUMERIC, ((8 << 16) | 2) + 4, None, None, None),
        (80005, "public", "item", "c", 80006, 0, -1, None, None, [["id", "23", "-1"], ["p", "80003", "-1"]]),
        (80007, "public", "floatrange", "r", 80008, 0, -1, oids.FLOAT8, 80009, None),
        (80010, "public", "citext", "b", 80011, 0, -1, None, None, None),
        (80012, "public", "ltree", "b", 80013, 0, -1, None, None, None),
    ]
    reg = TypeRegistry()
    assert register_catalog_rows(reg, rows) == 5
    assert reg.resolve(80001).decode_text(b"ok") == "ok"
    assert reg.resolve(80003).arrow_type == pa.decimal128(8, 2)
    assert reg.resolve(80006).decode_text(b'{"(1,2.50)"}')[0]["p"].as_tuple().exponent == -2
    assert reg.resolve(80009).decode_text(b"{[1,2)}") == [Range(1.0, 2.0, True, False)]
    assert reg.resolve(80011).decode_binary(b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x01\x39\x4b"
                                            b"\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01A") == ["A"]
    with warnings.catch_warnings():  # named by the catalog: kept as its text on purpose, no warning
        warnings.simplefilter("error", UnknownTypeWarning)
        assert reg.resolve(80012).arrow_type == pa.string()
        assert reg.resolve(80013).decode_text(b'{a.b,NULL}') == ["a.b", None]  # an array of its text
    assert not reg.is_known(80012) and not reg.is_known(80013)
    assert reg.type_name(80003) == "shop.price"


@pytest.mark.parametrize(("form", "data", "why"), [
    ("text", b'"a"=>"1", "b"', "'=>' expected"),
    ("text", b'"a"=>"1" "b"=>"2"', "',' expected"),
    ("text", b'"a"=>"1', "unterminated quoted string"),
    ("text", b'=>"1"', "a key or value expected"),
    ("binary", b"\x00\x00\x00\x01\x00\x00\x00\x05ab", "truncated"),
    ("binary", b"\x00\x00\x00\x01\xff\xff\xff\xff\x00\x00\x00\x00", "a NULL key"),
    ("binary", b"\xff\xff\xff\xfe", "negative pair count"),
    ("binary", b"\x00\x00\x00\x00\x00", "trailing bytes"),
])  # fmt: skip
def test_malformed_hstore_is_a_clear_error(form: str, data: bytes, why: str) -> None:
    """A malformed hstore value, in either format, raises the values layer's error naming what is wrong."""
    from walspark.values.errors import ValueConversionError
    from walspark.values.extensions import decode_hstore_binary, parse_hstore

    with pytest.raises(ValueConversionError, match=why):
        (parse_hstore if form == "text" else decode_hstore_binary)(data)
