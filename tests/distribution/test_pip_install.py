"""``pip install`` of walspark's wheel into a fresh venv in an empty folder, then ``walspark demo``.

This is also the demo's end-to-end test (the README's first command, ``./dev demo``, is ``walspark
demo`` in the checkout's venv): it must exit 0 with every table matching. One run of the demo serves
both: a second, from the checkout, would cost the suite minutes of CPU and prove nothing more.

See ``conftest.py`` for how it is installed: offline, from the checkout's files, jars from the
user's local cache (never from the checkout).
"""

from __future__ import annotations

import re
import time

import pytest

from .support import Installed


@pytest.mark.slow
@pytest.mark.spark
def test_wheel_in_a_fresh_venv_runs_the_demo(installed: Installed) -> None:
    started = time.monotonic()
    out = installed.run(["walspark", "demo", "--seconds", "5"], timeout=900)
    table = [line for line in out.splitlines() if line.startswith("shop.")]
    assert [line.split()[0] for line in table] == ["shop.customers", "shop.products", "shop.orders", "shop.order_items"]
    assert all(line.endswith("yes") for line in table), out[-3000:]
    assert "fetching" not in out, "the session resolved packages although the cache had the jars"
    assert (installed.folder / "walspark-demo" / "shop" / "orders" / "_delta_log").is_dir()
    assert "Traceback" not in out
    ours = re.compile(r"\[\s*\d+s\] |table\s|shop\.|Delta tables under ")  # its phase lines, its table, where it is
    assert not [line for line in out.splitlines() if line and not ours.match(line)], out[-3000:]  # no JVM notes
    print(f"\nbuild + venv + install {installed.install_seconds:.0f}s, demo {time.monotonic() - started:.0f}s")
