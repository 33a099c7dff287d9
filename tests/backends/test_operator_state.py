"""The operator state store: split/union list state, broadcast state, snapshots, restores, pickles."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.backends.operator import DefaultOperatorStateStore
from statekit.errors import NullKeyError, StateAccessError, StateTypeError, UntrustedPickleError
from statekit.state import BroadcastStateDescriptor, ListStateDescriptor, MapStateDescriptor
from statekit.types import PICKLED

OFFSETS = ListStateDescriptor("offsets", "bigint")
RULES = BroadcastStateDescriptor("rules", "string", "struct<limit:bigint,tags:array<string>>")


def test_list_state_methods():
    store = DefaultOperatorStateStore()
    h = store.get_list_state(OFFSETS)
    assert h.get() == []
    h.add(1)
    h.add_all([2, 3])
    assert list(h) == [1, 2, 3]
    with pytest.raises(StateTypeError):
        h.add(None)
    with pytest.raises(StateTypeError):
        h.update([1, None])
    h.update([9])
    assert h.get() == [9]
    h.clear()
    assert h.get() == []
    assert store.get_list_state(OFFSETS) is h


def test_broadcast_state_and_read_only_view():
    store = DefaultOperatorStateStore()
    h = store.get_broadcast_state(RULES)
    h.put("a", {"limit": 1, "tags": ["x"]})
    h.put_all({"b": {"limit": 2, "tags": []}})
    assert h.get("a") == {"limit": 1, "tags": ["x"]} and h.contains("b") and "b" in h
    assert sorted(h.keys()) == ["a", "b"] and len(h.values()) == 2 and not h.is_empty()
    with pytest.raises(NullKeyError):
        h.put(None, {})
    ro = h.read_only()
    assert ro.get("b") == {"limit": 2, "tags": []} and sorted(ro) == ["a", "b"] and ro.contains("a")
    assert sorted(ro.items())[0][0] == "a" and len(ro.values()) == 2 and not ro.is_empty()
    for write in (lambda: ro.put("c", {}), lambda: ro.remove("a"), ro.clear, lambda: ro.put_all({})):
        with pytest.raises(StateAccessError):
            write()
    h.remove("a")
    h.remove("missing")
    assert h.keys() == ["b"]
    h.clear()
    assert h.is_empty()
    # PyFlink passes a MapStateDescriptor to broadcast(); the same state comes back
    assert store.get_broadcast_state(MapStateDescriptor("rules", "string", "struct<limit:bigint,tags:array<string>>")) is h


def test_conflicting_registration():
    store = DefaultOperatorStateStore()
    store.get_list_state(OFFSETS)
    with pytest.raises(StateTypeError):
        store.get_union_list_state(OFFSETS)
    with pytest.raises(StateTypeError):
        store.get_list_state(ListStateDescriptor("offsets", "string"))
    with pytest.raises(StateTypeError):
        store.get_broadcast_state(BroadcastStateDescriptor("offsets", "string", "bigint"))
    with pytest.raises(StateTypeError):
        store.get_broadcast_state(BroadcastStateDescriptor("k", PICKLED, "bigint"))


def test_snapshot_tables():
    store = DefaultOperatorStateStore()
    store.get_list_state(OFFSETS).update([5, 6])
    store.get_union_list_state(ListStateDescriptor("seen", "string")).add("x")
    store.get_broadcast_state(RULES).put("r", {"limit": 3, "tags": None})
    snap = store.snapshot()
    assert {n: i.redistribution for n, (i, _) in snap.items()} == {"offsets": "split", "seen": "union", "rules": "broadcast"}
    assert snap["offsets"][1].schema == pa.schema([("idx", pa.int64()), ("value", pa.int64())])
    assert snap["offsets"][1].to_pylist() == [{"idx": 0, "value": 5}, {"idx": 1, "value": 6}]
    assert snap["rules"][1].to_pylist() == [{"key": "r", "value": {"limit": 3, "tags": None}}]
    assert snap["rules"][0].key_type == "string"


def test_restore_before_and_after_registration():
    old = DefaultOperatorStateStore()
    old.get_list_state(OFFSETS).update([1, 2, 3])
    old.get_broadcast_state(RULES).put("r", {"limit": 3, "tags": ["t"]})
    snap = old.snapshot()
    table = snap["offsets"][1]
    shuffled = pa.table({"subtask": [1, 0, 0], "idx": [0, 1, 0], "value": [3, 2, 1]})
    new = DefaultOperatorStateStore()
    new.restore({"offsets": (snap["offsets"][0], shuffled), "rules": snap["rules"]})
    assert new.snapshot()["rules"] == snap["rules"]  # carried along before registration
    assert new.get_list_state(OFFSETS).get() == [1, 2, 3]
    assert new.get_broadcast_state(RULES).get("r") == {"limit": 3, "tags": ["t"]}
    late = DefaultOperatorStateStore()
    h = late.get_list_state(OFFSETS)
    late.restore({"offsets": (snap["offsets"][0], table)})
    assert h.get() == [1, 2, 3]
    mismatched = DefaultOperatorStateStore()
    mismatched.restore({"offsets": snap["offsets"]})
    with pytest.raises(StateTypeError):
        mismatched.get_union_list_state(OFFSETS)


def test_pickled_operator_state_needs_trust():
    desc = ListStateDescriptor("objs", PICKLED)
    store = DefaultOperatorStateStore()
    store.get_list_state(desc).add({"a": {1}})
    snap = store.snapshot()
    assert snap["objs"][1].schema.field("value").type == pa.binary()
    untrusting = DefaultOperatorStateStore()
    untrusting.restore(snap)
    with pytest.raises(UntrustedPickleError):
        untrusting.get_list_state(desc)
    assert untrusting.snapshot()["objs"] == snap["objs"]  # a refused registration loses nothing
    trusting = DefaultOperatorStateStore(trust_pickled=True)
    trusting.restore(snap)
    assert trusting.get_list_state(desc).get() == [{"a": {1}}]
