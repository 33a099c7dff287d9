"""The broadcast state pattern on every backend: rules reach every subtask, and survive a savepoint with rescaling."""

from __future__ import annotations

import pytest

from statekit.errors import JobError, StateAccessError
from statekit.runtime import (
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
    StreamExecutionEnvironment,
)
from statekit.savepoint import Savepoint
from statekit.state.descriptors import MapStateDescriptor, ValueStateDescriptor

RULES = MapStateDescriptor("rules", "string", "bigint")
SEEN: dict[int, list] = {}


class Threshold(KeyedBroadcastProcessFunction):
    """Passes a key's values above the broadcast threshold, counting them per key; rules are ``(name, value)``."""

    def open(self, runtime_context):
        self.passed = runtime_context.get_state(ValueStateDescriptor("passed", "bigint", default=0))
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value, ctx):
        rules = ctx.get_broadcast_state(RULES)
        limit = rules.get("threshold")
        if limit is not None and value[1] > limit:
            self.passed.update(self.passed.value() + 1)
            yield ctx.get_current_key(), value[1], self.passed.value()

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value[0], value[1])
        SEEN.setdefault(self.subtask, []).append(value)


def _run(backend, rules, items, parallelism, uid_suffix, **run):
    env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend)
    rule_stream = env.from_collection(rules).uid(f"rules-{uid_suffix}").broadcast(RULES)
    keyed = env.from_collection(items).uid(f"items-{uid_suffix}").key_by(lambda v: v[0], key_type="string")
    out = keyed.connect(rule_stream).process(Threshold()).uid("threshold")
    return list(out.execute_and_collect(**run))


def test_rules_reach_every_subtask_and_apply_to_keyed_elements(backend):
    SEEN.clear()
    items = [("a", 5), ("b", 20), ("c", 11), ("a", 30), ("b", 9), ("a", 12)]
    out = _run(backend, [("threshold", 10)], items, 3, "x")
    assert sorted(out) == [("a", 12, 2), ("a", 30, 1), ("b", 20, 1), ("c", 11, 1)]
    assert SEEN == {0: [("threshold", 10)], 1: [("threshold", 10)], 2: [("threshold", 10)]}


def test_broadcast_state_survives_a_savepoint_with_rescale(backend, tmp_path):
    sp = tmp_path / "sp"
    first = _run(backend, [("threshold", 10)], [("a", 11), ("b", 3), ("c", 50)], 2, "1", final_savepoint=sp)
    assert sorted(first) == [("a", 11, 1), ("c", 50, 1)]
    saved = Savepoint.open(sp)
    info = next(i for i in saved.operator("threshold").operator_states if i.name == "rules")
    assert info.redistribution == "broadcast"
    assert saved.broadcast_state("threshold", "rules").to_pylist() == [{"key": "threshold", "value": 10}]
    # No rules in the second run: every one of the 3 subtasks has the restored threshold, and the counts go on.
    items = [(k, 40) for k in "abcdefg"] + [("a", 2)]
    rest = _run(backend, [], items, 3, "2", restore_from=sp, allow_non_restored_state=True)
    assert sorted(rest) == [("a", 40, 2), ("b", 40, 1), ("c", 40, 2), ("d", 40, 1), ("e", 40, 1), ("f", 40, 1), ("g", 40, 1)]


class Tag(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        with pytest.raises(StateAccessError, match="read-only"):
            ctx.get_broadcast_state(RULES).put("x", 1)  # read-only on the element side
        yield value, ctx.get_broadcast_state(RULES).get("threshold")

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(*value)


def test_non_keyed_broadcast_process(backend):
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    rules = env.from_collection([("threshold", 7)]).broadcast(RULES)
    out = env.from_collection(["x", "y", "z"]).rebalance().connect(rules).process(Tag()).execute_and_collect()
    assert sorted(out) == [("x", 7), ("y", 7), ("z", 7)]


def test_plain_broadcast_partitioning_reaches_every_subtask(backend):
    env = StreamExecutionEnvironment(parallelism=3, state_backend=backend)
    out = env.from_collection([1, 2]).broadcast().map(lambda v: v * 10).execute_and_collect()
    assert sorted(out) == [10, 10, 10, 20, 20, 20]


def test_unknown_broadcast_state_is_an_error(backend):
    class Wrong(KeyedBroadcastProcessFunction):
        def process_element(self, value, ctx):
            ctx.get_broadcast_state(MapStateDescriptor("other", "string", "bigint"))

        def process_broadcast_element(self, value, ctx):
            pass

    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    rules = env.from_collection([("threshold", 1)]).broadcast(RULES)
    keyed = env.from_collection([("a", 1)]).key_by(lambda v: v[0], key_type="string")
    with pytest.raises(JobError, match="no broadcast state 'other'"):
        keyed.connect(rules).process(Wrong()).execute_and_collect()


def test_readme_broadcast_example_runs():
    import re
    from pathlib import Path

    import statekit.runtime

    text = Path(statekit.runtime.__file__).with_name("README.md").read_text()
    block = re.search(r"## Broadcast state\n\n```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md (Broadcast state)", "exec"), {})


class Reset(KeyedBroadcastProcessFunction):
    """Counts per key; a ``reset`` broadcast zeroes every key's count; an event timer reports each key at ts 100."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", "bigint", default=0))

    def process_element(self, value, ctx):
        self.count.update(self.count.value() + 1)
        ctx.timer_service().register_event_time_timer(100)

    def process_broadcast_element(self, value, ctx):
        ctx.apply_to_keyed_state(ValueStateDescriptor("count", "bigint", default=0), lambda key, state: state.update(10))

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), self.count.value(), ctx.get_broadcast_state(RULES).is_empty()


def test_apply_to_keyed_state_and_timers(backend):
    from statekit.runtime import WatermarkStrategy

    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    stamp = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: 1)
    items = env.from_collection([("a", 1), ("b", 1), ("a", 1)]).assign_timestamps_and_watermarks(stamp)
    # Sources take turns one element at a time: a, reset, b, a. The reset sets a's count (1) to 10 on
    # the subtask holding a; b did not exist yet. Broadcast state stays empty (the function never puts).
    rules = env.from_collection([("reset", 0)]).broadcast(RULES)
    out = items.key_by(lambda v: v[0], key_type="string").connect(rules).process(Reset()).execute_and_collect()
    assert sorted(out) == [("a", 11, True), ("b", 1, True)]


def test_broadcast_before_any_key_needs_a_declared_key_type(backend):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    rules = env.from_collection([("threshold", 1)]).broadcast(RULES)
    keyed = env.from_collection([("a", 5)]).key_by(lambda v: v[0])  # no key_type: inferred from the first key
    with pytest.raises(JobError, match="key_type"):  # the rule (first source) arrives before "a"
        keyed.connect(rules).process(Threshold()).execute_and_collect()
