"""Window bootstrap with the job's trigger: the history replayed through it, the savepoint holding what the
runtime's window operator holds after seeing that history live (contents, trigger state, timers)."""

from __future__ import annotations

import pytest

from statekit.errors import InvalidArgumentError
from statekit.runtime import (
    ContinuousEventTimeTrigger,
    CountEvictor,
    CountTrigger,
    EventTimeSessionWindows,
    EventTimeTrigger,
    Evictor,
    GlobalWindows,
    ProcessingTimeTrigger,
    ProcessWindowFunction,
    PurgingTrigger,
    StreamExecutionEnvironment,
    TimeEvictor,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from statekit.savepoint import Savepoint, check
from statekit.spark import OperatorTransformation, SavepointWriter
from statekit.state import ValueStateDescriptor
from statekit.testing import ClickCounter

pytestmark = pytest.mark.spark

HIST = [i * 7 for i in range(40)]  # an element v has key v % 3 and timestamp v // 10
LATER = [300 + i * 7 for i in range(40)]
LAGGING_WM = WatermarkStrategy.for_bounded_out_of_orderness(10**9).with_timestamp_assigner(lambda v, ts: v // 10)


class OverBudget(Trigger):
    """A custom trigger: fires and purges a window once its elements sum past 500 (the running sum is its
    own per-window state), and fires at the window's end (its own event-time timer)."""

    budget = ValueStateDescriptor("budget-sum", "bigint")

    def on_element(self, element, timestamp, window, ctx):
        spent = ctx.get_partitioned_state(self.budget)
        ctx.register_event_time_timer(window.max_timestamp())
        total = (spent.value() or 0) + element
        if total > 500:
            spent.clear()
            return TriggerResult.FIRE_AND_PURGE
        spent.update(total)
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self):
        return False

    def clear(self, window, ctx):
        ctx.get_partitioned_state(self.budget).clear()
        ctx.delete_event_time_timer(window.max_timestamp())


class KeepEven(Evictor):
    def evict_before(self, elements, size, window, ctx):
        elements[:] = [e for e in elements if e.get_value() % 2 == 0]

    def evict_after(self, elements, size, window, ctx):
        pass


class Sorted(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, tuple(sorted(elements))


FUNCTIONS = {  # (bootstrap side, job side); with an evictor the buffer is what both keep
    "reduce": (lambda w: w.reduce(lambda a, b: a + b, value="v", output_type="bigint"),
               lambda ws: ws.reduce(lambda a, b: a + b, output_type="bigint")),
    "aggregate": (lambda w: w.aggregate(ClickCounter(), accumulator_type="bigint", value="v", element_type="bigint"),
                  lambda ws: ws.aggregate(ClickCounter(), accumulator_type="bigint", element_type="bigint")),
    "process": (lambda w: w.process(value="v", element_type="bigint"),
                lambda ws: ws.process(Sorted(), element_type="bigint")),
}  # fmt: skip
TUMBLING = lambda: TumblingEventTimeWindows.of(100)  # noqa: E731
CASES = {  # name: (assigner, trigger, evictor, function)
    "count": (TUMBLING, lambda: CountTrigger.of(5), None, "process"),
    "event-time": (lambda: EventTimeSessionWindows.with_gap(3), EventTimeTrigger.create, None, "process"),
    "purging": (TUMBLING, lambda: PurgingTrigger.of(CountTrigger.of(5)), None, "reduce"),
    "custom": (TUMBLING, OverBudget, None, "aggregate"),
    "continuous": (TUMBLING, lambda: ContinuousEventTimeTrigger.of(10), None, "process"),
    "sessions-count": (lambda: EventTimeSessionWindows.with_gap(3), lambda: CountTrigger.of(4), None, "reduce"),
    "count-window-evictor": (GlobalWindows.create, lambda: CountTrigger.of(3), lambda: CountEvictor.of(4), "process"),
    "purging-evictor": (TUMBLING, lambda: PurgingTrigger.of(CountTrigger.of(4)), lambda: TimeEvictor.of(5), "reduce"),
    "custom-evictor": (TUMBLING, OverBudget, KeepEven, "process"),
    "count-evictor-aggregate": (TUMBLING, lambda: CountTrigger.of(6), lambda: CountEvictor.of(2), "aggregate"),
}
STATE_ONLY = {  # processing-time timers fire by the restored job's wall clock: compared as state only
    "processing-time": (TUMBLING, ProcessingTimeTrigger.create, None, "reduce"),
}


def _job(elements, case, source="history", clock=None, **run):
    assigner, trigger, evictor, kind = {**CASES, **STATE_ONLY}[case]
    env = StreamExecutionEnvironment(parallelism=2, clock=clock)
    keyed = env.from_collection(elements).uid(source).assign_timestamps_and_watermarks(LAGGING_WM).key_by(
        lambda v: v % 3, key_type="bigint")  # fmt: skip
    windows = keyed.window(assigner()).trigger(trigger())
    if evictor is not None:
        windows = windows.evictor(evictor())
    return sorted(FUNCTIONS[kind][1](windows).uid("w").execute_and_collect(**run))


def _bootstrap(spark, case, path):
    assigner, trigger, evictor, kind = {**CASES, **STATE_ONLY}[case]
    rows = spark.createDataFrame([(v % 3, v, v // 10) for v in HIST], "k long, v long, ts long").repartition(3)
    windows = OperatorTransformation.bootstrap_with(rows).key_by("k").window(assigner(), timestamp="ts").trigger(trigger())
    if evictor is not None:
        windows = windows.evictor(evictor())
    SavepointWriter.new_savepoint(spark).with_operator("w", FUNCTIONS[kind][0](windows)).write(path)


def _norm(value):
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return tuple(sorted(value))  # map state
    return tuple(value) if isinstance(value, list) else value


def _window_state(path):
    sp = Savepoint.open(path)
    meta = sp.operator("w")
    names = sorted(s.name for s in meta.keyed_states)
    rows = sp.keyed_table("w").to_pylist()
    void = {"start": None, "end": None}  # per-key state (the active sessions) has no window
    state = sorted(((r["key"], (r["namespace"] or void)["start"], (r["namespace"] or void)["end"],
                     tuple((n, _norm(r[n])) for n in names if r[n] is not None)) for r in rows),
                   key=repr)  # fmt: skip
    timers = sorted((t["key"], t["namespace"]["start"], t["namespace"]["end"], t["timestamp"], t["domain"])
                    for t in sp.timers("w").to_pylist())  # fmt: skip
    return {(s.name, s.kind, s.type) for s in meta.keyed_states}, state, timers


@pytest.mark.parametrize("case", list(CASES))
def test_triggered_windows_bootstrap_as_the_window_operator_holds_them(spark, tmp_path, case):
    """Flink's window bootstrap runs the job's window operator over the history with its output discarded and no
    watermark: the trigger's state and timers are kept, a FIRE emits nothing (an evictor still runs on it) and a
    FIRE_AND_PURGE drops the window's contents. The bootstrapped savepoint holds exactly what the runtime's window
    operator holds after seeing the history live, and the restored job continues as that job does."""
    _bootstrap(spark, case, tmp_path / "boot")
    assert check(tmp_path / "boot").ok
    _job(HIST, case, final_savepoint=tmp_path / "live")  # the history, live, stopped with a savepoint
    booted, live = _window_state(tmp_path / "boot"), _window_state(tmp_path / "live")
    assert booted == live
    assert booted[1]  # windows are pending
    # (a new source: the live savepoint's source offsets are not restored)
    restored = _job(LATER, case, "later", restore_from=tmp_path / "boot")
    assert restored and restored == _job(LATER, case, "later", restore_from=tmp_path / "live", allow_non_restored_state=True)


def test_processing_time_trigger_timers_as_the_window_operator_holds_them(spark, tmp_path):
    """Flink's ProcessingTimeTrigger registers a processing-time timer at the window's end; a bootstrap never fires
    processing-time timers (Flink's NeverFireProcessingTimeService), so it writes them beside the event-time cleanup
    timers, as the runtime's operator holds them while its clock has not reached them."""
    from statekit.runtime import ManualClock

    _bootstrap(spark, "processing-time", tmp_path / "boot")
    _job(HIST, "processing-time", clock=ManualClock(0), final_savepoint=tmp_path / "live")
    booted = _window_state(tmp_path / "boot")
    assert booted == _window_state(tmp_path / "live")
    assert {t[4] for t in booted[2]} == {"event", "processing"}


def test_count_and_purging_triggers_state_as_flink_states_it(spark, tmp_path):
    """Flink's CountTrigger counts a window's elements in its own state ("count-trigger"), clearing the count when
    it fires; a PurgingTrigger also drops the window's contents, so only the elements after the last fire remain."""
    per_key = {k: [v for v in HIST if v % 3 == k] for k in range(3)}  # 14, 13 and 13 elements
    _bootstrap(spark, "count", tmp_path / "count")
    _bootstrap(spark, "purging", tmp_path / "purging")
    counted = {r[0]: dict(r[3]) for r in _window_state(tmp_path / "count")[1]}
    assert counted == {k: {"window-contents": tuple(vs), "count-trigger": len(vs) % 5} for k, vs in per_key.items()}
    purged = {r[0]: dict(r[3]) for r in _window_state(tmp_path / "purging")[1]}
    assert purged == {k: {"window-contents": sum(vs[len(vs) - len(vs) % 5:]), "count-trigger": len(vs) % 5}
                      for k, vs in per_key.items()}  # fmt: skip
    timers = _window_state(tmp_path / "count")[2]
    assert timers == [(k, 0, 100, 99, "event") for k in range(3)]  # the cleanup timers; CountTrigger sets none


class NoMerge(Trigger):
    def can_merge(self):
        return False


def test_triggers_the_bootstrap_refuses(spark):
    rows = spark.createDataFrame([(1, 1, 1)], "k long, v long, ts long")
    keyed = OperatorTransformation.bootstrap_with(rows).key_by("k")
    with pytest.raises(InvalidArgumentError, match="needs a Trigger"):
        keyed.window(TUMBLING(), timestamp="ts").trigger(lambda *a: None)
    with pytest.raises(InvalidArgumentError, match="cannot merge session windows"):
        keyed.window(EventTimeSessionWindows.with_gap(3), timestamp="ts").trigger(NoMerge())
    with pytest.raises(InvalidArgumentError, match="timestamp="):
        keyed.window(TUMBLING())
