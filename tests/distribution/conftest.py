"""Fixtures of the distribution tests (see :mod:`.support`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import CHECKOUT, LEAKS, WHEELS, Installed, run_ok, source_copy


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Held by one process at a time (the suite's xdist workers): the first builds, the others wait."""
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Installed:
    """walspark's wheel installed in a fresh venv, once per run: the test workers share it.

    The build and install take a minute of CPU; the tests only run the venv's commands, each in
    folders of its own, so the second worker to ask waits for the first one's venv instead of
    building its own.
    """
    # xdist's workers each have a base folder under one shared for the run; without xdist it is ours
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    record = shared / "pip-install.json"
    with _exclusive(shared / "pip-install.lock"):
        if record.exists():
            saved = json.loads(record.read_text())
            return Installed(Path(saved["wheel"]), Path(saved["venv"]), Path(saved["folder"]), saved["env"],
                             Path(saved["cache"]), saved["install_seconds"])  # fmt: skip
        done = _install(shared / "pip-install")
        record.write_text(json.dumps({"wheel": str(done.wheel), "venv": str(done.venv), "folder": str(done.folder),
                                      "env": done.env, "cache": str(done.cache),
                                      "install_seconds": done.install_seconds}))  # fmt: skip
        return done


def _install(work: Path) -> Installed:
    """Build the wheel from the checkout's files, install it offline into a new venv under ``work``,
    fill that user's jar cache the way ``walspark jars --from`` does."""
    if not list(WHEELS.glob("pyspark-*.whl")):
        pytest.fail(f"no wheelhouse in {WHEELS}: run ./dev setup (it builds the dependencies' wheels once)")
    started = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)  # a worker's build that failed half-way
    work.mkdir()
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
