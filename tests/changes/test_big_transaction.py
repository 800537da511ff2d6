"""One transaction of 5,000,000 rows, streamed: the consumer's memory stays bounded (issue 5).

Runs ``bench/memory.py`` (a child process consumes the slot with a 64 MiB assembler budget;
its peak RSS comes from the OS) and checks that every row arrives at commit and that the peak
stays under the budget plus the interpreter's own footprint — independent of the row count.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory.py"


@pytest.mark.slow
def test_five_million_row_transaction_in_bounded_memory():
    spec = importlib.util.spec_from_file_location("bench_memory", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    result = bench.run(rows=5_000_000, budget_mib=64)

    assert result["rows"] == 5_000_000
    assert result["streamed"] and result["spilled_transactions"] >= 1
    assert result["peak_accounted_bytes"] <= (64 << 20) + (1 << 20)
    # Budget + interpreter, libraries and I/O buffers: far below the ~800 MiB the raw messages
    # of this transaction would take if held in memory.
    assert result["peak_kib"] < result["baseline_kib"] + 64 * 1024 + 96 * 1024
