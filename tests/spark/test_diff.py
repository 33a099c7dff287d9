"""statekit.spark.diff gives the rows statekit.savepoint.diff gives; different key types are refused before any job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statekit.errors import KeyTypeMismatchError
from statekit.savepoint import diff as local_diff
from statekit.spark import diff, diff_operators

sys.path.insert(0, str(Path(__file__).parents[1] / "savepoint"))
from test_diff import _write  # noqa: E402  (the savepoints of the local diff's tests)

pytestmark = pytest.mark.spark


def _norm(rows):
    out = {}
    for r in rows:
        r = r.asDict(recursive=True) if hasattr(r, "asDict") else r
        for side in ("old", "new"):
            if r[side] is not None and r[side].get("attrs") is not None:
                r[side]["attrs"] = dict(r[side]["attrs"])
        out[r["key"]] = r
    return out


def test_spark_diff_equals_the_local_diff(spark, tmp_path):
    from test_diff import ValueStateDescriptor

    a = _write(tmp_path / "a", keys=[1, 2, 3, 5], count=[10, 20, 30, None], seen=[["a"], [], None, ["z"]],
               attrs=[[("x", 1), ("y", 2)], None, None, None])  # fmt: skip
    b = _write(tmp_path / "b", keys=[1, 2, 4, 5], count=[10, 21, 40, None], seen=[["a"], [], ["d"], ["z", "w"]],
               attrs=[[("y", 2), ("x", 1)], None, None, None], extra=(ValueStateDescriptor("flag", "boolean"), [True, None, None, None]),
               max_parallelism=256, others=("new",))  # fmt: skip
    df = diff(a, b, "counter", spark=spark)
    assert df.columns == ["key", "change", "old", "new"]
    expected = _norm(local_diff(a, b, op="counter").operator("counter").keyed.to_pylist())
    assert _norm(df.collect()) == expected and set(expected) == {2, 3, 4, 5}

    meta = {(r.operator, r.item, r.change) for r in diff_operators(a, b, spark=spark).collect()}
    assert meta == {("new", "operator", "added"), ("gone", "operator", "removed"),
                    ("counter", "state:flag", "added"), ("counter", "max_parallelism", "changed")}  # fmt: skip

    other = _write(tmp_path / "c", keys=["1"], count=[1], seen=[None], attrs=[None], key_type="string")
    with pytest.raises(KeyTypeMismatchError):
        diff(a, other, "counter", spark=spark)


def test_spark_diff_of_timers_and_operator_state_rows_equals_the_local_diff(spark, tmp_path):
    """table="timers" and table=<operator state> give the rows of the local diff's timers and state rows."""
    from test_diff import _write_more

    a = _write_more(tmp_path / "a", timers=[(1, 10, "event"), (1, 20, "event"), (2, 5, "processing")],
                    items=[[1, 2], [2, 3]], names=[["x"], ["y"]], rates={"EUR": 1.1, "GBP": 1.3}, parallelism=2)  # fmt: skip
    b = _write_more(tmp_path / "b", timers=[(1, 10, "event"), (2, 5, "event"), (3, 7, "event")],
                    items=[[3, 2, 2, 2, 4]], names=[["x", "z", "y"]], rates={"EUR": 1.2, "USD": 1.0}, parallelism=1)  # fmt: skip
    local = local_diff(a, b)

    def rows(df_or_table):
        got = df_or_table.collect() if hasattr(df_or_table, "collect") else df_or_table.to_pylist()
        return sorted((tuple(sorted((r.asDict() if hasattr(r, "asDict") else r).items())) for r in got), key=repr)

    timers = diff(a, b, "timed", table="timers", spark=spark)
    assert rows(timers) == rows(local.operator("timed").timers) and len(rows(timers)) == 4
    for name in ("items", "names", "rates"):
        got = diff(a, b, "ops", table=name, spark=spark)
        assert rows(got) == rows(local.operator("ops").state_rows[name]), name
    assert rows(diff(a, b, "ops", table="names", spark=spark)) == [(("change", "added"), ("value", "z"))]
