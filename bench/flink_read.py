"""Reading real Flink savepoints: statekit's numpy decoder against Flink's own State Processor API, in one run.

The savepoints are written once by Flink's State Processor API (the generator's `Bench` /
`BenchStr` classes: 10M keys, two ValueState<Long>, max parallelism 128, HashMap backend,
canonical) and cached in ~/.cache/statekit/flink-bench (override: STATEKIT_FLINK_BENCH_DIR).
Measured per savepoint (Long keys, String keys "key-" + k):

* full read to Arrow, in-process and as a whole fresh process (incl. ``import statekit``; warm page
  cache, and with ``--cold`` once after the savepoint's files were evicted from it)
* one-key ``get``, in-process and as a whole process
* conversion to statekit's format (``statekit.savepoint.convert.convert_to_statekit``)
* a full Spark aggregate (``--spark``)
* the Java SPA full read (``Bench read``) of the same savepoint, timed in this invocation
  (``--skip-java`` for quick runs; the ratios are then not printed)

    python bench/flink_read.py [--keys N] [--skip-java] [--spark] [--only long|string] [--cold]

The machine is shared: numbers move with load, which is printed with them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import best, load, private_copy  # bench/ is on sys.path when run as a script
from processes import installed_env

# Shared material lives beside the checkout (`../shared/`), wherever the checkout is.
GENERATOR = Path(os.environ.get("STATEKIT_FLINK_GENERATOR")
                 or Path(__file__).resolve().parents[1].parent / "shared" / "flink" / "generator")
CACHE = Path(os.environ.get("STATEKIT_FLINK_BENCH_DIR", Path.home() / ".cache" / "statekit" / "flink-bench"))
JAVA_OPTS = os.environ.get("BENCH_JAVA_OPTS", "-Xmx6g")
KINDS = {"long": ("Bench", 4242424), "string": ("BenchStr", "key-4242424")}


def generator() -> Path:
    """A private copy of the generator (never build inside the shared, read-only one)."""
    dst = CACHE / "generator"
    private_copy(GENERATOR, dst)
    return dst


def run_java(cls: str, *args: str, xmx: str = JAVA_OPTS) -> tuple[float, str]:
    gen = generator()
    env = dict(os.environ, FLINKBUILD_DIR=str(CACHE / "build"), JAVA_OPTS=xmx)
    if (CACHE / "build" / "classpath.txt").exists():
        env["SKIP_BUILD"] = "1"
    t0 = time.perf_counter()
    out = subprocess.run(["bash", str(gen / "run.sh"), cls, *args], env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    found = re.search(r"RESULT mode=.*", out.stdout)  # the JVM's log colouring may precede it on its line
    line = found.group(0) if found else None
    if out.returncode != 0 or line is None:
        raise SystemExit(f"Java {cls} {args} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return dt, line


def savepoint(kind: str, n: int) -> Path:
    cls, _ = KINDS[kind]
    sp = CACHE / f"sp-{kind}-{n}"
    if not (sp / "_metadata").exists():
        tmp = CACHE / f"sp-{kind}-{n}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        print(f"building {sp} with Flink's SavepointWriter ({cls} bootstrap, once) ...", flush=True)
        dt, line = run_java(cls, "bootstrap", str(tmp), str(n), xmx="-Xmx4g")
        print(f"  {line} ({dt:.1f} s)", flush=True)
        tmp.rename(sp)
    return sp


CPU = {"user": 0.0, "sys": 0.0}  # the CPU time of the last `whole_process` child
ENV = installed_env()  # children run as an installed statekit does (bytecode cached; see bench/processes.py)


def whole_process(code: str) -> float:
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=ENV)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.update(user=r1.ru_utime - r0.ru_utime, sys=r1.ru_stime - r0.ru_stime)
    return dt


def evict(sp_path: Path) -> None:
    """Drop the savepoint's files (only them) from the page cache: the next read is a cold one."""
    for p in sp_path.iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def bench_one(kind: str, n: int, *, java: bool, spark: bool, cold: bool = False) -> None:
    from statekit.savepoint import Savepoint

    sp_path = savepoint(kind, n)
    size = sum(p.stat().st_size for p in sp_path.iterdir())
    key = KINDS[kind][1]
    print(f"\n== {kind} keys: {sp_path} ({size / 1e6:.0f} MB, {n:,} keys), load {load()}", flush=True)

    def full():
        sp = Savepoint.open(sp_path)
        return sp, sp.keyed_table("bench")

    t_full, (sp, table) = best(full, 2)
    assert table.num_rows == n, table.num_rows
    sums = {c: table.column(c).to_numpy().sum() for c in ("a", "b")}
    assert sums["a"] == n * (n - 1) // 2 and sums["b"] == n * n, sums
    print(f"full read (in-process): {t_full:.2f} s  {n / t_full / 1e6:.1f} M keys/s  [{sp.stats.describe()}]")
    code_full = (f"from statekit.savepoint import Savepoint; t = Savepoint.open({str(sp_path)!r}).keyed_table('bench'); "
                 f"assert t.num_rows == {n}")
    if cold:
        evict(sp_path)
        t_cold = whole_process(code_full)
        print(f"full read (whole process incl. import), cold page cache (files evicted): {t_cold:.2f} s "
              f"(user {CPU['user']:.2f} s, sys {CPU['sys']:.2f} s)")
    runs = []
    for _ in range(3):
        runs.append((whole_process(code_full), CPU["user"], CPU["sys"]))
    t_full_proc = min(r[0] for r in runs)
    print(f"full read (whole process incl. import), warm page cache: {t_full_proc:.2f} s best of 3 "
          f"(all: {', '.join(f'{w:.2f} s (user {u:.2f}, sys {y:.2f})' for w, u, y in runs)})")

    def one():
        return Savepoint.open(sp_path).get("bench", key)

    t_one, got = best(one, 5)
    assert got is not None and got["a"] == int(str(key).removeprefix("key-")), got
    code_one = f"from statekit.savepoint import Savepoint; assert Savepoint.open({str(sp_path)!r}).get('bench', {key!r})"
    one_runs = []
    for _ in range(3):
        one_runs.append((whole_process(code_one), CPU["user"] + CPU["sys"]))
    t_one_proc = min(r[0] for r in one_runs)
    print(f"one key get: {t_one * 1000:.1f} ms in-process, {t_one_proc:.2f} s whole process best of 3 "
          f"(all: {', '.join(f'{w:.2f} s (cpu {c:.2f})' for w, c in one_runs)})")

    from statekit.savepoint.convert import convert_to_statekit

    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        t0 = time.perf_counter()
        convert_to_statekit(sp_path, Path(tmp) / "out", uids=["bench"])
        t_conv = time.perf_counter() - t0
        conv_rows = Savepoint.open(Path(tmp) / "out").keyed_table("bench").num_rows
    assert conv_rows == n
    print(f"conversion to statekit format: {t_conv:.2f} s  {n / t_conv / 1e6:.1f} M keys/s")

    t_spark = None
    if spark:
        from statekit.spark import SavepointReader, spark_session

        session = spark_session()
        reader = SavepointReader.read(session, str(sp_path))
        reader.read_keyed_state("bench").agg({"a": "sum"}).collect()  # warm up (JVM, Python workers)
        t0 = time.perf_counter()
        row = reader.read_keyed_state("bench").agg({"a": "sum", "b": "sum"}).collect()[0]
        t_spark = time.perf_counter() - t0
        assert row["sum(a)"] == sums["a"], row
        print(f"Spark aggregate sum(a), sum(b) over the Flink savepoint: {t_spark:.2f} s")
        session.stop()

    if java:
        print(f"Java SPA full read ({KINDS[kind][0]} read, {JAVA_OPTS}), load before {load()} ...", flush=True)
        t_java, line = run_java(KINDS[kind][0], "read", str(sp_path))
        print(f"  {line}  jvm wall {t_java:.1f} s, load after {load()}")
        print(f"ratios vs Java full read: full read {t_java / t_full:.0f}x in-process, "
              f"{t_java / t_full_proc:.0f}x whole process; one key {t_java / t_one_proc:.0f}x whole process; "
              f"conversion {t_java / t_conv:.0f}x" + (f"; Spark aggregate {t_java / t_spark:.0f}x" if t_spark else ""))
    else:
        print("Java SPA timing skipped (--skip-java): no ratios printed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--skip-java", action="store_true", help="do not time Flink's Java SPA (quick runs)")
    ap.add_argument("--spark", action="store_true", help="also time a Spark aggregate")
    ap.add_argument("--only", choices=sorted(KINDS))
    ap.add_argument("--cold", action="store_true",
                    help="also time one whole-process full read after evicting the savepoint's files from the page cache")
    ap.add_argument("--build-only", action="store_true", help="only build (and cache) the savepoints")
    args = ap.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    kinds = [args.only] if args.only else list(KINDS)
    if args.build_only:
        for k in kinds:
            savepoint(k, args.keys)
        return
    print(f"load average at start: {os.getloadavg()}")
    for k in kinds:
        bench_one(k, args.keys, java=not args.skip_java, spark=args.spark, cold=args.cold)


if __name__ == "__main__":
    main()
