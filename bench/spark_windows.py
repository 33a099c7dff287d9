"""Spark window-state benchmark: window bootstrap and read_window_state against plain Spark doing the same work.

Prints, in one run on one session, for N click rows (``user bigint, ts bigint``, 100k users, one
hour of one-minute tumbling windows):
  * window bootstrap with ``aggregate(ClickCounter())`` (rows assigned to windows and counted in
    Python per row, state written as a savepoint) against the same counts computed by plain Spark
    (``groupBy(user, window).count()``) and written as Parquet;
  * ``read_window_state(op)`` (columnar) and with a `WindowReaderFunction`, against
    ``spark.read.parquet`` of those counts.

Usage: ``python bench/spark_windows.py [--rows N]``. Output goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from statekit.runtime import TumblingEventTimeWindows
from statekit.spark import OperatorTransformation, SavepointReader, SavepointWriter, WindowReaderFunction, spark_session
from statekit.testing import ClickCounter

MINUTE = 60_000


class Counts(WindowReaderFunction):
    def read_window(self, key, ctx, elements):
        yield key, ctx.window.start, next(iter(elements))


def timed(fn):
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.rows
    spark = spark_session()
    out = Path(tempfile.mkdtemp(prefix="statekit-bench-windows-"))
    try:
        clicks = spark.range(n).selectExpr("(id * 7919) % 100000 AS user", "(id * 104729) % 3600000 AS ts").cache()
        clicks.count()
        bootstrap = (OperatorTransformation.bootstrap_with(clicks).key_by("user")
                     .window(TumblingEventTimeWindows.of(MINUTE), timestamp="ts")
                     .aggregate(ClickCounter(), accumulator_type="bigint"))  # fmt: skip
        small = OperatorTransformation.bootstrap_with(clicks.limit(1000)).key_by("user").window(
            TumblingEventTimeWindows.of(MINUTE), timestamp="ts").aggregate(ClickCounter(), accumulator_type="bigint")
        SavepointWriter.new_savepoint(spark).with_operator("warm", small).write(out / "warm")  # Python workers up

        plain = clicks.groupBy("user", (F.col("ts") - F.col("ts") % MINUTE).alias("start")).count()
        t_base, _ = timed(lambda: plain.write.parquet(str(out / "counts.parquet")))
        t_boot, _ = timed(lambda: SavepointWriter.new_savepoint(spark).with_operator("clicks", bootstrap).write(out / "sp"))
        reader = SavepointReader.read(spark, out / "sp")
        windows = reader.read_window_state("clicks")
        t_read_base, base_total = timed(lambda: spark.read.parquet(str(out / "counts.parquet")).agg(F.sum("count")).first()[0])
        t_cols, total = timed(lambda: windows.agg(F.sum("contents")).first()[0])
        t_cols, total = timed(lambda: windows.agg(F.sum("contents")).first()[0])  # warm
        fn = reader.read_window_state("clicks", Counts(), aggregate_function=ClickCounter(),
                                      output_schema="user bigint, start bigint, clicks bigint")  # fmt: skip
        t_fn, fn_total = timed(lambda: fn.agg(F.sum("clicks")).first()[0])
        n_windows = windows.count()
        assert total == fn_total == base_total == n, (total, fn_total, base_total)
        print(f"{n:,} clicks -> {n_windows:,} pending (user, minute) windows")
        print(f"plain Spark groupBy count + write parquet (baseline): {t_base:6.2f}s  {n / t_base / 1e6:6.2f} M rows/s")
        print(f"window bootstrap (aggregate), savepoint written      : {t_boot:6.2f}s  {n / t_boot / 1e6:6.2f} M rows/s"
              f"  ratio {t_base / t_boot:.2f}x")
        print(f"spark.read.parquet of the counts + sum (baseline)    : {t_read_base:6.2f}s  "
              f"{n_windows / t_read_base / 1e6:6.2f} M windows/s")
        print(f"read_window_state, columnar + sum                    : {t_cols:6.2f}s  "
              f"{n_windows / t_cols / 1e6:6.2f} M windows/s  ratio {t_read_base / t_cols:.2f}x")
        print(f"read_window_state, WindowReaderFunction + sum        : {t_fn:6.2f}s  "
              f"{n_windows / t_fn / 1e3:6.0f} k windows/s  ratio {t_read_base / t_fn:.2f}x")
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
