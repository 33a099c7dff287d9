"""Writing Flink savepoints: statekit against Flink's Java State Processor API bootstrap, timed in one invocation.

The shape of Flink's own anchor (`../shared/flink/generator/bench.sh`): N Long keys (default 10M), two
`ValueState<Long>` ``a`` = key and ``b`` = 2*key+1, max parallelism 128, parallelism 2, canonical savepoint.

  * Java: `Bench bootstrap` (SavepointWriter from ``fromSequence``, HashMap backend), one JVM, -Xmx8g;
  * Spark: ``SavepointWriter.new_savepoint(spark).with_operator("bench", key_by("key").columns(a, b))
    .write(out, format="flink")`` from ``spark.range(N)`` (state files written by Spark tasks, in the JVM:
    `statekit.spark.flink_jvm`);
  * local: ``write_flink`` (what ``statekit convert --to flink`` runs) of the same state from a statekit
    savepoint, in-process, and the whole ``statekit convert --to flink`` command as a fresh process.

Each statekit output is checked (row count, sums of a and b, one key) before its time is printed. Prints
seconds, keys/s and the ratio against the Java bootstrap of the same run; the load average is printed
too (other work on the machine moves every figure). Usage: ``python bench/flink_write.py [--keys N]
[--skip-java] [--skip-spark]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "flink"))

import flink_harness  # noqa: E402
from processes import installed_env  # noqa: E402

from statekit.savepoint import Savepoint, SavepointBuilder  # noqa: E402
from statekit.savepoint.flink_out import write_flink  # noqa: E402
from statekit.state import ValueStateDescriptor  # noqa: E402

A, B = ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "bigint")


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def check(path: Path, n: int) -> None:
    """The Flink savepoint at `path` holds exactly the bench state (read back with statekit's Flink reader)."""
    sp = Savepoint.open(path)
    t = sp.keyed_table("bench")
    a = t.column("a").to_numpy()
    b = t.column("b").to_numpy()
    assert t.num_rows == n, (t.num_rows, n)
    assert int(a.sum()) == n * (n - 1) // 2 and int(b.sum()) == n * n, "wrong sums"
    k = n // 2
    assert sp.get("bench", k) == {"a": k, "b": 2 * k + 1}


def java_bootstrap(out: Path, n: int) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(flink_harness.java_command("statekit.flinkreal.Bench", "bootstrap", str(out), str(n),
                                                     heap="8g"), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"Java bootstrap failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    print(f"  {line}")
    return wall


def statekit_source(path: Path, n: int) -> None:
    """The same state as a statekit savepoint (the input of the conversion; not timed)."""
    keys = np.arange(n, dtype=np.int64)
    with SavepointBuilder(path) as b:
        op = b.add_operator("bench", parallelism=2, max_parallelism=128, key_type="bigint", keyed_states=[A, B])
        op.write_keyed(pa.table({"key": keys, "a": keys, "b": 2 * keys + 1}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--skip-java", action="store_true", help="no JVM anchor (ratios are then not printed)")
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args()
    n = args.keys
    work = Path(tempfile.mkdtemp(prefix="statekit-bench-flink-write-"))
    results: dict[str, float] = {}
    try:
        print(f"flink_write: {n:,} Long keys, two ValueState<Long>, max parallelism 128, parallelism 2 ({load()})")
        java = None
        if not args.skip_java:
            why = flink_harness.missing_tools()
            if why:
                print(f"  Java anchor skipped: {why}")
            else:
                flink_harness.build()
                java = java_bootstrap(work / "java", n)
                size = sum(p.stat().st_size for p in (work / "java").iterdir())
                print(f"Java SPA bootstrap (one JVM, MiniCluster, -Xmx8g): {java:.2f} s, {n / java / 1e3:.0f} k keys/s, "
                      f"{size / 1e6:.0f} MB ({load()})")
                shutil.rmtree(work / "java")

        if not args.skip_spark:
            from statekit.spark import OperatorTransformation, SavepointWriter, spark_session

            spark = spark_session()
            df = spark.range(n, numPartitions=2).selectExpr("id AS key", "id AS a", "2 * id + 1 AS b").cache()
            df.count()
            # the first write starts Spark's Python workers (imports included); the second reuses them, as
            # every later write of a long-lived session does
            for what in ("Spark bootstrap (DataFrame -> Flink savepoint), first write of the session",
                         "Spark bootstrap, second write (Python workers already started)"):
                t0 = time.perf_counter()
                (SavepointWriter.new_savepoint(spark, max_parallelism=128)
                 .with_operator("bench", OperatorTransformation.bootstrap_with(df, parallelism=2).key_by("key")
                                .columns(A, B))
                 .write(work / "spark", format="flink"))
                results[what] = time.perf_counter() - t0
                print(f"{what}: {results[what]:.2f} s ({load()})")
                check(work / "spark", n)
                shutil.rmtree(work / "spark")
            spark.stop()

        statekit_source(work / "sk", n)
        t0 = time.perf_counter()
        write_flink(work / "sk", work / "local")
        results["local write_flink (statekit savepoint -> Flink), in-process"] = time.perf_counter() - t0
        check(work / "local", n)
        shutil.rmtree(work / "local")
        exe = Path(sys.executable).with_name("statekit")
        t0 = time.perf_counter()
        proc = subprocess.run([str(exe), "convert", "--to", "flink", str(work / "sk"), str(work / "cli")],
                              capture_output=True, text=True, env=installed_env())
        if proc.returncode == 0:
            results["statekit convert --to flink (whole process)"] = time.perf_counter() - t0
            check(work / "cli", n)
        else:
            print(f"  statekit convert --to flink failed: {proc.stderr.strip()[-500:]}")

        for what, sec in results.items():
            ratio = f", {java / sec:.1f}x faster than the Java bootstrap" if java else ""
            print(f"{what}: {sec:.2f} s, {n / sec / 1e6:.2f} M keys/s{ratio}")
        print(f"({load()}; figures move with other work on the machine)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
