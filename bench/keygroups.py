"""Benchmark: vectorised assign_key_groups vs a plain Python loop of assign_to_key_group."""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from statekit.keygroups import assign_key_groups, assign_to_key_group

BASELINE = "plain Python loop of assign_to_key_group"


def make_strings(n: int, seed: int = 11) -> list[str]:
    """Mostly ASCII ids; 10% non-ASCII (accents, CJK, emoji), 5% empty strings."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 10**9, n).tolist()
    flavours = rng.integers(0, 20, n).tolist()
    prefixes = {1: "sessión-", 2: "\U0001f600用户-"}
    return ["" if f == 0 else prefixes.get(f, "user-") + str(i) for f, i in zip(flavours, ids)]


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def report(label: str, key_type: str, n: int, seconds: float) -> float:
    rate = n / seconds
    print(f"{label:<51} {key_type:<7} {n:>11,} keys  {rate / 1e6:8.2f} M keys/s")
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000_000, help="bigint keys (strings: n // 5)")
    ap.add_argument("--baseline-n", type=int, default=200_000, help="keys in the Python-loop sample")
    ap.add_argument("--max-parallelism", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = ap.parse_args()
    m = args.max_parallelism
    rng = np.random.default_rng(7)
    data = {
        "bigint": pa.array(rng.integers(-(2**63), 2**63 - 1, args.n, dtype=np.int64, endpoint=True)),
        "string": pa.array(make_strings(args.n // 5)),
    }
    print(f"max parallelism {m}, best of {args.repeat}")
    for key_type, arr in data.items():
        assign_key_groups(arr.slice(0, 1000), m, key_type)  # warm-up: imports, power tables
        seconds = best_of(args.repeat, lambda: assign_key_groups(arr, m))
        fast = report("assign_key_groups", key_type, len(arr), seconds)
        sample = arr.slice(0, min(args.baseline_n, len(arr))).to_pylist()
        expected = assign_key_groups(sample, m, key_type).tolist()
        loop: list[int] = []

        def python_loop() -> None:
            loop[:] = [assign_to_key_group(k, m, key_type) for k in sample]

        slow = report(f"baseline: {BASELINE}", key_type, len(sample), best_of(1, python_loop))
        assert loop == expected, "vectorised and scalar key groups disagree"
        print(f"{'ratio assign_key_groups / baseline':<51} {key_type:<7} {fast / slow:>16.0f}x")


if __name__ == "__main__":
    main()
