"""The driver JVM's options: how it compiles (``$WALSPARK_JIT``, short-lived sessions)."""

from __future__ import annotations

import logging

import pytest

from walspark.spark.session import JIT_ENV, jit_options

#: C1 alone, with tiered compilation's code cache (C1 alone would get 48 MB, which long runs fill).
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


@pytest.mark.parametrize(("setting", "short_lived", "expected"), [
    (None, True, C1_ONLY),   # a --once run, the demo: C2's warm-up is not repaid
    (None, False, ""),       # a stream, a copy: the JVM's tiered compilation
    ("quick", False, C1_ONLY),
    ("full", True, ""),
    (" Quick ", False, C1_ONLY),
])  # fmt: skip
def test_short_lived_sessions_compile_with_c1_alone_unless_told(
    setting: str | None, short_lived: bool, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if setting is None:
        monkeypatch.delenv(JIT_ENV, raising=False)
    else:
        monkeypatch.setenv(JIT_ENV, setting)
    assert jit_options(short_lived) == expected


def test_an_unknown_setting_is_said_and_ignored(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    monkeypatch.setenv(JIT_ENV, "c2")
    with caplog.at_level(logging.WARNING):
        assert jit_options(True) == C1_ONLY
        assert jit_options(False) == ""
    assert "'c2', neither 'quick' nor 'full'" in caplog.text


def test_a_catalog_schema_gets_an_embedded_metastore_in_the_state_folder_unless_one_is_configured(tmp_path) -> None:
    from walspark.spark.session import MetastoreError, metastore_settings

    own = metastore_settings(str(tmp_path / "metastore"))
    assert own["spark.sql.catalogImplementation"] == "hive"
    assert own["spark.hadoop.javax.jdo.option.ConnectionURL"] == (
        f"jdbc:derby:;databaseName={tmp_path}/metastore/metastore_db;create=true")  # fmt: skip
    assert metastore_settings("s3a://b/x", {"spark.hadoop.hive.metastore.uris": "thrift://m:9083"}) == {
        "spark.sql.catalogImplementation": "hive"}  # fmt: skip
    assert metastore_settings("s3a://b/x", {"spark.sql.catalog.unity": "x"}, "unity.cdc") == {}
    with pytest.raises(MetastoreError, match="cannot live in s3a://b/x .*hive.metastore.uris"):
        metastore_settings("s3a://b/x", {})


def test_catalog_names_follow_one_rule_and_a_clash_is_refused_in_one_line() -> None:
    from walspark.spark.lake.catalog_tables import CatalogError, CatalogTables, catalog_table_name
    from walspark.storage.layout import TargetLayout

    assert catalog_table_name("public", "Orders") == "orders"
    assert catalog_table_name("sales", "Tä'ble.1") == "sales_t__ble_1"
    catalog = CatalogTables(None, TargetLayout("/lake"), "cdc")  # type: ignore[arg-type]  # names only
    assert catalog.name("public", "a`b") == "`cdc`.`a_b`"
    with pytest.raises(CatalogError, match=r"tables a\.b and public\.a_b would both be cdc\.a_b; rename one"):
        catalog._check_clashes(sorted([("public", "a_b"), ("a", "b")]))
    for bad in ("", "a.b.c", "1x", "a-b"):
        with pytest.raises(ValueError, match="--catalog-schema"):
            CatalogTables(None, TargetLayout("/lake"), bad)  # type: ignore[arg-type]
