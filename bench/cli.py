"""Benchmark: the `statekit` command as whole processes - inspect, get, show --key on a 10M-key savepoint,
query on a small one with DuckDB and with Spark - against `python -c "import statekit"` and a bare Spark start."""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from processes import installed_env  # bench/ is on sys.path when run as a script

from statekit.demo import write_demo_savepoint
from statekit.savepoint import SavepointBuilder
from statekit.state import ListStateDescriptor, ValueStateDescriptor

PYTHON = sys.executable
STATEKIT = str(Path(sys.executable).parent / "statekit")


def big_savepoint(path: Path, n: int) -> int:
    """`n` bigint keys with a value and a list state; returns a key that exists."""
    rng = np.random.default_rng(11)
    keys = rng.permutation(n).astype(np.int64) * 7919 - n
    lengths = rng.integers(0, 4, n)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 1 << 40, int(offsets[-1]))))
    table = pa.table({"key": keys, "count": rng.integers(0, 1 << 40, n), "history": lists})
    with SavepointBuilder(path, checkpoint_id=1, job_name="bench") as b:
        b.add_operator("counter", parallelism=4, max_parallelism=128, key_type="bigint",
                       keyed_states=[ValueStateDescriptor("count", "bigint"), ListStateDescriptor("history", "bigint")]
                       ).write_keyed(table)
    return int(keys[n // 2])


CPU: dict[str, float] = {}
ENV = installed_env()  # children run as an installed statekit does (bytecode cached; see bench/processes.py)


def wall(cmd: list[str], runs: int) -> tuple[float, float]:
    """Median and min wall time of `runs` runs of `cmd` (each must exit 0; output discarded).

    The median CPU time (user + system) of the process goes to `CPU`: on a loaded machine it shows
    what the command costs when it does not wait for a core.
    """
    times, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    CPU[" ".join(cmd)] = statistics.median(cpu)
    return statistics.median(times), min(times)


def cpu(cmd: list[str]) -> float:
    return CPU[" ".join(cmd)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000_000, help="keys of the big savepoint")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--spark-runs", type=int, default=1)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="statekit-bench-cli-"))
    try:
        t0 = time.perf_counter()
        big = work / "big"
        key = big_savepoint(big, args.n)
        built = time.perf_counter() - t0
        small = write_demo_savepoint(work / "small", users=1_000)
        print(f"10M-key savepoint: {args.n:,} keys, {sum(f.stat().st_size for f in big.rglob('*.parquet')) / 2**20:.0f} "
              f"MiB, built in {built:.1f} s; machine load average {os.getloadavg()[0]:.1f} (noisy if high)")
        base_cmd = [PYTHON, "-c", "import statekit"]
        base, base_min = wall(base_cmd, args.runs)
        arrow_cmd = [PYTHON, "-c", "import statekit, pyarrow.parquet, pyarrow.compute"]
        arrow, arrow_min = wall(arrow_cmd, args.runs)
        label = 'baseline: python -c "import statekit"'
        print(f"{label:48s} {base:6.3f} s (min {base_min:.3f}, cpu {cpu(base_cmd):.3f})")
        label = "baseline: ... + import pyarrow.parquet, .compute"
        print(f"{label:48s} {arrow:6.3f} s (min {arrow_min:.3f}, cpu {cpu(arrow_cmd):.3f})")
        cases = [
            ("inspect (10M keys)", [STATEKIT, "inspect", str(big)]),
            ("get --key (10M keys)", [STATEKIT, "get", str(big), "--uid", "counter", "--key", str(key)]),
            ("show --key (10M keys)", [STATEKIT, "show", str(big), "--uid", "counter", "--key", str(key), "--values"]),
            ("show --limit 20 (10M keys)", [STATEKIT, "show", str(big), "--uid", "counter"]),
            ("query duckdb key = K (10M keys)",
             [STATEKIT, "query", str(big), f"SELECT * FROM counter.keyed WHERE key = {key}"]),
            ("query duckdb GROUP BY (1k keys)",
             [STATEKIT, "query", str(small), "SELECT balance > 0 AS positive, count(*) FROM accounts.keyed GROUP BY 1"]),
        ]
        for name, cmd in cases:
            med, low = wall(cmd, args.runs)
            print(f"{name:48s} {med:6.3f} s (min {low:.3f}, cpu {cpu(cmd):.3f})  {med / base:5.2f}x import statekit  "
                  f"{med / arrow:5.2f}x import pyarrow  {1 / med:5.2f} commands/s")
        # A one-key repair writes a new savepoint: only its key group's file is rewritten, the others linked.
        times = []
        for i in range(args.runs):
            target = work / f"set-{i}"
            cmd = [STATEKIT, "set", str(big), str(target), "--uid", "counter", "--key", str(key), "--state", "count",
                   "--value", str(i), "--apply"]
            times.append(wall(cmd, 1)[0])
            shutil.rmtree(target)
        med = statistics.median(times)
        print(f"{'set --apply one key (10M keys)':48s} {med:6.3f} s (min {min(times):.3f})  {med / base:5.2f}x import "
              f"statekit  {med / arrow:5.2f}x import pyarrow")
        if not args.no_spark:
            start = ("from pyspark.sql import SparkSession; "
                     "SparkSession.builder.master('local[*]').config('spark.ui.enabled','false').getOrCreate().stop()")
            spark_bare, _ = wall([PYTHON, "-c", start], args.spark_runs)
            print(f"{'baseline: bare Spark start (pyspark, local[*])':48s} {spark_bare:6.3f} s")
            med, _ = wall([STATEKIT, "query", str(small), "--engine", "spark",
                           "SELECT balance > 0 AS positive, count(*) FROM accounts.keyed GROUP BY 1"], args.spark_runs)
            duck, _ = wall([STATEKIT, "query", str(small),
                            "SELECT balance > 0 AS positive, count(*) FROM accounts.keyed GROUP BY 1"], args.runs)
            print(f"{'query spark GROUP BY (1k keys)':48s} {med:6.3f} s  {med / spark_bare:5.2f}x bare Spark start  "
                  f"duckdb is {med / duck:.0f}x faster")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
