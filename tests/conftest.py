"""Shared fixtures: real servers and a real Spark, started and stopped by the suite itself.

Nothing here assumes a server was left running: each PostgreSQL runs from a temporary directory
on a port the kernel picked, so a second run, or another PostgreSQL on 5432, changes nothing.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from walspark.embedded.postgres import EmbeddedPostgres, debian_bindir


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
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE database = %s AND NOT active",
                (name,),
            )
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
    from walspark.spark.session import spark_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = spark_session("walspark-tests", master="local[2]", conf={"spark.sql.warehouse.dir": str(warehouse)})
    yield session
    session.stop()
