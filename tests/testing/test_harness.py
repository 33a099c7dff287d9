"""The operator test harnesses drive the runtime's real operators: timers, watermarks, windows, snapshots."""

from __future__ import annotations

import pytest

from statekit.backends import SUPPORTED_BACKENDS
from statekit.errors import InvalidArgumentError, RestoreError
from statekit.runtime import KeyedProcessFunction, OutputTag, ProcessFunction, TumblingEventTimeWindows
from statekit.savepoint import Savepoint
from statekit.state.descriptors import ListStateDescriptor, ValueStateDescriptor
from statekit.testing import (
    KeyedOneInputStreamOperatorTestHarness,
    ProcessFunctionTestHarnesses,
    StreamRecord,
    Watermark,
)


class SessionCount(KeyedProcessFunction):
    """Counts a key's elements; 10 ms (event time) after the last one emits (key, count) and clears."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int))
        self.deadline = ctx.get_state(ValueStateDescriptor("deadline", int))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        old = self.deadline.value()
        if old is not None:
            ctx.timer_service().delete_event_time_timer(old)
        self.deadline.update(ctx.timestamp() + 10)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), self.count.value()
        self.count.clear()
        self.deadline.clear()


class Reminder(KeyedProcessFunction):
    """Remembers values; a processing-time timer 100 ms after the first one emits them all."""

    def open(self, ctx):
        self.values = ctx.get_list_state(ListStateDescriptor("values", str))

    def process_element(self, value, ctx):
        if not self.values.get():
            ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 100)
        self.values.add(value[1])

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp, self.values.get()
        self.values.clear()


def harness(fn=None, **options):
    return ProcessFunctionTestHarnesses.for_keyed_process_function(
        fn or SessionCount(), lambda e: e[0], "string", **options
    )


@pytest.mark.parametrize("backend", SUPPORTED_BACKENDS)
def test_event_time_timers_fire_on_watermarks(backend):
    with harness(state_backend=backend) as h:
        h.process_element(("a", 1), 1)
        h.process_element(("b", 2), 2)
        h.process_element(("a", 5), 5)  # moves a's deadline from 11 to 15
        assert sorted(h.keyed_state("count").items()) == [("a", 2), ("b", 1)]
        assert h.timers() == [(12, "b", "event"), (15, "a", "event")]
        assert h.num_keyed_state_entries() == 4
        h.process_watermark(12)
        assert h.extract_output_values() == [("b", 1)]
        assert h.get_output() == [StreamRecord(("b", 1), 12), Watermark(12)]
        h.process_watermark(20)
        assert h.extract_output_values() == [("b", 1), ("a", 2)]
        assert h.keyed_state("count") == {} and h.timers() == []


@pytest.mark.parametrize("backend", SUPPORTED_BACKENDS)
def test_processing_time_moves_only_when_set(backend):
    with harness(Reminder(), state_backend=backend) as h:
        h.process_element(("a", "x"))
        h.set_processing_time(50)
        h.process_element(("a", "y"))
        h.process_element(("b", "z"))  # b's timer: 150
        h.set_processing_time(99)
        assert h.extract_output_values() == []
        h.set_processing_time(100)
        assert h.extract_output_values() == [("a", 100, ["x", "y"])]
        h.set_processing_time(1_000)
        assert h.extract_output_values() == [("a", 100, ["x", "y"]), ("b", 150, ["z"])]
        with pytest.raises(InvalidArgumentError, match="forward"):
            h.set_processing_time(10)


@pytest.mark.parametrize("backend", SUPPORTED_BACKENDS)
def test_snapshot_restores_into_a_new_harness(tmp_path, backend):
    with harness(state_backend=backend) as h:
        h.process_element(("a", 1), 1)
        h.process_element(("b", 2), 2)
        h.process_watermark(2)
        path = h.snapshot(tmp_path / "sp")
        h.process_element(("a", 3), 3)  # after the snapshot: not in it
    sp = Savepoint.open(path)  # an ordinary savepoint
    assert sp.get("operator-under-test", "a")["count"] == 1
    other = "heap" if backend == "rocksdb" else "rocksdb"  # restores across backends, as a job does
    with harness(state_backend=other, restore_from=path) as h2:
        assert sorted(h2.keyed_state("count").items()) == [("a", 1), ("b", 1)]
        assert h2.timers() == [(11, "a", "event"), (12, "b", "event")]
        h2.process_element(("a", 4), 4)
        h2.process_watermark(100)
        assert sorted(h2.extract_output_values()) == [("a", 2), ("b", 1)]


def test_restore_matches_by_uid(tmp_path):
    with harness(uid="counter") as h:
        h.process_element(("a", 1), 1)
        path = h.snapshot(tmp_path / "sp")
    with pytest.raises(RestoreError, match="counter"):
        harness(uid="another", restore_from=path)


def test_process_function_harness():
    class Split(ProcessFunction):
        def process_element(self, value, ctx):
            yield from value.split()

    with ProcessFunctionTestHarnesses.for_process_function(Split()) as h:
        h.process_element("a b", 7)
        h.process_element("c")
        assert h.get_records() == [StreamRecord("a", 7), StreamRecord("b", 7), StreamRecord("c", None)]


def test_window_operator_with_late_side_output():
    late = OutputTag("late")
    h = KeyedOneInputStreamOperatorTestHarness(
        lambda keyed: keyed.window(TumblingEventTimeWindows.of(10)).side_output_late_data(late)
        .reduce(lambda a, b: (a[0], a[1] + b[1]), output_type="struct<f0:string,f1:bigint>"),
        lambda e: e[0], "string",
    )
    with h:
        h.process_element(("a", 1), 1)
        h.process_element(("a", 2), 4)
        h.process_element(("b", 5), 12)
        assert h.keyed_state("window-contents") == {  # per (key, window): the reduced value, as stored
            ("a", (0, 10)): {"f0": "a", "f1": 3},
            ("b", (10, 20)): {"f0": "b", "f1": 5},
        }
        h.process_watermark(10)
        assert h.extract_output_values() == [("a", 3)]
        h.process_element(("a", 100), 5)  # its window has fired and closed: late
        assert h.get_side_output(late) == [StreamRecord(("a", 100), 5)]
        h.process_watermark(30)
        assert h.extract_output_values() == [("a", 3), ("b", 5)]
