"""Injection points: named places in the code where a test can act (kill, pause or fail the run).

A crash window is reached exactly only when the process itself stops there, so the point has
to be in the code it interrupts; what happens at a point does not belong to the package. As
PostgreSQL's injection points, the package names its points and nothing more: the actions are
attached by the tests (``tests/support/walspark_injection_points.py``), in-process with :func:`install`
or, in a ``walspark run`` child, by :data:`ACTION` naming an importable ``module:function``.
With no action a point costs one check.

The points (all on the driver): ``checkpoint-logged``, ``driver-batch-logged``,
``driver-batch-applied`` (:mod:`walspark.pipeline.driver_batch`); ``head-start-claimed``
(:mod:`walspark.pipeline.head_start`); ``copy-started`` (with the
``table``) and ``copy-committed``, with the copy's ``stop`` event, and ``copy-swapped`` (a side
copy replaced its table, not yet recorded), with the ``table`` and ``stop``
(:mod:`walspark.spark.tablesync.sync`);
``wave-committed``, with the ``table``, the ``wave`` number and ``stop``
(:mod:`walspark.spark.tablesync.copying`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

__all__ = ["ACTION", "install", "point"]

#: The environment variable naming the action as ``module:function``, imported at the first point.
ACTION = "WALSPARK_INJECTION"

Action = Callable[..., None]

_action: Action | None = None
_loaded = False


def point(name: str, **context: Any) -> None:
    """The injection point ``name``: the installed action runs here, given ``name`` and ``context``."""
    action = _action if _loaded else _load()
    if action is not None:
        action(name, **context)


def install(action: Action | None) -> Action | None:
    """Run ``action`` at every point from now on (None: nothing); returns the action it replaces."""
    global _action, _loaded
    previous = _action if _loaded else _load()
    _action, _loaded = action, True
    return previous


def _load() -> Action | None:
    global _action, _loaded
    spec = os.environ.get(ACTION)
    if spec:
        module, _, function = spec.partition(":")
        _action = getattr(importlib.import_module(module), function)
    _loaded = True
    return _action
