"""A real Spark standalone cluster on this machine: a master and workers as separate processes.

They are started from the pyspark distribution's own launcher (``bin/spark-class`` with the
``Master`` and ``Worker`` classes), each in its own process group, each worker with its own work
and local dirs, all on loopback. The master picks its own port (``--port 0``) and says which in
its log, so nothing races for a port. The web UIs are off (``--webui-port 0`` picks a free one;
nothing reads it).

**The driver's local disk, hidden.** Executors must never read a path on the driver's disk (on a
real cluster they run on other hosts). On one machine they could, silently, so where the kernel
allows it the workers run in a mount namespace of their own (``unshare --user --map-root-user
--mount``) in which the driver's scratch folder is covered by an empty tmpfs: an executor that
opens a file there finds nothing, and the run fails. :attr:`StandaloneCluster.isolated` says
whether that was possible (a host without unprivileged user namespaces runs the workers plainly).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["StandaloneCluster", "can_hide_folders", "spark_home", "start_cluster"]

#: The worktree's ``src``: executors' Python workers import walspark from it, like the driver.
SRC = Path(__file__).resolve().parents[2] / "src"

_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")
_REGISTERED = "Successfully registered with master"


def spark_home() -> Path:
    """The pyspark distribution's folder: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def can_hide_folders() -> bool:
    """Whether this host lets this process make a user + mount namespace (``unshare -rm``) and
    mount a tmpfs in it (the mount stays private to the namespace)."""
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as folder:
        probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                                f"mount -t tmpfs -o size=1m walspark-probe {shlex.quote(folder)}"],
                               capture_output=True, timeout=30, check=False)  # fmt: skip
    return probe.returncode == 0


@dataclass
class StandaloneCluster:
    """A running master and its workers; :meth:`stop` kills every process group they lead."""

    url: str
    logs: Path
    isolated: bool
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def log_text(self, tail: int = 60) -> str:
        """The last lines of every daemon's log (and of the executors' stderr), for a failure message."""
        parts = []
        for path in sorted(self.logs.rglob("*")):
            if path.is_file() and (path.suffix == ".log" or path.name == "stderr"):
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                parts.append(f"==> {path.relative_to(self.logs)} <==\n" + "\n".join(lines))
        return "\n".join(parts)

    def executor_logs(self) -> list[Path]:
        """Every executor's stderr file under the workers' work dirs (one per executor started)."""
        return sorted(self.logs.glob("worker-*/work/app-*/*/stderr"))

    def stop(self) -> None:
        for proc in reversed(self.processes):
            _kill_group(proc)
        self.processes.clear()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the daemon's process group (a worker stops its executors), then SIGKILL the group:
    members (an executor JVM, a Python worker) may outlive the leader."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(10.0)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.wait()


def _daemon_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    pythonpath = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",  # master and worker daemons only schedule: keep them small
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": pythonpath,
        **extra,
    })
    return env


def _launch(args: Sequence[str], log: Path, env: dict[str, str], hide: Sequence[Path]) -> subprocess.Popen[bytes]:
    """``spark-class`` with ``args`` in a new session, its output in ``log``; in a mount namespace
    that covers ``hide`` with empty tmpfs mounts when ``hide`` is given."""
    command = [str(spark_home() / "bin" / "spark-class"), *args]
    if hide:
        mounts = " && ".join(f"mount -t tmpfs -o size=1m walspark-hidden {shlex.quote(str(p))}" for p in hide)
        command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                   f"{mounts} && exec {shlex.join(command)}"]  # fmt: skip
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                cwd=log.parent)  # fmt: skip


def _wait_for_log(proc: subprocess.Popen[bytes], log: Path, pattern: re.Pattern[str] | str, *,
                  timeout: float, what: str) -> re.Match[str] | str:  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = pattern.search(text) if isinstance(pattern, re.Pattern) else (pattern if pattern in text else None)
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n{text[-4000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout:.0f} s:\n{text[-4000:]}")
        time.sleep(0.2)


def _check_hidden(workers: Sequence[subprocess.Popen[bytes]], hide: Sequence[Path]) -> None:
    """Prove the workers cannot see ``hide``: a marker file written there now is absent from their
    view (``/proc/<pid>/root`` resolves paths in the process's own mount namespace). Executors
    and their Python workers are the worker's children and share its namespace."""
    for folder in hide:
        marker = folder / ".visible-to-workers"
        marker.write_text("the driver's disk")
        try:
            for proc in workers:
                if Path(f"/proc/{proc.pid}/root{marker}").exists():
                    raise RuntimeError(f"worker {proc.pid} sees {folder}: the driver's disk is not hidden")
        finally:
            marker.unlink()


def start_cluster(base: Path, *, workers: int = 1, cores: int = 2, hide: Sequence[Path] = (), timeout: float = 180.0,
                  worker_memory: str = "1g") -> StandaloneCluster:  # fmt: skip
    """Start a master and ``workers`` workers (``cores`` cores, ``worker_memory`` each) under ``base``.

    Returns once every worker is registered with the master. ``hide``: folders the workers (and
    so their executors) must not see — covered in their mount namespace, if the host allows it.
    On any failure the processes started so far are killed and the error carries their logs.
    """
    isolated = bool(hide) and can_hide_folders()
    cluster = StandaloneCluster(url="", logs=base, isolated=isolated)
    try:
        master_log = base / "master" / "master.log"
        master = _launch(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                          "--webui-port", "0"], master_log, _daemon_env({}), ())  # fmt: skip
        cluster.processes.append(master)
        found = _wait_for_log(master, master_log, _MASTER_URL, timeout=timeout, what="the Spark master")
        assert isinstance(found, re.Match)
        cluster.url = found.group(1)
        logs = []
        for n in range(workers):
            home = base / f"worker-{n}"
            (home / "local").mkdir(parents=True, exist_ok=True)
            (home / "work").mkdir(parents=True, exist_ok=True)
            env = _daemon_env({"SPARK_LOCAL_DIRS": str(home / "local"), "SPARK_WORKER_DIR": str(home / "work")})
            log = home / "worker.log"
            proc = _launch(["org.apache.spark.deploy.worker.Worker", cluster.url, "--cores", str(cores), "--memory",
                            worker_memory, "--work-dir", str(home / "work"), "--host", "127.0.0.1",
                            "--webui-port", "0"], log, env, hide if isolated else ())  # fmt: skip
            cluster.processes.append(proc)
            logs.append((proc, log, n))
        for proc, log, n in logs:
            _wait_for_log(proc, log, _REGISTERED, timeout=timeout, what=f"Spark worker {n}")
        if isolated:
            _check_hidden(cluster.processes[1:], hide)
    except RuntimeError as exc:
        cluster.stop()
        raise RuntimeError(f"{exc}\n{cluster.log_text()}") from None
    except BaseException:
        cluster.stop()
        raise
    return cluster
