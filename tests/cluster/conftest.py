"""Fixtures of the cluster suite: a real Spark standalone cluster, started and stopped by the suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import StandaloneCluster, start_cluster


@pytest.fixture
def driver_home(tmp_path: Path) -> Path:
    """The driver's scratch folder (its working dir, temp files, Spark local dirs, Delta's jars):
    hidden from the workers where the host allows it (:mod:`tests.cluster.support`)."""
    home = tmp_path / "driver"
    home.mkdir()
    return home


@pytest.fixture
def standalone_cluster(tmp_path: Path, driver_home: Path) -> Iterator[StandaloneCluster]:
    """A master and a worker (2 cores, 1 GiB) on loopback; their logs are printed on failure.

    One worker, whose executor runs two tasks at a time: a second worker would only add two JVMs
    (itself and its executor, per application) that prove nothing more on one host."""
    cluster = start_cluster(tmp_path / "cluster", workers=1, cores=2, hide=[driver_home])
    try:
        yield cluster
    finally:
        cluster.stop()
