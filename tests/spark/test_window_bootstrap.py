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
    with pytest.raises(InvalidArgumentError, match="merges windows"):
        keyed.window(EventTimeSessionWindows.with_gap(10), timestamp="ts")
    with pytest.raises(InvalidArgumentError, match="wall clock"):
        keyed.window(TumblingProcessingTimeWindows.of(10), timestamp="ts")
    with pytest.raises(InvalidArgumentError, match="no such column"):
        keyed.window(TumblingEventTimeWindows.of(10), timestamp="when")
    with pytest.raises(InvalidArgumentError, match="stored type"):
        keyed.window(TumblingEventTimeWindows.of(10), timestamp="ts").reduce(lambda a, b: a)
