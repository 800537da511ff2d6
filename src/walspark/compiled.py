"""Which hot path is in force: the compiled one (``walspark_c``) or the pure-Python reference.

``walspark_c`` is optional; without it the pure path runs and this says so once per process.
See docs/running.md ("The compiled hot path").
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

__all__ = ["API", "IMPLEMENTATION", "PURE_VARIABLE", "speedups"]

log = logging.getLogger(__name__)

#: Set to 1 to run the pure-Python hot path even where ``walspark_c`` is installed.
PURE_VARIABLE = "WALSPARK_PURE_PYTHON"

#: The ``walspark_c`` interface this walspark calls (``walspark_c.API``).
API = 4


def _load() -> ModuleType | None:
    if os.environ.get(PURE_VARIABLE, "").strip() not in ("", "0"):
        log.info("%s is set: the pure-Python hot path is in force", PURE_VARIABLE)
        return None
    try:
        import walspark_c
    except ImportError as exc:
        log.info("walspark_c is not installed (%s): the pure-Python hot path is in force "
                 "(./dev setup builds it; pip install ./c)", exc)  # fmt: skip
        return None
    if getattr(walspark_c, "API", 1) != API:  # built from other sources than this walspark's
        log.warning("walspark_c %s is out of date (interface %s, walspark needs %s): the pure-Python hot path "
                    "is in force (./dev setup rebuilds it; pip install ./c)", getattr(walspark_c, "__version__", "?"),
                    getattr(walspark_c, "API", 1), API)  # fmt: skip
        return None
    return walspark_c


#: The compiled module, or None where the pure-Python path is in force.
speedups: ModuleType | None = _load()

#: ``"c"`` or ``"python"``: what the hot path runs on in this process.
IMPLEMENTATION = "c" if speedups is not None else "python"
