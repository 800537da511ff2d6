"""Spark integration: the local session factory and the ``pgoutput`` data source.

``register(spark)`` makes ``format("pgoutput")`` available (``spark_session`` calls it); the
data source itself lives in :mod:`walspark.spark.datasource.source`. Imported lazily so that ``import
walspark.spark.session`` does not need pyspark until a session is made.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``pgoutput`` data source on a SparkSession (idempotent)."""
    from walspark.spark.datasource.source import register as _register

    _register(spark)
