"""Both hot paths in one benchmark run: the compiled one here, the pure-Python one in a child process.

Why a child: Spark's Python workers pick their path when they first import walspark
(``WALSPARK_PURE_PYTHON`` in their environment), and they inherit the environment of the JVM
the driver started. A second SparkSession in the same process would reuse that JVM and its
warm workers, so the pure-Python figure needs a process of its own. The child gets the
parent's server (same tables, same changes, its own slot) through one environment variable —
never argv, where a DSN would show in ``ps`` — and hands its figures back as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from walspark.compiled import PURE_VARIABLE, speedups

#: The environment variable carrying a child's task (JSON) from the parent.
TASK_VARIABLE = "WALSPARK_BENCH_CHILD"


def path_name() -> str:
    """How this process decodes: "compiled" or "pure Python" (as the table rows say it)."""
    return "compiled" if speedups is not None else "pure Python"


def child_task() -> dict[str, Any] | None:
    """The task this process was started for by :func:`run_pure`, or None in the parent."""
    text = os.environ.get(TASK_VARIABLE)
    return json.loads(text) if text else None


def run_child(script: str, task: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script`` again in a child process (``env`` added to this one's), for ``task``; the
    figures it reports.

    The child's progress goes to this process's stderr; it answers through :func:`report`.
    """
    with tempfile.TemporaryDirectory(prefix="walspark-bench-child-") as tmp:
        answer = Path(tmp) / "figures.json"
        env = {**os.environ, **(env or {}), TASK_VARIABLE: json.dumps({**task, "answer": str(answer)})}
        subprocess.run([sys.executable, script], env=env, check=True, stdout=sys.stderr)
        return json.loads(answer.read_text())


def run_pure(script: str, task: dict[str, Any]) -> dict[str, Any]:
    """:func:`run_child` with the pure-Python path forced."""
    return run_child(script, task, {PURE_VARIABLE: "1"})


def report(task: dict[str, Any], figures: dict[str, Any]) -> None:
    """The child's answer to :func:`run_pure`."""
    Path(task["answer"]).write_text(json.dumps(figures))
