"""A walspark installed the way a pip user installs it: its wheel in a fresh venv, offline.

The wheel is built from this checkout's files (tracked and new, as a fresh clone has them),
installed with its dependencies from the wheelhouse ``./dev setup`` builds (``.wheels/``) into a
new venv in an empty folder outside the checkout. Commands run there with no PYTHONPATH and no
``WALSPARK_JARS_DIR``: Delta's jars come from that user's local cache, filled with
``walspark jars --from FOLDER`` (a pip user's first online session fills it by Spark's package
resolution; here nothing may use the network).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from walspark.spark import jars as jars_mod

CHECKOUT = Path(__file__).resolve().parents[2]
WHEELS = CHECKOUT / ".wheels"

#: Variables that would let the installed walspark see the checkout or this suite's set-up.
LEAKS = ("PYTHONPATH", jars_mod.JARS_ENV, "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME",
          "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT",
          "PYSPARK_GATEWAY_SECRET")


@dataclass(frozen=True, slots=True)
class Installed:
    """A venv holding walspark's wheel, the empty folder it lives in, and the env to run it with."""

    wheel: Path
    venv: Path
    folder: Path
    env: dict[str, str]
    cache: Path
    install_seconds: float

    def run(self, args: Sequence[str], timeout: float = 600, env: dict[str, str] | None = None) -> str:
        """Run a command of the venv (``walspark``, ``spark-submit``) in the empty folder; its output
        (``env``: variables on top of :attr:`env`)."""
        return run_ok([str(self.venv / "bin" / args[0]), *args[1:]], self.folder, {**self.env, **(env or {})}, timeout)


def run_ok(args: Sequence[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """Run a command; fail the test with its output's tail unless it exits 0; its output."""
    done = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{list(args)[:4]} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout + done.stderr


def source_copy(dest: Path) -> Path:
    """The checkout's files as a fresh clone has them (tracked and new, nothing ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=CHECKOUT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = CHECKOUT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest / name)
    return dest


