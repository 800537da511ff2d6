"""Shared fixtures: real servers and a real Spark, started and stopped by the suite itself.

Nothing here assumes a server was left running: each PostgreSQL runs from a temporary directory
on a port the kernel picked, so a second run, or another PostgreSQL on 5432, changes nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator

import pytest
from depth import SOAK_VARIABLE, soak

from walspark.embedded.postgres import EmbeddedPostgres, debian_bindir


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true",
                     help="the soak run: every sweep turned up (more kills, every crash round, longer fuzzing); "
                          "see docs/testing.md")


#: The workers' own sessions' compiler setting (``$WALSPARK_JIT`` as set when the run began, else ``full``).
SESSION_JIT_ENV = "WALSPARK_TESTS_SESSION_JIT"


def pytest_configure(config: pytest.Config) -> None:
    """``--soak`` sets ``WALSPARK_SOAK`` before any test module is imported (workers get the option too).

    The ``walspark run`` processes the tests start compile with C1 alone (``WALSPARK_JIT=quick``,
    unless set): they live for a minute or two, not the day that repays C2's compiling (see
    :func:`walspark.spark.session.jit_options` and docs/testing.md). Each worker's own session
    (:func:`spark`) lives as long as the run and keeps the JVM's tiered compilation.
    """
    from walspark.spark.session import JIT_ENV

    if config.getoption("--soak"):
        os.environ[SOAK_VARIABLE] = "1"
    os.environ.setdefault(SESSION_JIT_ENV, os.environ.get(JIT_ENV, "full"))  # before the line below: the user's
    os.environ.setdefault(JIT_ENV, "quick")


@pytest.fixture(scope="session")
def pg18() -> Iterator[EmbeddedPostgres]:
    """The embedded PostgreSQL 18 (``wal_level=logical``), one for the whole session."""
    with EmbeddedPostgres() as server:
        yield server


@pytest.fixture(scope="session")
def pg15() -> Iterator[EmbeddedPostgres]:
    """Debian's PostgreSQL 15, the protocol-v3 server; skipped where it cannot be installed."""
    bindir = debian_bindir(15)
    if bindir is None:
        pytest.skip("Debian's PostgreSQL 15 is not installed (./dev setup installs it with apt where it can)")
    with EmbeddedPostgres(bindir=bindir) as server:
        yield server


#: The longest tests in CI's list of the 25 slowest (minutes each on 2 cores), longest first.
LONGEST = (
    "tests/reliability/test_crash_run.py::test_sigkill_at_random_points",
    "tests/scenarios/test_table_sync_stream.py",
    "tests/reliability/test_pipeline_faults.py",
    "tests/cluster/",
    "tests/scenarios/test_two_phase.py::test_sigkill",
    "tests/distribution/",
    "tests/scenarios/test_object_storage.py",
    "tests/scenarios/test_failover.py",
    "tests/scenarios/test_catalog_tables.py",
    "tests/pipeline/test_verify.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the long tests first: ``LONGEST``, the other slow ones, the other Spark tests, the rest.

    pytest-xdist hands tests out in collection order. In file order, a ten-minute crash scenario
    could start when most of the suite was done, and the run would end with one worker busy and
    the others idle. Started first, the long tests overlap each other, and the many short tests
    fill the gaps at the end. The sort is stable: otherwise each group keeps file order.
    """

    def order(item: pytest.Item) -> tuple[int, int]:
        rank = next((i for i, prefix in enumerate(LONGEST) if item.nodeid.startswith(prefix)), len(LONGEST))
        if item.get_closest_marker("slow") is not None:
            return 0, rank
        return (1 if item.get_closest_marker("spark") is not None else 2), rank

    items.sort(key=order)
    if not soak():  # a test marked soak runs in the soak run only
        for item in items:
            if item.get_closest_marker("soak") is not None:
                item.add_marker(pytest.mark.skip(reason="the soak run's (./dev test --soak)"))


_db_numbers = itertools.count()


def _fresh_database(server: EmbeddedPostgres) -> Iterator[str]:
    """A database of its own for one test: slots and publications never leak between tests."""
    import psycopg

    name = f"t{os.getpid()}_{next(_db_numbers)}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.dsn(name)
    finally:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            # A walsender can still hold its slot for a moment after its client went away:
            # end it, then drop the slots, before the database can go.
            for _ in range(100):
                with contextlib.suppress(psycopg.errors.ObjectInUse):  # taken again meanwhile: next round
                    conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                                 " WHERE database = %s AND active_pid IS NOT NULL", (name,))  # fmt: skip
                    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                                 " WHERE database = %s AND NOT active", (name,))  # fmt: skip
                if not conn.execute("SELECT 1 FROM pg_replication_slots WHERE database = %s", (name,)).fetchone():
                    break
                time.sleep(0.1)
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg18_dsn(pg18: EmbeddedPostgres) -> Iterator[str]:
    """A DSN for a new, empty database on the PostgreSQL 18 server."""
    yield from _fresh_database(pg18)


@pytest.fixture
def pg15_dsn(pg15: EmbeddedPostgres) -> Iterator[str]:
    """A DSN for a new, empty database on the PostgreSQL 15 server."""
    yield from _fresh_database(pg15)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """A local Spark session with Delta Lake, shared by the whole test session."""
    from walspark.spark.session import JIT_ENV, spark_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    # s3a: the object-storage tests read their tables back from the S3 endpoint (hadoop-aws on the class path)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(JIT_ENV, os.environ.get(SESSION_JIT_ENV, "full"))  # it lives the whole run: C2 repays itself
        session = spark_session("walspark-tests", master="local[2]", conf={"spark.sql.warehouse.dir": str(warehouse)},
                                locations=("s3a://walspark-tests",))
    yield session
    session.stop()


class S3Endpoint:
    """A running S3 endpoint (moto's server mode) and the settings to reach it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._buckets = itertools.count(1)

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS_* variables for this endpoint (moto accepts any key pair)."""
        return {"AWS_ACCESS_KEY_ID": "walspark-test-key", "AWS_SECRET_ACCESS_KEY": "walspark-test-secret",
                "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.url}

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        env = self.env
        return boto3.client("s3", endpoint_url=self.url, region_name=env["AWS_REGION"],
                            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])

    def bucket(self, prefix: str = "walspark") -> str:
        """A new, empty bucket; returns its name."""
        name = f"{prefix}-{os.getpid()}-{next(self._buckets)}"
        self.client().create_bucket(Bucket=name)
        return name

    def settings(self):  # type: ignore[no-untyped-def]
        from walspark.storage import StorageSettings

        return StorageSettings.from_env(self.env)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """An S3 endpoint for the session: moto's server as its own process on a free loopback port."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield S3Endpoint(url)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
