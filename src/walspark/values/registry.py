"""The type registry: type OID (+ typmod + column policy) -> :class:`Codec`.

Built-in types are fixed; user types are registered at run time. Anything else resolves to the
unknown-type fallback, with one warning per type and registry — never a crash, never a dropped
column.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from . import bits, geometry, network, numeric, oids, scalars, textsearch
from . import datetimes as dt
from .codecs import (
    INTERVAL_ARROW_TYPE,
    ArrayCodec,
    BinaryCodec,
    BoolCodec,
    Codec,
    CompositeCodec,
    MultirangeCodec,
    NumberCodec,
    RangeCodec,
    ScalarCodec,
    TextCodec,
    UnknownCodec,
    decimal_column,
    shifted_column,
)
from .datetimes import InfinityPolicy
from .errors import ValueConversionError
from .interval import Interval, decode_interval_binary, parse_interval_text
from .numeric import NumericPolicy

__all__ = ["BUILTIN_TYPE_NAMES", "ColumnOptions", "TypeRegistry", "UnknownTypeWarning"]

log = logging.getLogger("walspark.values")


class UnknownTypeWarning(UserWarning):
    """A column's type is not known to walspark; its values are kept as text/bytes."""


@dataclass(frozen=True, slots=True)
class ColumnOptions:
    """Per-column policies (see docs/types.md). Hashable, so codecs are cached by it.

    numeric: numeric columns' Arrow/Spark mapping (:class:`NumericPolicy`).
    infinity: date/timestamp ±infinity in Arrow: "sentinel" (min/max int), "null", "error".
    array_ndims: list nesting depth of array columns (PostgreSQL does not fix it per column).
    array_ignore_bounds: accept arrays whose lower bounds are not 1 (bounds are dropped).
    money_frac_digits: lc_monetary's fraction digits (2 for almost every locale).
    timestamptz_tz: the zone label of Arrow timestamptz columns (values are UTC instants).
    """

    numeric: NumericPolicy = field(default_factory=NumericPolicy)
    infinity: InfinityPolicy = "sentinel"
    array_ndims: int = 1
    array_ignore_bounds: bool = False
    money_frac_digits: int = 2
    timestamptz_tz: str = "UTC"

    def __post_init__(self) -> None:
        if self.infinity not in ("sentinel", "null", "error"):
            raise ValueError(f"unknown infinity policy {self.infinity!r}")
        if not 1 <= self.array_ndims <= 6:
            raise ValueError("array_ndims must be between 1 and 6")


DEFAULT_OPTIONS = ColumnOptions()

Factory = Callable[[int, int, ColumnOptions], Codec]  # (oid, typmod, options) -> codec


def _text(
    oid: int,
    name: str,
    binary: Callable | None = scalars.decode_str,
    *,
    prefix: int | None = 0,
    text: Callable = scalars.decode_str,
    fast_text: bool = True,
    delim: str = ",",
) -> Factory:
    def make(_o: int, _t: int, _opts: ColumnOptions) -> Codec:
        return TextCodec(oid, name, text, binary, fast_text=fast_text, binary_prefix=prefix, delimiter=delim)

    return make


def _reg_binary(data: bytes) -> str:
    """reg* types: the binary form is the OID number, the text form a name; kept as text."""
    return str(scalars.decode_uint4_binary(data))


def _xid8_storage(v: int) -> int:
    if v >= 2**63:
        raise ValueConversionError("xid8 beyond int64", value=str(v))
    return v


def _builtin_factories() -> dict[int, tuple[str, Factory]]:
    o = oids
    t: dict[int, tuple[str, Factory]] = {}

    def add(oid: int, name: str, factory: Factory) -> None:
        t[oid] = (name, factory)

    def fixed(codec: Codec | Callable[[], Codec]) -> Factory:
        """A type whose codec depends on nothing per column: built once, shared."""
        built = codec if isinstance(codec, Codec) else codec()
        return lambda _o, _t, _opts: built

    add(
        o.BOOL,
        "bool",
        fixed(lambda: BoolCodec(o.BOOL, "bool", pa.bool_(), scalars.decode_bool_text, scalars.decode_bool_binary)),
    )
    for oid, name, at, fn, fmt in (
        (o.INT2, "int2", pa.int16(), scalars.decode_int2_binary, "h"),
        (o.INT4, "int4", pa.int32(), scalars.decode_int4_binary, "i"),
        (o.INT8, "int8", pa.int64(), scalars.decode_int8_binary, "q"),
        (o.OID, "oid", pa.int64(), scalars.decode_uint4_binary, "I"),
        (o.XID, "xid", pa.int64(), scalars.decode_uint4_binary, "I"),
        (o.CID, "cid", pa.int64(), scalars.decode_uint4_binary, "I"),
    ):
        add(oid, name, fixed(NumberCodec(oid, name, at, scalars.decode_int_text, fn, fmt)))
    add(
        o.XID8,
        "xid8",
        fixed(
            lambda: ScalarCodec(
                o.XID8,
                "xid8",
                pa.int64(),
                scalars.decode_int_text,
                scalars.decode_uint8_binary,
                to_storage=_xid8_storage,
            )
        ),
    )
    add(
        o.FLOAT4,
        "float4",
        fixed(
            lambda: NumberCodec(
                o.FLOAT4, "float4", pa.float32(), scalars.decode_float4_text, scalars.decode_float4_binary, "f"
            )
        ),
    )
    add(
        o.FLOAT8,
        "float8",
        fixed(
            lambda: NumberCodec(
                o.FLOAT8, "float8", pa.float64(), scalars.decode_float8_text, scalars.decode_float8_binary, "d"
            )
        ),
    )

    def numeric_factory(oid: int, typmod: int, opts: ColumnOptions) -> Codec:
        pol = opts.numeric
        at = numeric.numeric_arrow_type(typmod, pol)
        # numeric_out's text is already the exact string; Arrow's string->decimal cast is
        # exact and refuses NaN, Infinity and anything that would need rounding.
        vector = (lambda a: a) if pa.types.is_string(at) else (lambda a: pc.cast(a, at))
        return ScalarCodec(
            oid,
            "numeric",
            at,
            numeric.decode_numeric_text,
            numeric.decode_numeric_binary,
            to_storage=lambda d: numeric.numeric_to_storage(d, at, pol),
            vector_text=vector,
            vector_binary=None if pa.types.is_string(at) else lambda v: decimal_column(v, at),
        )

    add(o.NUMERIC, "numeric", numeric_factory)

    def money_factory(oid: int, _t: int, opts: ColumnOptions) -> Codec:
        f = opts.money_frac_digits
        return ScalarCodec(
            oid,
            "money",
            pa.decimal128(19, f),
            lambda b: numeric.decode_money_text(b, f),
            lambda b: numeric.decode_money_binary(b, f),
        )

    add(o.MONEY, "money", money_factory)

    # Strings: the value is the characters in both formats.
    for oid, name in (
        (o.TEXT, "text"),
        (o.VARCHAR, "varchar"),
        (o.BPCHAR, "bpchar"),
        (o.NAME, "name"),
        (o.JSON, "json"),
        (o.XML, "xml"),
        (o.UNKNOWN, "unknown"),
        (o.CSTRING, "cstring"),
        (o.REFCURSOR, "refcursor"),
    ):
        add(oid, name, _text(oid, name))
    add(o.JSONB, "jsonb", _text(o.JSONB, "jsonb", scalars.decode_jsonb_binary, prefix=None))
    add(o.JSONPATH, "jsonpath", _text(o.JSONPATH, "jsonpath", scalars.decode_jsonb_binary, prefix=None))
    add(o.CHAR, "char", _text(o.CHAR, "char", scalars.decode_char_binary, prefix=None))
    add(1033, "aclitem", _text(1033, "aclitem", None, prefix=None))  # no send function
    # Values rendered to PostgreSQL's text form from binary.
    for oid, name, fn in (
        (o.INET, "inet", network.decode_inet_binary),
        (o.CIDR, "cidr", network.decode_inet_binary),
        (o.MACADDR, "macaddr", network.decode_macaddr_binary),
        (o.MACADDR8, "macaddr8", network.decode_macaddr8_binary),
        (o.TSVECTOR, "tsvector", textsearch.decode_tsvector_binary),
        (o.TSQUERY, "tsquery", textsearch.decode_tsquery_binary),
        (o.POINT, "point", geometry.decode_point_binary),
        (o.LINE, "line", geometry.decode_line_binary),
        (o.LSEG, "lseg", geometry.decode_lseg_binary),
        (o.PATH, "path", geometry.decode_path_binary),
        (o.POLYGON, "polygon", geometry.decode_polygon_binary),
        (o.CIRCLE, "circle", geometry.decode_circle_binary),
        (o.TID, "tid", scalars.decode_tid_binary),
        (o.PG_LSN, "pg_lsn", scalars.decode_pg_lsn_binary),
        (o.TXID_SNAPSHOT, "txid_snapshot", scalars.decode_snapshot_binary),
        (o.PG_SNAPSHOT, "pg_snapshot", scalars.decode_snapshot_binary),
    ):
        add(oid, name, _text(oid, name, fn, prefix=None))
    add(o.BOX, "box", _text(o.BOX, "box", geometry.decode_box_binary, prefix=None, delim=";"))
    for oid, name in ((o.BIT, "bit"), (o.VARBIT, "varbit")):
        add(
            oid, name, _text(oid, name, bits.decode_bit_binary, prefix=None, text=bits.decode_bit_text, fast_text=False)
        )
    for oid, name in (
        (o.REGPROC, "regproc"),
        (o.REGPROCEDURE, "regprocedure"),
        (o.REGOPER, "regoper"),
        (o.REGOPERATOR, "regoperator"),
        (o.REGCLASS, "regclass"),
        (o.REGTYPE, "regtype"),
        (o.REGCONFIG, "regconfig"),
        (o.REGDICTIONARY, "regdictionary"),
        (o.REGNAMESPACE, "regnamespace"),
        (o.REGROLE, "regrole"),
        (o.REGCOLLATION, "regcollation"),
    ):
        add(oid, name, _text(oid, name, _reg_binary, prefix=None))
    add(
        o.BYTEA,
        "bytea",
        fixed(
            lambda: BinaryCodec(o.BYTEA, "bytea", pa.binary(), scalars.decode_bytea_text, scalars.decode_bytea_binary)
        ),
    )
    add(
        o.UUID,
        "uuid",
        fixed(
            lambda: ScalarCodec(
                o.UUID, "uuid", pa.string(), scalars.decode_uuid_text, scalars.decode_uuid_binary, to_storage=str
            )
        ),
    )

    # Date and time.
    def date_factory(oid: int, _t: int, opts: ColumnOptions) -> Codec:
        inf = opts.infinity
        return ScalarCodec(
            oid,
            "date",
            pa.date32(),
            dt.parse_date_text,
            dt.decode_date_binary,
            to_python=dt.date_to_python,
            to_storage=lambda d: dt.date_to_storage(d, inf),
            vector_text=lambda a: pc.cast(a, pa.date32()),
            vector_binary=lambda v: shifted_column(
                v, "i", pa.int32(), dt.PG_EPOCH_DAYS, (dt.DATE_NOBEGIN, dt.DATE_NOEND), pa.date32()
            ),
        )

    add(o.DATE, "date", date_factory)

    def ts_factory(with_tz: bool) -> Factory:
        name = "timestamptz" if with_tz else "timestamp"

        def make(oid: int, _t: int, opts: ColumnOptions) -> Codec:
            inf = opts.infinity
            at = pa.timestamp("us", tz=opts.timestamptz_tz if with_tz else None)
            parse_as = pa.timestamp("us", tz="UTC" if with_tz else None)
            return ScalarCodec(
                oid,
                name,
                at,
                lambda b: dt.parse_timestamp_text(b, with_tz),
                dt.decode_timestamp_binary,
                to_python=lambda v: dt.timestamp_to_python(v, with_tz),
                to_storage=lambda v: dt.timestamp_to_storage(v, inf),
                vector_text=lambda a: pc.cast(a, parse_as).cast(at),
                vector_binary=lambda v: shifted_column(
                    v, "q", pa.int64(), dt.PG_EPOCH_USECS, (dt.DT_NOBEGIN, dt.DT_NOEND), at
                ),
            )

        return make

    add(o.TIMESTAMP, "timestamp", ts_factory(False))
    add(o.TIMESTAMPTZ, "timestamptz", ts_factory(True))
    add(
        o.TIME,
        "time",
        fixed(
            lambda: ScalarCodec(
                o.TIME, "time", pa.int64(), dt.parse_time_text, dt.decode_time_binary, to_python=dt.time_to_python
            )
        ),
    )
    add(
        o.TIMETZ,
        "timetz",
        fixed(
            lambda: ScalarCodec(
                o.TIMETZ,
                "timetz",
                pa.string(),
                dt.parse_timetz_text,
                dt.decode_timetz_binary,
                to_python=dt.timetz_to_python,
                to_storage=dt.format_timetz,
            )
        ),
    )
    add(
        o.INTERVAL,
        "interval",
        fixed(
            lambda: ScalarCodec(
                o.INTERVAL,
                "interval",
                INTERVAL_ARROW_TYPE,
                parse_interval_text,
                decode_interval_binary,
                to_storage=Interval.as_dict,
            )
        ),
    )
    return t


_BUILTINS = _builtin_factories()

#: OID -> type name of every built-in type walspark decodes (arrays, ranges included).
BUILTIN_TYPE_NAMES: dict[int, str] = {oid: name for oid, (name, _f) in _BUILTINS.items()}
BUILTIN_TYPE_NAMES.update({oids.INT2VECTOR: "int2vector", oids.OIDVECTOR: "oidvector"})
_RANGE_NAMES = {
    3904: "int4range",
    3906: "numrange",
    3908: "tsrange",
    3910: "tstzrange",
    3912: "daterange",
    3926: "int8range",
}
BUILTIN_TYPE_NAMES.update(_RANGE_NAMES)
BUILTIN_TYPE_NAMES.update({m: _RANGE_NAMES[r].replace("range", "multirange") for m, r in oids.MULTIRANGE_RANGE.items()})
for _elem, _arr in oids.ARRAY_OF.items():
    if _elem in BUILTIN_TYPE_NAMES:
        BUILTIN_TYPE_NAMES[_arr] = "_" + BUILTIN_TYPE_NAMES[_elem]


@dataclass(frozen=True, slots=True)
class _Enum:
    name: str


@dataclass(frozen=True, slots=True)
class _Domain:
    name: str
    base_oid: int
    base_typmod: int


@dataclass(frozen=True, slots=True)
class _Composite:
    name: str
    fields: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class _Range:
    name: str
    subtype_oid: int


@dataclass(frozen=True, slots=True)
class _Multirange:
    name: str
    range_oid: int


@dataclass(frozen=True, slots=True)
class _Extension:
    name: str
    factory: Callable[[int, int, ColumnOptions], Codec]


@dataclass(frozen=True, slots=True)
class _Array:
    name: str
    element_oid: int


class TypeRegistry:
    """Resolves (type OID, typmod, options, mode) to a codec; holds user-type registrations.

    One registry per source database (user-type OIDs are per database). Thread-safe for
    reads once registrations are done; registration is cheap and idempotent.
    """

    def __init__(self) -> None:
        self._user: dict[int, object] = {}
        self._names: dict[int, str] = {}
        self._cache: dict[tuple[int, int, ColumnOptions, bool], Codec] = {}
        self._warned: set[int] = set()
        self._opaque: set[int] = set()  # extension types the catalog names: text, without a warning

    # -- registration ------------------------------------------------------------------
    def _register(self, oid: int, entry: object, array_oid: int | None) -> None:
        self._user[oid] = entry
        if array_oid:
            self._user[array_oid] = _Array("_" + entry.name, oid)  # type: ignore[attr-defined]
        self._cache.clear()

    def note_type(self, oid: int, namespace: str, name: str) -> None:
        """Remember a type's name (from pgoutput's Type message) for messages and warnings."""
        self._names[oid] = f"{namespace}.{name}" if namespace and namespace != "pg_catalog" else name

    def register_enum(self, oid: int, name: str, *, array_oid: int | None = None) -> None:
        """An enum: values are their labels (strings) in both formats."""
        self._register(oid, _Enum(name), array_oid)

    def register_domain(
        self, oid: int, base_oid: int, name: str = "", *, base_typmod: int = -1, array_oid: int | None = None
    ) -> None:
        """A domain decodes as its base type (pgoutput sends the domain's OID).

        Also the way to declare an extension type that is text-like in both formats
        (e.g. citext: ``register_domain(citext_oid, oids.TEXT, "citext")``).
        """
        self._register(oid, _Domain(name or f"domain {oid}", base_oid, base_typmod), array_oid)

    def register_composite(
        self, oid: int, name: str, fields: Sequence[tuple[str, int, int]], *, array_oid: int | None = None
    ) -> None:
        """A composite type with its fields as (name, type OID, typmod), in attnum order."""
        self._register(oid, _Composite(name, tuple((n, int(t), int(m)) for n, t, m in fields)), array_oid)

    def register_range(
        self,
        oid: int,
        subtype_oid: int,
        name: str = "",
        *,
        multirange_oid: int | None = None,
        array_oid: int | None = None,
    ) -> None:
        """A user range type over ``subtype_oid`` (and optionally its multirange)."""
        entry = _Range(name or f"range {oid}", subtype_oid)
        self._register(oid, entry, array_oid)
        if multirange_oid:
            self._register(multirange_oid, _Multirange(entry.name.replace("range", "multirange"), oid), None)

    def register_extension(
        self, oid: int, name: str, factory: Callable[[int, int, ColumnOptions], Codec], *, array_oid: int | None = None
    ) -> None:
        """An extension type with a codec of its own (``factory(oid, typmod, options)``; see
        :mod:`.extensions`), and its array type."""
        self._register(oid, _Extension(name, factory), array_oid)

    def register_opaque(self, oid: int) -> None:
        """An extension base type the catalog names but walspark has no codec for (ltree, isbn,
        PostGIS ...): kept as an unknown type is (its text, or its bytes in binary mode), on
        purpose, so without the unknown-type warning."""
        self._opaque.add(oid)

    def register_array(self, array_oid: int, element_oid: int, name: str = "") -> None:
        """An array type over any resolvable element type."""
        self._register(array_oid, _Array(name or f"_{element_oid}", element_oid), None)

    # -- lookup --------------------------------------------------------------------------
    def type_name(self, oid: int) -> str:
        entry = self._user.get(oid)
        if entry is not None:
            return entry.name  # type: ignore[attr-defined]
        return BUILTIN_TYPE_NAMES.get(oid) or self._names.get(oid) or f"oid {oid}"

    def is_known(self, oid: int, _depth: int = 0) -> bool:
        """Whether every part of the type has a codec: an array, domain, composite or range of an
        unknown type is not known (its binary form holds the unknown one's)."""
        entry = self._user.get(oid)
        if entry is None:
            return (
                oid in _BUILTINS or oid in oids.ELEMENT_OF or oid in oids.RANGE_SUBTYPE or oid in oids.MULTIRANGE_RANGE
            )
        if _depth > 32:
            return False
        if isinstance(entry, _Array):
            return self.is_known(entry.element_oid, _depth + 1)
        if isinstance(entry, _Domain):
            return self.is_known(entry.base_oid, _depth + 1)
        if isinstance(entry, _Composite):
            return all(self.is_known(t, _depth + 1) for _, t, _ in entry.fields)
        if isinstance(entry, _Range):
            return self.is_known(entry.subtype_oid, _depth + 1)
        if isinstance(entry, _Multirange):
            return self.is_known(entry.range_oid, _depth + 1)
        return True

    def resolve(
        self, oid: int, typmod: int = -1, options: ColumnOptions = DEFAULT_OPTIONS, *, binary: bool = False
    ) -> Codec:
        """The codec of a column of type ``oid`` with ``typmod`` under ``options``.

        ``binary`` says whether the stream uses pgoutput's binary mode; it only matters
        for unknown types (string column in text mode, binary column in binary mode).
        """
        key = (oid, typmod, options, binary)
        codec = self._cache.get(key)
        if codec is None:
            codec = self._build(oid, typmod, options, binary, depth=0)
            self._cache[key] = codec
        return codec

    def _build(self, oid: int, typmod: int, opts: ColumnOptions, binary: bool, depth: int) -> Codec:
        if depth > 32:
            raise ValueConversionError("type nesting too deep (recursive domain?)", type_oid=oid)
        entry = self._user.get(oid)
        if isinstance(entry, _Enum):
            return TextCodec(oid, entry.name, scalars.decode_str, scalars.decode_str, binary_prefix=0)
        if isinstance(entry, _Domain):
            base_mod = entry.base_typmod if entry.base_typmod != -1 else typmod
            return self._build(entry.base_oid, base_mod, opts, binary, depth + 1)
        if isinstance(entry, _Composite):
            fields = [(n, self._build(t, m, opts, binary, depth + 1)) for n, t, m in entry.fields]
            return CompositeCodec(oid, entry.name, fields)
        if isinstance(entry, _Range):
            el = self._build(entry.subtype_oid, -1, opts, binary, depth + 1)
            return RangeCodec(oid, entry.name, el)
        if isinstance(entry, _Multirange):
            rng = self._build(entry.range_oid, -1, opts, binary, depth + 1)
            assert isinstance(rng, RangeCodec)
            return MultirangeCodec(oid, entry.name, rng)
        if isinstance(entry, _Extension):
            return entry.factory(oid, typmod, opts)
        if isinstance(entry, _Array):
            el = self._build(entry.element_oid, typmod, opts, binary, depth + 1)
            return ArrayCodec(oid, entry.name, el, opts.array_ndims, ignore_bounds=opts.array_ignore_bounds)
        builtin = _BUILTINS.get(oid)
        if builtin is not None:
            return builtin[1](oid, typmod, opts)
        if oid in (oids.INT2VECTOR, oids.OIDVECTOR):
            el = self._build(oids.INT2 if oid == oids.INT2VECTOR else oids.OID, -1, opts, binary, depth + 1)
            return ArrayCodec(oid, BUILTIN_TYPE_NAMES[oid], el, 1, vector=True)
        if oid in oids.ELEMENT_OF:
            elem_oid = oids.ELEMENT_OF[oid]
            # An array's typmod is its element's (e.g. numeric(10,2)[]).
            el = self._build(elem_oid, typmod, opts, binary, depth + 1)
            return ArrayCodec(oid, self.type_name(oid), el, opts.array_ndims, ignore_bounds=opts.array_ignore_bounds)
        if oid in oids.RANGE_SUBTYPE:
            el = self._build(oids.RANGE_SUBTYPE[oid], -1, opts, binary, depth + 1)
            return RangeCodec(oid, self.type_name(oid), el)
        if oid in oids.MULTIRANGE_RANGE:
            rng = self._build(oids.MULTIRANGE_RANGE[oid], -1, opts, binary, depth + 1)
            assert isinstance(rng, RangeCodec)
            return MultirangeCodec(oid, self.type_name(oid), rng)
        return self._unknown(oid, binary)

    def _unknown(self, oid: int, binary: bool) -> Codec:
        name = self.type_name(oid)
        if oid in self._opaque:
            log.debug(
                "PostgreSQL type %s (oid %d): an extension type kept as %s", name, oid, "bytes" if binary else "text"
            )
        elif oid not in self._warned:
            self._warned.add(oid)
            msg = (
                f"PostgreSQL type {name} (oid {oid}) is not known to walspark: its values are kept as "
                f"{'bytes (binary mode)' if binary else 'text'}; register it (enum, domain, composite) "
                "for a typed column"
            )
            log.warning(msg)
            warnings.warn(msg, UnknownTypeWarning, stacklevel=4)
        return UnknownCodec(oid, name, pa.binary() if binary else pa.string())
