"""Injection points: the named places where a test kills, pauses or fails a run, and nothing else does.

Why in the package: a crash window is only reached exactly when the process itself stops there,
so the point has to be in the code it interrupts (PostgreSQL's injection points exist for the
same reason). Every point is off unless its environment variable is set in the run's process,
and costs one dictionary lookup when it is not; they are all here, so a reader sees the whole set.
"""

from __future__ import annotations

import logging
import os
import threading
import time

__all__ = ["COPY_FAIL_AFTER_WAVES", "COPY_PAUSE", "COPY_RELEASE", "CRASH_AT", "HANDOFF_PAUSE", "WAVE_PAUSE",
           "count", "crash_point", "pause", "seconds"]  # fmt: skip

log = logging.getLogger(__name__)

#: The crash point at which the driver SIGKILLs its own process group (the JVM with it):
#: ``changes-appended`` (a batch's change logs are durable, Spark has not committed the batch, so
#: the slot is not confirmed), ``fold-planned`` (a fold's plan is written, nothing folded),
#: ``fold-committed`` (the mirror holds the fold, its progress row and plan do not); a ``--once``
#: run's driver batches: ``checkpoint-logged`` (a begun checkpoint's batch 0 planned, not
#: committed), ``driver-batch-logged``, ``driver-batch-applied``.
CRASH_AT = "WALSPARK_TEST_CRASH_AT"
#: Seconds a committed table copy waits for its hand-off (batches go on meanwhile).
HANDOFF_PAUSE = "WALSPARK_TEST_HANDOFF_PAUSE"
#: Seconds a table copy waits inside its snapshot before its COPY tasks start, ended early once
#: the file named by :data:`COPY_RELEASE` exists (the test releases it when it has seen enough).
COPY_PAUSE = "WALSPARK_TEST_COPY_PAUSE"
COPY_RELEASE = "WALSPARK_TEST_COPY_RELEASE"
#: Seconds a table copy waits after each committed wave (a copy half done, for kill tests).
WAVE_PAUSE = "WALSPARK_TEST_WAVE_PAUSE"
#: The number of waves after which a table copy fails (a crash in the middle, in-process).
COPY_FAIL_AFTER_WAVES = "WALSPARK_TEST_COPY_FAIL_AFTER_WAVES"


def crash_point(name: str) -> None:
    """SIGKILL this process group here if :data:`CRASH_AT` names this point."""
    if os.environ.get(CRASH_AT) == name:
        import signal

        log.warning("injection point: killed at %s", name)
        os.killpg(os.getpgrp(), signal.SIGKILL)


def seconds(variable: str) -> float:
    """The seconds a pause point is set to (0: off)."""
    return float(os.environ.get(variable) or 0)


def count(variable: str) -> int:
    """The count a failure point is set to (0: off)."""
    return int(os.environ.get(variable) or 0)


def pause(variable: str, release: str | None, stop: threading.Event) -> None:
    """Wait as long as ``variable`` says, until the file named by ``release`` exists, or ``stop``."""
    deadline = time.monotonic() + seconds(variable)
    path = os.environ.get(release) if release else None
    while time.monotonic() < deadline and not (path and os.path.exists(path)):
        if stop.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            return
