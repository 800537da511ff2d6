"""Fixtures of the distribution tests (see :mod:`.support`)."""

from __future__ import annotations

import os
import shutil
import sys
import time

import pytest

from .support import CHECKOUT, LEAKS, WHEELS, Installed, run_ok, source_copy


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if not list(WHEELS.glob("pyspark-*.whl")):
        pytest.fail(f"no wheelhouse in {WHEELS}: run ./dev setup (it builds the dependencies' wheels once)")
    started = time.monotonic()
    work = tmp_path_factory.mktemp("pip-install")
    source = source_copy(work / "clone")
    dist = work / "dist"
    # Build isolation installs the build back-end (setuptools, wheel) from the wheelhouse.
    run_ok([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--find-links", str(WHEELS),
            "-w", str(dist), str(source)], cwd=work)
    (wheel,) = dist.glob("walspark-*.whl")

    folder = work / "empty"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in LEAKS}
    venv = folder / "venv"
    run_ok([sys.executable, "-m", "venv", str(venv)], cwd=folder, env=env)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    cache = work / "user-cache"
    env["XDG_CACHE_HOME"] = str(cache)  # this user's cache: empty until filled below
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # spark-submit's master, workers and driver: loopback only
    run_ok([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELS),
            str(wheel)], cwd=folder, env=env)
    done = Installed(wheel, venv, folder, env, cache, time.monotonic() - started)

    where = done.run(["python", "-c", "import walspark; print(walspark.__file__)"])
    assert where.strip().startswith(str(venv)), where
    # The jars a user downloaded (here: the bytes ./dev setup fetched), copied into the cache.
    download = work / "download"
    download.mkdir()
    for jar in CHECKOUT.joinpath(".jars").glob("delta-*.jar"):
        shutil.copyfile(jar, download / jar.name)
    done.run(["walspark", "jars", "--from", str(download)])
    shutil.rmtree(download)
    listing = done.run(["walspark", "jars"])
    assert "(cache)" in listing and str(cache) in listing, listing
    return done

