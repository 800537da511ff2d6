"""The Python workers of the stream's first batch, started while the run does other things.

It reads nothing and writes nothing: a failure is logged and otherwise ignored. See
docs/design/staging.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Warmup", "warm_workers"]

log = logging.getLogger(__name__)

NAME = "walspark_warmup"


class _Reader(DataSourceReader):
    def __init__(self) -> None:
        import walspark.spark.datasource.source  # noqa: F401 - what the stream's planning worker imports

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        import walspark.spark.datasource.source  # noqa: F401 - what the stream's tasks import to decode

        return iter(())


class WarmupSource(DataSource):
    """``format("walspark_warmup")``: no rows; its planning and its task import walspark."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "x int"

    def reader(self, schema) -> DataSourceReader:
        return _Reader()


class Warmup:
    """The background read started by :func:`warm_workers`; :meth:`wait` before stopping Spark."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self.error: Exception | None = None  # what failed the read, if it did
        self._thread = threading.Thread(target=self._run, name="walspark-warmup", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._spark.dataSource.register(WarmupSource)
            self._spark.sparkContext.setJobDescription("walspark: start the data source's Python workers")
            self._spark.read.format(NAME).schema("x int").load().collect()
        except Exception as exc:
            self.error = exc
            log.debug("warming the Python workers failed (the first batch starts them)", exc_info=True)

    @property
    def running(self) -> bool:
        """Whether the read has not ended yet."""
        return self._thread.is_alive()

    def wait(self, timeout: float = 60.0) -> None:
        """Wait for the read to end (a Spark session must not stop under a running job)."""
        self._thread.join(timeout)


def warm_workers(spark: SparkSession) -> Warmup:
    """Start the stream's Python workers in the background (see the module docstring)."""
    return Warmup(spark)
