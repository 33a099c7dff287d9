"""The classic Flink state examples give their documented results on every backend."""

from __future__ import annotations

import pytest

from statekit import Types
from statekit.runtime import (
    CheckpointedFunction,
    CheckpointListener,
    CoFlatMapFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    RestartStrategies,
    SinkFunction,
    SourceFunction,
    StreamExecutionEnvironment,
)
from statekit.state.descriptors import ListStateDescriptor, ValueStateDescriptor


class CountWindowAverage(KeyedProcessFunction):
    """Flink's docs example: average every two elements per key, then clear."""

    def open(self, runtime_context):
        self.sum = runtime_context.get_state(ValueStateDescriptor("average", "struct<count:bigint,sum:bigint>"))

    def process_element(self, value, ctx):
        current = self.sum.value() or {"count": 0, "sum": 0}
        current = {"count": current["count"] + 1, "sum": current["sum"] + value[1]}
        self.sum.update(current)
        if current["count"] >= 2:
            yield value[0], current["sum"] // current["count"]
            self.sum.clear()


@pytest.mark.parametrize("parallelism", [1, 2])
def test_count_window_average(backend, parallelism):
    env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend)
    ds = env.from_collection([(1, 3), (1, 5), (1, 7), (1, 4), (1, 2)])
    out = ds.key_by(lambda v: v[0]).process(CountWindowAverage()).execute_and_collect()
    assert out == [(1, 4), (1, 5)]


class TemperatureAlert(KeyedProcessFunction):
    """Alert when a sensor's temperature jumps by more than the threshold."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def open(self, runtime_context):
        self.last = runtime_context.get_state(ValueStateDescriptor("last_temperature", "double"))

    def process_element(self, value, ctx):
        sensor, temperature = value
        last = self.last.value()
        if last is not None and abs(temperature - last) > self.threshold:
            yield sensor, last, temperature
        self.last.update(temperature)


def test_temperature_alert(backend):
    readings = [("s1", 20.0), ("s2", 30.0), ("s1", 20.5), ("s1", 23.0), ("s2", 29.0), ("s2", 31.0), ("s1", 21.2)]
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    keyed = env.from_collection(readings).key_by(lambda r: r[0], key_type=Types.STRING())  # PyFlink's type helpers
    out = keyed.process(TemperatureAlert(1.7))
    assert sorted(out.execute_and_collect(job_execution_name="alerts")) == [("s1", 20.5, 23.0), ("s1", 23.0, 21.2), ("s2", 29.0, 31.0)]


# -- the buffering sink ------------------------------------------------------------------------------

FLUSHED: list[int] = []


class BufferingSink(SinkFunction, CheckpointedFunction, CheckpointListener):
    """Flink's BufferingSink: buffer in operator list state, hand batches of N elements to the outside.

    A batch reaches the outside world only once the checkpoint covering it completes (the
    two-phase pattern); that is what makes it lose and duplicate nothing across a failure, where
    flushing straight away would be at-least-once.
    """

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.buffer: list[int] = []
        self.ready: list[int] = []
        self.staged: dict[int, list[int]] = {}

    def invoke(self, value, context):
        self.buffer.append(value)
        if len(self.buffer) >= self.threshold:
            self.ready.extend(self.buffer)
            self.buffer = []

    def snapshot_state(self, context):
        self.staged[context.get_checkpoint_id()] = self.ready
        self.ready = []
        # Everything not yet handed out is state: the open buffer and the staged batches.
        self.state.update(self.buffer + [v for batch in self.staged.values() for v in batch])

    def initialize_state(self, context):
        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("buffered", "bigint"))
        if context.is_restored():
            self.buffer = list(self.state.get() or [])

    def notify_checkpoint_complete(self, checkpoint_id):
        for cid in sorted(c for c in self.staged if c <= checkpoint_id):
            FLUSHED.extend(self.staged.pop(cid))

    def finish(self):
        FLUSHED.extend(v for batch in self.staged.values() for v in batch)
        FLUSHED.extend(self.ready + self.buffer)


class FailAt:
    def __init__(self, at):
        self.at = at

    def open(self, rc):
        self.attempt = rc.get_attempt_number()

    def map(self, v):
        if self.attempt == 0 and v == self.at:
            raise RuntimeError("injected")
        return v


@pytest.mark.parametrize("fail_at", [1, 57, 250, 399])
def test_buffering_sink_survives_failure(backend, fail_at, tmp_path):
    FLUSHED.clear()
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.enable_checkpointing(every_records=40)
    env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    from statekit.runtime import MapFunction

    class Fail(FailAt, MapFunction):
        pass

    env.from_collection(range(400)).uid("src").map(Fail(fail_at)).add_sink(BufferingSink(7)).uid("sink")
    result = env.execute("buffering")
    assert result.restarts == 1
    assert sorted(FLUSHED) == list(range(400))  # nothing lost, nothing twice


# -- the counter source --------------------------------------------------------------------------------


class CounterSource(SourceFunction, CheckpointedFunction):
    """Flink's CounterSource: the offset lives in operator list state and advances after each emit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.offset = 0
        self.running = True

    def run(self, ctx):
        lock = ctx.get_checkpoint_lock()
        while self.running and self.offset < self.limit:
            with lock:
                ctx.collect(self.offset)
                self.offset += 1

    def cancel(self):
        self.running = False

    def initialize_state(self, context):
        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("offset", "bigint"))
        for v in self.state.get() or []:
            self.offset = v

    def snapshot_state(self, context):
        self.state.update([self.offset])


class GeneratorCounterSource(CounterSource):
    """The same source written as a generator."""

    def run(self, ctx):
        while self.running and self.offset < self.limit:
            yield self.offset
            self.offset += 1


@pytest.mark.parametrize("source_class", [CounterSource, GeneratorCounterSource])
@pytest.mark.parametrize("fail_at", [0, 33, 149])
def test_counter_source_resumes_exactly(backend, source_class, fail_at, tmp_path):
    from statekit.runtime import MapFunction

    class Fail(FailAt, MapFunction):
        pass

    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.enable_checkpointing(every_records=25)
    env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    ds = env.add_source(source_class(150)).uid("counter").map(Fail(fail_at))
    out = ds.execute_and_collect()
    assert out == list(range(150))
    assert out.job_execution_result.restarts == 1


# -- rides and fares -----------------------------------------------------------------------------------

RIDES = [{"ride_id": i, "driver": f"d{i % 3}"} for i in range(10)]
FARES = [{"ride_id": i, "fare": 10.0 + i} for i in range(10)]


class EnrichmentFunction(CoFlatMapFunction):
    """The Flink training's rides/fares join: whichever arrives first waits in keyed state."""

    def open(self, rc):
        self.ride = rc.get_state(ValueStateDescriptor("saved_ride", "struct<ride_id:bigint,driver:string>"))
        self.fare = rc.get_state(ValueStateDescriptor("saved_fare", "struct<ride_id:bigint,fare:double>"))

    def flat_map1(self, ride):
        fare = self.fare.value()
        if fare is not None:
            self.fare.clear()
            yield ride, fare
        else:
            self.ride.update(ride)

    def flat_map2(self, fare):
        ride = self.ride.value()
        if ride is not None:
            self.ride.clear()
            yield ride, fare
        else:
            self.fare.update(fare)


class EnrichmentProcess(KeyedCoProcessFunction):
    def open(self, rc):
        self.ride = rc.get_state(ValueStateDescriptor("saved_ride", "struct<ride_id:bigint,driver:string>"))
        self.fare = rc.get_state(ValueStateDescriptor("saved_fare", "struct<ride_id:bigint,fare:double>"))

    def process_element1(self, ride, ctx):
        assert ctx.get_current_key() == ride["ride_id"]
        fare = self.fare.value()
        if fare is not None:
            self.fare.clear()
            yield ride, fare
        else:
            self.ride.update(ride)

    def process_element2(self, fare, ctx):
        ride = self.ride.value()
        if ride is not None:
            self.ride.clear()
            yield ride, fare
        else:
            self.fare.update(fare)


@pytest.mark.parametrize("function", [EnrichmentFunction, EnrichmentProcess])
def test_rides_and_fares(backend, function, tmp_path):
    # Fares of odd rides come first, rides of even rides come first: both orders are exercised.
    fares = [f for f in FARES if f["ride_id"] % 2] + [f for f in FARES if not f["ride_id"] % 2]
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    rides = env.from_collection(RIDES).key_by(lambda r: r["ride_id"], key_type="bigint")
    fares_ds = env.from_collection(fares).key_by(lambda f: f["ride_id"], key_type="bigint")
    out = rides.connect(fares_ds).flat_map(function()) if function is EnrichmentFunction else rides.connect(fares_ds).process(function())
    out = out.uid("enrich")
    pairs = out.execute_and_collect(final_savepoint=tmp_path / "sp")
    assert sorted((r["ride_id"], f["ride_id"]) for r, f in pairs) == [(i, i) for i in range(10)]
    from statekit.savepoint import Savepoint

    # Every ride was paired, so no state is left waiting.
    assert Savepoint.open(tmp_path / "sp").keyed_table("enrich").num_rows == 0


def test_connect_then_key_by(backend):
    env = StreamExecutionEnvironment(parallelism=3, state_backend=backend)
    a = env.from_collection(RIDES)
    b = env.from_collection(FARES)
    out = a.connect(b).key_by(lambda r: r["ride_id"], lambda f: f["ride_id"], key_type="bigint").flat_map(EnrichmentFunction())
    assert len(out.execute_and_collect()) == 10
