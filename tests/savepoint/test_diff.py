"""statekit.savepoint.diff: operators, states and keyed rows added, removed or changed between two savepoints."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.errors import KeyTypeMismatchError, UnknownOperatorError
from statekit.savepoint import SavepointBuilder, diff
from statekit.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

COUNT = ValueStateDescriptor("count", "bigint")
SEEN = ListStateDescriptor("seen", "string")
ATTRS = MapStateDescriptor("attrs", "string", "bigint")


def _write(path, *, count, seen, attrs, keys, extra=None, max_parallelism=128, others=("gone",), key_type="bigint"):
    with SavepointBuilder(path, checkpoint_id=1) as b:
        states = [COUNT, SEEN, ATTRS] + ([extra[0]] if extra else [])
        op = b.add_operator("counter", max_parallelism=max_parallelism, key_type=key_type, keyed_states=states)
        cols = {"key": keys, "count": count, "seen": seen, "attrs": pa.array(attrs, pa.map_(pa.string(), pa.int64()))}
        if extra:
            cols[extra[0].name] = extra[1]
        op.write_keyed(pa.table(cols))
        for uid in others:
            b.add_operator(uid, key_type="string", keyed_states=[COUNT]).write_keyed(pa.table({"key": ["x"], "count": [1]}))
    return path


@pytest.fixture
def pair(tmp_path):
    a = _write(tmp_path / "a", keys=[1, 2, 3, 5], count=[10, 20, 30, None], seen=[["a"], [], None, ["z"]],
               attrs=[[("x", 1), ("y", 2)], None, None, None])  # fmt: skip
    b = _write(tmp_path / "b", keys=[1, 2, 4, 5], count=[10, 21, 40, None], seen=[["a"], [], ["d"], ["z", "w"]],
               attrs=[[("y", 2), ("x", 1)], None, None, None], extra=(ValueStateDescriptor("flag", "boolean"), [True, None, None, None]),
               max_parallelism=256, others=("new",))  # fmt: skip
    return a, b


def test_keyed_rows_added_removed_and_changed_with_old_and_new_values(pair):
    d = diff(*pair)
    keyed = d.operator("counter").keyed
    rows = {r["key"]: r for r in keyed.to_pylist()}
    assert {k: r["change"] for k, r in rows.items()} == {2: "changed", 3: "removed", 4: "added", 5: "changed"}
    assert rows[2]["old"]["count"] == 20 and rows[2]["new"]["count"] == 21
    assert rows[3]["old"] == {"count": 30, "seen": None, "attrs": None} and rows[3]["new"] is None
    assert rows[4]["old"] is None and rows[4]["new"]["seen"] == ["d"]
    assert rows[5]["old"]["seen"] == ["z"] and rows[5]["new"]["seen"] == ["z", "w"]
    # key 1: same values, map entries in another order, and a value in the new state "flag": unchanged
    assert 1 not in rows
    c = d.operator("counter")
    assert (c.keys_added, c.keys_removed, c.keys_changed) == (1, 1, 2)
    assert c.examples == {"added": [4], "removed": [3], "changed": [2, 5]}


def test_operators_states_and_properties_added_and_removed(pair):
    d = diff(*pair, rows=False)
    assert d.operators_added == ["new"] and d.operators_removed == ["gone"]
    c = d.operator("counter")
    assert c.states_added == ["flag"] and c.states_removed == [] and c.states_changed == []
    assert c.settings == {"max_parallelism": (128, 256)}
    assert c.keyed is None and not d.same


def test_same_savepoint_has_no_differences(pair):
    d = diff(pair[0], pair[0])
    assert d.same and d.operator("counter").keyed is None  # identical files are not even read


def test_one_operator_and_an_unknown_one(pair):
    d = diff(*pair, op="counter")
    assert [o.name for o in d.operators] == ["counter"] and d.operators_added == [] and d.operators_removed == []
    with pytest.raises(UnknownOperatorError):
        diff(*pair, op="nope")


def test_different_key_types_are_refused(tmp_path, pair):
    other = _write(tmp_path / "c", keys=["1"], count=[1], seen=[None], attrs=[None], key_type="string")
    with pytest.raises(KeyTypeMismatchError, match="keyed by bigint .* by string"):
        diff(pair[0], other, op="counter")


def test_window_namespaces_and_a_changed_state_type(tmp_path):
    """Rows are matched by key and window; a state widened int -> bigint compares by value."""
    from statekit.state.descriptors import StateInfo

    ns = pa.struct([("start", pa.int64()), ("end", pa.int64())])

    def write(path, typ, values):
        with SavepointBuilder(path, checkpoint_id=1) as b:
            op = b.add_operator("w", key_type="string", namespace_type="struct<start:bigint,end:bigint>",
                                keyed_states=[StateInfo("n", "value", typ)])  # fmt: skip
            op.write_keyed(pa.table({"key": ["a", "a", "b"],
                                     "namespace": pa.array([None, {"start": 0, "end": 10}, {"start": 0, "end": 10}], ns),
                                     "n": pa.array(values, pa.int32() if typ == "int" else pa.int64())}))  # fmt: skip
        return path

    d = diff(write(tmp_path / "a", "int", [1, 2, 3]), write(tmp_path / "b", "bigint", [1, 2, 4]))
    w = d.operator("w")
    assert w.states_changed == ["n"]
    assert w.keyed.select(["key", "namespace", "change"]).to_pylist() == [
        {"key": "b", "namespace": {"start": 0, "end": 10}, "change": "changed"}
    ]


# --- timers and operator state rows -------------------------------------------------------------------

ITEMS = ("items", "split", "bigint")
NAMES = ("names", "union", "string")


def _write_more(path, *, timers, items, names, rates, parallelism):
    from statekit.state import OperatorStateInfo

    with SavepointBuilder(path, checkpoint_id=1) as b:
        op = b.add_operator("timed", key_type="bigint", keyed_states=[COUNT])
        op.write_keyed(pa.table({"key": [1, 2, 3], "count": [1, 1, 1]}))
        k, ts, dom = zip(*timers)
        op.write_timers(pa.table({"key": list(k), "timestamp": list(ts), "domain": list(dom)}))
        ops = b.add_operator("ops", parallelism=parallelism)
        ops.write_list_state(OperatorStateInfo(*ITEMS), items)
        ops.write_list_state(OperatorStateInfo(*NAMES), names)
        ops.write_broadcast_state(OperatorStateInfo("rates", "broadcast", "double", key_type="string"), rates)
    return path


@pytest.fixture
def more(tmp_path):
    a = _write_more(tmp_path / "a", timers=[(1, 10, "event"), (1, 20, "event"), (2, 5, "processing")],
                    items=[[1, 2], [2, 3]], names=[["x"], ["y"]], rates={"EUR": 1.1, "GBP": 1.3}, parallelism=2)  # fmt: skip
    b = _write_more(tmp_path / "b", timers=[(1, 10, "event"), (2, 5, "event"), (3, 7, "event")],
                    items=[[3, 2, 2, 2, 4]], names=[["x", "y"]], rates={"EUR": 1.2, "USD": 1.0}, parallelism=1)  # fmt: skip
    return a, b


def test_timers_added_and_removed(more):
    """A timer is its key, namespace, time and domain: one that moved to another time or domain is one removed
    and one added."""
    t = diff(*more).operator("timed")
    rows = sorted((r["change"], r["key"], r["timestamp"], r["domain"]) for r in t.timers.to_pylist())
    assert rows == [("added", 2, 5, "event"), ("added", 3, 7, "event"),
                    ("removed", 1, 20, "event"), ("removed", 2, 5, "processing")]  # fmt: skip
    assert (t.timers_added, t.timers_removed) == (2, 2) and t.keys_changed == 0 and not t.empty


def test_list_union_and_broadcast_rows_added_removed_and_changed(more):
    """List and union state compare as multisets (a rescale moves elements between subtasks without changing
    them), broadcast state by key."""
    d = diff(*more)
    ops = d.operator("ops")
    assert set(ops.state_rows) == {"items", "rates"}  # the union state holds the same names, rescaled
    assert sorted((r["change"], r["value"]) for r in ops.state_rows["items"].to_pylist()) == [
        ("added", 2), ("added", 4), ("removed", 1)]  # fmt: skip
    assert sorted(ops.state_rows["rates"].to_pylist(), key=lambda r: r["key"]) == [
        {"key": "EUR", "change": "changed", "old": 1.1, "new": 1.2},
        {"key": "GBP", "change": "removed", "old": 1.3, "new": None},
        {"key": "USD", "change": "added", "old": None, "new": 1.0}]  # fmt: skip
    assert ops.to_json()["state_rows"] == {"items": {"added": 2, "removed": 1, "changed": 0},
                                           "rates": {"added": 1, "removed": 1, "changed": 1}}  # fmt: skip
    assert ops.settings == {"parallelism": (2, 1)}
    same = diff(more[0], more[0])
    assert same.same and same.operator("ops").state_rows == {} and same.operator("timed").timers is None
