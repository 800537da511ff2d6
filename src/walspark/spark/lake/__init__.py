"""The lake side: Delta tables that change rows are applied to, exactly once.

See docs/design/applying.md for its modules and why each is exactly once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["ApplyChanges", "apply_changes"]

if TYPE_CHECKING:
    from walspark.spark.lake.apply import apply_changes
    from walspark.spark.lake.sink import ApplyChanges


def __getattr__(name: str) -> Any:  # imported on first use: a submodule alone does not load the sink
    if name == "ApplyChanges":
        from walspark.spark.lake.sink import ApplyChanges

        return ApplyChanges
    if name == "apply_changes":
        from walspark.spark.lake.apply import apply_changes

        return apply_changes
    raise AttributeError(f"module 'walspark.spark.lake' has no attribute {name!r}")
