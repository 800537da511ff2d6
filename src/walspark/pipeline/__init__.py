"""The pipeline of ``walspark run`` as a library: :class:`Pipeline` and what it is made of.

Modules, one concern each: ``settings`` (what a run is given, the stop switch), ``preflight``
(checks before anything starts), ``status`` (what a run has done, readable from any thread),
``progress`` (the per-batch lines from Spark's listener), ``queries`` (the streaming query, its
schema-change restarts and clean stop), ``runner`` (one run, snapshot to stop), ``handle`` (a
run in a background thread), ``builder`` (:class:`Pipeline`). None imports PySpark at import
time, so ``import walspark.pipeline`` stays cheap.
"""

from walspark.pipeline.builder import Pipeline
from walspark.pipeline.handle import PipelineHandle
from walspark.pipeline.preflight import preflight
from walspark.pipeline.queries import SchemaStuckError
from walspark.pipeline.runner import run_pipeline
from walspark.pipeline.settings import RunSettings, StopSwitch
from walspark.pipeline.status import PipelineStatus, RunSummary

__all__ = ["Pipeline", "PipelineHandle", "PipelineStatus", "RunSettings", "RunSummary", "SchemaStuckError",
           "StopSwitch", "preflight", "run_pipeline"]
