"""The ``pgoutput`` Python data source: one name for batch reads (capture files, peeks) and streams.

Registered with :func:`register` (the session factory does it); the schema is decided here, once,
on the driver. Options: :mod:`.options` and docs/data-source.md.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from walspark.spark.datasource.catalog import catalog_layout
from walspark.spark.datasource.options import SourceOptions
from walspark.spark.datasource.reader import CaptureReader, PeekReader, capture_layout
from walspark.spark.datasource.stream_reader import PgoutputStreamReader

__all__ = ["PgoutputDataSource", "register"]


class PgoutputDataSource(DataSource):
    """``format("pgoutput")``: PostgreSQL logical replication changes as typed rows."""

    @classmethod
    def name(cls) -> str:
        return "pgoutput"

    def _options(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def schema(self) -> StructType:
        options = self._options()
        if not options.live:
            return capture_layout(options).spark_schema()
        import psycopg

        assert options.dsn
        with psycopg.connect(options.dsn, autocommit=True) as conn:
            layout, _ = catalog_layout(
                conn,
                options.publications,
                options.table,
                binary=options.binary,
                staging_path=options.staging_location(),
                slot=options.slot,
            )
        return layout.spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._options()
        options.require_batch()
        if options.live:
            return PeekReader(options, schema)
        return CaptureReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._options()
        options.require_stream()
        return PgoutputStreamReader(options, schema)


def register(spark) -> None:  # a SparkSession; typed loosely to keep the import lazy
    """Make ``format("pgoutput")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(PgoutputDataSource)
