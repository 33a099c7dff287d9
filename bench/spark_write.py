"""Spark write benchmark: bootstrapping keyed state from a DataFrame against ``df.write.parquet`` of it.

Prints, in one run on one session, for the same 2M-key DataFrame (``key bigint, balance bigint``):
  * ``df.write.parquet`` (the baseline: what writing the data costs at all);
  * the columnar path, ``key_by("key").columns(ValueStateDescriptor("balance", ...))``;
  * the function path, a `KeyedStateBootstrapFunction` run once per row on the heap backend;
  * ``SavepointWriter.rekey`` of the columnar savepoint (key -> key + 10**9, key groups
    recomputed), against reading its keyed files and writing them back re-keyed with plain Spark;
each in rows/s and as a ratio of the baseline's time (1.0x = as fast as plain Parquet).

Usage: ``python bench/spark_write.py [--keys N]``. Output goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from statekit.savepoint import Savepoint
from statekit.spark import KeyedStateBootstrapFunction, OperatorTransformation, SavepointWriter, spark_session
from statekit.state import ValueStateDescriptor

BALANCE = ValueStateDescriptor("balance", "bigint")


class Balance(KeyedStateBootstrapFunction):
    def open(self, ctx):
        self.balance = ctx.get_state(BALANCE)

    def process_element(self, row, ctx):
        self.balance.update(row.balance)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2_000_000)
    args = parser.parse_args()
    n = args.keys
    spark = spark_session()
    out = Path(tempfile.mkdtemp(prefix="statekit-bench-write-"))
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
        t_col = timed(savepoint("columnar", columnar))
        t_fn = timed(savepoint("function", function))
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
        print(f"rekey baseline: read, re-key, write parquet: {t_rk_pq:6.2f}s  {n / t_rk_pq / 1e6:6.2f} M rows/s")
        print(f"SavepointWriter.rekey          : {t_rk:6.2f}s  {n / t_rk / 1e6:6.2f} M rows/s  "
              f"ratio {t_rk_pq / t_rk:.2f}x of that baseline")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
