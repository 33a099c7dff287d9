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

    python bench/flink_sql_write.py [--rows N] [--ttl-rows N] [--repeat R] [--skip-java]

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


def ttl_savepoint(rows: int) -> Path:
    """The TTL case, made with real Flink on first use (in this bench's own cache: its own generator copy)."""
    case = WRITE_CACHE / f"sql-rocksdb-{rows}-ttl"
    if not (case / "savepoint" / "_metadata").exists():
        tmp = WRITE_CACHE / f"sql-rocksdb-{rows}-ttl.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        R.run_java("BenchJob", str(tmp), str(rows), "rocksdb", "1 d")
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
    ap.add_argument("--ttl-rows", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-java", action="store_true")
    args = ap.parse_args()
    from statekit.savepoint import Savepoint
    from statekit.savepoint.patch import SetValue, repair

    read_case = R.CACHE / f"sql-rocksdb-{args.rows}"  # the read bench's case when it was made already
    R.CACHE = WRITE_CACHE  # every JVM of this bench runs from its own generator copy
    case = read_case if (read_case / "savepoint" / "_metadata").exists() else R.savepoint(args.rows, "rocksdb")
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

        ttl_case = ttl_savepoint(args.ttl_rows)
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


if __name__ == "__main__":
    main()
