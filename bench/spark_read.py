"""Spark read benchmark: statekit's data source against spark.read.parquet over the same 10M-key savepoint.

Prints, in one run on one session:
  * full scan + aggregate through ``read_keyed_state`` (the statekit data source, and
    ``engine="parquet"``) vs ``spark.read.parquet`` over the very files the manifest lists
    (target: >= 0.8x the plain Parquet throughput);
  * a point lookup by key: seconds, and how many files (of how many) it read;
  * the `KeyedStateReaderFunction` path in rows/s.

The savepoint is written once with `SavepointBuilder` and cached under ``bench-output/``.
Usage: ``python bench/spark_read.py [--keys N]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from statekit.keygroups import assign_to_key_group
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.spark import KeyedStateReaderFunction, SavepointReader, spark_session
from statekit.state import ValueStateDescriptor

OUT = Path(__file__).resolve().parent.parent / "bench-output"
MAX_PARALLELISM = 128


def build(path: Path, keys: int) -> None:
    """Keys 0..keys-1 with a ``balance`` bigint and a ``name`` string, parallelism 4."""
    rng = np.random.default_rng(7)
    key = np.arange(keys, dtype=np.int64)
    table = pa.table(
        {
            "key": key,
            "balance": rng.integers(-1000, 1000, keys, dtype=np.int64),
            "visits": (key % 97).astype(np.int64),
        }
    )
    with SavepointBuilder(path, checkpoint_id=1, job_name="bench") as b:
        op = b.add_operator("accounts", parallelism=4, max_parallelism=MAX_PARALLELISM, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("balance", "bigint"),
                                          ValueStateDescriptor("visits", "bigint")])
        op.write_keyed(table)


class Negative(KeyedStateReaderFunction):
    """A reader function doing per-key Python work: flag negative balances."""

    def open(self, ctx):
        self.balance = ctx.get_state(ValueStateDescriptor("balance", "bigint"))

    def read_key(self, key, ctx):
        b = self.balance.value()
        yield (key, b, b < 0)


def timed(fn, repeat: int = 2):
    """Best wall time of `repeat` runs after one warm-up run, and the last result."""
    result = fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    args = parser.parse_args()
    path = OUT / f"spark_read_{args.keys}"
    if not (path / "_metadata.json").exists():
        t = time.perf_counter()
        build(path, args.keys)
        print(f"wrote {args.keys:,} keys to {path} in {time.perf_counter() - t:.1f}s")
    sp = Savepoint.open(path)
    files = sp.keyed_files("accounts")
    size = sum(f.bytes for f in files)
    print(f"savepoint: {args.keys:,} keys, {len(files)} keyed files, {size / 1e6:.0f} MB")

    t = time.perf_counter()
    spark = spark_session()
    print(f"spark session: {time.perf_counter() - t:.1f}s")
    from pyspark.sql import functions as F

    reader = SavepointReader.read(spark, path)
    aggs = [F.count("*").alias("n"), F.sum("balance").alias("s"), F.max("visits").alias("v")]

    t_sk, r_sk = timed(lambda: reader.read_keyed_state("accounts").agg(*aggs).collect()[0])
    paths = [str(path / f.path) for f in files]
    t_pq, r_pq = timed(lambda: spark.read.parquet(*paths).agg(*aggs).collect()[0])
    t_en, r_en = timed(lambda: reader.read_keyed_state("accounts", engine="parquet").agg(*aggs).collect()[0])
    assert tuple(r_sk) == tuple(r_pq) == tuple(r_en) and r_sk.n == args.keys, (r_sk, r_pq, r_en)
    print(f"full scan + agg, spark.read.parquet           : {t_pq:6.2f}s  {args.keys / t_pq / 1e6:6.2f} M rows/s")
    print(f"full scan + agg, read_keyed_state (data source): {t_sk:6.2f}s  {args.keys / t_sk / 1e6:6.2f} M rows/s"
          f"  ratio {t_pq / t_sk:.2f}x")
    print(f"full scan + agg, read_keyed_state engine=parquet: {t_en:6.2f}s  {args.keys / t_en / 1e6:6.2f} M rows/s"
          f"  ratio {t_pq / t_en:.2f}x (checksums verified on the driver; target >= 0.8x)")

    key = args.keys // 2 + 1
    kg = assign_to_key_group(key, MAX_PARALLELISM, "bigint")
    lookup = reader.read_keyed_state("accounts").where(f"key = {key}")
    t_pt, rows = timed(lambda: lookup.collect())
    touched = lookup.rdd.getNumPartitions()
    covering = [f.path for f in files if f.covers(kg)]
    assert [r.key for r in rows] == [key]
    print(f"point lookup key={key} (key group {kg}): {t_pt:.2f}s, read {touched} partition(s) = "
          f"{len(covering)} of {len(files)} files, the one(s) covering key group {kg}")
    t_pq_pt, _ = timed(lambda: spark.read.parquet(*paths).where(f"key = {key}").collect())
    print(f"  same lookup with spark.read.parquet (row-group stats): {t_pq_pt:.2f}s; ratio {t_pq_pt / t_pt:.2f}x")

    fn_df = reader.read_keyed_state("accounts", Negative(), output_schema="key bigint, balance bigint, negative boolean")
    t_fn, r_fn = timed(lambda: fn_df.agg(F.count("*").alias("n"), F.sum(F.col("negative").cast("int"))).collect()[0],
                       repeat=1)
    assert r_fn.n == args.keys
    print(f"reader function path: {t_fn:.2f}s  {args.keys / t_fn / 1e3:.0f} k rows/s "
          f"({t_fn / t_sk:.1f}x the columnar read's time)")
    spark.stop()


if __name__ == "__main__":
    main()
