"""Reading a retained native RocksDB checkpoint of real Flink: statekit's full read and one-key get against raw rocksdict, in one run.

The checkpoint is written once by real Flink 2.3.0 (`tests/fixtures/flink/generator` class
`BigNativeJob`: N Long keys, ValueState<Long> a = key and b = 2*key+1, parallelism 2, max
parallelism 128, incremental RocksDB) and cached in ~/.cache/statekit/flink-native-bench
(override: STATEKIT_FLINK_NATIVE_BENCH_DIR). Measured:

* full read (``keyed_table``: copy of the SST files, RocksDB iteration, canonical re-layout, Arrow decode)
* one-key ``get`` on a freshly opened checkpoint (copy + seek to the key's key group)
* the baseline: raw rocksdict iteration over both column families of the same (already copied)
  databases, returning nothing - the floor of any rocksdict-based reader

    python bench/flink_native.py [--keys N]

The machine is shared: numbers move with load, which is printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import load  # bench/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "tests" / "fixtures" / "flink" / "generator"
CACHE = Path(os.environ.get("STATEKIT_FLINK_NATIVE_BENCH_DIR", Path.home() / ".cache" / "statekit" / "flink-native-bench"))


def checkpoint(n: int) -> Path:
    """The cached chk-N directory of an N-key checkpoint (made with real Flink on first use)."""
    out = CACHE / f"keys-{n}"
    if not (out / "checkpoint.txt").exists():
        env = dict(os.environ, FLINKBUILD_DIR=str(CACHE / "build"), JAVA_OPTS=os.environ.get("BENCH_JAVA_OPTS", "-Xmx3g"))
        print(f"writing a {n}-key native checkpoint with Flink (once) ...", flush=True)
        subprocess.run([str(GENERATOR / "run.sh"), "BigNativeJob", str(out), str(n)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    name = (out / "checkpoint.txt").read_text().split()[0]
    return out / "job" / name


def raw_baseline(chk: Path) -> tuple[float, int]:
    """Iterate every column family of every subtask's database with rocksdict (copies made beforehand)."""
    import rocksdict

    from statekit.format.flink.files import StateFiles
    from statekit.format.flink.metadata import IncrementalKeyedHandle, read_metadata
    from statekit.format.flink.native import NativeDatabases

    md = read_metadata(chk)
    files = StateFiles(md.path)
    handles = [st.managed_keyed for op in md.operators for st in op.subtasks
               if isinstance(st.managed_keyed, IncrementalKeyedHandle)]
    dbs = NativeDatabases()
    try:
        opened = [dbs.get(files, h) for h in handles]
        t0 = time.perf_counter()
        n = 0
        for db, present, _ in opened:
            for name in present:
                if name == "default":
                    continue
                it = db.get_column_family(name).iter()
                it.seek_to_first()
                while it.valid():
                    it.key()
                    it.value()
                    n += 1
                    it.next()
        return time.perf_counter() - t0, n
    finally:
        dbs.close()
        del rocksdict


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    args = ap.parse_args()
    chk = checkpoint(args.keys)
    from statekit.savepoint import Savepoint

    scratch = Path(tempfile.mkdtemp(prefix="statekit-bench-"))
    tempfile.tempdir = str(scratch)
    try:
        base_s, entries = raw_baseline(chk)
        t0 = time.perf_counter()
        sp = Savepoint.open(chk)
        table = sp.keyed_table("values")
        full_s = time.perf_counter() - t0
        assert table.num_rows == args.keys
        del sp
        t0 = time.perf_counter()
        got = Savepoint.open(chk).get("values", 424242 % args.keys)
        get_s = time.perf_counter() - t0
        assert got == {"a": 424242 % args.keys, "b": 2 * (424242 % args.keys) + 1}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"native RocksDB checkpoint, {args.keys} keys, {entries} entries (load {load()})")
    print(f"  raw rocksdict iteration (baseline): {base_s:6.2f} s  {entries / base_s / 1e6:5.2f} M entries/s")
    print(f"  statekit full read to Arrow:        {full_s:6.2f} s  {entries / full_s / 1e6:5.2f} M entries/s"
          f"  ({full_s / base_s:.1f}x the baseline, incl. copying the files)")
    print(f"  statekit one-key get (fresh open):  {get_s * 1000:6.0f} ms")


if __name__ == "__main__":
    main()
