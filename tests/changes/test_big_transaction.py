"""One transaction of millions of rows, streamed: the consumer's memory stays bounded (issue 5).

Runs ``bench/memory.py`` (a child process consumes the slot with an assembler budget; its peak
RSS comes from the OS) and checks that every row arrives at commit and that the peak stays under
the budget plus the interpreter's own footprint — independent of the row count. The default run
streams 2,000,000 rows (~320 MiB of messages) through a 16 MiB budget; the soak run 5,000,000
(~800 MiB) through 64 MiB.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from depth import sweep

BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory.py"


ROWS = int(sweep("WALSPARK_BIG_TXN_ROWS", "2000000", "5000000"))
BUDGET_MIB = 16 if ROWS < 5_000_000 else 64


@pytest.mark.slow
def test_a_transaction_of_millions_of_rows_in_bounded_memory():
    spec = importlib.util.spec_from_file_location("bench_memory", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    result = bench.run(rows=ROWS, budget_mib=BUDGET_MIB)

    assert result["rows"] == ROWS
    assert result["streamed"] and result["spilled_transactions"] >= 1
    assert result["peak_accounted_bytes"] <= (BUDGET_MIB << 20) + (1 << 20)
    # Budget + interpreter, libraries and I/O buffers: far below what the raw messages of this
    # transaction would take if held in memory (~160 bytes a row).
    assert result["peak_kib"] < result["baseline_kib"] + BUDGET_MIB * 1024 + 96 * 1024
    assert ROWS * 160 > 2 * (BUDGET_MIB + 96) << 20, "the transaction is too small to show the bound"
