"""``python -m walspark.cli``: the same as the ``walspark`` command."""

from walspark.cli.main import main

main()
