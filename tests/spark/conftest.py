"""Fixtures of the pgoutput data source tests (helpers live in support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .support import Source, create_source


@pytest.fixture
def source_dsn(pg18_dsn: str) -> str:
    """A database with tables acct/ev, publication pub and slot s."""
    create_source(pg18_dsn)
    return pg18_dsn


@pytest.fixture
def source_factory(pg18_dsn, spark) -> Iterator:
    made: list[Source] = []

    def make(ddl: str) -> Source:
        made.append(Source(pg18_dsn, spark, ddl))
        return made[-1]

    yield make
    for s in made:
        s.close()
