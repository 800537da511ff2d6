"""The code's own checks, run by the suite: ruff's lint over ``src/``, ``bench/`` and ``tests/``, ruff's
format over ``src/``, and mypy over ``src/`` (configured in pyproject.toml, pinned in the ``dev`` extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = BIN / tool
    if not exe.exists():
        pytest.fail(f"{tool} is not installed in {BIN}: run ./dev setup (it is in the dev extra)")
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    done = _run("ruff", "check", "--no-cache", "src", "bench", "tests")
    assert done.returncode == 0, done.stdout + done.stderr


def test_src_is_as_ruff_formats_it() -> None:
    done = _run("ruff", "format", "--check", "--no-cache", "src")
    assert done.returncode == 0, "run: .venv/bin/ruff format src\n" + done.stdout + done.stderr


def test_mypy_finds_nothing_in_src() -> None:
    done = _run("mypy", "--python-executable", sys.executable, "--cache-dir=/dev/null")
    assert done.returncode == 0, done.stdout + done.stderr
