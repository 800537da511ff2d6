"""The pipeline of ``walspark run`` as a library: :class:`Pipeline` and what it is made of.

One concern per module; none imports PySpark at import time, so ``import walspark.pipeline``
stays cheap. See docs/design/pipeline.md §6.
"""

from walspark.pipeline.builder import Pipeline
from walspark.pipeline.handle import PipelineHandle
from walspark.pipeline.preflight import preflight
from walspark.pipeline.queries import SchemaStuckError
from walspark.pipeline.runner import run_pipeline
from walspark.pipeline.settings import RunSettings, StopSwitch
from walspark.pipeline.status import PipelineStatus, RunSummary

__all__ = [
    "Pipeline",
    "PipelineHandle",
    "PipelineStatus",
    "RunSettings",
    "RunSummary",
    "SchemaStuckError",
    "StopSwitch",
    "preflight",
    "run_pipeline",
]
