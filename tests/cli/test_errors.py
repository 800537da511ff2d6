"""Every way a user can get the source or the options wrong ends in one actionable line.

Why subprocesses of the real entry point (``python -m walspark.cli``): the promise is about what
a terminal shows — stderr exactly one line, exit status not 0, no Python or Java traceback, the
password never printed — and only the real process shows what click, logging, Spark and the
drivers write. The servers are real: the session's PostgreSQL 18, one that asks for passwords
(``scram-sha-256`` for one role) and one with ``wal_level = replica``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from walspark.embedded.postgres import EmbeddedPostgres, free_port

SECRET = "Sekr3t-Pw-42"
SRC = str(Path(__file__).resolve().parents[2] / "src")


def walspark(*args: str, env: dict[str, str] | None = None,
             preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real command in a fresh interpreter (this checkout's sources first on the path)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("WALSPARK_DEBUG", "WALSPARK_DSN")}
    environ.update({"PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]), **(env or {})})
    return subprocess.run([sys.executable, "-m", "walspark.cli", *args], capture_output=True, text=True,
                          env=environ, timeout=300, stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)


def unwritable_folder(folder: Path) -> Callable[[], None] | None:
    """Make ``folder`` one the command's process may not write in; return what the process must run
    first. Root writes anywhere (CAP_DAC_OVERRIDE), so there the folder goes to ``nobody`` and the
    child drops that capability from its bounding set (Linux ``prctl``), as an ordinary user is."""
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return None
    os.chown(folder, 65534, 65534)
    folder.chmod(0o755)

    def drop_dac_override() -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return drop_dac_override


def one_line_error(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Assert the failure shape; return the line. ``expected``: fragments it must contain (any case)."""
    assert result.returncode != 0, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    line = lines[0]
    assert line.startswith("Error: "), line
    assert "Traceback" not in line and "py4j" not in line.lower() and "java." not in line
    assert SECRET not in result.stderr and SECRET not in result.stdout
    for fragment in expected:
        assert fragment.lower() in line.lower(), f"{fragment!r} not in {line!r}"
    return line


@pytest.fixture(scope="module")
def pw_pg() -> Iterator[EmbeddedPostgres]:
    """A server that checks the password of role ``pwuser`` (TCP and replication connections)."""
    hba = ["host all pwuser 127.0.0.1/32 scram-sha-256", "host replication pwuser 127.0.0.1/32 scram-sha-256"]
    with EmbeddedPostgres(hba=hba, settings={"log_min_messages": "fatal"}) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE pwuser LOGIN REPLICATION PASSWORD '{SECRET}'")
        yield server


@pytest.fixture(scope="module")
def replica_pg() -> Iterator[EmbeddedPostgres]:
    """A server with ``wal_level = replica``: logical decoding impossible."""
    with EmbeddedPostgres(settings={"wal_level": "replica"}) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
            conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        yield server


@pytest.fixture
def source(pg18_dsn: str) -> str:
    """A database with a published table and no slot yet."""
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t VALUES (1, 'a')")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    return pg18_dsn


@pytest.fixture
def role(pg18: EmbeddedPostgres, source: str) -> Iterator[str]:
    """A login role created for one test (REPLICATION and grants decided by the test)."""
    name = f"r{os.getpid()}_{free_port()}"
    with psycopg.connect(pg18.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
    yield name
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {name}")
    with psycopg.connect(pg18.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP ROLE {name}")


def _commands(dsn: str, target: Path) -> dict[str, list[str]]:
    """Each DSN-taking command, with otherwise valid options."""
    return {
        "run": ["run", "--dsn", dsn, "--publication", "pub", "--slot", "s1", "--target", str(target), "--once"],
        "snapshot": ["snapshot", "--dsn", dsn, "--publication", "pub", "--slot", "s1", "--target", str(target)],
        "capture": ["capture", "--dsn", dsn, "--publication", "pub", "--slot", "s1", str(target / "c.parquet")],
        "slot create": ["slot", "create", "--dsn", dsn, "--slot", "s1"],
        "slot list": ["slot", "list", "--dsn", dsn],
        "status": ["status", "--dsn", dsn, "--slot", "s1"],
    }


COMMANDS = ["run", "snapshot", "capture", "slot create", "slot list", "status"]


# -- bad connection strings, on every command ------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_unparsable_dsn(command: str, tmp_path: Path) -> None:
    dsn = f"host=127.0.0.1 password={SECRET} port='54"
    one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "connection string", "password=***")


@pytest.mark.parametrize("command", COMMANDS)
def test_unknown_host(command: str, tmp_path: Path) -> None:
    dsn = f"host=no-such-host.invalid password={SECRET} connect_timeout=5"
    one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "no-such-host.invalid", "check host")


@pytest.mark.parametrize("command", COMMANDS)
def test_nothing_listening(command: str, tmp_path: Path) -> None:
    port = free_port()
    dsn = f"postgresql://app:{SECRET}@127.0.0.1:{port}/db?connect_timeout=5"
    one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "connection refused", str(port), "running")


@pytest.mark.parametrize("command", COMMANDS)
def test_wrong_password(command: str, pw_pg: EmbeddedPostgres, tmp_path: Path) -> None:
    dsn = pw_pg.dsn(user="pwuser", password="not-" + SECRET)  # a password that is not the secret...
    line = one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "password authentication failed",
                          "check the user, password")
    assert "not-" + SECRET not in line  # ...and is not printed either
    assert SECRET not in line


@pytest.mark.parametrize("command", ["run", "slot list"])
def test_no_password_given(command: str, pw_pg: EmbeddedPostgres, tmp_path: Path) -> None:
    """libpq's "no password supplied" names where a password can come from, not host and port."""
    home = tmp_path / "home"  # no ~/.pgpass there
    home.mkdir()
    result = walspark(*_commands(pw_pg.dsn(user="pwuser"), tmp_path)[command],
                      env={"HOME": str(home), "PGPASSWORD": "", "PGPASSFILE": str(home / "none")})  # fmt: skip
    line = one_line_error(result, "no password supplied", "PGPASSWORD", "~/.pgpass", "connection string")
    assert "host and port" not in line and "***" not in line  # the advice itself is not masked


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_database(command: str, pg18: EmbeddedPostgres, tmp_path: Path) -> None:
    dsn = pg18.dsn(dbname="no_such_db", password=SECRET)
    one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "no_such_db", "does not exist", "dbname")


@pytest.mark.parametrize("command", ["run", "status"])
def test_unknown_sslmode(command: str, pg18: EmbeddedPostgres, tmp_path: Path) -> None:
    dsn = pg18.dsn(sslmode="sometimes", password=SECRET)
    one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "sslmode", "sometimes", "verify-full")


@pytest.mark.parametrize("command", ["run", "slot list"])
def test_sslmode_require_without_ssl_on_the_server(command: str, pg18: EmbeddedPostgres, tmp_path: Path) -> None:
    dsn = pg18.dsn(sslmode="require", password=SECRET)
    one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "does not support SSL", "enable ssl")


# -- bad options -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "snapshot", "capture", "slot create", "status"])
def test_invalid_slot_name(command: str, source: str, tmp_path: Path) -> None:
    args = [a if a != "s1" else "Bad-Slot" for a in _commands(source, tmp_path)[command]]
    one_line_error(walspark(*args), "invalid slot name", "lower-case")


@pytest.mark.parametrize("command", ["run", "snapshot", "capture"])
def test_invalid_publication_name(command: str, source: str, tmp_path: Path) -> None:
    args = [a if a != "pub" else "p" * 70 for a in _commands(source, tmp_path)[command]]
    one_line_error(walspark(*args), "publication name", "63")


@pytest.mark.parametrize(("command", "extra", "fragment"), [
    ("run", ["--trigger-seconds", "-1"], "--trigger-seconds"),
    ("run", ["--max-rows-per-batch", "zero"], "--max-rows-per-batch"),
    ("snapshot", ["--parallelism", "0"], "--parallelism"),
    ("capture", ["--streaming", "sometimes"], "--streaming"),
    ("capture", ["--proto-version", "9"], "--proto-version"),
    ("capture", ["--upto-lsn", "not-an-lsn"], "invalid LSN"),
    ("run", ["--no-such-option"], "no such option"),
])  # fmt: skip
def test_nonsense_option_values(command: str, extra: list[str], fragment: str, source: str, tmp_path: Path) -> None:
    line = one_line_error(walspark(*_commands(source, tmp_path)[command], *extra), fragment)
    assert "--help" in line or "LSN" in line  # a usage error points at the help


def test_scd2_table_not_in_the_publication(source: str, tmp_path: Path) -> None:
    one_line_error(walspark(*_commands(source, tmp_path)["run"], "--scd2", "public.tt"),
                   "--scd2", "not a table of publication", "public.t")


# -- missing objects -------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "snapshot"])
def test_missing_publication(command: str, source: str, tmp_path: Path) -> None:
    args = [a if a != "pub" else "no_pub" for a in _commands(source, tmp_path)[command]]
    one_line_error(walspark(*args), "no_pub", "does not exist", "CREATE PUBLICATION")


@pytest.mark.parametrize("args", [["status"], ["slot", "drop"], ["capture"]])
def test_missing_slot(args: list[str], source: str, tmp_path: Path) -> None:
    command = " ".join(args) if args != ["slot", "drop"] else None
    full = _commands(source, tmp_path)[command] if command else ["slot", "drop", "--dsn", source, "--slot", "s1"]
    one_line_error(walspark(*full), "s1", "does not exist", "slot")


def test_target_under_a_file(source: str, tmp_path: Path) -> None:
    """A target path through a file: said before Spark starts, naming the file."""
    (tmp_path / "afile").write_text("not a folder")
    args = _commands(source, tmp_path / "afile" / "lake")["run"]
    one_line_error(walspark(*args), "--target", str(tmp_path / "afile"), "is a file, not a folder")


@pytest.mark.parametrize(("locked_one", "state_elsewhere"), [("--target", False), ("--target", True), ("--state", True)])
def test_target_this_user_cannot_write(locked_one: str, state_elsewhere: bool, source: str, tmp_path: Path) -> None:
    """A target, or a separate --state folder, in a folder this user may not write in: said before
    Spark starts (not a PermissionError once the JVM is up), naming the option and the folder."""
    locked = tmp_path / "locked"
    preexec = unwritable_folder(locked)
    target, state = (locked / "lake", tmp_path / "state") if locked_one == "--target" else (tmp_path / "lake", locked)
    args = _commands(source, target)["run"] + (["--state", str(state / "st")] if state_elsewhere else [])
    line = one_line_error(walspark(*args, preexec_fn=preexec), locked_one, f"cannot write in {locked}", "chmod")
    assert "unexpected" not in line


def test_target_in_a_bucket_that_does_not_exist(source: str, s3_endpoint, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    args = [a if a != str(tmp_path) else "s3a://no-such-bucket/lake" for a in _commands(source, tmp_path)["run"]]
    one_line_error(walspark(*args, env=s3_endpoint.env), "--target", "bucket 'no-such-bucket' does not exist",
                   "AWS_*")  # fmt: skip


def test_slot_of_another_plugin(source: str, tmp_path: Path) -> None:
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('s1', 'test_decoding')")
    one_line_error(walspark(*_commands(source, tmp_path)["run"]), "s1", "test_decoding", "not a pgoutput slot")


def test_slot_read_by_another_consumer(source: str, tmp_path: Path) -> None:
    """A second run on a slot another consumer reads (an overlapping cron, a second terminal) stops
    in one line naming that consumer's PID, after a bounded wait and before Spark starts."""
    import time

    from walspark.pipeline.preflight import SLOT_FREE_SECONDS
    from walspark.source import ReplicationStream, StreamOptions, create_slot
    from walspark.source.connect import connect_sql

    with connect_sql(source) as conn:
        create_slot(conn, "s1")
    with ReplicationStream(source, "s1", StreamOptions(("pub",)), reconnect=None) as holder:
        holder.read(0.5)
        began = time.monotonic()
        line = one_line_error(walspark(*_commands(source, tmp_path)["run"]), "s1", "in use by another consumer",
                              f"PID {holder.backend_pid}", "pg_terminate_backend",
                              "walspark status --slot s1")
        assert time.monotonic() - began < SLOT_FREE_SECONDS + 30, line  # the JVM never started
    assert not (tmp_path / "_walspark").exists()


def _pipeline_with_tables(target: Path) -> Path:
    """A target as walspark run leaves it, without Spark: table sync states for ``public.t`` (ready)
    and ``public.gone`` (it left the publication)."""
    from walspark.spark.tablesync.state import LEFT, READY, SyncState, SyncStore
    from walspark.storage import TargetLayout

    SyncStore(TargetLayout(str(target))).put(SyncState("public", "t", READY), SyncState("public", "gone", LEFT))
    return target


def _requests(target: Path) -> list[Path]:
    return list((target / "_walspark" / "tablesync" / "requests").glob("*.json"))


def test_resnapshot_of_a_table_the_publication_does_not_publish(source: str, tmp_path: Path) -> None:
    """With the run's --dsn and --publication, a table is checked against what the publication
    publishes (walspark.source.catalog): a misspelt one is refused, not ignored by the next run."""
    target = _pipeline_with_tables(tmp_path / "lake")
    at_source = ["--dsn", source, "--publication", "pub"]
    line = one_line_error(walspark("resnapshot", "--target", str(target), "--table", "public.nosuch", *at_source),
                          "public.nosuch: not published by publication 'pub'", "(its tables: public.t)",
                          "ALTER PUBLICATION pub ADD TABLE public.nosuch")  # fmt: skip
    assert "unexpected" not in line
    one_line_error(walspark("resnapshot", "--target", str(target), "--table", "t", "--dsn", source,
                            "--publication", "nopub"), "'nopub' does not exist", "CREATE PUBLICATION")  # fmt: skip
    one_line_error(walspark("resnapshot", "--target", str(target), "--table", "t", "--publication", "pub"),
                   "--publication", "--dsn")  # fmt: skip
    assert not _requests(target)
    done = walspark("resnapshot", "--target", str(target), "--table", "t", *at_source)
    assert done.returncode == 0 and "re-copy of public.t requested" in done.stderr, done.stderr
    assert len(_requests(target)) == 1


def test_resnapshot_of_a_table_the_pipeline_does_not_have(tmp_path: Path) -> None:
    """Without a connection, from the pipeline's own state: a table it never had, or one that left
    its publication, is refused in one line (the run would only ignore the request)."""
    target = _pipeline_with_tables(tmp_path / "lake")
    one_line_error(walspark("resnapshot", "--target", str(target), "--table", "public.nosuch"),
                   "public.nosuch: not a table of the pipeline writing", "(its tables: public.gone, public.t)")  # fmt: skip
    one_line_error(walspark("resnapshot", "--target", str(target), "--table", "public.gone"),
                   "public.gone: left the publication", "ALTER PUBLICATION")  # fmt: skip
    assert not _requests(target)


# -- missing privileges ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "snapshot", "capture", "slot create"])
def test_role_without_replication(command: str, source: str, role: str, tmp_path: Path) -> None:
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON t TO {role}")  # only the REPLICATION attribute is missing
    dsn = f"{source} user={role} password={SECRET}"
    one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "REPLICATION")


@pytest.mark.parametrize("command", ["run", "snapshot"])
def test_role_that_cannot_select_the_published_table(command: str, pg18: EmbeddedPostgres, source: str, role: str,
                                                      tmp_path: Path) -> None:
    with psycopg.connect(pg18.dsn(), autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {role} REPLICATION")
    dsn = f"{source} user={role}"
    one_line_error(walspark(*_commands(dsn, tmp_path)[command]), "SELECT", "public.t", f"GRANT SELECT ON public.t TO {role}")


# -- server configuration --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "snapshot", "capture", "slot create"])
def test_wal_level_replica(command: str, replica_pg: EmbeddedPostgres, tmp_path: Path) -> None:
    one_line_error(walspark(*_commands(replica_pg.dsn(), tmp_path)[command]), "wal_level", "logical", "restart")


# -- debugging -------------------------------------------------------------------------------------


def test_traceback_only_when_asked(pg18: EmbeddedPostgres, tmp_path: Path) -> None:
    """-vv and WALSPARK_DEBUG=1 add the traceback (redacted); the default stays one line."""
    dsn = pg18.dsn(dbname="no_such_db", password=SECRET)
    args = _commands(dsn, tmp_path)["run"]
    one_line_error(walspark(*args))
    for result in (walspark("-vv", *args), walspark(*args, env={"WALSPARK_DEBUG": "1"})):
        assert result.returncode == 1
        assert "Traceback (most recent call last)" in result.stderr
        assert result.stderr.splitlines()[-1].startswith("Error: ") and "no_such_db" in result.stderr
        assert SECRET not in result.stderr and SECRET not in result.stdout


# -- the password through Spark ----------------------------------------------------------------------


@pytest.mark.spark
def test_run_never_shows_the_password_even_with_vv(pw_pg: EmbeddedPostgres, tmp_path: Path) -> None:
    """The DSN travels into Spark (the pgoutput source's ``dsn`` option, the snapshot tasks' plan).

    A whole ``walspark -vv run`` with a password — snapshot, then a query that fails inside
    Spark's Python data source — must not show it on stdout, stderr (Python logging at DEBUG,
    Spark's log4j, the traceback), nor write it into the target (checkpoint, staging, Delta logs).
    The failure without ``-vv`` still ends in one ``Error:`` line and shows no trace.
    """
    with psycopg.connect(pw_pg.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE pwdb OWNER pwuser")
    with psycopg.connect(pw_pg.dsn("pwdb", user="pwuser", password=SECRET), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t VALUES (1, 'a')")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    dsn = pw_pg.dsn("pwdb", user="pwuser", password=SECRET)
    target = tmp_path / "lake"
    run = ["run", "--dsn", dsn, "--publication", "pub", "--slot", "s1", "--target", str(target), "--once"]

    ok = walspark("-vv", *run)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "INFO walspark.source.slots: created slot s1" in ok.stderr  # -vv really logs (the DSN, redacted)
    assert SECRET not in ok.stdout and SECRET not in ok.stderr

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (2, 'b')")
    staging = target / "_walspark" / "staging" / "s1"
    shutil.rmtree(staging, ignore_errors=True)  # (a run that started no query made none)
    staging.parent.mkdir(parents=True, exist_ok=True)
    staging.write_text("a file where the staging folder should be")  # fails inside the Spark source
    for result in (walspark("-vv", *run), walspark(*run)):
        assert result.returncode == 1
        assert SECRET not in result.stdout and SECRET not in result.stderr
        assert result.stderr.splitlines()[-1].startswith("Error: ")
        assert "Not a directory" in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr and "\tat org.apache" not in result.stderr  # the default run
    for path in target.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
