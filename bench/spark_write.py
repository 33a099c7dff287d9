"""Spark write benchmark: bootstrapping keyed state from a DataFrame against ``df.write.parquet`` of it.

Prints, in one run on one session, for the same 2M-key DataFrame (``key bigint, balance bigint``):
  * ``df.write.parquet`` (the baseline: what writing the data costs at all);
  * the columnar path, ``key_by("key").columns(ValueStateDescriptor("balance", ...))``;
  * the function path, a `KeyedStateBootstrapFunction` run once per row on the heap backend;
  * ``SavepointWriter.rekey`` of the columnar savepoint (key -> key + 10**9, key groups
    recomputed), against reading its keyed files and writing them back re-keyed with plain Spark;
each in rows/s and as a ratio of the baseline's time (1.0x = as fast as plain Parquet), and for
the two bootstrap paths the growth of this Python driver's peak RSS during the write, against the
keyed state's in-memory (Arrow) size (target: below a quarter of it; executors write the files).

``--large N`` instead bootstraps N keys with two bigint states through the columnar path alone,
e.g. ``--large 30000000 --driver-memory 1g`` (it must succeed with a 1 GB driver).

Usage: ``python bench/spark_write.py [--keys N] [--driver-memory 4g] [--large N]``. Output goes to
a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from pyspark.sql import functions as F

from statekit.savepoint import Savepoint
from statekit.spark import KeyedStateBootstrapFunction, OperatorTransformation, SavepointWriter, spark_session
from statekit.state import ValueStateDescriptor

BALANCE = ValueStateDescriptor("balance", "bigint")
LIMIT = ValueStateDescriptor("limit", "bigint")


class Balance(KeyedStateBootstrapFunction):
    def open(self, ctx):
        self.balance = ctx.get_state(BALANCE)

    def process_element(self, row, ctx):
        self.balance.update(row.balance)


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_growth(fn) -> tuple[float, int]:
    """(seconds, bytes): `fn`'s time and how far this process's RSS rose above its level at the start."""
    start, peak, done = _rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            done.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        seconds = timed(fn)
    finally:
        done.set()
        sampler.join()
    return seconds, max(peak[0], _rss()) - start


def large(spark, n: int, out: Path) -> None:
    """Columnar bootstrap of `n` keys with two bigint states (the 1 GB driver acceptance run)."""
    df = spark.range(n).selectExpr("id AS key", "id % 1000 AS balance", "id % 7 AS limit")
    t = OperatorTransformation.bootstrap_with(df).key_by("key").columns(BALANCE, LIMIT)
    seconds, growth = peak_rss_growth(
        lambda: SavepointWriter.new_savepoint(spark).with_operator("accounts", t).write(out / "large"))
    sp = Savepoint.open(out / "large")
    rows = sum(f.rows for f in sp.keyed_files("accounts"))
    assert rows == n, rows
    assert sp.get("accounts", n - 1) == {"balance": (n - 1) % 1000, "limit": (n - 1) % 7}
    state = n * (4 + 8 + 8 + 8)  # key_group int, key, two bigint states
    print(f"{n:,} keys, two bigint states, spark.driver.memory={spark.conf.get('spark.driver.memory')}: "
          f"{seconds:6.2f}s  {n / seconds / 1e6:6.2f} M rows/s; driver RSS +{growth / 2**20:.0f} MB for "
          f"{state / 2**20:.0f} MB of state ({growth / state:.2f}x)")


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--large", type=int, default=0, help="only the columnar bootstrap of N keys, two states")
    args = parser.parse_args()
    n = args.keys
    spark = spark_session(**{"spark.driver.memory": args.driver_memory})
    out = Path(tempfile.mkdtemp(prefix="statekit-bench-write-"))
    if args.large:
        try:
            large(spark, args.large, out)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return
    try:
        df = spark.range(n).selectExpr("id AS key", "(id * 7919) % 1000 - 500 AS balance").cache()
        df.count()

        def savepoint(name, transformation):
            return lambda: SavepointWriter.new_savepoint(spark).with_operator("accounts", transformation).write(out / name)

        columnar = OperatorTransformation.bootstrap_with(df).key_by("key").columns(BALANCE)
        function = OperatorTransformation.bootstrap_with(df).key_by("key").transform(Balance())
        # warm-up: Python workers and JIT, on a small slice
        small = df.limit(10_000)
        SavepointWriter.new_savepoint(spark).with_operator(
            "w", OperatorTransformation.bootstrap_with(small).key_by("key").transform(Balance())).write(out / "warm")
        small.write.parquet(str(out / "warm.parquet"))

        t_pq = timed(lambda: df.write.parquet(str(out / "baseline.parquet")))
        t_col, rss_col = peak_rss_growth(savepoint("columnar", columnar))
        t_fn, rss_fn = peak_rss_growth(savepoint("function", function))
        for name in ("columnar", "function"):
            assert Savepoint.open(out / name).operator("accounts").files and \
                sum(f.rows for f in Savepoint.open(out / name).keyed_files("accounts")) == n
        assert Savepoint.open(out / "columnar").keyed_table("accounts").sort_by("key") == \
            Savepoint.open(out / "function").keyed_table("accounts").sort_by("key")
        keyed_paths = [str(out / "columnar" / f.path) for f in Savepoint.open(out / "columnar").keyed_files("accounts")]
        t_rk_pq = timed(lambda: spark.read.parquet(*keyed_paths).withColumn("key", F.col("key") + 10**9)
                        .write.parquet(str(out / "rekey-baseline.parquet")))
        t_rk = timed(lambda: SavepointWriter.from_existing_savepoint(spark, out / "columnar")
                     .rekey("accounts", F.col("key") + 10**9).write(out / "rekeyed"))
        assert Savepoint.open(out / "rekeyed").get("accounts", 10**9 + 5) == {"balance": (5 * 7919) % 1000 - 500}
        print(f"{n:,} keys, {spark.sparkContext.defaultParallelism} cores")
        print(f"df.write.parquet (baseline)      : {t_pq:6.2f}s  {n / t_pq / 1e6:6.2f} M rows/s")
        print(f"bootstrap, columnar path         : {t_col:6.2f}s  {n / t_col / 1e6:6.2f} M rows/s  "
              f"ratio {t_pq / t_col:.2f}x of baseline")
        print(f"bootstrap, function path         : {t_fn:6.2f}s  {n / t_fn / 1e6:6.2f} M rows/s  "
              f"ratio {t_pq / t_fn:.2f}x of baseline")
        state = n * (4 + 8 + 8)  # the keyed table in Arrow: key_group int, key bigint, balance bigint
        for name, growth in (("columnar", rss_col), ("function", rss_fn)):
            print(f"driver peak RSS, {name + ' path':14s}  : +{growth / 2**20:5.0f} MB for {state / 2**20:.0f} MB of "
                  f"keyed state ({growth / state:.2f}x; target < 0.25x)")
        print(f"rekey baseline: read, re-key, write parquet: {t_rk_pq:6.2f}s  {n / t_rk_pq / 1e6:6.2f} M rows/s")
        print(f"SavepointWriter.rekey          : {t_rk:6.2f}s  {n / t_rk / 1e6:6.2f} M rows/s  "
              f"ratio {t_rk_pq / t_rk:.2f}x of that baseline")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
