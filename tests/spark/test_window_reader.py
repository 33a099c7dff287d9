"""read_window_state over savepoints of real runtime window jobs: Flink's click-counter example and friends."""

from __future__ import annotations

import pytest

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.runtime import (
    CountTrigger,
    EventTimeSessionWindows,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from statekit.spark import SavepointReader, WindowReaderFunction
from statekit.state import ReducingStateDescriptor, ValueStateDescriptor
from statekit.testing import ClickCounter

pytestmark = pytest.mark.spark

MINUTE = 60_000
# (user, timestamp): alice clicks 3 times in minute 0 and once in minute 1, bob twice in minute 0.
CLICKS = [("alice", 1_000), ("bob", 1_500), ("alice", 2_000), ("alice", 30_000), ("bob", 59_000), ("alice", 61_000)]
# A watermark far behind the clicks: no window fires, every one is pending in the savepoint.
LAGGING = WatermarkStrategy.for_bounded_out_of_orderness(10 * MINUTE).with_timestamp_assigner(lambda e, ts: e[1])


class ClickReader(WindowReaderFunction):
    """Flink's documented ClickReader: user, count, window and trigger timers."""

    def read_window(self, key, ctx, elements):
        yield {"user": key, "count": next(iter(elements)), "start": ctx.window.start, "end": ctx.window.end,
               "timers": ctx.registered_event_time_timers()}  # fmt: skip


def _clicks(env):
    return env.from_collection(CLICKS).assign_timestamps_and_watermarks(LAGGING).key_by(lambda c: c[0], key_type="string")


@pytest.fixture(scope="module")
def click_savepoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("clicks") / "sp"
    env = StreamExecutionEnvironment(parallelism=2)
    out = _clicks(env).window(TumblingEventTimeWindows.of(MINUTE)).aggregate(
        ClickCounter(), accumulator_type="bigint", output_type="bigint").uid("click-window")  # fmt: skip
    assert list(out.execute_and_collect(final_savepoint=path)) == []  # nothing fired
    return path


EXPECTED = {("alice", 0): 3, ("bob", 0): 2, ("alice", MINUTE): 1}


def test_click_reader_reads_every_pending_window(spark, click_savepoint):
    reader = SavepointReader.read(spark, click_savepoint)
    rows = reader.read_window_state("click-window", ClickReader(), aggregate_function=ClickCounter()).collect()
    assert {(r.user, r.start): r["count"] for r in rows} == EXPECTED
    for r in rows:
        assert r.end == r.start + MINUTE
        assert r.timers == [r.end - 1]  # the window's cleanup timer (no allowed lateness)


def test_columnar_window_view_with_key_pruning(spark, click_savepoint):
    reader = SavepointReader.read(spark, click_savepoint)
    df = reader.read_window_state("click-window")
    assert df.columns == ["key", "window_start", "window_end", "contents"]
    assert {(r.key, r.window_start): r.contents for r in df.collect()} == EXPECTED  # contents = accumulators
    alice = df.where("key = 'alice'")
    assert sorted(r.window_start for r in alice.collect()) == [0, MINUTE]


def test_aggregate_windows_need_the_aggregate_function(spark, click_savepoint):
    reader = SavepointReader.read(spark, click_savepoint)
    with pytest.raises(InvalidArgumentError, match="aggregate_function"):
        reader.read_window_state("click-window", ClickReader())


def test_buffered_windows_with_count_trigger_state(spark, tmp_path):
    path = tmp_path / "sp"
    env = StreamExecutionEnvironment(parallelism=1)
    out = (_clicks(env).window(TumblingEventTimeWindows.of(MINUTE)).trigger(CountTrigger.of(10))
           .process(_Noop(), element_type="struct<f0:string,f1:bigint>").uid("buffered"))  # fmt: skip
    assert list(out.execute_and_collect(final_savepoint=path)) == []

    class Buffered(WindowReaderFunction):
        def read_window(self, key, ctx, elements):
            count = ctx.trigger_state(ReducingStateDescriptor("count-trigger", lambda a, b: a + b, "bigint"))
            yield key, ctx.window.start, sorted(e["f1"] for e in elements), count

    rows = SavepointReader.read(spark, path).read_window_state(
        "buffered", Buffered(), output_schema="user string, start bigint, stamps array<bigint>, count bigint"
    ).collect()
    got = {(r.user, r.start): (r.stamps, r["count"]) for r in rows}
    assert got == {
        ("alice", 0): ([1_000, 2_000, 30_000], 3),
        ("bob", 0): ([1_500, 59_000], 2),
        ("alice", MINUTE): ([61_000], 1),
    }


def test_session_windows_are_read_merged(spark, tmp_path):
    path = tmp_path / "sp"
    env = StreamExecutionEnvironment(parallelism=2)
    out = (_clicks(env).window(EventTimeSessionWindows.with_gap(5_000))
           .reduce(lambda a, b: (a[0], a[1] + b[1]), output_type="struct<f0:string,f1:bigint>").uid("sessions"))  # fmt: skip
    assert list(out.execute_and_collect(final_savepoint=path)) == []
    df = SavepointReader.read(spark, path).read_window_state("sessions")
    got = sorted((r.key, r.window_start, r.window_end) for r in df.collect())
    # alice's clicks at 1s and 2s merge into one session [1s, 7s); the others stand alone.
    assert got == [("alice", 1_000, 7_000), ("alice", 30_000, 35_000), ("alice", 61_000, 66_000),
                   ("bob", 1_500, 6_500), ("bob", 59_000, 64_000)]  # fmt: skip


def test_a_non_window_operator_is_refused(spark, acceptance_savepoint):
    with pytest.raises(InvalidArgumentError, match="not a window operator"):
        SavepointReader.read(spark, acceptance_savepoint).read_window_state("proc")


class _Noop(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield key


class FiresAndTotal(ProcessWindowFunction):
    """Counts firings per window (window state) and elements per user over all windows (global state)."""

    def process(self, key, context, elements):
        total = context.global_state().get_state(ValueStateDescriptor("total", "bigint", default=0))
        fires = context.window_state().get_state(ValueStateDescriptor("fires", "bigint", default=0))
        total.update(total.value() + 2)  # a CountTrigger.of(2) fires after each second element
        fires.update(fires.value() + 1)
        return []


class StateReader(WindowReaderFunction):
    def read_window(self, key, ctx, elements):
        fires = ctx.window_state().get_state(ValueStateDescriptor("fires", "bigint"))
        total = ctx.global_state().get_state(ValueStateDescriptor("total", "bigint"))
        yield {"user": key, "start": ctx.window.start, "fires": fires.value(), "total": total.value(),
               "n": len(list(elements))}  # fmt: skip


def test_reader_context_offers_window_and_global_state(spark, tmp_path):
    """Flink: a WindowReaderFunction's context has ``windowState()`` (the current window's keyed state)
    and ``globalState()`` (the key's state outside windows), as the ProcessWindowFunction that wrote them."""
    path = tmp_path / "sp"
    env = StreamExecutionEnvironment(parallelism=2)
    ws = _clicks(env).window(TumblingEventTimeWindows.of(MINUTE)).trigger(CountTrigger.of(2))
    out = ws.process(FiresAndTotal(), element_type="struct<f0:string,f1:bigint>").uid("w")
    assert list(out.execute_and_collect(final_savepoint=path)) == []
    rows = SavepointReader.read(spark, path).read_window_state("w", StateReader()).collect()
    got = {(r.user, r.start): (r.fires, r.total, r.n) for r in rows}
    assert got == {("alice", 0): (1, 2, 3), ("bob", 0): (1, 2, 2), ("alice", MINUTE): (None, 2, 1)}
    # The columnar view holds what is kept per window; the key's global state is not one of its columns
    # (Flink's state catalog keeps it out of the windowed table): it is in the keyed rows without a namespace.
    reader = SavepointReader.read(spark, path)
    table = reader.read_window_state("w")
    assert table.columns == ["key", "window_start", "window_end", "contents", "count-trigger", "fires"]
    assert {(r.key, r.window_start): r.fires for r in table.collect()} == {("alice", 0): 1, ("bob", 0): 1, ("alice", MINUTE): None}
    outside = reader.read_keyed_state("w").where("namespace IS NULL").select("key", "total").collect()
    assert sorted((r.key, r.total) for r in outside) == [("alice", 2), ("bob", 2)]
    with pytest.raises(StateTypeError):  # the descriptor's type is checked against the manifest
        SavepointReader.read(spark, path).read_window_state("w", BadReader()).collect()


class BadReader(WindowReaderFunction):
    def read_window(self, key, ctx, elements):
        yield {"v": ctx.global_state().get_state(ValueStateDescriptor("total", "string")).value()}
