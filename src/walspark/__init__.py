"""walspark: PostgreSQL logical replication (pgoutput) into Delta Lake tables through Spark.

``walspark.Pipeline`` (:mod:`walspark.pipeline`) and ``walspark.maintain``
(:mod:`walspark.spark.lake.maintenance`) are imported on first use, so ``import walspark`` stays
cheap (no PySpark).
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
    "maintain",
]

if TYPE_CHECKING:
    from walspark.pipeline import Pipeline, PipelineHandle, PipelineStatus, RunSummary
    from walspark.spark.lake.maintenance import maintain


def __getattr__(name: str) -> Any:
    if name in ("Pipeline", "PipelineHandle", "PipelineStatus", "RunSummary"):
        import walspark.pipeline

        return getattr(walspark.pipeline, name)
    if name == "maintain":
        from walspark.spark.lake.maintenance import maintain

        return maintain
    raise AttributeError(f"module 'walspark' has no attribute {name!r}")
