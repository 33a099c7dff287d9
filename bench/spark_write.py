"""Spark write benchmark: bootstrapping keyed state from a DataFrame against ``df.write.parquet`` of it.

Prints, in one run on one session, for the same 2M-key DataFrame (``key bigint, balance bigint``):
  * ``df.write.parquet`` (the baseline: what writing the data costs at all);
  * the columnar path, ``key_by("key").columns(ValueStateDescriptor("balance", ...))`` (Spark's own Parquet
    writer, `statekit.spark.jvm_parts`), next to its floor in plain Spark: the key group and the shuffle
    alone (no output), and those plus the sort and Spark's Parquet write;
  * the function path, a `KeyedStateBootstrapFunction` run once per row on the heap backend;
  * ``SavepointWriter.rekey`` of the columnar savepoint (key -> key + 10**9, key groups
    recomputed), against reading its keyed files and writing them back re-keyed with plain Spark,
    and with ``merge="sum"`` (key -> key & ~1: every two keys become one);
each in rows/s and as a ratio of the baseline's time (1.0x = as fast as plain Parquet), and the
growth of this Python driver's peak RSS during each write, against the keyed state's in-memory
(Arrow) size (target: below a quarter of it; executors write the files).

``--large N`` instead bootstraps N keys with two bigint states through the columnar path alone,
e.g. ``--large 30000000 --driver-memory 1g`` (it must succeed with a 1 GB driver).

``--cases evolve`` runs instead (10M keys by default, `bench_state_transform` and `bench_diff`):
  * ``with_state_transform`` (balance int -> bigint * 100) against plain Spark reading the keyed
    Parquet files, transforming the column and writing Parquet;
  * ``statekit.spark.diff`` of two savepoints (1% of keys changed, 0.5% removed, 0.5% added),
    written as Parquet, against plain Spark joining the two keyed tables and writing the changes;
    and the local Arrow ``statekit.savepoint.diff`` for reference.

Usage: ``python bench/spark_write.py [--keys N] [--cases write|evolve] [--driver-memory 4g] [--large N]``.
Output goes to a temporary directory.
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


def layout_floor(spark, df, out: Path, buckets: int) -> tuple[float, float]:
    """What the columnar layout costs in plain Spark: (key group + shuffle into `buckets` tasks, no output;
    the same + sort by key group + Spark's Parquet write). Every keyed write needs the shuffle: a key's rows
    must meet to be checked unique, and files hold contiguous key-group ranges."""
    from statekit.spark.keygroup_column import key_group_column
    from statekit.spark.parts import PartPlan, bucket_column

    plan = PartPlan("", "", "bigint", 128, buckets, None, None, 0, "")
    kg = key_group_column(spark, F.col("key"), 128)
    shuffled = df.withColumn("key_group", kg).repartition(buckets, bucket_column(plan, "key_group"))
    t_shuffle = timed(lambda: shuffled.write.format("noop").mode("overwrite").save())
    t_floor = timed(lambda: shuffled.sortWithinPartitions("key_group").write.parquet(str(out / "floor.parquet")))
    return t_shuffle, t_floor


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _two_savepoints(spark, out: Path, n: int) -> tuple[Path, Path]:
    """Savepoints a and b of `n` keys (``balance int``); b changes 1% of a's keys, drops 0.5%, adds 0.5%."""
    int_balance = ValueStateDescriptor("balance", "int")
    a = spark.range(n).selectExpr("id AS key", "CAST((id * 7919) % 1000 - 500 AS INT) AS balance")
    b = (spark.range(n + n // 200).where(f"id % 200 != 7 OR id >= {n}")
         .selectExpr("id AS key", "CAST((id * 7919) % 1000 - 500 + IF(id % 100 = 3, 1, 0) AS INT) AS balance"))  # fmt: skip
    for name, df in (("a", a), ("b", b)):
        t = OperatorTransformation.bootstrap_with(df).key_by("key").columns(int_balance)
        SavepointWriter.new_savepoint(spark).with_operator("accounts", t).write(out / name)
    return out / "a", out / "b"


def _keyed_paths(path: Path) -> list[str]:
    return [str(path / f.path) for f in Savepoint.open(path).keyed_files("accounts")]


def bench_state_transform(spark, out: Path, n: int, a: Path) -> None:
    """with_state_transform (int -> bigint * 100) against read Parquet / transform / write Parquet."""
    expr = "CAST(balance AS BIGINT) * 100"
    base = timed(lambda: spark.read.parquet(*_keyed_paths(a)).withColumn("balance", F.expr(expr))
                 .write.parquet(str(out / "transform-baseline.parquet")))  # fmt: skip
    t, growth = peak_rss_growth(lambda: SavepointWriter.from_existing_savepoint(spark, a)
                                .with_state_transform("accounts", "balance", expr, "bigint").write(out / "transformed"))  # fmt: skip
    sp = Savepoint.open(out / "transformed")
    assert sp.operator("accounts").keyed_states[0].type == "bigint"
    assert sp.get("accounts", 5) == {"balance": ((5 * 7919) % 1000 - 500) * 100}
    print(f"transform baseline: read, cast, write parquet: {base:6.2f}s  {n / base / 1e6:6.2f} M rows/s")
    print(f"SavepointWriter.with_state_transform  : {t:6.2f}s  {n / t / 1e6:6.2f} M rows/s  "
          f"ratio {base / t:.2f}x of that baseline; driver RSS +{growth / 2**20:.0f} MB for "
          f"{n * 16 / 2**20:.0f} MB of keyed state")


def bench_diff(spark, out: Path, n: int, a: Path, b: Path) -> None:
    """statekit.spark.diff written as Parquet against a plain Spark full outer join of the keyed files."""
    from statekit.savepoint import diff as local_diff
    from statekit.spark import diff

    def plain() -> None:
        x = spark.read.parquet(*_keyed_paths(a)).select(F.col("key").alias("ka"), F.col("balance").alias("old"))
        y = spark.read.parquet(*_keyed_paths(b)).select(F.col("key").alias("kb"), F.col("balance").alias("new"))
        j = x.join(y, F.col("ka") == F.col("kb"), "full_outer")
        change = (F.when(F.col("ka").isNull(), "added").when(F.col("kb").isNull(), "removed")
                  .when(~F.col("old").eqNullSafe(F.col("new")), "changed"))  # fmt: skip
        (j.select(F.coalesce("kb", "ka").alias("key"), change.alias("change"), "old", "new")
         .where("change IS NOT NULL").write.parquet(str(out / "diff-baseline.parquet")))  # fmt: skip

    base = timed(plain)
    t, growth = peak_rss_growth(lambda: diff(a, b, "accounts", spark=spark).write.parquet(str(out / "diff.parquet")))
    counts = {r.change: r["count"] for r in spark.read.parquet(str(out / "diff.parquet")).groupBy("change").count().collect()}
    assert counts == {r.change: r["count"] for r in
                      spark.read.parquet(str(out / "diff-baseline.parquet")).groupBy("change").count().collect()}
    t_local = timed(lambda: local_diff(a, b, op="accounts"))
    print(f"diff baseline: read both, outer join, write parquet: {base:6.2f}s  {n / base / 1e6:6.2f} M keys/s  {counts}")
    print(f"statekit.spark.diff (+ write parquet)  : {t:6.2f}s  {n / t / 1e6:6.2f} M keys/s  "
          f"ratio {base / t:.2f}x of that baseline; driver RSS +{growth / 2**20:.0f} MB")
    print(f"statekit.savepoint.diff (local, Arrow) : {t_local:6.2f}s  {n / t_local / 1e6:6.2f} M keys/s  "
          f"ratio {base / t_local:.2f}x of that baseline")


def evolve_main(spark, n: int) -> None:
    out = Path(tempfile.mkdtemp(prefix="statekit-bench-evolve-"))
    try:
        a, b = _two_savepoints(spark, out, n)
        warm_a, warm_b = _two_savepoints(spark, out / "warm", 10_000)  # Python workers, JIT, the pruning rule
        bench_state_transform(spark, out / "warm", 10_000, warm_a)
        bench_diff(spark, out / "warm", 10_000, warm_a, warm_b)
        print(f"{n:,} keys, {spark.sparkContext.defaultParallelism} cores (numbers are noisy on a shared machine)")
        bench_state_transform(spark, out, n, a)
        bench_diff(spark, out, n, a, b)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=None)
    parser.add_argument("--cases", choices=["write", "evolve"], default="write")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--large", type=int, default=0, help="only the columnar bootstrap of N keys, two states")
    args = parser.parse_args()
    spark = spark_session(**{"spark.driver.memory": args.driver_memory})
    if args.large:
        out = Path(tempfile.mkdtemp(prefix="statekit-bench-write-"))
        try:
            large(spark, args.large, out)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return
    if args.cases == "evolve":
        evolve_main(spark, args.keys or 10_000_000)
        return
    n = args.keys or 2_000_000
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
        t_col, rss_col = peak_rss_growth(savepoint("columnar", columnar))
        t_shuffle, t_floor = layout_floor(spark, df, out, len(Savepoint.open(out / "columnar").keyed_files("accounts")))
        t_fn, rss_fn = peak_rss_growth(savepoint("function", function))
        for name in ("columnar", "function"):
            assert Savepoint.open(out / name).operator("accounts").files and \
                sum(f.rows for f in Savepoint.open(out / name).keyed_files("accounts")) == n
        assert Savepoint.open(out / "columnar").keyed_table("accounts").sort_by("key") == \
            Savepoint.open(out / "function").keyed_table("accounts").sort_by("key")
        keyed_paths = [str(out / "columnar" / f.path) for f in Savepoint.open(out / "columnar").keyed_files("accounts")]
        t_rk_pq = timed(lambda: spark.read.parquet(*keyed_paths).withColumn("key", F.col("key") + 10**9)
                        .write.parquet(str(out / "rekey-baseline.parquet")))
        t_rk, rss_rk = peak_rss_growth(lambda: SavepointWriter.from_existing_savepoint(spark, out / "columnar")
                                       .rekey("accounts", F.col("key") + 10**9).write(out / "rekeyed"))
        assert Savepoint.open(out / "rekeyed").get("accounts", 10**9 + 5) == {"balance": (5 * 7919) % 1000 - 500}
        # merge=: every two keys become one (key // 2), their balances summed by Spark
        t_mg, rss_mg = peak_rss_growth(lambda: SavepointWriter.from_existing_savepoint(spark, out / "columnar")
                                       .rekey("accounts", F.col("key").bitwiseAND(-2), merge="sum").write(out / "merged"))
        assert Savepoint.open(out / "merged").get("accounts", 10) == {"balance": (10 * 7919) % 1000 - 500 + (11 * 7919) % 1000 - 500}
        print(f"{n:,} keys, {spark.sparkContext.defaultParallelism} cores")
        print(f"df.write.parquet (baseline)      : {t_pq:6.2f}s  {n / t_pq / 1e6:6.2f} M rows/s")
        print(f"bootstrap, columnar path         : {t_col:6.2f}s  {n / t_col / 1e6:6.2f} M rows/s  "
              f"ratio {t_pq / t_col:.2f}x of baseline")
        print(f"  floor: key group + shuffle only: {t_shuffle:6.2f}s (bounds the ratio at {t_pq / t_shuffle:.2f}x); "
              f"+ sort + Spark's Parquet write: {t_floor:6.2f}s ({t_pq / t_floor:.2f}x)")
        print(f"bootstrap, function path         : {t_fn:6.2f}s  {n / t_fn / 1e6:6.2f} M rows/s  "
              f"ratio {t_pq / t_fn:.2f}x of baseline")
        state = n * (4 + 8 + 8)  # the keyed table in Arrow: key_group int, key bigint, balance bigint
        for name, growth in (("columnar", rss_col), ("function", rss_fn)):
            print(f"driver peak RSS, {name + ' path':14s}  : +{growth / 2**20:5.0f} MB for {state / 2**20:.0f} MB of "
                  f"keyed state ({growth / state:.2f}x; target < 0.25x)")
        print(f"rekey baseline: read, re-key, write parquet: {t_rk_pq:6.2f}s  {n / t_rk_pq / 1e6:6.2f} M rows/s")
        print(f"SavepointWriter.rekey          : {t_rk:6.2f}s  {n / t_rk / 1e6:6.2f} M rows/s  "
              f"ratio {t_rk_pq / t_rk:.2f}x of that baseline; driver RSS +{rss_rk / 2**20:.0f} MB")
        print(f"SavepointWriter.rekey(merge=)  : {t_mg:6.2f}s  {n / t_mg / 1e6:6.2f} M rows/s  "
              f"ratio {t_rk_pq / t_mg:.2f}x of that baseline; driver RSS +{rss_mg / 2**20:.0f} MB")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
