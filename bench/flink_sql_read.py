"""Reading a real Flink SQL job's savepoint: statekit's physical and logical tables against a Parquet scan of the same rows.

The savepoint is written once by real Flink 2.3.0 and cached in ~/.cache/statekit/flink-sql-bench
(override: STATEKIT_FLINK_SQL_BENCH_DIR): the job `bench/flink_sql/BenchJob.java`, built inside a
private copy of the SQL generator (``../shared/flink/sql/generator``), runs from its compiled plan
over N rows with N distinct BIGINT ids and N distinct STRING names (``GROUP BY id`` and ``GROUP BY
name``, each ``COUNT(*), SUM(amount), MAX(amount)``; parallelism 2, max parallelism 128, RocksDB
backend by default, canonical savepoint). Measured in one invocation, per operator:

* ``Savepoint.open`` with the plan, full physical read to Arrow (``keyed_table``), full logical read
  (``logical_table``, from a fresh open: decoding included), rows/s; the decoding path per state
* the baseline, timed in the same run: a pyarrow scan of the same physical rows written once as an
  uncompressed Parquet file (what reading this state would cost if it were already a columnar table)
* one-key ``get`` in-process, and as a whole fresh process (``python -c``: import, open, get)
* with ``--spark``: a Spark aggregate over each operator's keyed and logical tables
  (``SavepointReader.read(spark, path, plan=)``), Spark's start not included
* unless ``--skip-java``: Flink's State Processor API ``readKeyedState`` of the same operator
  (`bench/flink_sql/BenchRead.java`: key and accumulator serializers restored from the savepoint's
  snapshots, every key's COUNT(*) emitted and summed), timed in the same invocation

    python bench/flink_sql_read.py [--rows N] [--backend rocksdb|hashmap] [--skip-java] [--spark]

The machine is shared: numbers move with load, which is printed with them.
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

from common import best, load, private_copy  # bench/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = Path(os.environ.get("STATEKIT_FLINK_SQL_GENERATOR") or ROOT.parent / "shared" / "flink" / "sql" / "generator")
CACHE = Path(os.environ.get("STATEKIT_FLINK_SQL_BENCH_DIR", Path.home() / ".cache" / "statekit" / "flink-sql-bench"))
JAVA_OPTS = os.environ.get("BENCH_JAVA_OPTS", "-Xmx3g")


def generator() -> Path:
    """A private copy of the SQL generator with the bench job added (the shared one is never built in)."""
    dst = CACHE / "generator"
    if private_copy(GENERATOR, dst):
        services = dst / "src" / "main" / "resources" / "META-INF" / "services" / "org.apache.flink.table.factories.Factory"
        services.write_text(services.read_text().rstrip("\n") + "\nstatekit.flinksql.BenchJob$Factory\n")
    for job in sorted((ROOT / "bench" / "flink_sql").glob("*.java")):
        target = dst / "src" / "main" / "java" / "statekit" / "flinksql" / job.name
        if not target.exists() or target.read_bytes() != job.read_bytes():
            shutil.copyfile(job, target)
            (CACHE / "build" / "classpath.txt").unlink(missing_ok=True)  # run.sh compiles again (incremental)
    return dst


def run_java(cls: str, *args: str) -> str:
    """Run a class of the private generator copy (compiled first when its sources changed); its stdout."""
    gen = generator()
    env = dict(os.environ, FLINKBUILD_DIR=str(CACHE / "build"), JAVA_OPTS=JAVA_OPTS)
    if (CACHE / "build" / "classpath.txt").exists():
        env["SKIP_BUILD"] = "1"
    out = subprocess.run(["bash", str(gen / "run.sh"), cls, *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{cls} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def savepoint(rows: int, backend: str) -> Path:
    """The cached bench case (savepoint/ and plan.json), made with real Flink on first use."""
    case = CACHE / f"sql-{backend}-{rows}"
    if not (case / "savepoint" / "_metadata").exists():
        tmp = CACHE / f"sql-{backend}-{rows}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        out = run_java("BenchJob", str(tmp), str(rows), backend)
        shutil.rmtree(case, ignore_errors=True)
        tmp.rename(case)
        print(f"made {case} with real Flink in {time.perf_counter() - t0:.0f} s: "
              f"{[ln for ln in out.splitlines() if 'rows ' in ln]}")
    return case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="distinct keys per operator (default 10M)")
    ap.add_argument("--backend", default="rocksdb", choices=["rocksdb", "hashmap"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spark", action="store_true", help="also a Spark aggregate over the keyed and logical tables")
    ap.add_argument("--skip-java", action="store_true", help="do not time Flink's State Processor API (no ratios)")
    ap.add_argument("--java-backend", default="hashmap", choices=["rocksdb", "hashmap"],
                    help="the backend Flink's SPA restores the state into (hashmap: its faster one)")
    args = ap.parse_args()

    import pyarrow.parquet as pq

    from statekit.savepoint import Savepoint

    case = savepoint(args.rows, args.backend)
    sp_path, plan = case / "savepoint", case / "plan.json"
    size = sum(p.stat().st_size for p in sp_path.iterdir())
    print(f"savepoint {sp_path} ({size / 1e6:.0f} MB, {args.backend}, written by Flink 2.3.0), load {load()}")
    t_open, _ = best(lambda: Savepoint.open(sp_path, plan=plan), args.repeat)
    print(f"Savepoint.open with the plan: {t_open * 1000:.0f} ms")
    sp0 = Savepoint.open(sp_path, plan=plan)
    ops = {f"GROUP BY {m.key_type}": m.uid for m in sp0.operators if sp0.operator_kind(m.identifier) == "group aggregate"}
    scratch = Path(tempfile.mkdtemp(prefix="statekit-sql-bench-"))
    try:
        for label, op in ops.items():
            def physical():
                sp = Savepoint.open(sp_path, plan=plan)
                return sp, sp.keyed_table(op)

            def logical():
                return Savepoint.open(sp_path, plan=plan).logical_table(op)

            t_phys, (sp, table) = best(physical, args.repeat)  # type: ignore[misc]
            t_logic, ltable = best(logical, args.repeat)
            n = table.num_rows
            parquet = scratch / f"{op}.parquet"
            pq.write_table(table, parquet, compression="none")
            t_pq, _ = best(lambda: pq.read_table(parquet), args.repeat)
            key = ltable.slice(n // 2, 1).to_pylist()[0]  # type: ignore[union-attr]
            k = key[ltable.column_names[0]]  # type: ignore[union-attr]
            t_get, row = best(lambda: sp.get(op, k), args.repeat)
            code = (f"from statekit.savepoint import Savepoint; sp = Savepoint.open({str(sp_path)!r}, plan={str(plan)!r}); "
                    f"assert sp.get({op!r}, {k!r}) is not None")
            t_proc, _ = best(lambda: subprocess.run([sys.executable, "-c", code], check=True), args.repeat)
            print(f"\n{label}: operator {op}, {n:,} keys, load {load()}")
            print(f"  decoding path: {sp.stats.describe()}")
            print(f"  physical read (open + keyed_table): {t_phys:.2f} s = {n / t_phys / 1e6:.2f} M rows/s")
            print(f"  logical read (open + logical_table): {t_logic:.2f} s = {n / t_logic / 1e6:.2f} M rows/s "
                  f"columns {ltable.column_names}")  # type: ignore[union-attr]
            print(f"  baseline, pyarrow scan of the same rows as uncompressed Parquet ({parquet.stat().st_size / 1e6:.0f} MB): "
                  f"{t_pq:.2f} s = {n / t_pq / 1e6:.2f} M rows/s")
            print(f"  physical read / Parquet scan: {t_phys / t_pq:.1f}x the time")
            print(f"  one key ({k!r}): get in-process {t_get * 1000:.1f} ms; whole process (import, open, get) {t_proc:.2f} s; "
                  f"state {row}")
            if not args.skip_java:
                uid_hash = sp.operator(op).uid_hash
                t0 = time.perf_counter()
                line = next(ln for ln in run_java("BenchRead", str(sp_path), uid_hash, args.java_backend).splitlines()
                            if "RESULT" in ln)
                t_jvm = time.perf_counter() - t0
                seconds = float(line.split("seconds=")[1].split()[0])
                keys = int(line.split("keys=")[1].split()[0])
                print(f"  Java State Processor API readKeyedState ({args.java_backend} backend): {seconds:.2f} s in the JVM "
                      f"({t_jvm:.2f} s as a process) for {keys:,} keys = {keys / seconds / 1e6:.2f} M rows/s; "
                      f"statekit's physical read is {seconds / t_phys:.1f}x faster (JVM time), logical "
                      f"{seconds / t_logic:.1f}x")
        if args.spark:
            spark_aggregates(sp_path, plan, ops, args.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def spark_aggregates(sp_path: Path, plan: Path, ops: dict[str, str], repeat: int) -> None:
    """A full Spark aggregate over each operator's keyed table (``sum(accState.count1)``) and logical table (``sum(cnt)``)."""
    from pyspark.sql import functions as F

    from statekit.spark import SavepointReader, spark_session

    spark = spark_session()
    reader = SavepointReader.read(spark, str(sp_path), plan=plan)
    print(f"\nSpark aggregates (session started), load {load()}")
    for label, op in ops.items():
        t_keyed, keyed = best(lambda: reader.read_keyed_state(op).agg(F.count("*"), F.sum("accState.count1")).collect()[0],
                              repeat)
        t_logic, logic = best(lambda: reader.read_logical_table(op).agg(F.count("*"), F.sum("cnt")).collect()[0], repeat)
        print(f"  {label}: keyed table sum(count1) {t_keyed:.2f} s {tuple(keyed)}; logical table sum(cnt) "  # type: ignore[arg-type]
              f"{t_logic:.2f} s {tuple(logic)}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
