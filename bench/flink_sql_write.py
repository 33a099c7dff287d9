"""Writing a real Flink SQL job's savepoint back: one-key `set` and `prune-expired` as whole processes.

Savepoints come from real Flink 2.3.0 through the read bench's job (`bench/flink_sql/BenchJob.java`, two group
aggregates over N distinct BIGINT ids and N distinct STRING names, RocksDB, canonical): the plain one is the read
bench's cached case (``~/.cache/statekit/flink-sql-bench``), the TTL one (``table.exec.state.ttl = 1 d``) is made
once in ``~/.cache/statekit/flink-sql-write-bench`` (override: STATEKIT_FLINK_SQL_WRITE_BENCH_DIR). Measured in
one invocation:

* ``statekit set SRC TGT --uid <GROUP BY id> --key 42 --state cnt --value 10 --plan plan.json --apply`` as a whole
  process (import, open, plan, write), and how many output files are hard links of the source's (untouched
  operators are carried, never copied through Python); the library call in-process
* ``statekit prune-expired`` on the TTL case with ``--now`` half-way through the keys' last-access times
* baselines in the same run: ``cp -r`` of the savepoint (what any full copy costs) and, unless ``--skip-java``,
  Flink's State Processor API ``readKeyedState`` of the edited operator (`BenchRead.java`): reading that one
  operator is the least an SPA-based repair does before it writes anything

* the SQL bootstrap (``--bootstrap``): the ``GROUP BY id`` aggregate's state (``COUNT(*), SUM(amount),
  MAX(amount)``) from a table of K rows with K distinct ids (BenchJob's input; with ``--rows-per-key R`` each id R
  times, so that the hash aggregation runs) written into a template of the bench
  job taken with no input (BenchJob over 0 rows), by ``statekit.savepoint.sql_bootstrap.bootstrap_sql`` (pyarrow)
  and by ``statekit.spark.bootstrap_sql`` (a local Spark session reading the same rows from Parquet), against the
  Java State Processor API's bootstrap of the same keyed state (`BenchBootstrap.java`: SavepointWriter, BinaryRowData
  keys, RowData accumulators) timed in the same invocation

    python bench/flink_sql_write.py [--rows N] [--backend rocksdb|hashmap] [--ttl-rows N] [--ttl-backend B]
                                    [--repeat R] [--skip-java]
    python bench/flink_sql_write.py --bootstrap [--keys K] [--rows-per-key R] [--spark-keys K] [--repeat R] [--skip-java]

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flink_sql_read as R  # noqa: E402  the read bench's job, build and cache

WRITE_CACHE = Path(os.environ.get("STATEKIT_FLINK_SQL_WRITE_BENCH_DIR",
                                  Path.home() / ".cache" / "statekit" / "flink-sql-write-bench"))
STATEKIT = str(Path(sys.executable).with_name("statekit"))


def ttl_savepoint(rows: int, backend: str = "rocksdb") -> Path:
    """The TTL case, made with real Flink on first use (in this bench's own cache: its own generator copy)."""
    case = WRITE_CACHE / f"sql-{backend}-{rows}-ttl"
    if not (case / "savepoint" / "_metadata").exists():
        tmp = WRITE_CACHE / f"sql-{backend}-{rows}-ttl.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        R.run_java("BenchJob", str(tmp), str(rows), backend, "1 d")
        shutil.rmtree(case, ignore_errors=True)
        tmp.rename(case)
        print(f"made {case} with real Flink in {time.perf_counter() - t0:.0f} s")
    return case


CPU: list[float] = []  # CPU seconds (user + system) of each process run


def process(args: list[str]) -> float:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([STATEKIT, *args], capture_output=True, text=True)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if out.returncode:
        raise SystemExit(f"statekit {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return took


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--backend", choices=("rocksdb", "hashmap"), default="rocksdb",
                    help="state backend of the read bench's savepoint that `set` edits")
    ap.add_argument("--ttl-rows", type=int, default=500_000)
    ap.add_argument("--ttl-backend", choices=("rocksdb", "hashmap"), default="rocksdb",
                    help="state backend of the TTL savepoint prune-expired reads (made on first use)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-java", action="store_true")
    ap.add_argument("--bootstrap", action="store_true", help="only the SQL bootstrap bench")
    ap.add_argument("--keys", type=int, default=10_000_000, help="keys of the SQL bootstrap")
    ap.add_argument("--template-rows", type=int, default=1000, help="rows the bench job's template saw")
    ap.add_argument("--rows-per-key", type=int, default=1,
                    help="input rows per key of the SQL bootstrap (above 1 the hash aggregation runs)")
    ap.add_argument("--spark-keys", type=int, default=None, help="keys of the Spark bootstrap (default --keys; 0: skip)")
    args = ap.parse_args()
    if args.bootstrap:
        bootstrap_bench(args)
        return
    from statekit.savepoint import Savepoint
    from statekit.savepoint.patch import SetValue, repair

    read_case = R.CACHE / f"sql-{args.backend}-{args.rows}"  # the read bench's case when it was made already
    R.CACHE = WRITE_CACHE  # every JVM of this bench runs from its own generator copy
    case = read_case if (read_case / "savepoint" / "_metadata").exists() else R.savepoint(args.rows, args.backend)
    sp_path, plan = case / "savepoint", case / "plan.json"
    sp = Savepoint.open(sp_path, plan=plan)
    by_id = next(m for m in sp.operators if sp.operator_kind(m.identifier) == "group aggregate"
                 and "bigint" in (m.key_type or ""))
    print(f"savepoint {sp_path}: {size(sp_path) / 1e6:.0f} MB, {args.rows:,} keys per operator, load {R.load()}")
    scratch = Path(tempfile.mkdtemp(prefix="statekit-sql-write-bench-"))
    try:
        times, linked, total = [], 0, 0
        for i in range(args.repeat):
            target = scratch / f"set-{i}"
            times.append(process(["set", str(sp_path), str(target), "--uid", by_id.uid, "--key", "42", "--state",
                                  "cnt", "--value", "10", "--plan", str(plan), "--apply"]))
            files = [p for p in target.rglob("*") if p.is_file()]
            linked, total = sum(p.stat().st_nlink > 1 for p in files), len(files)
            if i:
                shutil.rmtree(target)
        got = Savepoint.open(scratch / "set-0", plan=plan).get(by_id.uid, 42)["accState"]
        assert got["count1"] == 10, got
        print(f"one-key set as a whole process (statekit set ... --apply): best {min(times):.2f} s, all "
              f"{', '.join(f'{t:.2f}' for t in times)} s (CPU {', '.join(f'{c:.2f}' for c in CPU[-len(times):])} s); "
              f"{linked} of {total} output files hard-linked from the source; load {R.load()}")
        t0 = time.perf_counter()
        repair(sp_path, scratch / "lib", [SetValue(by_id.uid, 42, "cnt", 11)], plan=plan)
        print(f"one-key set in-process (patch.repair): {time.perf_counter() - t0:.2f} s")
        t0 = time.perf_counter()
        subprocess.run(["cp", "-r", str(sp_path), str(scratch / "copy")], check=True)
        print(f"baseline cp -r of the savepoint: {time.perf_counter() - t0:.2f} s")
        if not args.skip_java:
            t0 = time.perf_counter()
            line = next(ln for ln in R.run_java("BenchRead", str(sp_path), by_id.uid_hash, "hashmap").splitlines()
                        if "RESULT" in ln)
            seconds = float(line.split("seconds=")[1].split()[0])
            print(f"baseline Flink State Processor API readKeyedState of that operator: {seconds:.2f} s in the JVM "
                  f"({time.perf_counter() - t0:.2f} s as a process); statekit's whole set is "
                  f"{seconds / min(times):.1f}x faster than the SPA's read alone")
        shutil.rmtree(scratch / "copy", ignore_errors=True)
        shutil.rmtree(scratch / "lib", ignore_errors=True)

        ttl_case = ttl_savepoint(args.ttl_rows, args.ttl_backend)
        tsp_path = ttl_case / "savepoint"
        tsp = Savepoint.open(tsp_path)
        agg = next(m for m in tsp.operators if m.key_type is not None and "bigint" in m.key_type)
        import pyarrow.compute as pc

        last = pc.struct_field(tsp.keyed_table(agg.identifier).column("accState"), "last_access")
        now = int(pc.approximate_median(last).as_py()) + 86_400_000
        times = []
        for i in range(args.repeat):
            times.append(process(["prune-expired", str(tsp_path), str(scratch / f"prune-{i}"), "--now", str(now),
                                  "--ttl", "1 d", "--apply"]))
            shutil.rmtree(scratch / f"prune-{i}")
        print(f"prune-expired as a whole process on {tsp_path} ({size(tsp_path) / 1e6:.0f} MB, {args.ttl_rows:,} keys "
              f"per operator, half of them expired): best {min(times):.2f} s, all "
              f"{', '.join(f'{t:.2f}' for t in times)} s (CPU {', '.join(f'{c:.2f}' for c in CPU[-len(times):])} s); "
              f"load {R.load()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def bootstrap_bench(args: argparse.Namespace) -> None:
    """statekit's SQL bootstrap (local, Spark) against the Java SPA's bootstrap of the same keyed state."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from statekit.savepoint import Savepoint
    from statekit.savepoint.sql_bootstrap import bootstrap_sql

    R.CACHE = WRITE_CACHE
    # The template: the bench job over a few rows (over none, BenchJob triggers its savepoint before every task runs
    # and waits forever), so its operators hold those rows' keys and the bootstrap replaces them (replace=True).
    case = R.savepoint(args.template_rows, "hashmap")
    template, plan = case / "savepoint", case / "plan.json"
    sp = Savepoint.open(template, plan=plan)
    by_id = next(m for m in sp.operators if sp.operator_kind(m.identifier) == "group aggregate"
                 and "bigint" in (m.key_type or ""))
    n, per = args.keys, args.rows_per_key
    ids = np.arange(n, dtype=np.int64)
    if per > 1:  # every key `per` times, the copies far apart (as history arrives)
        ids = np.tile(ids, per)
    table = pa.table({"id": ids, "amount": ids % 1000})
    print(f"template {template} (operator {by_id.uid}, max parallelism {by_id.max_parallelism}, parallelism "
          f"{by_id.parallelism}); {len(ids):,} rows, {n:,} keys; load {R.load()}")
    scratch = Path(tempfile.mkdtemp(prefix="statekit-sql-bootstrap-bench-"))
    try:
        import resource

        times, cpus = [], []
        for i in range(args.repeat):
            target = scratch / f"local-{i}"
            before = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            bootstrap_sql(table, template, target, operator=by_id.uid, plan=plan, replace=True)
            times.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if i:
                shutil.rmtree(target)
        out = Savepoint.open(scratch / "local-0", plan=plan)
        got = out.get(by_id.uid, 4242)["accState"]
        assert (got["count1"], got["sum"], got["max"]) == (per, 242 * per, 242), got
        print(f"statekit bootstrap_sql (pyarrow, in-process) of {n:,} keys: best {min(times):.2f} s, all "
              f"{', '.join(f'{t:.2f}' for t in times)} s (CPU {', '.join(f'{c:.2f}' for c in cpus)} s); "
              f"{size(scratch / 'local-0') / 1e6:.0f} MB; load {R.load()}")
        spark_keys = n if args.spark_keys is None else args.spark_keys
        spark_best = None
        if spark_keys:
            from statekit.spark import bootstrap_sql as spark_bootstrap
            from statekit.spark import spark_session

            pq.write_table(table.slice(0, spark_keys), scratch / "rows.parquet")
            spark = spark_session(**{"spark.sql.shuffle.partitions": str(os.cpu_count() or 2)})
            df = spark.read.parquet(str(scratch / "rows.parquet"))
            stimes = []
            for i in range(args.repeat):
                t0 = time.perf_counter()
                spark_bootstrap(df, template, scratch / f"spark-{i}", operator=by_id.uid, plan=plan, replace=True)
                stimes.append(time.perf_counter() - t0)
                shutil.rmtree(scratch / f"spark-{i}")
            spark_best = min(stimes)
            print(f"statekit.spark.bootstrap_sql (local Spark, {spark.sparkContext.defaultParallelism} cores, session "
                  f"started) of {spark_keys:,} keys from Parquet: best {spark_best:.2f} s, all "
                  f"{', '.join(f'{t:.2f}' for t in stimes)} s; load {R.load()}")
        if not args.skip_java:
            jbefore = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            line = next(ln for ln in R.run_java("BenchBootstrap", str(scratch / "java"), str(n), by_id.uid,
                                                str(by_id.max_parallelism), str(by_id.parallelism)).splitlines()
                        if "RESULT" in ln)
            whole = time.perf_counter() - t0
            jafter = resource.getrusage(resource.RUSAGE_CHILDREN)
            jcpu = jafter.ru_utime - jbefore.ru_utime + jafter.ru_stime - jbefore.ru_stime
            seconds = float(line.split("seconds=")[1].split()[0])
            java = Savepoint.open(scratch / "java")
            jgot = java.get(by_id.uid, 4242)["accState"]
            assert jgot["f0"] == 1 and jgot["f1"] == 242, jgot
            print(f"baseline Flink State Processor API bootstrap of the same keyed state (BenchBootstrap.java): "
                  f"{seconds:.2f} s in the JVM ({whole:.2f} s as a process, CPU {jcpu:.2f} s incl. Maven's class "
                  f"path check); load {R.load()}")
            print(f"ratio: statekit local {seconds / min(times):.1f}x the Java bootstrap in wall time, "
                  f"{jcpu / min(cpus):.1f}x in CPU time"
                  + (f", statekit Spark {seconds / spark_best:.1f}x" if spark_best and spark_keys == n else ""))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
