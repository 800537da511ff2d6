"""Unchanged TOAST values with nothing to keep: a divergence to report, never a NULL to write.

:func:`check_unchanged_known` stops the table before its MERGE would write a NULL. See
docs/design/applying.md.
"""

from __future__ import annotations

import decimal
import functools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from walspark.spark.lake.evolution import SchemaEvolutionError
from walspark.spark.lake.tables import quote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from walspark.spark.lake.evolution import TargetTable

__all__ = ["UnchangedValueUnknown", "check_unchanged_known", "check_versions_known", "render_key"]

#: Longest rendering of one key value in the error line (a key can be a long text).
MAX_VALUE = 60

_P = "__ws_"


class UnchangedValueUnknown(SchemaEvolutionError):
    """An update left a TOASTed column unchanged, and no earlier value of that row is known."""


def render_key(keys: Sequence[str], values: Sequence[Any]) -> str:
    """``(a, b)=(1, 'x')``: names quoted like PostgreSQL's, values as Python literals on one line,
    each cut at :data:`MAX_VALUE` characters (a key may be long, or hold line breaks)."""

    def value(v: Any) -> str:
        if v is None:
            text = "NULL"
        elif isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
            text = str(v)
        elif isinstance(v, (str, bytes)):
            text = repr(v)  # quoted, line breaks and control characters escaped
        else:
            text = repr(str(v))  # dates, times, booleans, structs: their text, quoted
        text = text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
        return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 3] + "..."

    return f"({', '.join(quote_ident(k) for k in keys)})=({', '.join(value(v) for v in values)})"


def quote_ident(name: str) -> str:
    """An identifier as PostgreSQL prints it: bare when plain lower-case, else double-quoted."""
    plain = name.isascii() and name.replace("_", "a").isalnum() and name == name.lower() and not name[:1].isdigit()
    return name if plain else '"' + name.replace('"', '""') + '"'


def check_unchanged_known(target: TargetTable, source: DataFrame, keys: Sequence[str], names: Sequence[str]) -> None:
    """Raise :class:`UnchangedValueUnknown` if the MERGE would have to invent an unchanged value.

    ``source`` is the folded SCD1 source (``__ws_k<i>``, ``__ws_op``, ``__ws_from``,
    ``__ws_unchanged`` positions still unresolved). A row with unresolved positions that is not
    a delete needs the target's row at its key; one that arrived by a key change needs the old
    key's value, which resolution already looked for in the batch and the target — what it did
    not find is unknown (the target's row at the *new* key, if any, is another row's).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    pending = source.where((F.col(f"{_P}op") != "D") & (F.size(F.col(f"{_P}unchanged")) > 0))
    current = (
        DeltaTable.forPath(target.spark, target.path)
        .toDF()
        .select(*[F.col(quote(k)).alias(f"{_P}t{i}") for i, k in enumerate(keys)], F.lit(True).alias(f"{_P}held"))
    )
    match = functools.reduce(
        operator.and_, [pending[f"{_P}k{i}"].eqNullSafe(current[f"{_P}t{i}"]) for i in range(len(keys))]
    )
    found = (
        pending.join(current, match, "left")
        .where(F.col(f"{_P}held").isNull() | F.col(f"{_P}from").isNotNull())
        .select(*[F.col(f"{_P}k{i}") for i in range(len(keys))], F.col(f"{_P}unchanged"), F.col(f"{_P}held"))
        .limit(1)
        .collect()
    )
    if not found:
        return
    row = found[0]
    where = (
        "the target has no row for that key"
        if row[f"{_P}held"] is None
        else "the row came from another key whose value is known neither in the batch nor in the target"
    )
    _stop(target, keys, [row[f"{_P}k{i}"] for i in range(len(keys))], [names[i] for i in row[f"{_P}unchanged"]], where)


def check_versions_known(target: TargetTable, joined: DataFrame, keys: Sequence[str], names: Sequence[str],
                         target_columns: set[str]) -> None:  # fmt: skip
    """SCD2: the same rule for the new versions of :func:`~.apply_scd2.versions` (``joined``: one
    row per key and transaction, ``__ws_v<i>`` the batch's running values, null where unknown,
    ``__ws_tv<i>`` the target's current version's, null where it has no current version)."""
    from pyspark.sql import functions as F

    unknown = [
        F.when(F.col(f"{_P}v{i}").isNull() & F.col(f"{_P}tv{i}").isNull(), F.lit(i))
        for i, c in enumerate(names)
        if c in target_columns
    ]
    if not unknown:
        return
    positions = F.array_compact(F.array(*unknown))
    found = (
        joined.where(F.col("_op") != "D")
        .select(*[F.col(f"{_P}k{i}") for i in range(len(keys))], positions.alias(f"{_P}unknown"))
        .where(F.size(f"{_P}unknown") > 0)
        .limit(1)
        .collect()
    )
    if found:
        row = found[0]
        _stop(
            target,
            keys,
            [row[f"{_P}k{i}"] for i in range(len(keys))],
            [names[i] for i in row[f"{_P}unknown"]],
            "the target has no current version for that key",
        )


def _stop(target: TargetTable, keys: Sequence[str], values: Sequence[Any], columns: Sequence[str], where: str) -> None:
    raise UnchangedValueUnknown(
        f"table {target.qualified}: an update left column(s) {', '.join(repr(c) for c in columns)} unchanged (TOAST) "
        f"for key {render_key(keys, values)}, but {where}: the Delta table has diverged from the source (rows "
        f"deleted or never copied). Nothing of {target.qualified} was written from this batch (no NULL invented); "
        f"other tables go on. {target.recopy_advice()}"
    )
