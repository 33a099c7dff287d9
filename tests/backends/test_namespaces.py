"""Window namespaces: scoping, the namespace column in snapshots, and merging (session windows)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.format.keyed import NAMESPACE_ARROW
from statekit.keygroups import KeyGroupRange
from statekit.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

from .test_handles import AVG_TYPE, Avg

W1, W2, W3 = (0, 10), (10, 20), (5, 25)


def test_namespaces_are_separate(backend, at):
    h = backend.get_state(ListStateDescriptor("l", "bigint"))
    v = backend.get_state(ValueStateDescriptor("v", "bigint"))
    at(backend, "k", W1)
    h.add(1)
    at(backend, "k", W2)
    assert h.get() == []
    h.add(2)
    at(backend, "k")  # void namespace
    v.update(9)
    assert h.get() == []
    at(backend, "k", W1)
    assert h.get() == [1] and v.value() is None
    with pytest.raises(InvalidArgumentError):
        backend.set_current_namespace("not a window")


def test_namespace_column(backend, at):
    h = backend.get_state(ListStateDescriptor("l", "bigint"))
    v = backend.get_state(ValueStateDescriptor("v", "bigint"))
    at(backend, "k", W1)
    h.add(1)
    at(backend, "k", (-(2**40), 2**40))
    h.add(2)
    at(backend, "j")
    v.update(3)
    t = backend.snapshot(1).table()
    assert t.column_names == ["key_group", "key", "namespace", "l", "v"]
    assert t.schema.field("namespace").type == NAMESPACE_ARROW
    rows = sorted(t.to_pylist(), key=lambda r: (r["key"], repr(r["namespace"])))
    assert [(r["key"], r["namespace"], r["l"], r["v"]) for r in rows] == [
        ("j", None, None, 3),
        ("k", {"start": -(2**40), "end": 2**40}, [2], None),
        ("k", {"start": 0, "end": 10}, [1], None),
    ]


def test_namespaced_round_trip(make_backend, at):
    a = make_backend()
    h = a.get_state(ListStateDescriptor("l", "bigint"))
    for i, ns in enumerate([W1, W2, W3]):
        at(a, f"k{i}", ns)
        h.add(i)
    at(a, "k0", W2)
    h.add(100)
    table = a.snapshot(1).table()
    b = make_backend()
    b.restore([table], a.state_infos())
    h = b.get_state(ListStateDescriptor("l", "bigint"))
    at(b, "k0", W2)
    assert h.get() == [100]
    at(b, "k2", W3)
    assert h.get() == [2]
    assert sorted(b.namespaces("l")) == sorted([("k0", W1), ("k1", W2), ("k2", W3), ("k0", W2)])
    assert sorted(b.keys("l", W2)) == ["k0", "k1"]


def test_merge_list(backend, at):
    h = backend.get_state(ListStateDescriptor("l", "string"))
    for ns, x in ((W1, "a"), (W2, "b"), (W3, "c")):
        at(backend, "k", ns)
        h.add(x)
    at(backend, "other", W1)
    h.add("z")
    at(backend, "k", W1)
    backend.merge_namespaces("l", [W1, W2], W3)
    assert h.get() == []  # current namespace (W1) is restored after merging, and was cleared
    backend.set_current_namespace(W3)
    assert sorted(h.get()) == ["a", "b", "c"]
    at(backend, "other", W1)
    assert h.get() == ["z"]
    assert sorted(backend.namespaces("l")) == sorted([("k", W3), ("other", W1)])


def test_merge_reducing_and_aggregating(backend, at):
    r = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b, "bigint"))
    g = backend.get_state(AggregatingStateDescriptor("g", Avg(), AVG_TYPE))
    for ns, x in ((W1, 1), (W2, 2)):
        at(backend, "k", ns)
        r.add(x)
        g.add(x)
    at(backend, "k", W3)
    g.add(6)
    backend.merge_namespaces("r", [W1, W2], W3)
    backend.merge_namespaces("g", [W1, W2], W3)
    assert r.get() == 3 and g.get() == 3.0
    backend.set_current_namespace(W1)
    assert r.get() is None and g.get() is None


def test_merge_value_state_refused(backend, at):
    backend.get_state(ValueStateDescriptor("v", "bigint"))
    at(backend, "k", W1)
    with pytest.raises(StateTypeError):
        backend.merge_namespaces("v", [W1], W2)


def test_many_namespaces_then_void(backend, at):
    h = backend.get_state(ValueStateDescriptor("v", "bigint"))
    for w in range(50):
        at(backend, "k", (w, w + 1))
        h.update(w)
        h.clear()
    at(backend, "k")
    h.update(1)
    t = backend.snapshot(1).table()
    # windows were used, so the column stays (all subtasks of a window operator agree on the schema)
    assert t.column_names == ["key_group", "key", "namespace", "v"]
    assert t.column("namespace").to_pylist() == [None] and t.column("v").to_pylist() == [1]
    assert t.schema.field("key").type == pa.string()


def test_restored_namespace_column_is_kept(make_backend, at):
    a = make_backend()
    h = a.get_state(ValueStateDescriptor("v", "bigint"))
    at(a, "k", W1)
    h.update(1)
    table = a.snapshot(1).table()
    empty = make_backend(key_group_range=KeyGroupRange(0, 0) if table["key_group"][0].as_py() else KeyGroupRange(1, 1))
    empty.restore([table], a.state_infos())
    assert empty.snapshot(2).table().column_names == ["key_group", "key", "namespace", "v"]
