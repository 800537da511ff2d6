"""``pip install`` of walspark's wheel into a fresh virtual environment, then ``walspark demo``.

What a user without the checkout does: the wheel is built from this checkout's files, installed
with its dependencies into a new venv in an empty folder outside the checkout, and run there
with no PYTHONPATH and no ``WALSPARK_JARS_DIR``: Delta's jars come from the local cache, filled
with ``walspark jars --from FOLDER`` (a pip user's first online run fills it by Spark's package
resolution; here nothing may use the network). Dependencies come from the wheelhouse that
``./dev setup`` builds (``.wheels/``), so the install is offline too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from walspark.spark import jars as jars_mod

CHECKOUT = Path(__file__).resolve().parents[2]
WHEELS = CHECKOUT / ".wheels"

#: Variables that would let the installed walspark see the checkout or this suite's set-up.
_LEAKS = ("PYTHONPATH", jars_mod.JARS_ENV, "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME",
          "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{args[:4]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def _source_copy(dest: Path) -> Path:
    """The checkout's files as a fresh clone has them (tracked and new, nothing ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=CHECKOUT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = CHECKOUT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest / name)
    return dest


@pytest.mark.slow
@pytest.mark.spark
def test_wheel_in_a_fresh_venv_runs_the_demo(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not list(WHEELS.glob("pyspark-*.whl")):
        pytest.fail(f"no wheelhouse in {WHEELS}: run ./dev setup (it builds the dependencies' wheels once)")
    started = time.monotonic()
    work = tmp_path_factory.mktemp("pip-install")
    source = _source_copy(work / "clone")
    dist = work / "dist"
    # Build isolation installs the build back-end (setuptools, wheel) from the wheelhouse.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--find-links", str(WHEELS),
          "-w", str(dist), str(source)], cwd=work)
    (wheel,) = dist.glob("walspark-*.whl")

    empty = work / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _LEAKS}
    venv = empty / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=empty, env=env)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CACHE_HOME"] = str(work / "user-cache")  # this user's cache: empty until filled below
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELS),
          str(wheel)], cwd=empty, env=env)
    installed = time.monotonic() - started

    where = _run([str(venv / "bin" / "python"), "-c", "import walspark; print(walspark.__file__)"], cwd=empty, env=env)
    assert where.strip().startswith(str(venv)), where

    # The jars a user downloaded (here: the bytes ./dev setup fetched), copied into the cache.
    download = work / "download"
    download.mkdir()
    for jar in CHECKOUT.joinpath(".jars").glob("delta-*.jar"):
        shutil.copyfile(jar, download / jar.name)
    _run([str(venv / "bin" / "walspark"), "jars", "--from", str(download)], cwd=empty, env=env)
    shutil.rmtree(download)
    listing = _run([str(venv / "bin" / "walspark"), "jars"], cwd=empty, env=env)
    assert "(cache)" in listing and str(work / "user-cache") in listing, listing

    shutil.rmtree(venv / ".." / "venv" / "__pycache__", ignore_errors=True)
    demo_started = time.monotonic()
    out = _run([str(venv / "bin" / "walspark"), "demo", "--seconds", "5"], cwd=empty, env=env, timeout=900)
    demo_seconds = time.monotonic() - demo_started
    table = [line for line in out.splitlines() if line.startswith("shop.")]
    assert [line.split()[0] for line in table] == ["shop.customers", "shop.products", "shop.orders", "shop.order_items"]
    assert all(line.endswith("yes") for line in table), out[-3000:]
    assert "fetching" not in out, "the session resolved packages although the cache had the jars"
    assert (empty / "walspark-demo" / "shop" / "orders" / "_delta_log").is_dir()
    assert "Traceback" not in out
    print(f"\nbuild + venv + install {installed:.0f}s, demo {demo_seconds:.0f}s")
