"""OIDs of PostgreSQL's built-in types, as fixed in pg_type.dat (stable since PG 14).

Why constants and not a catalog query: `values` is pure and must decode a capture file
offline. Built-in OIDs never change across releases; user types (enums, domains,
composites, extension types) are registered at run time through the registry.
"""

from __future__ import annotations

from typing import Final

BOOL: Final = 16
BYTEA: Final = 17
CHAR: Final = 18
NAME: Final = 19
INT8: Final = 20
INT2: Final = 21
INT2VECTOR: Final = 22
INT4: Final = 23
REGPROC: Final = 24
TEXT: Final = 25
OID: Final = 26
TID: Final = 27
XID: Final = 28
CID: Final = 29
OIDVECTOR: Final = 30
JSON: Final = 114
XML: Final = 142
POINT: Final = 600
LSEG: Final = 601
PATH: Final = 602
BOX: Final = 603
POLYGON: Final = 604
LINE: Final = 628
CIDR: Final = 650
FLOAT4: Final = 700
FLOAT8: Final = 701
UNKNOWN: Final = 705
CIRCLE: Final = 718
MACADDR8: Final = 774
MONEY: Final = 790
MACADDR: Final = 829
INET: Final = 869
BPCHAR: Final = 1042
VARCHAR: Final = 1043
DATE: Final = 1082
TIME: Final = 1083
TIMESTAMP: Final = 1114
TIMESTAMPTZ: Final = 1184
INTERVAL: Final = 1186
TIMETZ: Final = 1266
BIT: Final = 1560
VARBIT: Final = 1562
NUMERIC: Final = 1700
REFCURSOR: Final = 1790
REGPROCEDURE: Final = 2202
REGOPER: Final = 2203
REGOPERATOR: Final = 2204
REGCLASS: Final = 2205
REGTYPE: Final = 2206
RECORD: Final = 2249
CSTRING: Final = 2275
UUID: Final = 2950
TXID_SNAPSHOT: Final = 2970
PG_LSN: Final = 3220
TSVECTOR: Final = 3614
TSQUERY: Final = 3615
REGCONFIG: Final = 3734
REGDICTIONARY: Final = 3769
JSONB: Final = 3802
JSONPATH: Final = 4072
REGNAMESPACE: Final = 4089
REGROLE: Final = 4096
REGCOLLATION: Final = 4191
PG_SNAPSHOT: Final = 5038
XID8: Final = 5069

INT4RANGE: Final = 3904
NUMRANGE: Final = 3906
TSRANGE: Final = 3908
TSTZRANGE: Final = 3910
DATERANGE: Final = 3912
INT8RANGE: Final = 3926
INT4MULTIRANGE: Final = 4451
NUMMULTIRANGE: Final = 4532
TSMULTIRANGE: Final = 4533
TSTZMULTIRANGE: Final = 4534
DATEMULTIRANGE: Final = 4535
INT8MULTIRANGE: Final = 4536

#: element type OID -> array type OID (pg_type.typarray), for every built-in base type.
ARRAY_OF: Final[dict[int, int]] = {
    BOOL: 1000,
    BYTEA: 1001,
    CHAR: 1002,
    NAME: 1003,
    INT8: 1016,
    INT2: 1005,
    INT2VECTOR: 1006,
    INT4: 1007,
    REGPROC: 1008,
    TEXT: 1009,
    OID: 1028,
    TID: 1010,
    XID: 1011,
    CID: 1012,
    OIDVECTOR: 1013,
    JSON: 199,
    XML: 143,
    POINT: 1017,
    LSEG: 1018,
    PATH: 1019,
    BOX: 1020,
    POLYGON: 1027,
    LINE: 629,
    CIDR: 651,
    FLOAT4: 1021,
    FLOAT8: 1022,
    CIRCLE: 719,
    MACADDR8: 775,
    MONEY: 791,
    MACADDR: 1040,
    INET: 1041,
    BPCHAR: 1014,
    VARCHAR: 1015,
    DATE: 1182,
    TIME: 1183,
    TIMESTAMP: 1115,
    TIMESTAMPTZ: 1185,
    INTERVAL: 1187,
    TIMETZ: 1270,
    BIT: 1561,
    VARBIT: 1563,
    NUMERIC: 1231,
    REFCURSOR: 2201,
    REGPROCEDURE: 2207,
    REGOPER: 2208,
    REGOPERATOR: 2209,
    REGCLASS: 2210,
    REGTYPE: 2211,
    RECORD: 2287,
    CSTRING: 1263,
    UUID: 2951,
    TXID_SNAPSHOT: 2949,
    PG_LSN: 3221,
    TSVECTOR: 3643,
    TSQUERY: 3645,
    REGCONFIG: 3735,
    REGDICTIONARY: 3770,
    JSONB: 3807,
    JSONPATH: 4073,
    REGNAMESPACE: 4090,
    REGROLE: 4097,
    REGCOLLATION: 4192,
    PG_SNAPSHOT: 5039,
    XID8: 271,
    INT4RANGE: 3905,
    NUMRANGE: 3907,
    TSRANGE: 3909,
    TSTZRANGE: 3911,
    DATERANGE: 3913,
    INT8RANGE: 3927,
    INT4MULTIRANGE: 6150,
    NUMMULTIRANGE: 6151,
    TSMULTIRANGE: 6152,
    TSTZMULTIRANGE: 6153,
    DATEMULTIRANGE: 6155,
    INT8MULTIRANGE: 6157,
}

#: array type OID -> element type OID.
ELEMENT_OF: Final[dict[int, int]] = {arr: elem for elem, arr in ARRAY_OF.items()}

#: range type OID -> subtype OID (pg_range.rngsubtype).
RANGE_SUBTYPE: Final[dict[int, int]] = {
    INT4RANGE: INT4,
    NUMRANGE: NUMERIC,
    TSRANGE: TIMESTAMP,
    TSTZRANGE: TIMESTAMPTZ,
    DATERANGE: DATE,
    INT8RANGE: INT8,
}

#: multirange type OID -> range type OID (pg_range.rngmultitypid, inverted).
MULTIRANGE_RANGE: Final[dict[int, int]] = {
    INT4MULTIRANGE: INT4RANGE,
    NUMMULTIRANGE: NUMRANGE,
    TSMULTIRANGE: TSRANGE,
    TSTZMULTIRANGE: TSTZRANGE,
    DATEMULTIRANGE: DATERANGE,
    INT8MULTIRANGE: INT8RANGE,
}
