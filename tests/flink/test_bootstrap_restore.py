"""Acceptance (a): a Flink savepoint bootstrapped from Spark DataFrames (String and Long keys; Value, List, Map and
Reducing state; an event-time timer per key; operator list, union and broadcast state) restores into a real
Flink 2.3.0 job that sees every value, and whose restored timers fire."""

from __future__ import annotations

import pytest

from statekit.spark import (
    BroadcastStateBootstrapFunction,
    KeyedStateBootstrapFunction,
    OperatorTransformation,
    SavepointWriter,
    StateBootstrapFunction,
)
from statekit.state import ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor, ValueStateDescriptor

pytestmark = [pytest.mark.flink, pytest.mark.spark]

COUNT = ValueStateDescriptor("count", "bigint")
RECENT = ListStateDescriptor("recent", "string")
PER_KIND = MapStateDescriptor("per_kind", "string", "bigint")
TOTAL = ReducingStateDescriptor("total", lambda a, b: a + b, "bigint")
KINDS = ["click", "view", "buy"]


class Events(KeyedStateBootstrapFunction):
    """Several rows per String key: all four keyed state kinds and one event-time timer per key."""

    def open(self, ctx):
        self.count, self.recent = ctx.get_state(COUNT), ctx.get_list_state(RECENT)
        self.per_kind, self.total = ctx.get_map_state(PER_KIND), ctx.get_reducing_state(TOTAL)

    def process_element(self, row, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.recent.add(f"{row.kind}:{row.value}")
        self.per_kind.put(row.kind, (self.per_kind.get(row.kind) or 0) + 1)
        self.total.add(row.value)
        ctx.timer_service().register_event_time_timer(1_000_000 + row.idx)


class Offsets(StateBootstrapFunction):
    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.split = store.get_list_state(ListStateDescriptor("buffer", "bigint"))
        self.union = store.get_union_list_state(ListStateDescriptor("offsets", "bigint"))

    def process_element(self, row, ctx):
        self.split.add(row.id)

    def snapshot_state(self, ctx):
        self.union.update([100 + ctx.index_of_this_subtask])


class Rates(BroadcastStateBootstrapFunction):
    def process_element(self, row, ctx):
        ctx.get_broadcast_state(MapStateDescriptor("rates", "string", "double")).put(row.currency, row.rate)


def _events(n_keys: int) -> list[tuple]:
    rows = []
    for i in range(n_keys):
        for j in range(1 + i % 3):
            rows.append((f"user-{i}", i, KINDS[(i + j) % 3], 10 * i + j))
    return rows


def test_spark_bootstrap_restores_into_a_real_flink_job(spark, flink, tmp_path):
    n = 40
    rows = _events(n)
    events = spark.createDataFrame(rows, "user string, idx int, kind string, value bigint")
    longs = spark.createDataFrame(
        [(k * 1_000_003 - 7, k, [f"x{k}"] * (k % 3), {"a": k} if k % 2 else None) for k in range(-20, 30)],
        "key bigint, count bigint, recent array<string>, per_kind map<string,bigint>")
    ids = spark.range(0, 12, 1, numPartitions=2)
    rates = spark.createDataFrame([("USD", 1.0), ("EUR", 1.25), ("日本円", 0.0067)], "currency string, rate double")
    out = tmp_path / "flink-sp"
    (SavepointWriter.new_savepoint(spark, max_parallelism=128)
     .with_operator("events", OperatorTransformation.bootstrap_with(events, parallelism=2)
                    .key_by("user", key_type="string").transform(Events()))
     .with_operator("longs", OperatorTransformation.bootstrap_with(longs, parallelism=2).key_by("key")
                    .columns(COUNT, RECENT, PER_KIND, count=TOTAL))
     .with_operator("offsets", OperatorTransformation.bootstrap_with(ids, parallelism=2).transform(Offsets()))
     .with_operator("rates", OperatorTransformation.bootstrap_with(rates).transform(Rates()))
     .write(out, format="flink"))
    assert (out / "_metadata").read_bytes()[:4] == bytes.fromhex("4960672d")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind

    keyed_states = [{"name": "count", "kind": "value", "type": "bigint"},
                    {"name": "recent", "kind": "list", "type": "string"},
                    {"name": "per_kind", "kind": "map", "key_type": "string", "type": "bigint"},
                    {"name": "total", "kind": "reducing", "type": "bigint"}]
    spec = {"parallelism": 2, "operators": [
        {"uid": "events", "kind": "keyed", "key_type": "string", "states": keyed_states},
        {"uid": "longs", "kind": "keyed", "key_type": "bigint", "states": keyed_states},
        {"uid": "offsets", "kind": "operator", "states": [{"name": "buffer", "kind": "list", "type": "bigint"},
                                                           {"name": "offsets", "kind": "union", "type": "bigint"}]},
        {"uid": "rates", "kind": "broadcast", "states": [{"name": "rates", "key_type": "string", "type": "double"}]},
    ]}
    got = flink.restore(out, spec)

    want_events = {}
    for user, idx, kind, value in rows:
        e = want_events.setdefault(user, {"count": 0, "recent": [], "per_kind": {}, "total": 0})
        e["count"] += 1
        e["recent"].append(f"{kind}:{value}")
        e["per_kind"][kind] = e["per_kind"].get(kind, 0) + 1
        e["total"] += value
    assert got.keyed["events"] == want_events
    # every key's event-time timer fired once, in the real job, at the bootstrapped time
    assert got.timers["events"] == {f"user-{i}": [("event", 1_000_000 + i)] for i in range(n)}

    want_longs = {}
    for k in range(-20, 30):
        e = {"count": k, "total": k}
        if k % 3:
            e["recent"] = [f"x{k}"] * (k % 3)
        if k % 2:
            e["per_kind"] = {"a": k}
        want_longs[k * 1_000_003 - 7] = e
    assert got.keyed["longs"] == want_longs
    assert "longs" not in got.timers

    buffer = got.operator["offsets"]["buffer"]
    assert sorted(buffer) == [0, 1] and sorted(buffer[0] + buffer[1]) == list(range(12))
    assert {s: sorted(v) for s, v in got.operator["offsets"]["offsets"].items()} == {0: [100, 101], 1: [100, 101]}
    assert got.broadcast["rates"]["rates"] == {0: {"EUR": 1.25, "USD": 1.0, "日本円": 0.0067},
                                               1: {"EUR": 1.25, "USD": 1.0, "日本円": 0.0067}}
