"""`walspark demo`, the README's first command, end to end: it must exit 0 with every table matching."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.spark
def test_demo_mirrors_every_table_and_exits_zero(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "walspark.cli", "demo", "--target", str(tmp_path / "lake"), "--seconds", "3"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    table = [line for line in lines if line.startswith("shop.")]
    assert [line.split()[0] for line in table] == ["shop.customers", "shop.products", "shop.orders", "shop.order_items"]
    assert all(line.endswith("yes") for line in table)
    assert (tmp_path / "lake" / "shop" / "orders" / "_delta_log").is_dir()
    assert "Traceback" not in result.stdout + result.stderr
