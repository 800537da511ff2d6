"""How deep the suite goes: the default run (every window once) or the soak run (the sweeps).

``./dev test --soak`` (or ``WALSPARK_SOAK=1``) turns every sweep up at once: more kills, every
crash round, more fuzzing time, every cluster target. Each sweep keeps its own variable, which
wins over both depths, so one sweep can still be run alone (``WALSPARK_CRASH_KILLS=20``).
docs/testing.md lists what each depth checks.
"""

from __future__ import annotations

import os

#: The environment variable that selects the soak run (set by ``--soak``, see tests/conftest.py).
SOAK_VARIABLE = "WALSPARK_SOAK"


def soak() -> bool:
    """Whether this is the soak run."""
    return os.environ.get(SOAK_VARIABLE, "") not in ("", "0")


def sweep(name: str, default: str, soaked: str) -> str:
    """The value of one sweep's setting: ``name`` from the environment if set, else this depth's."""
    return os.environ.get(name) or (soaked if soak() else default)

