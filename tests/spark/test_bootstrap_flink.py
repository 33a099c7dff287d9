"""Flink's bootstrap-function behaviours: rich functions (open/close), timers-only keyed functions, and operator
state written at no more subtasks than the max parallelism; every result restored into the runtime."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from statekit.runtime import KeyedProcessFunction, StreamExecutionEnvironment
from statekit.savepoint import Savepoint, check
from statekit.spark import (
    BroadcastStateBootstrapFunction,
    KeyedStateBootstrapFunction,
    OperatorTransformation,
    SavepointWriter,
    StateBootstrapFunction,
)
from statekit.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

pytestmark = pytest.mark.spark


class Journal:
    """Records a function's lifecycle calls into one file per task (executors are separate processes)."""

    def __init__(self, directory):
        self.directory = str(directory)

    def log(self, event):
        if not hasattr(self, "_file"):
            self._file = os.path.join(self.directory, f"{os.getpid()}-{uuid.uuid4().hex}")  # the process it ran in
        with open(self._file, "a") as f:
            f.write(event + "\n")


def journals(directory):
    return [Path(p).read_text().split() for p in Path(directory).iterdir()]


class Scaled(KeyedStateBootstrapFunction, Journal):
    def open(self, ctx):
        self.log("open")
        self.total = ctx.get_state(ValueStateDescriptor("total", "bigint"))
        self.scale = 100  # a field set up in open, used by every row

    def process_element(self, row, ctx):
        self.log("element")
        self.total.update((self.total.value() or 0) + row.amount * self.scale)

    def close(self):
        self.log("close")


class Buffer(StateBootstrapFunction, Journal):
    def initialize_state(self, ctx):
        self.log("initialize")
        self.items = ctx.get_operator_state_store().get_list_state(ListStateDescriptor("items", "bigint"))

    def open(self, ctx):
        self.log("open")
        self.offset = 1000

    def process_element(self, row, ctx):
        self.log("element")
        self.items.add(row.id + self.offset)

    def snapshot_state(self, ctx):
        self.log("snapshot")

    def close(self):
        self.log("close")


class Rates(BroadcastStateBootstrapFunction, Journal):
    def open(self, ctx):
        self.log("open")
        self.rates = ctx.get_broadcast_state(MapStateDescriptor("rates", "string", "double"))

    def process_element(self, row, ctx):
        self.log("element")
        self.rates.put(row.currency, row.rate)

    def close(self):
        self.log("close")


def _lifecycle_ok(events, middle=("element",), before=("open",), after=("close",)):
    n = len(before)
    return events[:n] == list(before) and events[len(events) - len(after):] == list(after) and \
        set(events[n:len(events) - len(after)]) <= set(middle)


def test_bootstrap_functions_are_rich_functions(spark, tmp_path):
    """Flink: StateBootstrapFunction, BroadcastStateBootstrapFunction and KeyedStateBootstrapFunction are
    AbstractRichFunctions: open() before the first element and close() after the last, once per task."""
    for d in ("keyed", "list", "broadcast"):
        (tmp_path / d).mkdir()
    amounts = spark.createDataFrame([(i % 5, i) for i in range(20)], "user long, amount long").repartition(3)
    keyed = OperatorTransformation.bootstrap_with(amounts).key_by("user").transform(Scaled(tmp_path / "keyed"))
    ids = spark.range(0, 12, 1, numPartitions=3)
    buffered = OperatorTransformation.bootstrap_with(ids).transform(Buffer(tmp_path / "list"))
    rates = spark.createDataFrame([("EUR", 1.1), ("GBP", 1.3)], "currency string, rate double")
    broadcast = OperatorTransformation.bootstrap_with(rates).transform(Rates(tmp_path / "broadcast"))
    (SavepointWriter.new_savepoint(spark).with_operator("totals", keyed).with_operator("buffer", buffered)
     .with_operator("rates", broadcast).write(tmp_path / "sp"))  # fmt: skip
    for d, before, after in (("keyed", ("open",), ("close",)), ("list", ("initialize", "open"), ("snapshot", "close")),
                             ("broadcast", ("open",), ("close",))):  # fmt: skip
        # none of the three is initialized or opened on the driver (Flink opens functions only in tasks)
        assert not [p for p in (tmp_path / d).iterdir() if p.name.startswith(f"{DRIVER_PID}-")], d
        logs = [j for j in journals(tmp_path / d) if "element" in j]
        assert logs and all(_lifecycle_ok(j, before=before, after=after) for j in logs), (d, logs)
        assert all(j.count("open") == 1 and j.count("close") == 1 for j in logs)
    sp = Savepoint.open(tmp_path / "sp")
    assert check(tmp_path / "sp").ok
    assert sorted(sp.list_state("buffer", "items").column("value").to_pylist()) == list(range(1000, 1012))
    assert dict(zip(*(sp.broadcast_state("rates", "rates").column(c).to_pylist() for c in ("key", "value")))) == {
        "EUR": 1.1, "GBP": 1.3}  # fmt: skip
    # the keyed state (scaled with the field set in open) restores into a live job
    assert _restored_totals(tmp_path / "sp") == {u: 100 * sum(i for i in range(20) if i % 5 == u) + 1 for u in range(5)}


class Totals(KeyedProcessFunction):
    def open(self, rc):
        self.total = rc.get_state(ValueStateDescriptor("total", "bigint"))

    def process_element(self, value, ctx):
        self.total.update(self.total.value() + 1)
        yield ctx.get_current_key(), self.total.value()


def _restored_totals(path):
    env = StreamExecutionEnvironment(parallelism=2)
    out = env.from_collection(list(range(5))).uid("src").key_by(lambda v: v, key_type="bigint").process(Totals()).uid("totals")
    return dict(out.execute_and_collect(restore_from=path, allow_non_restored_state=True))


class Reminders(KeyedStateBootstrapFunction):
    """No keyed state at all: only a timer per row."""

    def process_element(self, row, ctx):
        ctx.timer_service().register_event_time_timer(row.due)


class Remind(KeyedProcessFunction):
    def process_element(self, value, ctx):
        return []

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp


def test_a_timers_only_keyed_bootstrap_function(spark, tmp_path):
    """Flink: a KeyedStateBootstrapFunction may only register timers; they are written and fire after restore."""
    rows = spark.createDataFrame([("a", 100), ("b", 200), ("a", 300)], "user string, due long")
    t = OperatorTransformation.bootstrap_with(rows).key_by("user").transform(Reminders())
    SavepointWriter.new_savepoint(spark).with_operator("reminders", t).write(tmp_path / "sp")
    sp = Savepoint.open(tmp_path / "sp")
    assert check(tmp_path / "sp").ok and sp.operator("reminders").keyed_states == ()
    assert sorted((r["key"], r["timestamp"]) for r in sp.timers("reminders").to_pylist()) == [("a", 100), ("a", 300), ("b", 200)]
    env = StreamExecutionEnvironment(parallelism=2)
    src = env.from_collection([("c", 1)]).uid("src")
    out = src.key_by(lambda v: v[0], key_type="string").process(Remind()).uid("reminders")
    fired = sorted(out.execute_and_collect(restore_from=tmp_path / "sp", allow_non_restored_state=True))
    assert fired == [("a", 100), ("a", 300), ("b", 200)]  # the end of input's final watermark fires them


RESTORED: dict = {}


class Items(StateBootstrapFunction):
    def initialize_state(self, ctx):
        self.items = ctx.get_operator_state_store().get_list_state(ListStateDescriptor("items", "bigint"))

    def process_element(self, row, ctx):
        self.items.add(row.id)

    def snapshot_state(self, ctx):
        pass


def test_operator_state_write_parallelism_is_capped_at_max_parallelism(spark, tmp_path):
    """Flink: an operator's parallelism never exceeds its max parallelism; a bootstrap asking for more
    (or reading more partitions) writes max-parallelism subtasks instead of failing."""
    asked = OperatorTransformation.bootstrap_with(spark.range(0, 100, 1, numPartitions=4), parallelism=40).transform(Items())
    wide = OperatorTransformation.bootstrap_with(spark.range(100, 200, 1, numPartitions=40)).transform(Items())
    (SavepointWriter.new_savepoint(spark, max_parallelism=16).with_operator("asked", asked)
     .with_operator("wide", wide).write(tmp_path / "sp"))  # fmt: skip
    sp = Savepoint.open(tmp_path / "sp")
    for uid, values in (("asked", range(100)), ("wide", range(100, 200))):
        meta = sp.operator(uid)
        assert (meta.parallelism, meta.max_parallelism) == (16, 16)
        table = sp.list_state(uid, "items")
        assert sorted(table.column("value").to_pylist()) == list(values)
        assert max(table.column("subtask").to_pylist()) <= 15


# --- states are discovered in the tasks, never by opening the function on the driver ------------------

DRIVER_PID = os.getpid()  # Spark's Python workers are other processes


class Opened(KeyedStateBootstrapFunction):
    """Records the process of every open(); refuses to be opened in the driver's process."""

    def __init__(self, directory, driver_pid):
        self.directory, self.driver_pid = str(directory), driver_pid

    def open(self, ctx):
        if os.getpid() == self.driver_pid:
            raise RuntimeError("open() ran on the driver")
        with open(os.path.join(self.directory, uuid.uuid4().hex), "w") as f:
            f.write(str(os.getpid()))
        self.total = ctx.get_state(ValueStateDescriptor("total", "bigint"))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", "bigint"))

    def process_element(self, row, ctx):
        self.total.update((self.total.value() or 0) + row.amount)
        self.seen.add(row.amount)


def test_keyed_functions_are_opened_only_in_tasks(spark, tmp_path):
    """Flink: a KeyedStateBootstrapFunction is opened by the tasks that run it, never by the client; the
    states it registers there are the operator's states."""
    (tmp_path / "opens").mkdir()
    amounts = spark.createDataFrame([(i % 5, i) for i in range(20)], "user long, amount long").repartition(3)
    t = OperatorTransformation.bootstrap_with(amounts).key_by("user").transform(Opened(tmp_path / "opens", DRIVER_PID))
    assert list((tmp_path / "opens").iterdir()) == []  # building the transformation opens nothing
    SavepointWriter.new_savepoint(spark).with_operator("totals", t).write(tmp_path / "sp")
    pids = {p.read_text() for p in (tmp_path / "opens").iterdir()}
    assert pids and str(DRIVER_PID) not in pids
    sp = Savepoint.open(tmp_path / "sp")
    assert [(s.name, s.kind, s.type) for s in sp.operator("totals").keyed_states] == [
        ("total", "value", "bigint"), ("seen", "list", "array<bigint>")]  # fmt: skip
    assert check(tmp_path / "sp").ok
    assert _restored_totals(tmp_path / "sp") == {u: sum(i for i in range(20) if i % 5 == u) + 1 for u in range(5)}


class ByTask(KeyedStateBootstrapFunction):
    """Registers states that depend on the task: what the driver must refuse when it merges the reports."""

    def __init__(self, mode):
        self.mode = mode

    def open(self, ctx):
        from pyspark import TaskContext

        odd = TaskContext.get().partitionId() % 2
        self.value = "1" if odd and self.mode == "types" else 1
        if self.mode == "types":
            self.n = ctx.get_state(ValueStateDescriptor("n", "string" if odd else "bigint"))
        else:
            self.n = ctx.get_state(ValueStateDescriptor("n", "bigint"))
            if odd:
                ctx.get_state(ValueStateDescriptor("extra", "bigint"))

    def process_element(self, row, ctx):
        self.n.update(self.value)


@pytest.mark.parametrize("mode, message", [("types", "registered as value<bigint> in one task and as value<string>|"
                                                      "registered as value<string> in one task and as value<bigint>"),
                                           ("sets", "register the same states")])
def test_tasks_registering_conflicting_states_are_refused(spark, tmp_path, mode, message):
    from statekit.errors import StateTypeError

    rows = spark.createDataFrame([(i, i) for i in range(64)], "user long, amount long")
    t = OperatorTransformation.bootstrap_with(rows).key_by("user").transform(ByTask(mode))
    with pytest.raises(StateTypeError, match=message):
        SavepointWriter.new_savepoint(spark).with_operator("n", t).write(tmp_path / "sp")
    assert not (tmp_path / "sp").exists() and list(tmp_path.iterdir()) == []
