"""A Flink savepoint converted to statekit's format restores into the embedded runtime and continues the counts."""

from __future__ import annotations

import pytest

from statekit.errors import InvalidArgumentError, NotASavepointError, SavepointExistsError
from statekit.runtime import KeyedProcessFunction, StreamExecutionEnvironment
from statekit.savepoint import Savepoint
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink import FlinkSavepoint
from statekit.state import ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor, ValueStateDescriptor

from .conftest import CANONICAL, expected, savepoint


class Counter(KeyedProcessFunction):
    """The corpus job's `counter` operator, in statekit's runtime: same state names and types."""

    def open(self, rc):
        self.count = rc.get_state(ValueStateDescriptor("count", "bigint"))
        self.recent = rc.get_list_state(ListStateDescriptor("recent", "string"))
        self.per_kind = rc.get_map_state(MapStateDescriptor("per_kind", "string", "bigint"))
        self.sum = rc.get_reducing_state(ReducingStateDescriptor("sum", lambda a, b: a + b, "bigint"))

    def process_element(self, value, ctx):
        key, kind, v = value
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.recent.update((list(self.recent.get() or []) + [f"{kind}:{v}"])[-3:])
        self.per_kind.put(kind, (self.per_kind.get(kind) or 0) + 1)
        self.sum.add(v)
        yield key, n, self.sum.get()

    def on_timer(self, timestamp, ctx):
        return []


@pytest.mark.parametrize("case", ["string-hashmap-canonical", "string-rocksdb-canonical",
                                  "string-hashmap-canonical-snappy"])
def test_converted_savepoint_restores_and_continues_the_counts(case, tmp_path):
    exp = {e["key"]: e for e in expected(case)["operators"]["counter"]["keys"]}
    # the counter has timers: it is converted as one table (operators without timers go batch by batch)
    assert Savepoint.open(savepoint(case)).keyed_batches("counter") is None
    out = convert_to_statekit(savepoint(case), tmp_path / "sp", uids=["counter", "rules"])
    sp = Savepoint.open(out)
    assert not isinstance(sp, FlinkSavepoint)
    assert sp.operator("counter").uid == "counter"
    assert sp.timers("counter").num_rows == len(exp)
    keys = sorted(exp)[:5]
    env = StreamExecutionEnvironment(parallelism=2)
    events = [(k, "buy", 100) for k in keys]
    got = (env.from_collection(events).key_by(lambda e: e[0]).process(Counter()).uid("counter")
           .execute_and_collect(restore_from=out, allow_non_restored_state=True))
    assert sorted(got) == sorted((k, exp[k]["count"] + 1, exp[k]["sum"] + 100) for k in keys)


@pytest.mark.parametrize("case", CANONICAL)
def test_conversion_keeps_every_table(case, tmp_path):
    src = Savepoint.open(savepoint(case))
    out = Savepoint.open(convert_to_statekit(savepoint(case), tmp_path / "sp"))
    for meta in src.operators:
        if meta.key_type is None and not meta.operator_states:
            continue
        mine = out.operator(meta.identifier)
        assert mine.keyed_states == meta.keyed_states and mine.key_type == meta.key_type
        if meta.key_type is not None:
            a = src.keyed_table(meta.identifier).to_pylist()
            b = out.keyed_table(meta.identifier).to_pylist()
            assert sorted(map(repr, a)) == sorted(map(repr, b))
            assert src.timers(meta.identifier).num_rows == out.timers(meta.identifier).num_rows
        for s in meta.operator_states:
            if s.redistribution == "broadcast":
                assert src.broadcast_state(meta.identifier, s.name).to_pylist() == \
                    out.broadcast_state(meta.identifier, s.name).to_pylist()
            else:
                assert src.list_state(meta.identifier, s.name).to_pylist() == \
                    out.list_state(meta.identifier, s.name).to_pylist()


def test_conversion_refuses_unknown_uids_and_existing_targets(tmp_path):
    with pytest.raises(InvalidArgumentError, match="no-such-uid"):
        convert_to_statekit(savepoint("string-hashmap-canonical"), tmp_path / "a", uids=["no-such-uid"])
    assert not (tmp_path / "a").exists()
    (tmp_path / "b").mkdir()
    with pytest.raises(SavepointExistsError):
        convert_to_statekit(savepoint("string-hashmap-canonical"), tmp_path / "b")
    with pytest.raises(NotASavepointError):
        convert_to_statekit(tmp_path / "b", tmp_path / "c")


@pytest.mark.parametrize("case", CANONICAL)
def test_keyed_batches_add_up_to_the_keyed_table(case):
    """Every corpus operator that goes batch by batch (canonical, no timers) gives its whole table in
    ascending, disjoint batches, even batches of one key group; those declaring timer queues answer None
    (they are read whole)."""
    import pyarrow as pa

    sp = Savepoint.open(savepoint(case))
    for meta in sp.operators:
        if meta.key_type is None:
            continue
        batches = sp.keyed_batches(meta.identifier, batch_bytes=1)
        if batches is None:
            declares_timers = sp.flink.layout(sp.flink_operator(meta.identifier)).timers
            assert declares_timers or case == "string-rocksdb-native", (case, meta.display_name)
            continue
        got = list(batches)
        groups = [b.column("key_group").to_pylist() for b in got if b.num_rows]
        assert all(max(a) < min(b) for a, b in zip(groups, groups[1:]))
        assert pa.concat_tables(got).equals(sp.keyed_table(meta.identifier, with_key_group=True))
