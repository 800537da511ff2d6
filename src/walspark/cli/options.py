"""The options the commands share, each declared once; ``walspark run``'s from the run settings.

A run setting's flag, help, default and bound are written once, beside its field in
``RunSettings`` (:class:`~walspark.pipeline.settings.Option`); the commands get them from there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING
from typing import Any, TypeVar

import click

from walspark.pipeline.settings import Option, run_options

__all__ = [
    "master_option",
    "parse_confs",
    "pipeline_target_options",
    "settings_options",
    "source_options",
    "spark_options",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def _click_type(annotation: str, option: Option) -> Any:
    """The click type of a setting from its annotation (``"int | None"`` → an int, bounded)."""
    if option.choices is not None:
        return click.Choice(option.choices)
    kind = "int" if "int" in annotation else "float" if "float" in annotation else "str"
    if kind == "str" or option.minimum is None:
        return {"int": int, "float": float, "str": str}[kind]
    maximum = None if option.maximum is None else int(option.maximum)
    if kind == "int":
        return click.IntRange(int(option.minimum), maximum, min_open=option.above)
    return click.FloatRange(option.minimum, min_open=option.above)


def _decorator(name: str, annotation: str, default: Any, option: Option) -> Callable[[_F], _F]:
    flag = Option.flag(name)
    if annotation == "bool":  # on by default: --no-NAME turns it off
        decls = f"{flag}/--no-{flag[2:]}" if default is True else flag
        return click.option(decls, name, is_flag=True, default=default, help=option.help)
    if annotation.startswith("tuple"):
        return click.option(flag, multiple=True, metavar=option.metavar, help=option.help)
    required = default is MISSING
    return click.option(flag, required=required, default=None if required else default, envvar=option.envvar,
                        metavar=option.metavar, type=_click_type(annotation, option), help=option.help,
                        show_default=not required and default is not None)  # fmt: skip


def settings_options(command: _F) -> _F:
    """Give ``command`` an option per run setting (its keyword arguments are the settings' names)."""
    for field, option in reversed(run_options()):
        command = _decorator(field.name, str(field.type), field.default, option)(command)
    return command


def source_options(command: _F) -> _F:
    """``--dsn``, ``--publication`` and ``--slot`` exactly as ``walspark run`` has them (the same settings)."""
    for field, option in reversed([(f, o) for f, o in run_options() if f.name in ("dsn", "publication", "slot")]):
        command = _decorator(field.name, str(field.type), field.default, option)(command)
    return command


#: ``--master``: the Spark master of a command that starts Spark.
master_option = click.option(
    "--master", default=None, help="Spark master (default local[*]; under spark-submit, its --master)."
)
_conf_option = click.option(
    "--conf",
    "confs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Spark setting, repeatable (as spark-submit's), e.g. spark.hadoop.fs.s3a.endpoint=...",
)


def spark_options(command: _F) -> _F:
    """``--master`` and ``--conf`` (parsed by :func:`parse_confs`)."""
    return master_option(_conf_option(command))


def pipeline_target_options(command: _F) -> _F:
    """``--target`` and ``--state`` of a pipeline that ``walspark run`` writes, for the commands acting on it."""
    target = click.option(
        "--target", required=True, help="Folder or URI of the Delta tables, as given to walspark run."
    )
    state = click.option(
        "--state",
        default=None,
        metavar="LOCATION",
        help="walspark's state folder, as given to walspark run (default TARGET/_walspark).",
    )
    return target(state(command))


def parse_confs(confs: tuple[str, ...]) -> dict[str, str]:
    """``--conf KEY=VALUE`` options as a dict (the last one of a key wins, as in spark-submit)."""
    out: dict[str, str] = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item.split('=')[0]!r}: expected KEY=VALUE", param_hint="--conf")
        out[key.strip()] = value
    return out
