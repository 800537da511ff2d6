"""What the tests do at walspark's injection points (:mod:`walspark._injection`): kill, pause, fail.

:func:`act` is the action: each behaviour is off unless its environment variable is set in the
process that reaches the point. A ``walspark run`` child gets the action with the variables of
:func:`environment` (this folder on its ``PYTHONPATH``, so it imports this module); a test that
runs walspark in its own process installs it with :func:`installed`. Everything runs on the
driver (no point is reached in a Spark Python worker).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from walspark import _injection

log = logging.getLogger(__name__)

#: The point at which the driver SIGKILLs its own process group (the JVM with it), logging
#: ``injection point: killed at <name>``: a ``--once`` run's driver batches: ``checkpoint-logged``
#: (a begun checkpoint's batch 0 planned, not committed), ``driver-batch-logged``,
#: ``driver-batch-applied``, ``head-start-claimed`` (the backlog staged while Spark started).
CRASH_AT = "WALSPARK_TEST_CRASH_AT"
#: Seconds a table copy waits inside its snapshot before its COPY tasks start (``copy-started``),
#: ended early once the file named by :data:`COPY_RELEASE` exists (the test releases it when it
#: has seen enough).
COPY_PAUSE = "WALSPARK_TEST_COPY_PAUSE"
COPY_RELEASE = "WALSPARK_TEST_COPY_RELEASE"
#: Seconds a table copy waits after each committed wave but the last (``wave-committed``: a copy
#: half done, for kill tests).
WAVE_PAUSE = "WALSPARK_TEST_WAVE_PAUSE"
#: The number of waves after which a table copy fails (``wave-committed``: a crash in the middle,
#: in-process).
COPY_FAIL_AFTER_WAVES = "WALSPARK_TEST_COPY_FAIL_AFTER_WAVES"
#: Seconds a committed table copy waits for its hand-off (``copy-committed``; batches go on meanwhile).
HANDOFF_PAUSE = "WALSPARK_TEST_HANDOFF_PAUSE"

FOLDER = Path(__file__).resolve().parent


def act(name: str, **context: Any) -> None:
    """The action at injection point ``name`` (see the variables above)."""
    if os.environ.get(CRASH_AT) == name:
        log.warning("injection point: killed at %s", name)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    if name == "copy-started":
        _pause(_seconds(COPY_PAUSE), os.environ.get(COPY_RELEASE), context["stop"])
    elif name == "copy-committed":
        _pause(_seconds(HANDOFF_PAUSE), None, context["stop"])
    elif name == "wave-committed":
        fail_after = int(os.environ.get(COPY_FAIL_AFTER_WAVES) or 0)
        if fail_after and context["wave"] >= fail_after:
            raise RuntimeError(f"test hook: the copy of {context['table']} fails after {fail_after} wave(s)")
        pause = _seconds(WAVE_PAUSE)
        if pause:
            context["stop"].wait(pause)


def environment() -> dict[str, str]:
    """The variables that give a ``walspark run`` child process :func:`act` (on top of its own)."""
    path = os.pathsep.join(p for p in (str(FOLDER), os.environ.get("PYTHONPATH")) if p)
    return {_injection.ACTION: f"{Path(__file__).stem}:act", "PYTHONPATH": path}


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """:func:`act` at the points reached in this process, for the ``with`` block."""
    previous = _injection.install(act)
    try:
        yield
    finally:
        _injection.install(previous)


def _seconds(variable: str) -> float:
    return float(os.environ.get(variable) or 0)


def _pause(seconds: float, release: str | None, stop: threading.Event) -> None:
    """Wait ``seconds``, until the file ``release`` exists, or until ``stop``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (release and os.path.exists(release)):
        if stop.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            return
