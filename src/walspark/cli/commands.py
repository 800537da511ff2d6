"""Registers every subcommand on the ``walspark`` group (one module per command family)."""

from walspark.cli import capture, demo  # noqa: F401
from walspark.cli import slots  # noqa: F401
from walspark.cli import snapshot  # noqa: F401
from walspark.cli import run  # noqa: F401
from walspark.cli import resnapshot  # noqa: F401
from walspark.cli import jars  # noqa: F401
from walspark.cli import maintain  # noqa: F401
