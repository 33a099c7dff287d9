"""Aborts at interpreter exit ("terminate called without an active exception") with statekit's old
memory pattern (Arrow buffers over Python bytes and NumPy arrays) against the current one.

Runs the workloads of `tests/exit_child.py` (the bare pattern without statekit; threaded point
reads; Flink reads + DuckDB SQL; a RocksDB job) in fresh interpreters, `--jobs` at a time, and counts the runs that did not exit 0.
``--patterns old`` runs the same statekit code with `statekit.format.arrow_memory` replaced by the
zero-copy wrappers used before (``pa.py_buffer``, ``pa.array(ndarray)``, numpy-allocated buffers)
and verified files read into Python memory; ``new`` is the code as it is. The old pattern is the baseline: the ratio is new/old aborts.

    python bench/exit_race.py --runs 60 --jobs 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
CHILD = TESTS / "exit_child.py"
CORPUS = TESTS / "fixtures" / "flink" / "2.3.0"

# Put back the zero-copy wrappers statekit used before: every buffer then holds a Python object.
OLD_PATTERN = """
import runpy, sys, types
import numpy as np, pyarrow as pa
import statekit.format.arrow_memory as am
import statekit.format.files as files

def py_buffer(data):
    return pa.py_buffer(np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data)

def py_array(values, type_=None):
    return pa.array(values, type_)

def py_allocate(n, dtype):
    out = np.empty(max(n, 1), np.dtype(dtype).newbyteorder("="))
    return out[:n], pa.py_buffer(out)

old = {"copy_buffer": py_buffer, "from_numpy": py_array, "allocate": py_allocate}
for name, replacement in old.items():
    new = getattr(am, name)
    for module in list(sys.modules.values()):
        if getattr(module, name, None) is new:
            setattr(module, name, replacement)
files.pa = types.SimpleNamespace(**{k: getattr(pa, k) for k in dir(pa) if not k.startswith("__")})
files.pa.allocate_buffer = lambda n: pa.py_buffer(bytearray(n))  # verified files read into Python memory
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(pattern: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    prefix = [sys.executable, "-c", OLD_PATTERN] if pattern == "old" else [sys.executable]
    return subprocess.run(prefix + [str(CHILD), *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TMPDIR=str(cwd)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60, help="runs per workload and pattern")
    ap.add_argument("--jobs", type=int, default=2, help="processes at a time (load makes the race likelier)")
    ap.add_argument("--workloads", default="buffers,reads,flink,rocksdb")
    ap.add_argument("--patterns", default="old,new")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="exit-race-") as tmp:
        root = Path(tmp)
        sp = root / "sp"
        subprocess.run([sys.executable, str(CHILD), "savepoint", str(sp)], check=True)
        print(f"load: {os.getloadavg()[0]:.1f} (1-min average), {os.cpu_count()} CPUs, {opts.jobs} processes at a time")
        totals = {}
        for workload in opts.workloads.split(","):
            for pattern in opts.patterns.split(","):
                def args(i: int) -> list[str]:
                    if workload == "reads":
                        return ["reads", str(sp)]
                    if workload == "flink":
                        return ["flink", str(CORPUS), str(sp)]
                    if workload == "buffers":  # the bare pattern: Python bytes (old) or Arrow memory (new)
                        return ["buffers", str(sp), "python" if pattern == "old" else "arrow"]
                    return ["rocksdb", str(root / f"job-{pattern}-{i}"), str(TESTS / "runtime")]

                t0 = time.perf_counter()
                with ThreadPoolExecutor(opts.jobs) as pool:
                    results = list(pool.map(lambda i: _run(pattern, args(i), root), range(opts.runs)))
                secs = time.perf_counter() - t0
                aborts = sum(1 for r in results if r.returncode == -6 or "terminate called" in r.stderr)
                other = sum(1 for r in results if r.returncode != 0) - aborts
                totals[(workload, pattern)] = aborts
                print(f"{workload:8} {pattern:4} {aborts:3} aborts / {opts.runs} runs, {other} other failures, "
                      f"{opts.runs / secs:.1f} runs/s")
                for r in [r for r in results if r.returncode != 0][:1]:
                    print("   e.g. exit", r.returncode, r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else "")
        for workload in opts.workloads.split(","):
            old, new = totals.get((workload, "old")), totals.get((workload, "new"))
            if old is not None and new is not None:
                print(f"{workload:8} ratio new/old aborts: {new}/{old}" + (f" = {new / old:.2f}" if old else ""))


if __name__ == "__main__":
    main()
