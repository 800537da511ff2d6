"""Pure parts of schema following: recorded stream shapes, their merge, column identity plans."""

from __future__ import annotations

from pyspark.sql import types as T

from walspark.spark.datasource.schema import AMBIGUOUS_KEY, ATTNUM_KEY, SAME_AS_KEY
from walspark.spark.datasource.shapes import identify_old_columns, merge_recorded
from walspark.spark.lake.evolution import (
    ColumnIds,
    _aliases,
    _plan,
    parse_attnums,
    sql_string,
)
from walspark.staging.barrier import read_barrier, record_barrier, recorded_shapes


def _f(name: str, dtype: T.DataType, attnum: int | None = None) -> T.StructField:
    return T.StructField(name, dtype, True, {} if attnum is None else {ATTNUM_KEY: attnum})


def test_recorded_shapes_replace_per_table_and_age_out(tmp_path):
    record_barrier(tmp_path, 100, {"public.t": [(("id", 23, -1), ("b", 25, -1))]}, [("public.t", "new column 'b'")])
    record_barrier(tmp_path, 200, {"public.u": [(("x", 23, -1),)]}, [("public.u", "why")])
    record_barrier(tmp_path, 300, {"public.t": [(("id", 23, -1),), (("id", 23, -1), ("c", 16, -1))]},
                   [("public.t", "again")])
    assert recorded_shapes(tmp_path) == {"public.t": [(("id", 23, -1),), (("id", 23, -1), ("c", 16, -1))],
                                         "public.u": [(("x", 23, -1),)]}
    assert list(recorded_shapes(tmp_path, after_lsn=200)) == ["public.t"]
    barrier = read_barrier(tmp_path)
    assert barrier is not None and barrier.end_lsn == 300 and barrier.line() == "table public.t: again"


def test_merge_keeps_catalog_facts_widens_and_lets_the_stream_win_a_conflict():
    catalog = T.StructType([_f("id", T.IntegerType(), 1), _f("a", T.IntegerType(), 2), _f("b", T.IntegerType(), 4)])
    stream = T.StructType([_f("id", T.IntegerType()), _f("a", T.LongType()), _f("b", T.StringType()),
                           _f("gone", T.StringType())])
    merged = merge_recorded("public.t", catalog, [stream])
    got = {f.name: (f.dataType.simpleString(), (f.metadata or {}).get(ATTNUM_KEY)) for f in merged.fields}
    assert got == {"id": ("int", 1), "a": ("bigint", 2), "b": ("string", None), "gone": ("string", None)}
    assert [f.name for f in merge_recorded("public.new", None, [stream]).fields] == ["id", "a", "b", "gone"]


def _shape(*names: str) -> T.StructType:
    return T.StructType([_f(n, T.StringType() if n != "id" else T.IntegerType()) for n in names])


def test_old_columns_are_found_by_their_place_among_attnums():
    """pgoutput sends columns in attnum order and attnums are never reused: an older shape's
    unknown columns are the attnums between the columns the catalog still names, when they are
    as many; dropped attnums in the history are dead columns."""
    catalog = T.StructType([_f("id", T.IntegerType(), 1), _f("a", T.StringType(), 2), _f("d", T.StringType(), 3),
                            _f("e", T.StringType(), 5)])
    history = {1: "id", 2: "a", 3: "d", 4: None, 5: "e"}
    # b renamed to c and then to d; x (attnum 4) dropped since; e's older name c2
    assert identify_old_columns(catalog, _shape("id", "a", "c"), history) == {"c": "d"}
    assert identify_old_columns(catalog, _shape("id", "a", "b", "x", "c2"), history) == {"b": "d", "x": None,
                                                                                      "c2": "e"}
    # after d: x (4, dropped since) or e (5, renamed since) — both possible pasts
    assert identify_old_columns(catalog, _shape("id", "a", "d", "y"), history) == {"y": True}
    # ... unless the types tell: an int column cannot be e (text) now
    int_y = T.StructType([*_shape("id", "a", "d").fields, _f("y", T.IntegerType())])
    assert identify_old_columns(catalog, int_y, history) == {"y": None}
    # names out of attnum order (swapped by renames): nothing the catalog does not name is trusted
    assert identify_old_columns(catalog, _shape("id", "d", "a", "q"), history) == {"q": True}
    merged = merge_recorded("public.t", catalog, [_shape("id", "a", "c"), _shape("id", "a", "d", "y")], history)
    md = {f.name: f.metadata for f in merged.fields}
    assert md["c"] == {SAME_AS_KEY: "d"} and md["y"] == {AMBIGUOUS_KEY: True}


def test_identity_plan_rename_readd_swap_and_tables_without_attnums():
    current = {n: _f(n, T.IntegerType()) for n in ("id", "a", "b")}
    ids = ColumnIds({"id": 1, "a": 2, "b": 3}, {})
    # rename b -> c, the batch still carrying b (changes from before the rename)
    fields = [_f("id", T.IntegerType(), 1), _f("a", T.IntegerType(), 2), _f("c", T.IntegerType(), 3),
              _f("b", T.IntegerType())]
    plan = _plan(fields, current, ids)
    assert plan.renames == [("b", "c")] and not plan.drops and not plan.added
    assert _aliases(fields, plan.ids) == {"b": "c"}
    # dropped and added again: a new attnum under the old name
    plan = _plan([_f("id", T.IntegerType(), 1), _f("b", T.StringType(), 4)], current, ids)
    assert plan.drops == ["b"] and [f.name for f in plan.added] == ["b"] and plan.ids.attnums["b"] == 4
    # names swapped
    plan = _plan([_f("id", T.IntegerType(), 1), _f("b", T.IntegerType(), 2), _f("a", T.IntegerType(), 3)], current, ids)
    assert sorted(plan.renames) == [("a", "b"), ("b", "a")] and plan.ids.attnums == {"id": 1, "b": 2, "a": 3}
    # nothing to do
    assert _plan([_f("id", T.IntegerType(), 1), _f("a", T.IntegerType(), 2)], current, ids).ids == ids
    # a table from before attnums were recorded: columns are adopted by name
    plan = _plan([_f("id", T.IntegerType(), 1), _f("b", T.IntegerType(), 7)], current, ColumnIds({}, {}))
    assert not plan.drops and not plan.renames and plan.ids.attnums == {"id": 1, "b": 7}
    # a column added from an older stream shape (attnum unknown) is not a later column of that name
    plan = _plan([_f("id", T.IntegerType(), 1), _f("x", T.IntegerType())], current, ids)
    assert plan.ids.attnums["x"] == 0
    plan = _plan([_f("id", T.IntegerType(), 1), _f("x", T.IntegerType(), 9)], {**current, "x": _f("x", T.IntegerType())},
                 plan.ids)
    assert plan.drops == ["x"] and [f.name for f in plan.added] == ["x"]


def test_property_round_trip_and_sql_string():
    ids = ColumnIds({"it's": 1, "a\\b": 2, "é": 3}, {"old": "it's"})
    assert parse_attnums(ids.to_json()) == ids
    assert parse_attnums(None) == ColumnIds({}, {}) and parse_attnums("not json") == ColumnIds({}, {})
    assert sql_string("it's \\u00e9") == "'it\\'s \\\\u00e9'"


def test_recopy_advice_names_the_real_target_and_table():
    """A retyped table's error says what to type, with this target and table: no placeholder left."""
    from walspark.spark.lake.evolution import TargetTable

    advice = TargetTable(None, "/data/lake/public/orders", "public.orders").recopy_advice()  # type: ignore[arg-type]
    assert "`walspark resnapshot --target /data/lake --table public.orders`" in advice, advice
    assert "<" not in advice and ">" not in advice, advice
