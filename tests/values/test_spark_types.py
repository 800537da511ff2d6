"""Spark types derived from the Arrow types (no Spark session needed)."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from walspark.values import TypeRegistry, oids, spark_schema, spark_type

T = pytest.importorskip("pyspark.sql.types")


def test_scalar_mapping() -> None:
    assert spark_type(pa.int16()) == T.ShortType()
    assert spark_type(pa.int64()) == T.LongType()
    assert spark_type(pa.float32()) == T.FloatType()
    assert spark_type(pa.decimal128(38, 10)) == T.DecimalType(38, 10)
    assert spark_type(pa.timestamp("us")) == T.TimestampNTZType()
    assert spark_type(pa.timestamp("us", tz="UTC")) == T.TimestampType()
    assert spark_type(pa.date32()) == T.DateType()
    assert spark_type(pa.binary()) == T.BinaryType()


def test_schema_of_every_family() -> None:
    cols = [("i", oids.INT4, -1), ("n", oids.NUMERIC, ((10 << 16) | 2) + 4), ("iv", oids.INTERVAL, -1),
            ("r", oids.DATERANGE, -1), ("a", oids.ARRAY_OF[oids.FLOAT8], -1), ("t", oids.TIME, -1),
            ("tz", oids.TIMETZ, -1), ("m", oids.INT8MULTIRANGE, -1), ("b", oids.BYTEA, -1)]
    s = spark_schema(cols, TypeRegistry())
    assert s["i"].dataType == T.IntegerType()
    assert s["n"].dataType == T.DecimalType(10, 2)
    assert s["iv"].dataType == T.StructType([T.StructField("months", T.IntegerType()),
                                             T.StructField("days", T.IntegerType()),
                                             T.StructField("microseconds", T.LongType())])
    assert s["r"].dataType["lower"].dataType == T.DateType()
    assert s["a"].dataType == T.ArrayType(T.DoubleType(), True)
    assert s["t"].dataType == T.LongType()
    assert s["tz"].dataType == T.StringType()
    assert isinstance(s["m"].dataType, T.ArrayType)
    assert s["b"].dataType == T.BinaryType()
    assert s["n"].metadata["pg.type"] == "numeric"


def test_values_package_does_not_import_spark() -> None:
    code = "import sys, walspark.values; assert not any(m.startswith('pyspark') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
