"""Each run setting is declared once: ``walspark run``'s options and the ``Pipeline`` builder follow it.

No server, no Spark: the table of settings (``RunSettings``' fields with an ``Option``), the
command's parameters and the builder's methods are compared with each other.
"""

from __future__ import annotations

from dataclasses import MISSING

import pytest

from walspark.cli import commands  # noqa: F401  (registers the subcommands)
from walspark.cli.main import cli
from walspark.pipeline import Pipeline, RunSettings
from walspark.pipeline.settings import Option, run_options
from walspark.source.errors import OptionError

#: How the builder sets each setting: a call on a fresh builder, and the value it gives.
SETTERS = {
    "scd2": (lambda p: p.scd2("public.a", "public.b"), ("public.a", "public.b")),
    "app_id": (lambda p: p.app_id("q"), "q"),
    "trigger_seconds": (lambda p: p.trigger_seconds(2.5), 2.5),
    "max_rows_per_batch": (lambda p: p.max_rows_per_batch(10), 10),
    "sync_check_seconds": (lambda p: p.sync_check_seconds(3), 3.0),
    "sync_chunk_rows": (lambda p: p.sync_chunk_rows(7), 7),
    "state": (lambda p: p.state("/elsewhere"), "/elsewhere"),
    "maintenance_hours": (lambda p: p.maintenance(6), 6.0),
    "retain_hours": (lambda p: p.maintenance(24, retain_hours=1), 1.0),
    "metrics_port": (lambda p: p.metrics(9187), 9187),
    "metrics_host": (lambda p: p.metrics(9187, host="0.0.0.0"), "0.0.0.0"),
    "change_data_feed": (lambda p: p.change_data_feed(), True),
    "catalog_schema": (lambda p: p.catalog("cdc"), "cdc"),
    "failover_slot": (lambda p: p.failover_slot(False), False),
    "on_slot_loss": (lambda p: p.on_slot_loss("resnapshot"), "resnapshot"),
}
#: Set by the constructor, or by how the builder is run.
GIVEN = {"dsn", "publication", "slot", "target", "once"}


def _pipeline() -> Pipeline:
    return Pipeline(None, dsn="dbname=x", publication="pub", slot="s", target="/lake")


def test_every_setting_is_an_option_of_walspark_run_with_its_default() -> None:
    params = {p.name: p for p in cli.commands["run"].params}
    for field, option in run_options():
        param = params.get(field.name)
        assert param is not None, f"{Option.flag(field.name)} is not an option of walspark run"
        assert param.opts == [Option.flag(field.name)]
        assert param.help == option.help
        if field.default is MISSING:
            assert param.required, field.name
        elif isinstance(field.default, tuple):
            assert param.multiple, field.name
        else:
            assert param.default == field.default, field.name
    extra = set(params) - {f.name for f, _ in run_options()}
    assert extra == {"master", "confs"}, "an option of walspark run that is not a setting"


def test_every_setting_has_a_builder_method_that_leaves_the_builder_as_it_was() -> None:
    assert {f.name for f, _ in run_options()} == set(SETTERS) | GIVEN
    base = _pipeline()
    before = base.settings()
    for name, (call, value) in SETTERS.items():
        changed = call(base)
        assert changed is not base and getattr(changed.settings(), name) == value, name
        assert base.settings() == before, f"{name}: the builder changed in place"
    assert base.on_progress(print) is not base and base.session(None) is not base  # type: ignore[arg-type]


@pytest.mark.parametrize(("call", "flag"), [
    (lambda p: p.trigger_seconds(0), "--trigger-seconds"),
    (lambda p: p.max_rows_per_batch(0), "--max-rows-per-batch"),
    (lambda p: p.sync_chunk_rows(0), "--sync-chunk-rows"),
    (lambda p: p.maintenance(-1), "--maintenance-hours"),
    (lambda p: p.metrics(0), "--metrics-port"),
    (lambda p: p.metrics(65536), "--metrics-port"),
    (lambda p: p.maintenance(24, retain_hours=-1), "--retain-hours"),
    (lambda p: p.on_slot_loss("retry"), "--on-slot-loss"),
])  # fmt: skip
def test_a_setting_out_of_its_bound_is_refused_naming_the_setting_and_its_flag(call, flag) -> None:
    with pytest.raises(OptionError, match=f"{flag.lstrip('-').replace('-', '_')} \\({flag}\\) must be"):
        call(_pipeline())


def test_the_settings_of_walspark_run_build_the_same_pipeline() -> None:
    settings = RunSettings("dbname=x", "pub", "s", "/lake", scd2=("public.a",), trigger_seconds=2.0)
    assert Pipeline.from_settings(settings).settings() == _pipeline().scd2("public.a").trigger_seconds(2).settings()
