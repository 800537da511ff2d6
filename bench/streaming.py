"""The benchmarks' streaming pipeline in a background thread (shared by e2e and freshness).

Both time a live :class:`walspark.Pipeline` — the code of ``walspark run`` — while a writer commits at a
fixed rate, so the pipeline runs beside the measuring code, and its failure must end the
benchmark with the reason instead of leaving it waiting.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from walspark.pipeline import Pipeline, PipelineHandle


def start_pipeline(pipeline: Pipeline, *, timeout: float) -> PipelineHandle:
    """Start the pipeline (:meth:`walspark.Pipeline.start`, a background thread); return its handle
    once its query streams. Raises SystemExit with the reason if it fails or is not streaming within
    ``timeout`` seconds; later failures are the handle's ``exception`` (the caller keeps checking).
    """
    handle = pipeline.start()
    deadline = time.monotonic() + timeout
    while handle.status().state != "streaming":
        if not handle.is_active or time.monotonic() > deadline:
            raise SystemExit(f"the pipeline did not start: {handle.exception or handle.status()}")
        time.sleep(0.2)
    return handle


def add_stream_options(parser: argparse.ArgumentParser, *, sample: float, what: str) -> None:
    """The options every streaming benchmark has: the trigger, the reader's sampling, the master."""
    parser.add_argument("--trigger", type=float, default=0.5, help="pipeline trigger interval (default 0.5 s)")
    parser.add_argument("--sample", type=float, default=sample, help=f"{what} sampling interval (default {sample:g} s)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
