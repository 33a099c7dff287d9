"""Every state handle method and its edge cases, on every backend."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.errors import NullKeyError, StateAccessError, StateTypeError
from statekit.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statekit.types import PICKLED


class Avg(AggregateFunction):
    def create_accumulator(self):
        return {"count": 0, "sum": 0}

    def add(self, value, acc):
        return {"count": acc["count"] + 1, "sum": acc["sum"] + value}

    def get_result(self, acc):
        return acc["sum"] / acc["count"]

    def merge(self, a, b):
        return {"count": a["count"] + b["count"], "sum": a["sum"] + b["sum"]}


AVG_TYPE = "struct<count:bigint,sum:bigint>"


def test_value_state_default_update_clear(backend, at):
    plain = backend.get_state(ValueStateDescriptor("plain", "bigint"))
    counted = backend.get_state(ValueStateDescriptor("counted", "bigint", default=0))
    at(backend, "a")
    assert plain.value() is None and counted.value() == 0
    plain.update(5)
    counted.update(counted.value() + 1)
    at(backend, "b")
    assert plain.value() is None and counted.value() == 0
    at(backend, "a")
    assert plain.value() == 5 and counted.value() == 1
    plain.update(None)  # Flink: update(null) clears
    assert plain.value() is None
    counted.clear()
    assert counted.value() == 0


def test_same_descriptor_same_handle_and_conflicts(backend):
    d = ValueStateDescriptor("s", "bigint")
    h = backend.get_state(d)
    assert backend.get_state(d) is h
    assert backend.get_state(ValueStateDescriptor("s", "bigint")) is h
    with pytest.raises(StateTypeError, match="'s'"):
        backend.get_state(ValueStateDescriptor("s", "string"))
    with pytest.raises(StateTypeError):
        backend.get_state(ListStateDescriptor("s", "bigint"))


def test_no_key_and_null_key(backend):
    h = backend.get_state(ValueStateDescriptor("v", "bigint"))
    with pytest.raises(StateAccessError):
        h.value()
    with pytest.raises(StateAccessError):
        h.update(1)
    with pytest.raises(NullKeyError):
        backend.set_current_key(None, 0)
    assert backend.get_current_key() is None
    backend.set_current_key("k", 1)
    assert backend.get_current_key() == "k"


def test_list_state(backend, at):
    h = backend.get_state(ListStateDescriptor("l", "string"))
    at(backend, "a")
    assert list(h.get()) == []
    h.add("x")
    h.add_all(["y", "z"])
    h.add_all([])
    assert h.get() == ["x", "y", "z"]
    assert list(h) == ["x", "y", "z"]
    got = h.get()
    got.append("mutated")  # a copy: the state must not change
    assert h.get() == ["x", "y", "z"]
    with pytest.raises(StateTypeError):
        h.add(None)
    with pytest.raises(StateTypeError):
        h.add_all(["ok", None])
    with pytest.raises(StateTypeError):
        h.update([None])
    assert h.get() == ["x", "y", "z"]
    h.update(["q"])
    assert h.get() == ["q"]
    h.update([])
    assert h.get() == [] and list(backend.keys("l")) == []
    h.add("again")
    h.clear()
    assert h.get() == []


def test_map_state(backend, at):
    h = backend.get_state(MapStateDescriptor("m", "bigint", "string"))
    at(backend, "a")
    assert h.is_empty() and h.get(1) is None and h.keys() == [] and h.items() == [] and h.values() == []
    h.put(1, "one")
    h.put_all({2: "two", -3: "minus three"})
    h.put_all([(4, "four")])
    assert h.get(2) == "two" and h.contains(-3) and not h.contains(5) and 4 in h
    assert sorted(h.keys()) == [-3, 1, 2, 4]
    assert sorted(h.values()) == ["four", "minus three", "one", "two"]
    assert sorted(h.items()) == [(-3, "minus three"), (1, "one"), (2, "two"), (4, "four")]
    assert sorted(h) == [-3, 1, 2, 4]
    for k in h.keys():  # removing while looping over keys() is safe
        h.remove(k)
    assert h.is_empty()
    h.remove(99)  # missing: no-op
    h.put(7, None)  # null values are allowed, as in Flink
    assert h.contains(7) and h.get(7) is None and not h.is_empty()
    with pytest.raises(NullKeyError):
        h.put(None, "x")
    h.clear()
    assert h.is_empty()
    at(backend, "b")
    assert h.is_empty()


def test_map_state_struct_values_and_tuple_keys(backend, at):
    h = backend.get_state(MapStateDescriptor("m", "struct<a:int,b:string>", "struct<x:double,tags:array<string>>"))
    at(backend, "k")
    h.put((1, "z"), {"x": 1.5, "tags": ["p", "q"]})
    assert h.get((1, "z")) == {"x": 1.5, "tags": ["p", "q"]}


def test_reducing_state(backend, at):
    h = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b, "bigint"))
    at(backend, "a")
    assert h.get() is None
    h.add(3)
    h.add(4)
    assert h.get() == 7
    with pytest.raises(StateTypeError):
        h.add(None)
    h.clear()
    assert h.get() is None


def test_aggregating_state(backend, at):
    h = backend.get_state(AggregatingStateDescriptor("avg", Avg(), AVG_TYPE))
    at(backend, "a")
    assert h.get() is None
    h.add(2)
    h.add(4)
    assert h.get() == 3.0
    h.clear()
    assert h.get() is None


@pytest.mark.parametrize(
    "key_type, keys",
    [
        (pa.string(), ["", "ü日本", "a\x00b", "x" * 300]),
        (pa.int64(), [0, -1, 2**63 - 1, -(2**63), 42]),
        (pa.int32(), [0, -(2**31), 2**31 - 1]),
        (pa.float64(), [0.0, -1.5, 1e300]),
        (pa.bool_(), [True, False]),
        (pa.struct([("a", pa.int32()), ("b", pa.string())]), [(1, "x"), (1, "y"), (-2, "")]),
    ],
)
def test_key_types(make_backend, at, key_type, keys):
    backend = make_backend(key_type=key_type)
    h = backend.get_state(ValueStateDescriptor("v", "string"))
    for i, k in enumerate(keys):
        at(backend, k)
        h.update(f"v{i}")
    for i, k in enumerate(keys):
        at(backend, k)
        assert h.value() == f"v{i}"
    assert sorted(map(repr, backend.keys("v"))) == sorted(map(repr, keys))


def test_pickled_values(backend, at):
    h = backend.get_state(ValueStateDescriptor("p", PICKLED))
    at(backend, "a")
    h.update({"set": {1, 2}, "tuple": (1, "x")})
    assert h.value() == {"set": {1, 2}, "tuple": (1, "x")}


def test_struct_and_nested_values(backend, at):
    h = backend.get_state(ValueStateDescriptor("s", "struct<n:bigint,m:map<string,array<double>>,d:date>"))
    import datetime as dt

    at(backend, "a")
    v = {"n": 1, "m": {"x": [1.0, None]}, "d": dt.date(2024, 2, 29)}
    h.update(v)
    assert h.value() == v


def test_keys_and_namespaces_iteration(backend, at):
    h = backend.get_state(ListStateDescriptor("l", "bigint"))
    at(backend, "a")
    h.add(1)
    at(backend, "b", (0, 10))
    h.add(2)
    at(backend, "c", (10, 20))
    h.add(3)
    assert list(backend.keys("l")) == ["a"]
    assert list(backend.keys("l", (0, 10))) == ["b"]
    assert sorted(backend.namespaces("l"), key=repr) == sorted([("a", None), ("b", (0, 10)), ("c", (10, 20))], key=repr)
    with pytest.raises(StateAccessError):
        list(backend.keys("nope"))
