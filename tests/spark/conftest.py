"""Fixtures of the pgoutput data source tests (helpers live in support.py)."""

from __future__ import annotations

import pytest

from .support import create_source


@pytest.fixture
def source_dsn(pg18_dsn: str) -> str:
    """A database with tables acct/ev, publication pub and slot s."""
    create_source(pg18_dsn)
    return pg18_dsn
