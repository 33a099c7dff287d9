"""Keyed windows on every backend: documented results, lateness, and pending windows through a savepoint with rescaling."""

from __future__ import annotations

import pytest

from statekit.errors import InvalidArgumentError
from statekit.runtime import (
    AggregateFunction,
    ContinuousEventTimeTrigger,
    CountTrigger,
    EventTimeSessionWindows,
    ManualClock,
    MapFunction,
    OutputTag,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    Trigger,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WatermarkStrategy,
)
from statekit.savepoint import Savepoint

PAIR = "struct<f0:string,f1:bigint>"
STAMP = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1])
DATA = [("a", 1), ("b", 2), ("a", 5), ("a", 12), ("b", 13), ("a", 31), ("a", 33)]


def add(a, b):
    return a[0], a[1] + b[1]


class Collect(ProcessWindowFunction):
    """Emits ``(key, start, end, sorted timestamps)`` per firing."""

    def process(self, key, context, elements):
        w = context.window()
        assert w.max_timestamp() == w.end - 1
        yield key, w.start, w.end, sorted(e[1] for e in elements)


class Average(AggregateFunction):
    def create_accumulator(self):
        return {"sum": 0, "count": 0}

    def add(self, value, acc):
        return {"sum": acc["sum"] + value[1], "count": acc["count"] + 1}

    def get_result(self, acc):
        return acc["sum"] / acc["count"]

    def merge(self, a, b):
        return {"sum": a["sum"] + b["sum"], "count": a["count"] + b["count"]}


def keyed(backend, data=DATA, parallelism=2):
    env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend)
    return env.from_collection(data).assign_timestamps_and_watermarks(STAMP).key_by(lambda e: e[0], key_type="string")


def test_tumbling_reduce(backend):
    out = keyed(backend).window(TumblingEventTimeWindows.of(10)).reduce(add, output_type=PAIR).execute_and_collect()
    assert sorted(out) == [("a", 6), ("a", 12), ("a", 64), ("b", 2), ("b", 13)]


def test_sliding_process(backend):
    out = keyed(backend).window(SlidingEventTimeWindows.of(10, 5)).process(Collect(), element_type=PAIR).execute_and_collect()
    assert sorted(out) == [
        ("a", -5, 5, [1]), ("a", 0, 10, [1, 5]), ("a", 5, 15, [5, 12]), ("a", 10, 20, [12]),
        ("a", 25, 35, [31, 33]), ("a", 30, 40, [31, 33]),
        ("b", -5, 5, [2]), ("b", 0, 10, [2]), ("b", 5, 15, [13]), ("b", 10, 20, [13]),
    ]  # fmt: skip


def test_session_windows_merge(backend):
    # gap 5: a's 1 and 5 touch ([1,6) and [5,10) merge), 12 starts a new session, 31 and 33 share one.
    out = keyed(backend).window(EventTimeSessionWindows.with_gap(5)).process(Collect(), element_type=PAIR).execute_and_collect()
    assert sorted(out) == [("a", 1, 10, [1, 5]), ("a", 12, 17, [12]), ("a", 31, 38, [31, 33]), ("b", 2, 7, [2]), ("b", 13, 18, [13])]


def test_session_aggregate_merges_accumulators(backend):
    data = [("a", 1), ("a", 8), ("a", 4)]  # [1,6) and [8,13) are apart until 4 ([4,9)) bridges them
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    stamp = WatermarkStrategy.for_bounded_out_of_orderness(10).with_timestamp_assigner(lambda e, ts: e[1])
    ks = env.from_collection(data).assign_timestamps_and_watermarks(stamp).key_by(lambda e: e[0], key_type="string")
    out = ks.window(EventTimeSessionWindows.with_gap(5)).aggregate(Average(), accumulator_type="struct<sum:bigint,count:bigint>")
    assert out.execute_and_collect() == [13 / 3]


def test_count_window(backend):
    out = keyed(backend).count_window(2).reduce(add, output_type=PAIR).execute_and_collect()
    assert sorted(out) == [("a", 6), ("a", 43), ("b", 15)]  # a's 33 waits for a second element


def test_aggregate_with_process_window_function(backend):
    class WithWindow(ProcessWindowFunction):
        def process(self, key, context, averages):
            yield key, context.window().start, list(averages)

    out = keyed(backend).window(TumblingEventTimeWindows.of(10)).aggregate(
        Average(), WithWindow(), accumulator_type="struct<sum:bigint,count:bigint>"
    ).execute_and_collect()
    assert sorted(out) == [("a", 0, [3.0]), ("a", 10, [12.0]), ("a", 30, [32.0]), ("b", 0, [2.0]), ("b", 10, [13.0])]


LATE = [("a", 1), ("a", 12), ("a", 3), ("a", 20), ("a", 4)]


@pytest.mark.parametrize(("lateness", "expected"), [(0, [("a", 1), ("a", 12), ("a", 20)]), (5, [("a", 1), ("a", 4), ("a", 12), ("a", 20)])])
def test_late_elements_dropped_or_refire_within_allowed_lateness(backend, lateness, expected):
    # 12 moves the watermark to 11: [0,10) fires with 1. The late 3 is dropped, or (lateness 5, window
    # kept until 14) re-fires [0,10) as 1+3. 20 ends [10,20) and the lateness; the late 4 is dropped.
    ws = keyed(backend, LATE, parallelism=1).window(TumblingEventTimeWindows.of(10)).allowed_lateness(lateness)
    assert list(ws.reduce(add, output_type=PAIR).execute_and_collect()) == expected


def test_late_elements_to_a_side_output(backend):
    late = OutputTag("late")
    ws = keyed(backend, LATE, parallelism=1).window(TumblingEventTimeWindows.of(10)).side_output_late_data(late)
    sums = ws.reduce(add, output_type=PAIR)
    dropped = sums.get_side_output(late).map(lambda e: ("late", e[1]))
    out = sums.union(dropped).execute_and_collect()
    assert sorted(out) == [("a", 1), ("a", 12), ("a", 20), ("late", 3), ("late", 4)]


def test_processing_time_windows(backend):
    clock = ManualClock(0)

    class Tick(MapFunction):
        def map(self, value):
            clock.advance(value[1])  # time passing between elements
            return value

    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend, clock=clock)
    ks = env.from_collection([("a", 1), ("a", 3), ("a", 8), ("a", 1), ("a", 100)]).map(Tick()).key_by(lambda e: e[0], key_type="string")
    out = ks.window(TumblingProcessingTimeWindows.of(10)).reduce(add, output_type=PAIR).execute_and_collect()
    # arrivals at 1, 4, 12, 13, 113: [0,10) fires when the clock passes 9; [10,20) when it reaches 113;
    # [110,120) is still open at the end (pending processing timers are dropped, as documented).
    assert list(out) == [("a", 4), ("a", 9)]


def test_window_needs_state_types(backend):
    ws = keyed(backend).window(TumblingEventTimeWindows.of(10))
    with pytest.raises(InvalidArgumentError, match="output_type"):
        ws.reduce(add)
    with pytest.raises(InvalidArgumentError, match="element_type"):
        ws.process(Collect())


# -- savepoints ----------------------------------------------------------------------------------------


def _events(n):
    """Timestamps in three bursts; the key is ``k<ts % 7>``."""
    return [i * 3 + (i // 40) * 100 for i in range(n)]


class Span(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, context.window().end, sorted(elements)


def _job(backend, data, parallelism, kind, src_uid, **run):
    env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend)
    stamp = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e)
    ks = env.from_source(data, stamp, "events").uid(src_uid).key_by(lambda e: f"k{e % 7}", key_type="string")
    if kind == "tumbling":
        out = ks.window(TumblingEventTimeWindows.of(50)).reduce(lambda a, b: a + b, output_type="bigint")
    elif kind == "count":
        out = ks.count_window(4).reduce(lambda a, b: a + b, output_type="bigint")
    else:
        out = ks.window(EventTimeSessionWindows.with_gap(25)).process(Span(), element_type="bigint")
    return list(out.uid("win").execute_and_collect(**run))


@pytest.mark.parametrize("kind", ["tumbling", "session", "count"])
def test_pending_windows_survive_a_savepoint_and_rescale(backend, tmp_path, kind):
    data = _events(120)
    reference = _job(backend, data, 2, kind, "events")
    sp = tmp_path / "sp"
    first = _job(backend, data[:70], 2, kind, "events-1", final_savepoint=sp)
    saved = Savepoint.open(sp)
    table = saved.keyed_table("win")
    assert "namespace" in table.column_names and table.num_rows > 0
    rows = [r for r in table.to_pylist() if r["window-contents"] is not None]
    assert rows and all(r["namespace"] is not None for r in rows)  # pending windows, under their namespace
    if kind != "count":  # a global window has no timers
        timers = saved.timers("win").to_pylist()
        assert timers and all(t["namespace"]["end"] - 1 <= t["timestamp"] for t in timers)
    rest = _job(backend, data[70:], 3, kind, "events-2", restore_from=sp, allow_non_restored_state=True)
    assert sorted(first + rest, key=repr) == sorted(reference, key=repr)


def test_readme_windows_example_runs():
    import re
    from pathlib import Path

    import statekit.runtime

    text = Path(statekit.runtime.__file__).with_name("README.md").read_text()
    block = re.search(r"## Windows\n\n```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md (Windows)", "exec"), {})


def test_windows_recover_from_a_failure_exactly_once(backend, tmp_path):
    from jobs import FailOnce, make_env

    def run(fail_at, chk):
        env = make_env(backend, 2, chk, every=25)
        stamp = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1])
        src = env.from_source([(f"k{i % 5}", i) for i in range(300)], stamp, "events").uid("events")
        ks = src.map(FailOnce(fail_at)).uid("fail").map(lambda e: e[1]).key_by(lambda v: f"k{v % 5}", key_type="string")
        out = ks.window(SlidingEventTimeWindows.of(20, 10)).reduce(lambda a, b: a + b, output_type="bigint")
        result = out.uid("win").execute_and_collect()
        assert result.job_execution_result.restarts == (0 if fail_at is None else 1)
        return sorted(result)

    assert run(170, tmp_path / "a") == run(None, tmp_path / "b")


class EveryTwo(Trigger):
    """Fires (without purging) every second element, and never at the window's end."""

    def __init__(self):
        self.count = CountTrigger.of(2)

    def on_element(self, element, timestamp, window, ctx):
        return self.count.on_element(element, timestamp, window, ctx)

    def clear(self, window, ctx):
        self.count.clear(window, ctx)


def test_custom_trigger_replaces_the_default(backend):
    data = [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("a", 5), ("a", 15)]
    out = keyed(backend, data).window(TumblingEventTimeWindows.of(10)).trigger(EveryTwo()).reduce(add, output_type=PAIR)
    assert list(out.execute_and_collect()) == [("a", 3), ("a", 10)]  # 1+2, then 1+2+3+4; 5 and 15 never fire


def test_continuous_event_time_trigger_fires_every_interval_and_at_the_end(backend):
    """Flink's ContinuousEventTimeTrigger: the first element sets the next fire time to the interval boundary after
    it (state "fire-time"); each fire sets the next, capped at the window's end, where the window fires too."""
    data = [("a", 5), ("a", 40), ("a", 70), ("a", 95), ("a", 130)]
    out = keyed(backend, data, parallelism=1).window(TumblingEventTimeWindows.of(100)).trigger(ContinuousEventTimeTrigger.of(30))
    fired = list(out.process(Collect(), element_type=PAIR).execute_and_collect())
    assert fired == [("a", 0, 100, [5, 40]),  # at 30 (the watermark reached 39 with 40)
                     ("a", 0, 100, [5, 40, 70]), ("a", 0, 100, [5, 40, 70, 95]),  # at 60, 90
                     ("a", 0, 100, [5, 40, 70, 95]),  # at 99, the window's end
                     ("a", 100, 200, [130]), ("a", 100, 200, [130]), ("a", 100, 200, [130])]  # 150, 180, 199
    with pytest.raises(InvalidArgumentError, match="interval"):
        ContinuousEventTimeTrigger.of(0)


def test_inferred_key_type(backend):
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    ks = env.from_collection(DATA).assign_timestamps_and_watermarks(STAMP).key_by(lambda e: e[0])
    out = ks.window(TumblingEventTimeWindows.of(10)).reduce(add, output_type=PAIR).execute_and_collect()
    assert sorted(out) == [("a", 6), ("a", 12), ("a", 64), ("b", 2), ("b", 13)]


class Everything(ProcessAllWindowFunction):
    def process(self, context, elements):
        yield context.window().start, sorted(e[1] for e in elements)


def test_window_all(backend):
    env = StreamExecutionEnvironment(parallelism=3, state_backend=backend)
    src = env.from_collection(DATA).assign_timestamps_and_watermarks(STAMP).rebalance()
    windows = src.window_all(TumblingEventTimeWindows.of(10)).process(Everything(), element_type=PAIR)
    assert windows.get_parallelism() == 1
    assert sorted(windows.execute_and_collect()) == [(0, [1, 2, 5]), (10, [12, 13]), (30, [31, 33])]
    counted = src.count_window_all(3).reduce(add, output_type=PAIR).execute_and_collect()
    assert [v for _, v in counted] == [8, 56]  # 1+2+5, then 12+13+31; 33 waits


class KeyStartSum(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key, context.window().start, context.window().end, sum(elements)


def _reference(data, kind):
    """Brute-force windows of in-order ``data`` (timestamps; key ``k<ts % 5>``) as ``(key, start, end, sum)``."""
    out: dict = {}
    if kind == "sliding":
        for ts in data:
            start = ts - ts % 10
            while start > ts - 30:
                k = (f"k{ts % 5}", start, start + 30)
                out[k] = out.get(k, 0) + ts
                start -= 10
        return sorted((*k, v) for k, v in out.items())
    sessions = []
    for key in sorted({f"k{ts % 5}" for ts in data}):
        start = end = None
        total = 0
        for ts in sorted(t for t in data if f"k{t % 5}" == key):
            if end is not None and ts <= end:
                end, total = max(end, ts + 40), total + ts
            else:
                if end is not None:
                    sessions.append((key, start, end, total))
                start, end, total = ts, ts + 40, ts
        sessions.append((key, start, end, total))
    return sorted(sessions)


@pytest.mark.parametrize("kind", ["sliding", "session"])
def test_random_input_matches_brute_force_across_a_rescaling_savepoint(backend, tmp_path, kind):
    import random

    rnd = random.Random(7)
    data = sorted(rnd.randrange(0, 2_000) for _ in range(300))
    split = rnd.randrange(50, 250)

    def run(part, p, src, **kw):
        env = StreamExecutionEnvironment(parallelism=p, state_backend=backend)
        stamp = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e)
        ks = env.from_source(part, stamp, "events").uid(src).key_by(lambda e: f"k{e % 5}", key_type="string")
        assigner = SlidingEventTimeWindows.of(30, 10) if kind == "sliding" else EventTimeSessionWindows.with_gap(40)
        return list(ks.window(assigner).process(KeyStartSum(), element_type="bigint").uid("w").execute_and_collect(**kw))

    out = run(data[:split], 2, "s1", final_savepoint=tmp_path / "sp")
    out += run(data[split:], 3, "s2", restore_from=tmp_path / "sp", allow_non_restored_state=True)
    assert sorted(out) == _reference(data, kind)


def test_random_out_of_order_input_with_lateness_matches_brute_force(backend):
    import random

    rnd = random.Random(11)
    data = [max(0, i * 4 + rnd.randrange(-60, 10)) for i in range(250)]  # out of order by up to ~70 ms
    ooo, lateness, size = 20, 15, 25
    accepted: dict = {}
    wm = max_ts = -(2**63)
    for ts in data:  # the watermark an element meets is that of the elements before it
        start = ts - ts % size
        if start + size - 1 + lateness > wm:
            k = (f"k{ts % 3}", start)
            accepted[k] = accepted.get(k, 0) + ts
        if ts > max_ts:
            max_ts = ts
            wm = max(wm, ts - ooo - 1)
    assert len(accepted) < len({(f"k{t % 3}", t - t % size) for t in data}) or sum(accepted.values()) < sum(data)  # some dropped

    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    stamp = WatermarkStrategy.for_bounded_out_of_orderness(ooo).with_timestamp_assigner(lambda e, ts: e)
    # Watermarks generated in the (single) source, so the operator sees the sequence simulated above.
    ks = env.from_source(data, stamp, "events").key_by(lambda e: f"k{e % 3}", key_type="string")
    ws = ks.window(TumblingEventTimeWindows.of(size)).allowed_lateness(lateness)
    out = ws.process(KeyStartSum(), element_type="bigint").execute_and_collect()
    last = {}
    for key, start, _end, total in out:  # each (late) firing carries the window's whole contents so far
        last[(key, start)] = total
    assert last == accepted


def test_pickled_tuples_keep_their_shape_across_a_restore(backend, tmp_path):
    from statekit import PICKLED

    def run(part, src, **kw):
        env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
        ks = env.from_source(part, STAMP, "events").uid(src).key_by(lambda e: e[0], key_type="string")
        return list(ks.window(TumblingEventTimeWindows.of(10)).reduce(add, output_type=PICKLED).uid("w").execute_and_collect(**kw))

    out = run(DATA[:3], "s1", final_savepoint=tmp_path / "sp")
    out += run(DATA[3:], "s2", restore_from=tmp_path / "sp", allow_non_restored_state=True, trust_pickled=True)
    assert sorted(out) == [("a", 6), ("a", 12), ("a", 64), ("b", 2), ("b", 13)]


CLEARED: list = []


class Firings(ProcessWindowFunction):
    """Numbers each firing of a window with per-window state, which ``clear`` drops at cleanup."""

    def process(self, key, context, elements):
        from statekit.state.descriptors import ValueStateDescriptor

        n = context.window_state().get_state(ValueStateDescriptor("firings", "bigint", default=0))
        n.update(n.value() + 1)
        yield context.window().start, n.value(), sorted(e[1] for e in elements)

    def clear(self, context):
        from statekit.state.descriptors import ValueStateDescriptor

        context.window_state().get_state(ValueStateDescriptor("firings", "bigint", default=0)).clear()
        CLEARED.append(context.window().start)


def test_window_state_counts_late_firings_and_is_cleared(backend):
    CLEARED.clear()
    ws = keyed(backend, LATE, parallelism=1).window(TumblingEventTimeWindows.of(10)).allowed_lateness(5)
    out = ws.process(Firings(), element_type=PAIR).execute_and_collect()
    assert list(out) == [(0, 1, [1]), (0, 2, [1, 3]), (10, 1, [12]), (20, 1, [20])]
    assert CLEARED == [0, 10, 20]


class Totals(ProcessWindowFunction):
    """Per-key state next to per-window state: a running total over all windows and the firings of each window."""

    def process(self, key, context, elements):
        from statekit.state.descriptors import ValueStateDescriptor

        total = context.global_state().get_state(ValueStateDescriptor("total", "bigint", default=0))
        fires = context.window_state().get_state(ValueStateDescriptor("fires", "bigint", default=0))
        total.update(total.value() + len(list(elements)))
        fires.update(fires.value() + 1)
        yield key, context.window().start, total.value(), fires.value()

    def clear(self, context):
        from statekit.state.descriptors import ValueStateDescriptor

        context.window_state().get_state(ValueStateDescriptor("fires", "bigint", default=0)).clear()


def test_global_and_window_state_of_process_window_functions_across_a_savepoint(backend, tmp_path):
    """Flink: ``Context.globalState()`` is keyed state of the current key outside any window (it
    outlives every window); ``Context.windowState()`` is scoped to key and window, lives until you
    clear it, and ``clear(context)`` is called when the window is cleaned up (end + allowed lateness)."""
    def run(part, src, parallelism, **kw):
        env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend)
        ks = env.from_source(part, STAMP, "events").uid(src).key_by(lambda e: e[0], key_type="string")
        ws = ks.window(TumblingEventTimeWindows.of(10)).allowed_lateness(5)
        return list(ws.process(Totals(), element_type=PAIR).uid("w").execute_and_collect(**kw))

    # a: window [0,10) fires at 12 with [1] and re-fires with [1, 3] for the late 3; [10,20) stays pending.
    first = run([("a", 1), ("b", 2), ("a", 12), ("a", 3)], "s1", 2, final_savepoint=tmp_path / "sp1")
    assert sorted(first) == [("a", 0, 1, 1), ("a", 0, 3, 2), ("b", 0, 1, 1)]
    rows = Savepoint.open(tmp_path / "sp1").keyed_table("w").to_pylist()
    assert {r["key"]: r["total"] for r in rows if r["namespace"] is None} == {"a": 3, "b": 1}
    # [0,10) is not cleaned up yet (watermark 11 < 9 + lateness 5): its window state is in the savepoint
    assert {(r["key"], r["namespace"]["start"]): r["fires"] for r in rows if r["fires"] is not None} == {("a", 0): 2, ("b", 0): 1}

    # Restored at another parallelism: totals continue, the pending window fires, cleanup clears window state.
    rest = run([("a", 21), ("b", 22), ("b", 23), ("a", 40)], "s2", 3, final_savepoint=tmp_path / "sp2",
               restore_from=tmp_path / "sp1", allow_non_restored_state=True)  # fmt: skip
    assert sorted(rest) == [("a", 10, 4, 1), ("a", 20, 5, 1), ("b", 20, 3, 1)]
    rows = Savepoint.open(tmp_path / "sp2").keyed_table("w").to_pylist()
    assert {r["key"]: r["total"] for r in rows if r["namespace"] is None} == {"a": 5, "b": 3}
    assert all(r["fires"] is None for r in rows)  # every fired window was cleaned up and clear() dropped its state
