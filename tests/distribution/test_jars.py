"""Where Spark sessions get Delta's jars: the lookup order, the cache, and the one clear error.

The resolution tests run Spark's real package resolution (spark-submit's Ivy, in a child JVM)
against repositories on this machine only: a Maven layout in a temporary folder (reached with a
``file:`` URL) for the success case, and a resolver on a loopback port nothing listens on for
the offline case.
"""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

import pytest

from walspark.spark import jars as jars_mod
from walspark.spark.jars import DeltaJarsNotFound, delta_jars, find_jars

CHECKOUT = Path(__file__).resolve().parents[2]


def _jar(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"PK")
    return folder


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An explicit folder, a checkout's .jars and a cache, all empty; nothing else is looked at."""
    monkeypatch.delenv(jars_mod.JARS_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    checkout = tmp_path / "checkout" / ".jars"
    monkeypatch.setattr(jars_mod, "checkout_dir", lambda: checkout)
    return {"explicit": tmp_path / "explicit", "checkout": checkout, "cache": jars_mod.cache_dir()}


def test_lookup_order(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    delta = ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar")
    assert find_jars() is None
    _jar(places["cache"], "io.delta_delta-spark_4.2_2.13-4.4.0.jar", "io.delta_delta-storage-4.4.0.jar")
    assert find_jars().origin == "cache"  # type: ignore[union-attr]
    _jar(places["checkout"], *delta)
    assert find_jars().origin == "checkout"  # type: ignore[union-attr]
    _jar(places["explicit"], "unrelated.jar")
    monkeypatch.setenv(jars_mod.JARS_ENV, str(places["explicit"]))
    assert find_jars().origin == "checkout", "a folder without Delta's jar is passed over"  # type: ignore[union-attr]
    _jar(places["explicit"], *delta)
    found = find_jars()
    assert found is not None and found.origin == jars_mod.JARS_ENV and found.folder == places["explicit"]
    assert [f.name for f in found.files] == sorted([*delta, "unrelated.jar"])
    # s3a:// needs hadoop-aws too: only the cache has it, so the cache wins for such a session
    _jar(places["cache"], "org.apache.hadoop_hadoop-aws-3.5.0.jar")
    assert find_jars(s3a=True).origin == "cache"  # type: ignore[union-attr]
    assert find_jars(s3a=False).origin == jars_mod.JARS_ENV  # type: ignore[union-attr]


def test_s3a_is_needed_for_s3a_locations_or_settings() -> None:
    assert jars_mod.needs_s3a(["s3a://bucket/lake"])
    assert jars_mod.needs_s3a([], {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:1"})
    assert not jars_mod.needs_s3a(["/tmp/lake", "file:/tmp/x"], {"spark.sql.shuffle.partitions": "2"})


def test_versions_agree_with_setup() -> None:
    """The jar version a pip user's session resolves is the one ./dev setup fetches."""
    import importlib.metadata

    pom = (CHECKOUT / "build-support" / "pom.xml").read_text()
    assert re.search(r"<delta.version>(.*?)</delta.version>", pom).group(1) == jars_mod.DELTA_VERSION  # type: ignore[union-attr]
    python_delta = importlib.metadata.version("delta-spark")
    assert python_delta.split(".")[:2] == jars_mod.DELTA_VERSION.split(".")[:2]
    assert jars_mod.hadoop_aws_package() == "org.apache.hadoop:hadoop-aws:" + jars_mod.hadoop_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", jars_mod.hadoop_version())


def _ivy_settings(path: Path, root: str) -> Path:
    path.write_text(
        '<ivysettings><settings defaultResolver="only"/><resolvers>'
        f'<ibiblio name="only" m2compatible="true" root="{root}"/>'
        "</resolvers></ivysettings>"
    )
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the socket is: connections are refused


@pytest.mark.spark
def test_offline_without_cache_is_one_clear_error(places: dict[str, Path], tmp_path: Path) -> None:
    settings = _ivy_settings(tmp_path / "ivysettings.xml", f"http://127.0.0.1:{_closed_port()}/maven2/")
    conf = {"spark.jars.ivySettings": str(settings), "spark.jars.ivy": str(tmp_path / "ivy-home")}
    with pytest.raises(DeltaJarsNotFound) as caught:
        delta_jars(conf=conf)
    message = str(caught.value)
    assert "\n" not in message
    assert jars_mod.delta_package() in message
    assert "io.delta#delta-spark_" in message and "Connection refused" in message  # Ivy's own words
    assert "walspark jars" in message and jars_mod.JARS_ENV in message  # what to do
    assert str(places["cache"]) in message
    assert not list(places["cache"].glob("*.jar"))


def _maven_repo(root: Path) -> Path:
    """A Maven repository layout holding the Delta jars ./dev setup fetched (their real bytes)."""
    version = jars_mod.DELTA_VERSION
    spark_artifact = f"delta-spark_{jars_mod.spark_binary()}_{jars_mod.SCALA_BINARY}"
    source = CHECKOUT / ".jars"
    for artifact, dependency in ((spark_artifact, "delta-storage"), ("delta-storage", None)):
        folder = root / "io" / "delta" / artifact / version
        folder.mkdir(parents=True)
        shutil.copyfile(source / f"{artifact}-{version}.jar", folder / f"{artifact}-{version}.jar")
        deps = (f"<dependencies><dependency><groupId>io.delta</groupId><artifactId>{dependency}</artifactId>"
                f"<version>{version}</version></dependency></dependencies>") if dependency else ""
        (folder / f"{artifact}-{version}.pom").write_text(
            '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>io.delta</groupId><artifactId>{artifact}</artifactId><version>{version}</version>"
            f"{deps}</project>"
        )
    return root


@pytest.mark.spark
def test_resolution_fills_the_cache_once(places: dict[str, Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _maven_repo(tmp_path / "repo")
    settings = _ivy_settings(tmp_path / "ivysettings.xml", repo.as_uri() + "/")
    conf = {"spark.jars.ivySettings": str(settings), "spark.jars.ivy": str(tmp_path / "ivy-home")}
    got = delta_jars(conf=conf)
    assert got.origin == "resolved" and got.folder == places["cache"]
    names = sorted(f.name for f in got.files)
    assert names == sorted([f"io.delta_delta-spark_{jars_mod.spark_binary()}_2.13-{jars_mod.DELTA_VERSION}.jar",
                            f"io.delta_delta-storage-{jars_mod.DELTA_VERSION}.jar"])
    delta = CHECKOUT / ".jars" / f"delta-storage-{jars_mod.DELTA_VERSION}.jar"
    assert (places["cache"] / names[1]).read_bytes() == delta.read_bytes()
    # the next session finds the cache and starts no resolution at all
    monkeypatch.setattr(jars_mod, "resolve_packages", lambda *a, **k: pytest.fail("resolved again"))
    again = delta_jars(conf=conf)
    assert again.origin == "cache" and again.files == got.files
