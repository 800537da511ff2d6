"""Registers every subcommand on the ``walspark`` group (one module per command family)."""

from walspark.cli import (  # noqa: F401
    capture,
    demo,
    jars,
    maintain,
    resnapshot,
    run,
    slots,
    snapshot,
    verify,
)
