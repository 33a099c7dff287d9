"""Jobs shared by the runtime tests and the child processes they kill (run as a script by tests)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from statekit.runtime import (
    CheckpointListener,
    FileSink,
    KeyedProcessFunction,
    MapFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
    WatermarkStrategy,
)
from statekit.state.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor


def events(n: int, keys: int = 37) -> list[tuple[str, int]]:
    """``(key, sequence)`` pairs: deterministic, many keys, timestamps increasing with sequence."""
    return [(f"k{(i * 7919) % keys}", i) for i in range(n)]


class FailOnce(MapFunction, CheckpointListener):
    """Raises at one element, or parks the process for a SIGKILL, in the first attempt only.

    Parked, the process keeps writing the checkpoints in flight (their threads go on); the
    parent kills it once it has read that at least one checkpoint was written.
    """

    def __init__(self, at: int | None, mode: str = "raise") -> None:
        self.at, self.mode = at, mode
        self.completed = 0

    def open(self, runtime_context):
        self.attempt = runtime_context.get_attempt_number()

    def notify_checkpoint_complete(self, checkpoint_id):
        self.completed += 1

    def map(self, value):
        if self.attempt == 0 and self.at is not None:
            if self.mode == "raise" and value[1] == self.at:
                raise RuntimeError(f"injected failure at element {self.at}")
            if self.mode == "park" and value[1] == self.at:
                self._park(value[1])
        return value

    def _park(self, at: int) -> None:
        if True:
            # Tell the parent where we are, then wait to be killed.
            sys.stdout.write(f"parked {at}\n")
            sys.stdout.flush()
            sys.stdin.readline()
            os._exit(3)  # only reached if the parent closes stdin instead of killing


class SumCount(KeyedProcessFunction):
    """Per key: count (ValueState), sum (ValueState), last three values (ListState), buckets (MapState), a timer."""

    def open(self, rc):
        self.count = rc.get_state(ValueStateDescriptor("count", "bigint", default=0))
        self.total = rc.get_state(ValueStateDescriptor("total", "bigint"))
        self.last = rc.get_list_state(ListStateDescriptor("last", "bigint"))
        self.buckets = rc.get_map_state(MapStateDescriptor("buckets", "int", "bigint"))

    def process_element(self, value, ctx):
        key, seq = value
        n = self.count.value() + 1
        self.count.update(n)
        self.total.update((self.total.value() or 0) + seq)
        recent = (list(self.last.get() or []) + [seq])[-3:]
        self.last.update(recent)
        b = seq % 4
        self.buckets.put(b, (self.buckets.get(b) or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 50)
        if n % 5 == 0:
            yield (key, n, self.total.value())

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), "timer", timestamp, self.count.value())


def build(env: StreamExecutionEnvironment, data: list, *, fail_at: int | None = None, mode: str = "raise", uid_suffix: str = ""):
    """Source → failure injector → key_by → SumCount; returns the output stream."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(10).with_timestamp_assigner(lambda e, ts: e[1] * 10)
    src = env.from_source(data, strategy, "events").uid("events" + uid_suffix)
    mapped = src.map(FailOnce(fail_at, mode)).uid("fail")
    return mapped.key_by(lambda e: e[0], key_type="string").process(SumCount()).uid("sum")


def make_env(backend: str, parallelism: int, checkpoints: Path | None, every: int = 100) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend)
    if checkpoints is not None:
        env.enable_checkpointing(every_records=every)
        env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoints).set_num_retained_checkpoints(2)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    return env


def run_to_files(backend: str, n: int, out: Path, checkpoints: Path, savepoint: Path, *, fail_at=None, mode="raise", restore=None) -> None:
    """The job writing to a transactional FileSink (used by the killed-child test)."""
    env = make_env(backend, 2, checkpoints)
    build(env, events(n), fail_at=fail_at, mode=mode).map(json.dumps).sink_to(FileSink(out, format="text")).uid("files")
    env.execute("files", restore_from=restore, final_savepoint=savepoint, trust_pickled=True)


if __name__ == "__main__":  # the child process of the kill test
    import logging

    import pyarrow as pa

    handler = logging.StreamHandler(sys.stdout)  # "checkpoint N written" lines tell the parent
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("statekit.runtime.checkpointing").addHandler(handler)
    logging.getLogger("statekit.runtime.checkpointing").setLevel(logging.INFO)

    # pyarrow imports pandas on first use (~0.5 s); do it now so the first checkpoint completes
    # while the job still runs, as in a warm long-running process.
    pa.array([1])
    backend, n, out, chk, sp, at = sys.argv[1:7]
    run_to_files(backend, int(n), Path(out), Path(chk), Path(sp), fail_at=int(at), mode="park")
