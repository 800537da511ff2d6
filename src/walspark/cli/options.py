"""``walspark run``'s options, made from the one declaration of each setting (:class:`~walspark.pipeline.settings.Option`).

A setting's flag, help, default and bound are written once, beside its field in ``RunSettings``;
the command gets them from there, so the CLI and the library cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING
from typing import Any, TypeVar

import click

from walspark.pipeline.settings import Option, run_options

__all__ = ["settings_options"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _click_type(annotation: str, option: Option) -> Any:
    """The click type of a setting from its annotation (``"int | None"`` → an int, bounded)."""
    kind = "int" if "int" in annotation else "float" if "float" in annotation else "str"
    if kind == "str" or option.minimum is None:
        return {"int": int, "float": float, "str": str}[kind]
    if kind == "int":
        return click.IntRange(int(option.minimum), min_open=option.above)
    return click.FloatRange(option.minimum, min_open=option.above)


def _decorator(name: str, annotation: str, default: Any, option: Option) -> Callable[[_F], _F]:
    flag = Option.flag(name)
    if annotation == "bool":
        return click.option(flag, is_flag=True, default=default, help=option.help)
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
