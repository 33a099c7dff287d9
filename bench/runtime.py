"""Benchmark: the embedded runtime's keyed count (one ValueState) against a dict loop and a raw rocksdict loop.

A job ``from_collection(words) → key_by(word) → count`` over `--events` events and `--keys`
string keys, on the heap and RocksDB backends at parallelism 1 and 2. Printed, all measured in
the same run: events/s; the ratio to a plain Python dict loop doing the same counting (the
practical ceiling for a Python engine); the ratio to a raw rocksdict get/put loop (RocksDB's
ceiling from Python); and, for `--checkpoint-keys` keys, how long a checkpoint takes to
complete and how long processing paused for it (the synchronous snapshot).

Targets (issue 4): heap ≥ 0.25× the dict loop; RocksDB ≥ 0.5× heap.

Run: ``python bench/runtime.py [--events 2000000] [--keys 100000] [--checkpoint-keys 1000000]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from baselines import dict_loop, rocksdict_loop  # bench/ is on sys.path when run as a script

from statekit.runtime import KeyedProcessFunction, StreamExecutionEnvironment
from statekit.state import ValueStateDescriptor


class Count(KeyedProcessFunction):
    """Counts per key and emits nothing (a *returning* function: no generator per element)."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", "bigint", default=0))

    def process_element(self, value, ctx):
        count = self.count
        count.update(count.value() + 1)


def workload(n_events: int, n_keys: int, seed: int = 7) -> list[str]:
    keys = [f"user-{i:07d}" for i in range(n_keys)]
    return [keys[i] for i in np.random.default_rng(seed).integers(0, n_keys, n_events).tolist()]


def job(words: list[str], backend: str, parallelism: int, workdir: Path) -> float:
    env = StreamExecutionEnvironment(parallelism=parallelism, state_backend=backend, working_dir=workdir)
    env.from_collection(words).key_by(lambda w: w, key_type="string").process(Count())
    t0 = time.perf_counter()
    env.execute("bench")
    return time.perf_counter() - t0


def checkpoint_pause(n_keys: int, backend: str, workdir: Path) -> tuple[float, float, float]:
    """(processing pause of the synchronous snapshot, time to complete the checkpoint, total job time)."""
    from statekit.runtime import job as job_module

    words = [f"key-{i:08d}" for i in range(n_keys)]
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend, working_dir=workdir)
    # One checkpoint, right after every key has been counted once.
    env.enable_checkpointing(every_records=n_keys)
    env.get_checkpoint_config().set_checkpoint_storage_dir(workdir / "chk")
    env.from_collection(words + words[:1]).key_by(lambda w: w, key_type="string").process(Count())
    timings: dict[str, float] = {}
    original = job_module.Execution.trigger

    def timed_trigger(self, kind, path=None):
        t0 = time.perf_counter()
        pending = original(self, kind, path)
        timings["pause"] = time.perf_counter() - t0
        pending.future.add_done_callback(lambda f: timings.setdefault("complete", time.perf_counter() - t0))
        return pending

    job_module.Execution.trigger = timed_trigger
    try:
        t0 = time.perf_counter()
        env.execute("checkpoint")
        total = time.perf_counter() - t0
    finally:
        job_module.Execution.trigger = original
    return timings["pause"], timings["complete"], total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--checkpoint-keys", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs of every measurement (noisy machines)")
    args = ap.parse_args()
    words = workload(args.events, args.keys)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        best = lambda f: min(f(i) for i in range(args.repeat))  # noqa: E731
        t_dict = best(lambda i: dict_loop(words))
        t_rocks = best(lambda i: rocksdict_loop(root / f"raw-{i}", words))
        print(f"{args.events:,} events, {args.keys:,} string keys (best of {args.repeat})")
        print(f"  dict loop           {args.events / t_dict:12,.0f} events/s")
        print(f"  raw rocksdict loop  {args.events / t_rocks:12,.0f} events/s")
        heap = {}
        for backend in ("heap", "rocksdb"):
            for p in (1, 2):
                t = best(lambda i: job(words, backend, p, root / f"{backend}-{p}-{i}"))
                rate = args.events / t
                line = f"  runtime {backend:<7} p={p}  {rate:12,.0f} events/s  {t_dict / t:5.2f}x dict loop"
                if backend == "heap":
                    heap[p] = t
                else:
                    line += f"  {t_rocks / t:5.2f}x raw rocksdict  {heap[p] / t:5.2f}x heap"
                print(line, flush=True)
        print(f"checkpoint of {args.checkpoint_keys:,} keys (parallelism 1)")
        for backend in ("heap", "rocksdb"):
            pause, complete, total = checkpoint_pause(args.checkpoint_keys, backend, root / f"chk-{backend}")
            print(f"  {backend:<7} processing paused {pause * 1000:8.1f} ms; checkpoint complete after {complete:6.2f} s (job {total:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
