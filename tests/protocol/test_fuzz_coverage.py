"""Coverage-guided fuzzing of the decoders (atheris), for a bounded time, as a subprocess.

Why a subprocess: libFuzzer owns the process it runs in — it exits the process on a crash
and installs its own signal handlers — so it cannot run inside pytest. The test runs
``fuzz_decoder.py`` for a time budget (``WALSPARK_FUZZ_SECONDS``, default 45) on a fresh
corpus seeded with real encoded messages and values, and fails if any input made something
other than ``ProtocolError`` / ``ValueConversionError`` escape (libFuzzer then exits
non-zero and names the crash file, kept under pytest's tmp dir for replay with
``python tests/protocol/fuzz_decoder.py <crash file>``).

The execution-count floor guards against a fuzzer that "passes" by not running: a broken
seed corpus, an import error swallowed somewhere, or a target that returns at once.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from depth import sweep

FUZZ_SCRIPT = Path(__file__).with_name("fuzz_decoder.py")
SRC = Path(__file__).resolve().parents[2] / "src"
SECONDS = int(sweep("WALSPARK_FUZZ_SECONDS", "45", "600"))
# A 2-CPU machine at load 7 still runs over a thousand inputs a second; 10 000 in the whole
# budget only fails when the target is not really executing (a broken seed corpus, a target
# that returns at once).
MIN_EXECUTIONS = 10_000

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                       reason="atheris is not installed for this interpreter (no wheel for it); "
                              "the hypothesis fuzz tests in test_fuzz.py still run"),
    pytest.mark.timeout(SECONDS + 300),
]


def _stat(output: str, name: str) -> int | None:
    match = re.search(rf"^stat::{name}:\s+(\d+)", output, re.MULTILINE)
    return int(match.group(1)) if match else None


def test_coverage_guided_fuzzing_finds_no_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus"
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, str(FUZZ_SCRIPT), f"-max_total_time={SECONDS}", f"-artifact_prefix={artifacts}/",
         "-print_final_stats=1", str(corpus)],
        env=env, capture_output=True, text=True, timeout=SECONDS + 240,
    )
    output = result.stderr + result.stdout
    crashes = sorted(p.name for p in artifacts.iterdir())
    assert result.returncode == 0, (
        f"the fuzzer found a crash (exit {result.returncode}, inputs kept in {artifacts}: {crashes});"
        f" last output:\n{output[-6000:]}")
    executed = _stat(output, "number_of_executed_units")
    done = re.findall(r"^#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)", output, re.MULTILINE)
    assert executed is not None, f"no final statistics in the fuzzer's output:\n{output[-3000:]}"
    summary = f"atheris: {executed} inputs in {SECONDS} s"
    if done:
        _, cov, features, corpus_size = done[-1]
        summary += f", coverage {cov} edges / {features} features, corpus {corpus_size} inputs"
    with capsys.disabled():  # shown even without -s: the figures are the point of a fuzz run
        print(f"\n{summary}")
    assert executed >= MIN_EXECUTIONS, f"only {executed} inputs executed in {SECONDS} s:\n{output[-3000:]}"
    assert not crashes, crashes
