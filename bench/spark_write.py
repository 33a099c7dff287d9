"""Spark write benchmark: bootstrapping keyed state from a DataFrame against ``df.write.parquet`` of it.

Prints, in one run on one session, for the same 2M-key DataFrame (``key bigint, balance bigint``):
  * ``df.write.parquet`` (the baseline: what writing the data costs at all);
  * the columnar path, ``key_by("key").columns(ValueStateDescriptor("balance", ...))``;
  * the function path, a `KeyedStateBootstrapFunction` run once per row on the heap backend;
each in rows/s and as a ratio of the baseline's time (1.0x = as fast as plain Parquet).

Usage: ``python bench/spark_write.py [--keys N]``. Output goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

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
        print(f"{n:,} keys, {spark.sparkContext.defaultParallelism} cores")
        print(f"df.write.parquet (baseline)      : {t_pq:6.2f}s  {n / t_pq / 1e6:6.2f} M rows/s")
        print(f"bootstrap, columnar path         : {t_col:6.2f}s  {n / t_col / 1e6:6.2f} M rows/s  "
              f"ratio {t_pq / t_col:.2f}x of baseline")
        print(f"bootstrap, function path         : {t_fn:6.2f}s  {n / t_fn / 1e6:6.2f} M rows/s  "
              f"ratio {t_pq / t_fn:.2f}x of baseline")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
