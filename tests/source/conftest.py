"""Fixtures of the replication-source tests.

Tests that change server settings or restart the server use servers of their own (``own_pg``:
``wal_sender_timeout = 2s`` so keepalive handling is exercised within seconds), never the
shared ``pg18`` session server.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from walspark.embedded.postgres import EmbeddedPostgres

_numbers = itertools.count()


def fresh_database(server: EmbeddedPostgres, prefix: str = "src") -> Iterator[str]:
    """A new database on ``server`` for one test; its slots are dropped afterwards."""
    import psycopg

    name = f"{prefix}{os.getpid()}_{next(_numbers)}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.dsn(name)
    finally:
        try:
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                             " WHERE database = %s AND active_pid IS NOT NULL", (name,))
                conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                             " WHERE database = %s AND NOT active", (name,))
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception:  # the server may be mid-restart in a failing test; the tmp dir goes anyway
            pass


@pytest.fixture(scope="session")
def own_pg() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL 18 of the source tests alone: short wal_sender_timeout, restartable."""
    with EmbeddedPostgres(settings={"wal_sender_timeout": "2s", "log_min_messages": "fatal"}) as server:
        yield server


@pytest.fixture
def own_dsn(own_pg: EmbeddedPostgres) -> Iterator[str]:
    yield from fresh_database(own_pg)
