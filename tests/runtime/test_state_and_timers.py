"""Keyed state kinds, registration rules, timers (event and processing time), TTL and the stream operators."""

from __future__ import annotations

import pytest

from statekit.errors import JobError, StateAccessError
from statekit.runtime import (
    CoMapFunction,
    KeyedProcessFunction,
    ManualClock,
    MapFunction,
    ProcessFunction,
    StreamExecutionEnvironment,
    TimeDomain,
    WatermarkStrategy,
)
from statekit.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)


class Avg(AggregateFunction):
    def create_accumulator(self):
        return {"n": 0, "s": 0}

    def add(self, value, acc):
        return {"n": acc["n"] + 1, "s": acc["s"] + value}

    def get_result(self, acc):
        return acc["s"] / acc["n"]


class AllKinds(KeyedProcessFunction):
    def open(self, rc):
        self.value = rc.get_state(ValueStateDescriptor("v", "bigint", default=0))
        self.list = rc.get_list_state(ListStateDescriptor("l", "bigint"))
        self.map = rc.get_map_state(MapStateDescriptor("m", "string", "bigint"))
        self.reducing = rc.get_reducing_state(ReducingStateDescriptor("r", lambda a, b: max(a, b), "bigint"))
        self.agg = rc.get_aggregating_state(AggregatingStateDescriptor("a", Avg(), "struct<n:bigint,s:bigint>"))

    def process_element(self, value, ctx):
        key, x = value
        self.value.update(self.value.value() + x)
        self.list.add(x)
        self.map.put(f"x{x}", (self.map.get(f"x{x}") or 0) + 1)
        self.reducing.add(x)
        self.agg.add(x)
        yield key, self.value.value(), list(self.list.get()), dict(self.map.items()), self.reducing.get(), self.agg.get()


def test_every_state_kind(backend):
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    data = [("a", 1), ("b", 5), ("a", 3), ("a", 1)]
    out = env.from_collection(data).key_by(lambda v: v[0], key_type="string").process(AllKinds()).execute_and_collect()
    last_a = [o for o in out if o[0] == "a"][-1]
    assert last_a == ("a", 5, [1, 3, 1], {"x1": 2, "x3": 1}, 3, 5 / 3)


class LateRegistration(KeyedProcessFunction):
    def process_element(self, value, ctx):
        ctx.get_runtime_context().get_state(ValueStateDescriptor("late", "bigint"))
        yield value


class KeyedStateInMap(MapFunction):
    def open(self, rc):
        rc.get_state(ValueStateDescriptor("nope", "bigint"))

    def map(self, value):
        return value


class ReadInOpen(KeyedProcessFunction):
    def open(self, rc):
        rc.get_state(ValueStateDescriptor("v", "bigint")).value()  # no current key yet

    def process_element(self, value, ctx):
        yield value


@pytest.mark.parametrize("job", ["late", "not keyed", "outside a key"])
def test_state_registration_rules(backend, job):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    ds = env.from_collection([1, 2])
    if job == "late":
        ds.key_by(lambda v: v).process(LateRegistration())
    elif job == "not keyed":
        ds.map(KeyedStateInMap())
    else:
        ds.key_by(lambda v: v, key_type="bigint").process(ReadInOpen())
    with pytest.raises(JobError) as info:
        env.execute("rules")
    assert isinstance(info.value.__cause__, StateAccessError)


class Timeout(KeyedProcessFunction):
    """Emit when a key has been quiet for 100 ms of event time; re-arm on every element."""

    def open(self, rc):
        self.last = rc.get_state(ValueStateDescriptor("last", "bigint"))

    def process_element(self, value, ctx):
        previous = self.last.value()
        if previous is not None:
            ctx.timer_service().delete_event_time_timer(previous + 100)
        self.last.update(ctx.timestamp())
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        assert ctx.timer_service().current_watermark() >= timestamp
        yield ctx.get_current_key(), timestamp


def test_event_time_timers_fire_on_watermarks(backend):
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(20).with_timestamp_assigner(lambda e, ts: e[1])
    data = [("a", 0), ("b", 10), ("a", 50), ("b", 300), ("a", 400), ("c", 1_000)]
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    ds = env.from_source(data, strategy, "events").key_by(lambda e: e[0], key_type="string").process(Timeout())
    out = ds.execute_and_collect()
    # a re-arms at 50 (its timer at 100 is deleted) and fires at 150 once b's 300 moves the
    # watermark to 279; b's timer at 110 is deleted by b at 300 before any watermark reached it;
    # c at 1000 (watermark 979) fires b at 400 and a at 500; c fires at the end of input.
    assert sorted(out) == [("a", 150), ("a", 500), ("b", 400), ("c", 1_100)]


class ProcessingTimeout(KeyedProcessFunction):
    def __init__(self, clock):
        self.clock = clock

    def process_element(self, value, ctx):
        now = ctx.timer_service().current_processing_time()
        ctx.timer_service().register_processing_time_timer(now + 1_000)
        self.clock.advance(value[1])  # the test's notion of time passing between elements

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.PROCESSING_TIME
        yield ctx.get_current_key(), timestamp


def test_processing_time_timers_with_a_manual_clock(backend):
    clock = ManualClock(0)
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend, clock=clock)
    data = [("a", 600), ("b", 600), ("c", 10)]  # a at 0, b at 600, c at 1200
    out = env.from_collection(data).key_by(lambda e: e[0]).process(ProcessingTimeout(clock)).execute_and_collect()
    # a's timer (1000) fires once time reaches 1200; b's (1600) and c's (2210) never come due.
    assert out == [("a", 1_000)]


class TtlCount(KeyedProcessFunction):
    def __init__(self, clock):
        self.clock = clock

    def open(self, rc):
        desc = ValueStateDescriptor("n", "bigint", default=0).with_ttl(StateTtlConfig.new_builder(1_000).build())
        self.n = rc.get_state(desc)

    def process_element(self, value, ctx):
        self.clock.set(value[1])
        self.n.update(self.n.value() + 1)
        yield value[0], self.n.value()


def test_ttl_uses_the_injected_clock(backend):
    clock = ManualClock(0)
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend, clock=clock)
    data = [("a", 0), ("a", 500), ("a", 2_000), ("a", 2_100)]
    out = env.from_collection(data).key_by(lambda e: e[0]).process(TtlCount(clock)).execute_and_collect()
    assert out == [("a", 1), ("a", 2), ("a", 1), ("a", 2)]  # expired after 1 s without writes


def test_map_with_state_and_reduce(backend):
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    words = ["a", "b", "a", "c", "a", "b"]
    keyed = env.from_collection(words).key_by(lambda w: w, key_type="string")
    counts = keyed.map_with_state(lambda w, n: ((w, (n or 0) + 1), (n or 0) + 1), "bigint").execute_and_collect()
    assert sorted(counts) == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("c", 1)]
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    pairs = env.from_collection([(w, 1) for w in words]).key_by(lambda p: p[0], key_type="string")
    totals = pairs.reduce(lambda x, y: (x[0], x[1] + y[1]), output_type="struct<f0:string,f1:bigint>")
    assert max(t[1] for t in totals.execute_and_collect() if t[0] == "a") == 3


def test_reduce_needs_a_type(backend):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    with pytest.raises(ValueError, match="output_type"):
        env.from_collection([1]).key_by(lambda x: x).reduce(lambda a, b: a + b)


class Doubler(CoMapFunction):
    def map1(self, value):
        return ("left", value * 2)

    def map2(self, value):
        return ("right", value)


class Tag(ProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


def test_stateless_operators(backend):
    env = StreamExecutionEnvironment(parallelism=3, state_backend=backend)
    a = env.from_collection(range(6)).filter(lambda x: x % 2 == 0).flat_map(lambda x: [x, x])
    b = env.from_collection(["x"])
    out = a.connect(b).map(Doubler()).process(Tag()).execute_and_collect()
    assert sorted(out) == sorted([(("left", v), None) for v in (0, 0, 4, 4, 8, 8)] + [(("right", "x"), None)])


def test_assign_timestamps_and_watermarks_downstream_of_a_map(backend):
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1])
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    data = [("a", 0), ("a", 50), ("b", 120), ("a", 400)]
    stamped = env.from_collection(data).map(lambda e: e).assign_timestamps_and_watermarks(strategy)
    out = stamped.key_by(lambda e: e[0], key_type="string").process(Timeout()).execute_and_collect()
    assert sorted(out) == [("a", 500), ("b", 220)]  # a re-armed at 400 before its 150 timer was due


def test_union_merges_streams_and_watermarks(backend):
    from statekit.runtime import CheckpointingMode

    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1])
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.enable_checkpointing(every_records=2, mode=CheckpointingMode.AT_LEAST_ONCE)
    a = env.from_source([("a", 0), ("a", 500)], strategy, "a")
    b = env.from_source([("b", 10)], strategy, "b").map(lambda e: e)
    out = a.union(b).key_by(lambda e: e[0], key_type="string").process(Timeout()).execute_and_collect()
    assert sorted(out) == [("a", 600), ("b", 110)]  # a re-armed at 500 before the watermarks passed 100


def test_timers_need_a_current_key():
    from statekit.runtime.operators import KeyedOperatorMixin

    class Probe(KeyedOperatorMixin):
        backend = None
        name = "probe"

    with pytest.raises(StateAccessError, match="no current key"):
        Probe().current_key_group
