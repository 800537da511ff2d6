"""walspark: PostgreSQL logical replication (pgoutput) into Delta Lake tables through Spark.

``walspark.Pipeline`` (:mod:`walspark.pipeline`), ``walspark.maintain``, ``walspark.read_table``
and ``walspark.fresh_view`` (:mod:`walspark.spark.lake.fresh`) are imported on first use, so
``import walspark`` stays cheap (no PySpark).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Pipeline",
    "PipelineHandle",
    "PipelineStatus",
    "RunSummary",
    "__version__",
    "fresh_view",
    "maintain",
    "read_table",
]

if TYPE_CHECKING:
    from walspark.pipeline import Pipeline, PipelineHandle, PipelineStatus, RunSummary
    from walspark.spark.lake.fresh import fresh_view, read_table
    from walspark.spark.lake.maintenance import maintain


def __getattr__(name: str) -> Any:
    if name in ("Pipeline", "PipelineHandle", "PipelineStatus", "RunSummary"):
        import walspark.pipeline

        return getattr(walspark.pipeline, name)
    if name == "maintain":
        from walspark.spark.lake.maintenance import maintain

        return maintain
    if name in ("read_table", "fresh_view"):
        import walspark.spark.lake.fresh

        return getattr(walspark.spark.lake.fresh, name)
    raise AttributeError(f"module 'walspark' has no attribute {name!r}")
