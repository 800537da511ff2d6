"""A table's declared struct widened by the stream shapes a schema barrier recorded.

The barrier (:mod:`walspark.staging.barrier`) keeps the shapes; this is how the next start
declares them beside the catalog's. See docs/design/staging.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pyspark.sql import types as T

__all__ = ["identify_old_columns", "merge_recorded"]


def _fits(actual: T.DataType, declared: T.DataType) -> bool:
    from walspark.spark.datasource.schema import _fits as fits

    return fits(actual, declared)


def merge_recorded(
    name: str,
    declared: T.StructType | None,
    recorded: Sequence[T.StructType],
    history: Mapping[int, str | None] | None = None,
) -> T.StructType:
    """The catalog's struct of a table widened to hold the recorded stream shapes too.

    Catalog columns come first and keep their catalog facts (attnum, missing value) as long as
    the recorded type fits them either way (the wider type is declared). A recorded column the
    catalog lacks (dropped or renamed since) is appended without facts, and so is a recorded
    column whose type cannot share a column with the catalog's (dropped and re-added with another
    type, or retyped): the stream's shape wins, because its changes come first — the catalog's
    shape is declared again at the restart its own changes cause. With the table's attnum
    ``history``, each appended column also says which catalog column it is now, if the stream
    shows it (:func:`identify_old_columns`). Shapes recorded together (one transaction) that
    conflict with each other raise :class:`~.schema.SchemaChangedError`.
    """
    from walspark.spark.datasource.schema import AMBIGUOUS_KEY, SAME_AS_KEY, merge_structs

    fields: dict[str, T.StructField] = {f.name: f for f in (declared.fields if declared is not None else ())}
    stream = merge_structs(name, list(recorded)) if recorded else T.StructType([])
    identity: dict[str, str | bool | None] = {}
    if history and declared is not None:
        for shape in recorded:
            for column, found in identify_old_columns(declared, shape, history).items():
                identity[column] = found if identity.get(column, found) == found else True
    for f in stream.fields:
        have = fields.get(f.name)
        if have is None:
            metadata = _plain_metadata(f)
            found = identity.get(f.name)
            if found is True:
                metadata[AMBIGUOUS_KEY] = True
            elif found is not None:
                metadata[SAME_AS_KEY] = found
            fields[f.name] = T.StructField(f.name, f.dataType, True, metadata)
        elif _fits(f.dataType, have.dataType):
            continue
        elif _fits(have.dataType, f.dataType):
            fields[f.name] = T.StructField(f.name, f.dataType, True, have.metadata)
        else:
            fields[f.name] = T.StructField(f.name, f.dataType, True, _plain_metadata(f))
    return T.StructType(list(fields.values()))


#: Beyond this many ways to place an older shape's unknown columns among the attnums, give up.
_MAX_PLACEMENTS = 20_000


def identify_old_columns(
    catalog: T.StructType, shape: T.StructType, history: Mapping[int, str | None]
) -> dict[str, str | bool | None]:
    """Which column each column of an older stream shape is now, for those the catalog does not
    name: the catalog column's name (renamed since), None (dropped since) or True (cannot tell).

    pgoutput names columns but gives no attnum; it sends them in attnum order, and PostgreSQL
    never reuses an attnum (dropped columns keep theirs in ``pg_attribute``). So a run of unknown
    columns between two columns the catalog still names (attnums ``lo`` < ``hi``) is some of the
    attnums in between, in order; and every live published column older than one the shape holds
    existed then, so it is in the shape too. Each placement of the run that obeys this (and the
    types) is a possible past; a column on which all of them agree is identified — a column
    added and renamed within one backlog, or renamed twice, is found — and one where only dropped
    columns are possible is dead (its values no longer matter).
    """
    from itertools import combinations

    from walspark.spark.datasource.schema import ATTNUM_KEY

    current = {f.name: int(f.metadata[ATTNUM_KEY]) for f in catalog.fields if ATTNUM_KEY in (f.metadata or {})}
    published = {n: name for name, n in current.items()}
    possible = sorted({n for n, name in history.items() if name is None} | set(published))
    out: dict[str, str | bool | None] = {}

    def place(run: list[T.StructField], lo: int, hi: float) -> None:
        between = [n for n in possible if lo < n < hi]
        outcomes: list[set[str | None]] = [set() for _ in run]
        if math.comb(len(between), len(run)) > _MAX_PLACEMENTS:
            outcomes = [{None, ""} for _ in run]
        else:
            for chosen in combinations(between, len(run)):
                top = hi if hi != float("inf") else chosen[-1]
                if any(n in published and n not in chosen and n < top for n in between):
                    continue  # a live column older than one the shape holds would be missing
                names = [published.get(n) for n in chosen]
                if any(
                    now is not None and not _compatible(f.dataType, catalog[now].dataType)
                    for f, now in zip(run, names, strict=True)
                ):
                    continue
                for seen, now in zip(outcomes, names, strict=True):
                    seen.add(now)
        for f, seen in zip(run, outcomes, strict=True):
            out[f.name] = next(iter(seen)) if len(seen) == 1 else (None if not seen - {None} else True)

    run: list[T.StructField] = []
    lo, ordered = 0, True
    for f in shape.fields:
        n = current.get(f.name)
        if n is None:
            run.append(f)
            continue
        ordered = ordered and n > lo
        if run:
            place(run, lo, n)
            run = []
        lo = max(lo, n)
    if run:
        place(run, lo, float("inf"))
    if not ordered:  # names the catalog has, out of attnum order: swapped by renames
        out = {name: True for name in out}
    return out


def _compatible(a: T.DataType, b: T.DataType) -> bool:
    return _fits(a, b) or _fits(b, a)


def _plain_metadata(field: T.StructField) -> dict:
    """A stream column's metadata without catalog facts (its identity in the catalog is unknown)."""
    return {k: v for k, v in (field.metadata or {}).items() if not k.startswith("walspark.")}
