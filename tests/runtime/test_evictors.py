"""Evictors and sliding count windows on every backend: Flink's results, and buffered windows through a savepoint."""

from __future__ import annotations

import pytest

from statekit.errors import InvalidArgumentError
from statekit.runtime import (
    AggregateFunction,
    CountEvictor,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    TimeEvictor,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from statekit.savepoint import Savepoint

STAMP = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1])


def _keyed(backend, data, parallelism=1, src="src"):
    env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend)
    return env.from_collection(data).uid(src).key_by(lambda e: e[0], key_type="string")


def test_sliding_count_window_sums_the_last_four_every_two(backend):
    data = [("a", i) for i in range(1, 11)]
    out = _keyed(backend, data).count_window(4, 2).reduce(lambda x, y: ("a", x[1] + y[1]),
                                                          output_type="struct<f0:string,f1:bigint>")  # fmt: skip
    # Fires at 2, 4, 6, 8, 10 elements over the last (up to) four: [1,2] [1..4] [3..6] [5..8] [7..10].
    assert [v[1] for v in out.execute_and_collect()] == [3, 10, 18, 26, 34]


class Stamps(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, [e[1] for e in elements]


def test_time_evictor_keeps_the_newest_elements_of_a_window(backend):
    data = [("a", 1), ("a", 2), ("a", 5), ("a", 9), ("b", 3)]
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    ks = env.from_collection(data).assign_timestamps_and_watermarks(STAMP).key_by(lambda e: e[0], key_type="string")
    out = (ks.window(TumblingEventTimeWindows.of(10)).evictor(TimeEvictor.of(5))
           .process(Stamps(), element_type="struct<f0:string,f1:bigint>"))  # fmt: skip
    # In a's window the newest element is at 9: elements at or before 9 - 5 = 4 are evicted.
    assert sorted(out.execute_and_collect()) == [("a", 0, [5, 9]), ("b", 0, [3])]


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return acc[0] + value[1], acc[1] + 1

    def get_result(self, acc):
        return acc[0] / acc[1]


def test_aggregate_over_what_the_evictor_leaves(backend):
    data = [("a", v) for v in (10, 20, 30, 40)]
    ks = _keyed(backend, data)
    with pytest.raises(InvalidArgumentError, match="element_type"):
        ks.count_window(3, 1).aggregate(Average(), accumulator_type="struct<s:bigint,n:bigint>")
    out = _keyed(backend, data).count_window(3, 1).aggregate(
        Average(), accumulator_type="struct<s:bigint,n:bigint>", element_type="struct<f0:string,f1:bigint>")
    assert list(out.execute_and_collect()) == [10.0, 15.0, 20.0, 30.0]


def _sliding_job(backend, data, parallelism, src, **run):
    env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend)
    ks = env.from_collection(data).uid(src).key_by(lambda v: f"k{v % 3}", key_type="string")
    out = ks.count_window(5, 2).reduce(lambda x, y: x + y, output_type="bigint").uid("win")
    return sorted(out.execute_and_collect(**run))


def test_buffered_elements_survive_a_savepoint_and_rescale(backend, tmp_path):
    data = list(range(60))
    reference = _sliding_job(backend, data, 2, "s")
    first = _sliding_job(backend, data[:31], 2, "s1", final_savepoint=tmp_path / "sp")
    table = Savepoint.open(tmp_path / "sp").keyed_table("win")
    assert {"window-contents", "window-timestamps"} <= set(table.column_names)
    rest = _sliding_job(backend, data[31:], 3, "s2", restore_from=tmp_path / "sp", allow_non_restored_state=True)
    assert sorted(first + rest) == reference


def test_count_evictor_validates_its_count():
    with pytest.raises(InvalidArgumentError):
        CountEvictor.of(-1)
