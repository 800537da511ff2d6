"""The benchmarks' streaming pipeline in a background thread (shared by e2e and freshness).

Both time a live ``run_pipeline`` — the code of ``walspark run`` — while a writer commits at a
fixed rate, so the pipeline runs beside the measuring code, and its failure must end the
benchmark with the reason instead of leaving it waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def start_pipeline(spark: SparkSession, settings: Any, say: Callable[[str], None], *, timeout: float,
                   failures: list[BaseException]) -> threading.Thread:  # fmt: skip
    """Run the pipeline in a daemon thread; return once its query is active.

    Its exception, if any, is appended to ``failures`` (which the caller keeps checking).
    Raises SystemExit if it fails or is not streaming within ``timeout`` seconds.
    """
    from walspark.cli.run import run_pipeline

    def runner() -> None:
        try:
            run_pipeline(spark, settings, say=say)
        except BaseException as exc:  # reported by the caller
            failures.append(exc)

    thread = threading.Thread(target=runner, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not spark.streams.active:
        if failures or time.monotonic() > deadline:
            raise SystemExit(f"the pipeline did not start: {failures}")
        time.sleep(0.2)
    return thread
