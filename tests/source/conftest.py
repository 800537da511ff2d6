"""Fixtures of the replication-source tests.

Tests that change server settings or restart the server use servers of their own (``own_pg``:
``wal_sender_timeout = 2s`` so keepalive handling is exercised within seconds), never the
shared ``pg18`` session server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from srcutil import fresh_database

from walspark.embedded.postgres import EmbeddedPostgres


@pytest.fixture(scope="session")
def own_pg() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL 18 of the source tests alone: short wal_sender_timeout, restartable."""
    with EmbeddedPostgres(settings={"wal_sender_timeout": "2s", "log_min_messages": "fatal"}) as server:
        yield server


@pytest.fixture
def own_dsn(own_pg: EmbeddedPostgres) -> Iterator[str]:
    yield from fresh_database(own_pg)
