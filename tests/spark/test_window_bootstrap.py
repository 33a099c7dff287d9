"""Window bootstrap from DataFrames: pending windows a runtime job with the same window definition restores and fires."""

from __future__ import annotations

import pytest

from statekit.errors import InvalidArgumentError
from statekit.runtime import (
    EventTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WatermarkStrategy,
)
from statekit.savepoint import Savepoint, check
from statekit.spark import OperatorTransformation, SavepointReader, SavepointWriter
from statekit.testing import ClickCounter

pytestmark = pytest.mark.spark

MINUTE = 60_000
HISTORY = [("alice", 1_000), ("bob", 1_500), ("alice", 2_000), ("alice", 61_000)]
LIVE = [("alice", 30_000), ("bob", 62_000), ("carol", 65_000), ("alice", 130_000)]


class WithWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, next(iter(elements))


def _live_job(path, window, finish, **run):
    env = StreamExecutionEnvironment(parallelism=2)
    stamp = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1])
    keyed = env.from_collection(LIVE).uid("live").assign_timestamps_and_watermarks(stamp).key_by(
        lambda e: e[0], key_type="string")  # fmt: skip
    out = finish(keyed.window(window)).uid("click-window")
    return sorted(out.execute_and_collect(restore_from=path, **run))


def test_bootstrapped_click_counts_fire_in_the_restored_job(spark, tmp_path):
    clicks = spark.createDataFrame(HISTORY, "user string, ts bigint")
    t = (OperatorTransformation.bootstrap_with(clicks).key_by("user")
         .window(TumblingEventTimeWindows.of(MINUTE), timestamp="ts").aggregate(ClickCounter(), accumulator_type="bigint"))  # fmt: skip
    SavepointWriter.new_savepoint(spark, max_parallelism=128).with_operator("click-window", t).write(tmp_path / "sp")
    assert check(tmp_path / "sp").ok
    pending = SavepointReader.read(spark, tmp_path / "sp").read_window_state("click-window")
    assert sorted((r.key, r.window_start, r.contents) for r in pending.collect()) == [
        ("alice", 0, 2), ("alice", MINUTE, 1), ("bob", 0, 1)]  # fmt: skip
    timers = Savepoint.open(tmp_path / "sp").timers("click-window").to_pylist()
    assert sorted((t["key"], t["timestamp"]) for t in timers) == [
        ("alice", MINUTE - 1), ("alice", 2 * MINUTE - 1), ("bob", MINUTE - 1)]  # fmt: skip
    fired = _live_job(tmp_path / "sp", TumblingEventTimeWindows.of(MINUTE),
                      lambda w: w.aggregate(ClickCounter(), WithWindow(), accumulator_type="bigint"),
                      allow_non_restored_state=False)  # fmt: skip
    # History and live clicks count together, window by window.
    assert fired == [("alice", 0, 3), ("alice", MINUTE, 1), ("alice", 2 * MINUTE, 1),
                     ("bob", 0, 1), ("bob", MINUTE, 1), ("carol", MINUTE, 1)]  # fmt: skip


def test_sliding_reduce_of_a_value_column_with_spark_timestamps(spark, tmp_path):
    rows = spark.createDataFrame([("a", 5, 1_000), ("a", 7, 25_000), ("b", 1, 50_000)], "k string, amount bigint, ms bigint")
    rows = rows.selectExpr("k", "amount", "timestamp_millis(ms) AS at")
    t = (OperatorTransformation.bootstrap_with(rows).key_by("k")
         .window(SlidingEventTimeWindows.of(30_000, 10_000), timestamp="at").reduce(lambda x, y: x + y, value="amount"))  # fmt: skip
    SavepointWriter.new_savepoint(spark).with_operator("sums", t).write(tmp_path / "sp")
    got = SavepointReader.read(spark, tmp_path / "sp").read_window_state("sums").collect()
    assert sorted((r.key, r.window_start, r.contents) for r in got) == [
        ("a", -20_000, 5), ("a", -10_000, 5), ("a", 0, 12), ("a", 10_000, 7), ("a", 20_000, 7),
        ("b", 30_000, 1), ("b", 40_000, 1), ("b", 50_000, 1)]  # fmt: skip


def test_buffered_elements_for_process_windows(spark, tmp_path):
    rows = spark.createDataFrame([("a", 3, 100), ("a", 4, 200), ("b", 9, 300)], "k string, v bigint, ts bigint")
    t = (OperatorTransformation.bootstrap_with(rows).key_by("k")
         .window(TumblingEventTimeWindows.of(1_000), timestamp="ts").process(value="v"))  # fmt: skip
    SavepointWriter.new_savepoint(spark).with_operator("buf", t).write(tmp_path / "sp")
    got = SavepointReader.read(spark, tmp_path / "sp").read_window_state("buf").collect()
    assert sorted((r.key, r.window_start, sorted(r.contents)) for r in got) == [("a", 0, [3, 4]), ("b", 0, [9])]


def test_windows_bootstrap_refuses_what_it_cannot_build(spark):
    rows = spark.createDataFrame([("a", 1)], "k string, ts bigint")
    keyed = OperatorTransformation.bootstrap_with(rows).key_by("k")
    with pytest.raises(InvalidArgumentError, match="wall clock"):
        keyed.window(TumblingProcessingTimeWindows.of(10), timestamp="ts")
    with pytest.raises(InvalidArgumentError, match="no such column"):
        keyed.window(TumblingEventTimeWindows.of(10), timestamp="when")
    with pytest.raises(InvalidArgumentError, match="stored type when value= is a function"):
        keyed.window(TumblingEventTimeWindows.of(10), timestamp="ts").reduce(lambda a, b: a, value=lambda r: r.ts)
    with pytest.raises(InvalidArgumentError, match="no such column"):
        keyed.window(TumblingEventTimeWindows.of(10), timestamp="ts").process(value="amount")


# --- evicting windows --------------------------------------------------------------------------------

from statekit.runtime import CountEvictor, Evictor, TimeEvictor, WindowFunction  # noqa: E402
from statekit.testing import ClickCounter as Count  # noqa: E402

HIST = [i * 7 for i in range(40)]         # an element v has key v % 3 and timestamp v // 10
LATER = [300 + i * 7 for i in range(40)]
LAGGING_WM = WatermarkStrategy.for_bounded_out_of_orderness(10**9).with_timestamp_assigner(lambda v, ts: v // 10)


class KeepEven(Evictor):
    """A custom evictor: odd elements leave before the function runs."""

    def evict_before(self, elements, size, window, ctx):
        elements[:] = [e for e in elements if e.get_value() % 2 == 0]

    def evict_after(self, elements, size, window, ctx):
        pass


class Sorted(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, tuple(sorted(elements))


class Applied(WindowFunction):
    def apply(self, key, window, inputs):
        yield key, window.start, tuple(sorted(inputs))


EVICTORS = {"count": lambda: CountEvictor.of(2), "time": lambda: TimeEvictor.of(20), "custom": KeepEven}
FUNCTIONS = {  # (bootstrap side, job side)
    "reduce": (lambda w: w.reduce(lambda a, b: a + b, value="v", output_type="bigint"),
               lambda ws: ws.reduce(lambda a, b: a + b, output_type="bigint")),
    "aggregate": (lambda w: w.aggregate(Count(), accumulator_type="bigint", value="v", element_type="bigint"),
                  lambda ws: ws.aggregate(Count(), accumulator_type="bigint", element_type="bigint")),
    "process": (lambda w: w.process(value="v", element_type="bigint"),
                lambda ws: ws.process(Sorted(), element_type="bigint")),
    "apply": (lambda w: w.apply(value="v", element_type="bigint"), lambda ws: ws.apply(Applied(), element_type="bigint")),
}


def _evicting_job(elements, evictor, finish, **run):
    env = StreamExecutionEnvironment(parallelism=2)
    keyed = env.from_collection(elements).uid("live").assign_timestamps_and_watermarks(LAGGING_WM).key_by(
        lambda v: v % 3, key_type="bigint")  # fmt: skip
    out = finish(keyed.window(TumblingEventTimeWindows.of(100)).evictor(evictor())).uid("evicting")
    return sorted(out.execute_and_collect(**run))


@pytest.mark.parametrize("kind, evictor", [(k, "count") for k in FUNCTIONS] + [("process", "time"), ("process", "custom")])
def test_evicting_windows_restore_as_if_the_history_had_run_live(spark, tmp_path, kind, evictor):
    """Flink: with an evictor the window operator buffers every element and its timestamp, whatever the
    function; the evictor and the function run when the window fires. A bootstrapped buffer restored and
    continued gives what a job that had seen the history live gives."""
    boot, job = FUNCTIONS[kind]
    rows = spark.createDataFrame([(v % 3, v, v // 10) for v in HIST], "k long, v long, ts long").coalesce(1)
    windowed = OperatorTransformation.bootstrap_with(rows).key_by("k").window(TumblingEventTimeWindows.of(100), timestamp="ts")
    SavepointWriter.new_savepoint(spark).with_operator("evicting", boot(windowed.evictor(EVICTORS[evictor]()))).write(tmp_path / "sp")
    meta = Savepoint.open(tmp_path / "sp").operator("evicting")
    assert [(s.name, s.kind) for s in meta.keyed_states] == [("window-contents", "list"), ("window-timestamps", "list")]
    restored = _evicting_job(LATER, EVICTORS[evictor], job, restore_from=tmp_path / "sp")
    assert restored == _evicting_job(HIST + LATER, EVICTORS[evictor], job)
    assert len(restored) == 3  # one window per key fired, with history and live elements


def _session_job(elements, finish, **run):
    env = StreamExecutionEnvironment(parallelism=2)
    keyed = env.from_collection(elements).uid("live").assign_timestamps_and_watermarks(LAGGING_WM).key_by(
        lambda v: v % 3, key_type="bigint")  # fmt: skip
    return sorted(finish(keyed.window(EventTimeSessionWindows.with_gap(10))).uid("sessions").execute_and_collect(**run))


@pytest.mark.parametrize("kind", ["reduce", "process"])
def test_session_windows_bootstrap_and_merge_with_live_elements(spark, tmp_path, kind):
    """Flink: session windows merge when they touch; bootstrapped sessions are the operator's merged windows
    (and its set of active sessions), and live elements restored onto them merge as in a job that saw all."""
    hist, live = [0, 60, 300, 31], [120, 411, 301]  # key v % 3, timestamp v // 10
    boot = {"reduce": lambda w: w.reduce(lambda a, b: a + b, value="v", output_type="bigint"),
            "process": lambda w: w.process(value="v", element_type="bigint")}[kind]
    job = {"reduce": lambda ws: ws.reduce(lambda a, b: a + b, output_type="bigint"),
           "process": lambda ws: ws.process(Sorted(), element_type="bigint")}[kind]
    rows = spark.createDataFrame([(v % 3, v, v // 10) for v in hist], "k long, v long, ts long")
    t = boot(OperatorTransformation.bootstrap_with(rows).key_by("k").window(EventTimeSessionWindows.with_gap(10), timestamp="ts"))
    SavepointWriter.new_savepoint(spark).with_operator("sessions", t).write(tmp_path / "sp")
    assert check(tmp_path / "sp").ok
    pending = SavepointReader.read(spark, tmp_path / "sp").read_window_state("sessions").collect()
    assert sorted((r.key, r.window_start, r.window_end) for r in pending) == [(0, 0, 16), (0, 30, 40), (1, 3, 13)]
    restored = _session_job(live, job, restore_from=tmp_path / "sp")
    assert restored == _session_job(hist + live, job)
    if kind == "process":
        assert restored == [(0, 0, (0, 60, 120)), (0, 30, (300,)), (0, 41, (411,)), (1, 3, (31,)), (1, 30, (301,))]


class CountRows(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, sorted(e[1] for e in elements)


def test_evicting_aggregate_takes_the_element_type_from_the_dataframe(spark, tmp_path):
    """Flink's bootstrap of an evicting window takes the buffered elements' type from the stream; here from
    the DataFrame's schema: ``aggregate`` over whole rows needs no ``element_type=``, and the restored job
    (whose elements are the same rows) evicts and counts history and live rows together."""
    rows = spark.createDataFrame([(v % 3, v, v // 10) for v in HIST], "k long, v long, ts long").coalesce(1)
    windowed = (OperatorTransformation.bootstrap_with(rows).key_by("k")
                .window(TumblingEventTimeWindows.of(100), timestamp="ts").evictor(CountEvictor.of(2)))  # fmt: skip
    SavepointWriter.new_savepoint(spark).with_operator("evicting", windowed.aggregate(Count(), accumulator_type="bigint")).write(tmp_path / "sp")
    contents = Savepoint.open(tmp_path / "sp").operator("evicting").keyed_state("window-contents")
    assert (contents.kind, contents.type) == ("list", "array<struct<k:bigint,v:bigint,ts:bigint>>")

    def job(elements, **run):
        env = StreamExecutionEnvironment(parallelism=2)
        stamp = WatermarkStrategy.for_bounded_out_of_orderness(10**9).with_timestamp_assigner(lambda e, ts: e[2])
        keyed = env.from_collection([(v % 3, v, v // 10) for v in elements]).uid("live").assign_timestamps_and_watermarks(
            stamp).key_by(lambda e: e[0], key_type="bigint")  # fmt: skip
        ws = keyed.window(TumblingEventTimeWindows.of(100)).evictor(CountEvictor.of(2))
        out = ws.process(CountRows(), element_type="struct<k:bigint,v:bigint,ts:bigint>").uid("evicting")
        return sorted(out.execute_and_collect(**run))

    restored = job(LATER, restore_from=tmp_path / "sp")
    assert restored == job(HIST + LATER)
    assert [len(vs) for _, _, vs in restored] == [2, 2, 2]  # the evictor kept the last two of history + live
