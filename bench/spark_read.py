"""Spark read benchmark: statekit's data source against spark.read.parquet over the same 10M-key savepoint.

Prints, in one run on one session:
  * full scan + aggregate through ``read_keyed_state`` (default engine: Spark's Parquet reader with
    statekit's pruning rule; and the statekit Python data source) vs ``spark.read.parquet`` over
    the very files the manifest lists (target: >= 0.8x the plain Parquet throughput);
  * a point lookup by key with either engine: seconds, and how many files (of how many) it read;
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

    from statekit.spark.pruning import install_pruning

    t = time.perf_counter()
    assert install_pruning(spark), "the pruning rule is not available (no JDK?); the bench measures it"
    print(f"pruning rule loaded in {time.perf_counter() - t:.1f}s (the first use on a machine compiles it with javac)")
    reader = SavepointReader.read(spark, path)
    aggs = [F.count("*").alias("n"), F.sum("balance").alias("s"), F.max("visits").alias("v")]
    paths = [str(path / f.path) for f in files]

    # Planning the first query of a session verifies every file's CRC-32 against the manifest (on
    # the driver, cached per file after that: a savepoint is immutable); time that step on its own.
    spark.read.parquet(paths[0]).where("key = 1").collect()  # the session's first query warms Spark's planner
    t = time.perf_counter()
    reader.read_keyed_state("accounts").inputFiles()
    t_verify = time.perf_counter() - t
    t_pq, r_pq = timed(lambda: spark.read.parquet(*paths).agg(*aggs).collect()[0])
    schema = reader.read_keyed_state("accounts", with_key_group=True).schema
    t_pqs, _ = timed(lambda: spark.read.schema(schema).parquet(*paths).agg(*aggs).collect()[0])
    t_auto, r_auto = timed(lambda: reader.read_keyed_state("accounts").agg(*aggs).collect()[0])
    t_ds, r_ds = timed(lambda: reader.read_keyed_state("accounts", engine="statekit").agg(*aggs).collect()[0])
    assert tuple(r_auto) == tuple(r_pq) == tuple(r_ds) and r_auto.n == args.keys, (r_auto, r_pq, r_ds)
    print(f"full scan + agg, spark.read.parquet (baseline)  : {t_pq:6.2f}s  {args.keys / t_pq / 1e6:6.2f} M rows/s")
    print(f"full scan + agg, read_keyed_state (auto=parquet): {t_auto:6.2f}s  {args.keys / t_auto / 1e6:6.2f} M rows/s"
          f"  ratio {t_pq / t_auto:.2f}x (target >= 0.8x)")
    print(f"  same with the schema given (no footer inference)  : {t_pqs:6.2f}s  ratio {t_pqs / t_auto:.2f}x")
    print(f"  once per session: planning + CRC-32 of all {len(files)} files ({size / 1e6:.0f} MB): {t_verify:.2f}s "
          f"({size / 1e6 / t_verify:.0f} MB/s)")
    print(f"full scan + agg, engine='statekit' (Python source): {t_ds:6.2f}s  {args.keys / t_ds / 1e6:6.2f} M rows/s"
          f"  ratio {t_pq / t_ds:.2f}x")

    key = args.keys // 2 + 1
    kg = assign_to_key_group(key, MAX_PARALLELISM, "bigint")
    covering = [f.path for f in files if f.covers(kg)]
    for engine in ("auto", "statekit"):
        lookup = reader.read_keyed_state("accounts", engine=engine).where(f"key = {key}")
        t_pt, rows = timed(lambda: lookup.collect())
        touched = len(lookup.inputFiles()) if engine == "auto" else lookup.rdd.getNumPartitions()
        assert [r.key for r in rows] == [key]
        print(f"point lookup key={key} (key group {kg}), engine={engine}: {t_pt:.3f}s, read {touched} of "
              f"{len(files)} files (the {len(covering)} covering key group {kg})")
    t_pq_pt, _ = timed(lambda: spark.read.parquet(*paths).where(f"key = {key}").collect())
    print(f"  same lookup with spark.read.parquet (all files, row-group stats): {t_pq_pt:.3f}s")

    fn_df = reader.read_keyed_state("accounts", Negative(), output_schema="key bigint, balance bigint, negative boolean")
    t_fn, r_fn = timed(lambda: fn_df.agg(F.count("*").alias("n"), F.sum(F.col("negative").cast("int"))).collect()[0],
                       repeat=1)
    assert r_fn.n == args.keys
    print(f"reader function path: {t_fn:.2f}s  {args.keys / t_fn / 1e3:.0f} k rows/s "
          f"({t_fn / t_auto:.1f}x the columnar read's time)")
    spark.stop()


if __name__ == "__main__":
    main()
