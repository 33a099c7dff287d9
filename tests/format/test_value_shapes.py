"""One value decoder: `Savepoint.get` and the reader functions (local and Spark) give every state kind the same shape."""

from __future__ import annotations

import pytest

from statekit.runtime import AggregateFunction, KeyedProcessFunction, StreamExecutionEnvironment
from statekit.savepoint import Savepoint
from statekit.spark.reader_function import KeyedStateReaderFunction, iter_output
from statekit.spark.scan import TableSpec, plan_tasks
from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statekit.types import PICKLED


class Keep(AggregateFunction):
    """Its result is its accumulator, so the reader's ``get()`` shows the stored value as `Savepoint.get` does."""

    def create_accumulator(self):
        return {"n": 0, "last": ""}

    def add(self, value, acc):
        return {"n": acc["n"] + 1, "last": value}

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return {"n": a["n"] + b["n"], "last": b["last"]}


DESCRIPTORS = {
    "value": ValueStateDescriptor("value", int),
    "nested": ValueStateDescriptor("nested", "struct<tags:map<string,bigint>,seen:array<string>>"),
    "list": ListStateDescriptor("list", str),
    "map": MapStateDescriptor("map", str, float),
    "struct_keys": MapStateDescriptor("struct_keys", "struct<a:string,b:bigint>", "bigint"),
    "pickled": MapStateDescriptor("pickled", str, PICKLED),
    "reducing": ReducingStateDescriptor("reducing", lambda a, b: a + b, int),
    "aggregating": AggregatingStateDescriptor("aggregating", Keep(), "struct<n:bigint,last:string>"),
}


class Fill(KeyedProcessFunction):
    def open(self, ctx):
        d = DESCRIPTORS
        self.value, self.nested = ctx.get_state(d["value"]), ctx.get_state(d["nested"])
        self.list, self.map = ctx.get_list_state(d["list"]), ctx.get_map_state(d["map"])
        self.struct_keys, self.pickled = ctx.get_map_state(d["struct_keys"]), ctx.get_map_state(d["pickled"])
        self.reducing, self.aggregating = ctx.get_reducing_state(d["reducing"]), ctx.get_aggregating_state(d["aggregating"])

    def process_element(self, value, ctx):
        key, word, n = value
        self.value.update(n)
        nested = self.nested.value() or {"tags": {}, "seen": []}
        self.nested.update({"tags": {**nested["tags"], word: n}, "seen": nested["seen"] + [word]})
        self.list.add(word)
        self.map.put(word, n / 2)
        self.struct_keys.put((word, n), n)
        self.pickled.put(word, {"objects": {n}})
        self.reducing.add(n)
        self.aggregating.add(word)


EVENTS = [("k1", "x", 1), ("k2", "y", 2), ("k1", "z", 3)]


class ReadAll(KeyedStateReaderFunction):
    """Yields each key's states as the read-only handles show them."""

    def open(self, ctx):
        d = DESCRIPTORS
        self.handles = {
            "value": ctx.get_state(d["value"]), "nested": ctx.get_state(d["nested"]),
            "list": ctx.get_list_state(d["list"]), "map": ctx.get_map_state(d["map"]),
            "struct_keys": ctx.get_map_state(d["struct_keys"]), "pickled": ctx.get_map_state(d["pickled"]),
            "reducing": ctx.get_reducing_state(d["reducing"]), "aggregating": ctx.get_aggregating_state(d["aggregating"]),
        }

    def read_key(self, key, ctx):
        out = {"key": key}
        for name, h in self.handles.items():
            out[name] = dict(h.items()) if hasattr(h, "items") else h.get() if hasattr(h, "get") else h.value()
        yield out


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("shapes") / "sp"
    env = StreamExecutionEnvironment(parallelism=2)
    stream = env.from_collection(EVENTS).key_by(lambda e: e[0], key_type="string").process(Fill()).uid("fill")
    assert list(stream.execute_and_collect(final_savepoint=path)) == []
    return path


EXPECTED = {
    "k1": {
        "value": 3,
        "nested": {"tags": {"x": 1, "z": 3}, "seen": ["x", "z"]},
        "list": ["x", "z"],
        "map": {"x": 0.5, "z": 1.5},
        "struct_keys": {("x", 1): 1, ("z", 3): 3},
        "pickled": {"x": {"objects": {1}}, "z": {"objects": {3}}},
        "reducing": 4,
        "aggregating": {"n": 2, "last": "z"},
    },
    "k2": {
        "value": 2,
        "nested": {"tags": {"y": 2}, "seen": ["y"]},
        "list": ["y"],
        "map": {"y": 1.0},
        "struct_keys": {("y", 2): 2},
        "pickled": {"y": {"objects": {2}}},
        "reducing": 2,
        "aggregating": {"n": 1, "last": "y"},
    },
}


def test_savepoint_get_gives_handle_shapes(savepoint):
    sp = Savepoint.open(savepoint, trust_pickled=True)
    for key, states in EXPECTED.items():
        assert sp.get("fill", key) == states


def test_local_reader_function_gives_the_same_shapes(savepoint):
    sp = Savepoint.open(savepoint, trust_pickled=True)
    meta = sp.operator("fill")
    spec = TableSpec(str(savepoint), meta.uid_hash, "keyed", trust_pickled=True)
    rows = [r for task in plan_tasks(meta, spec) for r in iter_output(ReadAll(), meta, spec, task, sp)]
    assert {r.pop("key"): r for r in rows} == {key: sp.get("fill", key) for key in EXPECTED} == EXPECTED


@pytest.mark.spark
def test_spark_reader_function_gives_the_same_shapes(spark, savepoint):
    from statekit.spark import SavepointReader

    schema = ("key string, value bigint, nested struct<tags:map<string,bigint>,seen:array<string>>, "
              "list array<string>, map map<string,double>, struct_keys map<struct<a:string,b:bigint>,bigint>, "
              "reducing bigint, aggregating struct<n:bigint,last:string>")

    class ReadTyped(ReadAll):
        def read_key(self, key, ctx):
            for row in super().read_key(key, ctx):
                row.pop("pickled")  # no Spark type for Python objects; compared locally above
                yield row

    reader = SavepointReader.read(spark, savepoint, trust_pickled=True)
    rows = reader.read_keyed_state("fill", ReadTyped(), output_schema=schema).collect()
    got = {r["key"]: {k: v for k, v in r.asDict(recursive=True).items() if k != "key"} for r in rows}
    for states in got.values():  # Spark hands map keys that are structs back as Rows (tuples)
        states["struct_keys"] = {tuple(k.values()) if isinstance(k, dict) else tuple(k): v for k, v in states["struct_keys"].items()}
    expected = {k: {n: v for n, v in s.items() if n != "pickled"} for k, s in EXPECTED.items()}
    assert got == expected
