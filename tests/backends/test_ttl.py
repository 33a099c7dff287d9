"""State TTL with a manual clock: expiry, update types, visibility, and expired entries left out of snapshots."""

from __future__ import annotations

import pytest

from statekit.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    Time,
    ValueStateDescriptor,
)

TTL = StateTtlConfig(ttl_ms=100)
ON_READ = StateTtlConfig.new_builder(Time.milliseconds(100)).update_ttl_on_read_and_write().build()
RETURN_EXPIRED = StateTtlConfig(100, state_visibility="return_expired_if_not_cleaned_up")


def test_value_expires_after_write(backend, at, clock):
    h = backend.get_state(ValueStateDescriptor("v", "bigint", default=-1, ttl=TTL))
    at(backend, "a")
    h.update(1)
    clock.advance(99)
    assert h.value() == 1  # reading does not extend on_create_and_write
    clock.advance(1)
    assert h.value() == -1
    h.update(2)
    clock.advance(50)
    h.update(3)  # writing restarts the clock
    clock.advance(60)
    assert h.value() == 3


def test_on_read_and_write_extends(backend, at, clock):
    h = backend.get_state(ValueStateDescriptor("v", "bigint", ttl=ON_READ))
    at(backend, "a")
    h.update(1)
    for _ in range(5):
        clock.advance(80)
        assert h.value() == 1
    clock.advance(100)
    assert h.value() is None


def test_return_expired_if_not_cleaned_up(backend, at, clock):
    h = backend.get_state(ValueStateDescriptor("v", "bigint", ttl=RETURN_EXPIRED))
    at(backend, "a")
    h.update(1)
    clock.advance(500)
    assert h.value() == 1  # still there, returned once, then cleaned up
    assert h.value() is None


def test_list_elements_expire_one_by_one(backend, at, clock):
    h = backend.get_state(ListStateDescriptor("l", "string", ttl=TTL))
    at(backend, "a")
    h.add("old")
    clock.advance(60)
    h.add_all(["new1", "new2"])
    assert h.get() == ["old", "new1", "new2"]
    clock.advance(50)
    assert h.get() == ["new1", "new2"]
    clock.advance(100)
    assert h.get() == []
    h.update(["x"])
    assert list(h) == ["x"]
    with pytest.raises(Exception):
        h.add(None)


def test_map_entries_expire_one_by_one(backend, at, clock):
    h = backend.get_state(MapStateDescriptor("m", "string", "bigint", ttl=TTL))
    at(backend, "a")
    h.put("old", 1)
    clock.advance(60)
    h.put_all({"new": 2})
    assert sorted(h.items()) == [("new", 2), ("old", 1)]
    clock.advance(50)
    assert h.get("old") is None and not h.contains("old") and h.get("new") == 2
    assert h.keys() == ["new"] and h.values() == [2] and not h.is_empty()
    clock.advance(100)
    assert h.is_empty()
    h.put("z", 3)
    h.remove("z")
    assert h.is_empty()


def test_reducing_with_ttl(backend, at, clock):
    h = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b, "bigint", ttl=TTL))
    at(backend, "a")
    h.add(1)
    h.add(2)
    assert h.get() == 3
    clock.advance(100)
    assert h.get() is None
    h.add(5)
    assert h.get() == 5


def test_expired_entries_are_not_snapshotted_or_iterated(backend, at, clock):
    v = backend.get_state(ValueStateDescriptor("v", "bigint", ttl=TTL))
    lst = backend.get_state(ListStateDescriptor("l", "bigint", ttl=TTL))
    m = backend.get_state(MapStateDescriptor("m", "string", "bigint", ttl=TTL))
    at(backend, "old")
    v.update(1)
    lst.add(1)
    m.put("a", 1)
    clock.advance(60)
    at(backend, "new")
    v.update(2)
    lst.add(2)
    m.put("b", 2)
    at(backend, "old")
    lst.add(3)  # one live element under an otherwise expiring key
    clock.advance(50)
    assert list(backend.keys("v")) == ["new"]
    table = backend.snapshot(1).table()
    rows = {r["key"]: r for r in table.to_pylist()}
    assert rows["new"] == {"key_group": rows["new"]["key_group"], "key": "new", "v": 2, "l": [2], "m": [("b", 2)]}
    assert rows["old"]["v"] is None and rows["old"]["l"] == [3] and rows["old"]["m"] is None
    infos = {i.name: i for i in backend.snapshot(2).infos}
    assert infos["v"].ttl_ms == 100


def test_restored_ttl_state_gets_fresh_timestamps(make_backend, at, clock):
    a = make_backend()
    h = a.get_state(ValueStateDescriptor("v", "bigint", ttl=TTL))
    at(a, "k")
    h.update(7)
    table = a.snapshot(1).table()
    clock.advance(90)
    b = make_backend()
    b.restore([table], a.state_infos())
    h = b.get_state(ValueStateDescriptor("v", "bigint", ttl=TTL))
    clock.advance(90)
    at(b, "k")
    assert h.value() == 7  # stamped at restore time
    clock.advance(10)
    assert h.value() is None


def test_ttl_can_be_added_on_restore(make_backend, at, clock):
    a = make_backend()
    h = a.get_state(ValueStateDescriptor("v", "bigint"))
    at(a, "k")
    h.update(7)
    table = a.snapshot(1).table()
    b = make_backend()
    b.restore([table], a.state_infos())
    b.snapshot(2)  # RocksDB keeps restored, unregistered state in RocksDB by now
    h = b.get_state(ValueStateDescriptor("v", "bigint", ttl=TTL))
    at(b, "k")
    assert h.value() == 7
    clock.advance(100)
    assert h.value() is None
