"""`statekit stats` on 10M-key savepoints (Flink and statekit formats) against decoding everything, in one run.

The savepoints (10M Long keys, two ValueState<Long>, max parallelism 128, parallelism 2; the Flink one written
from the statekit one by ``write_flink``, i.e. ``statekit convert --to flink``) are made once and cached in
~/.cache/statekit/stats-bench (override: STATEKIT_STATS_BENCH_DIR). Measured per format:

* ``savepoint_stats(top=0)``: entries and bytes per key group, state and subtask (no key decoded)
* ``savepoint_stats(top=10)``: the same with the 10 largest keys (keys decoded, values not)
* ``statekit stats --json`` as a whole fresh process
* ``compat`` of the savepoint against itself and against its statekit twin (serializers and manifests only)
* baseline, same run: the naive way - decode the keyed table and timers (``Savepoint.keyed_table`` +
  ``timers``, what an "independent count" needs) and add up per key group with numpy

    python bench/stats.py [--keys N]

The machine is shared: numbers move with load, which is printed with them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from processes import installed_env  # bench/ is on sys.path when run as a script

from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.flink_out import write_flink
from statekit.savepoint.stats import savepoint_stats
from statekit.state import ValueStateDescriptor

CACHE = Path(os.environ.get("STATEKIT_STATS_BENCH_DIR", Path.home() / ".cache" / "statekit" / "stats-bench"))


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def savepoints(n: int) -> dict[str, Path]:
    """The statekit and the Flink savepoint of `n` keys (made once, cached)."""
    sk, fl = CACHE / f"sk-{n}", CACHE / f"flink-{n}"
    if not (sk / "_metadata.json").exists():
        keys = np.arange(n, dtype=np.int64)
        with SavepointBuilder(sk) as b:
            op = b.add_operator("bench", parallelism=2, max_parallelism=128, key_type="bigint",
                                keyed_states=[ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "bigint")])
            op.write_keyed(pa.table({"key": keys, "a": keys, "b": 2 * keys + 1}))
    if not (fl / "_metadata").exists():
        write_flink(sk, fl)
    return {"statekit": sk, "flink": fl}


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def naive(path: Path) -> np.ndarray:
    """The baseline: decode everything, then count rows per key group."""
    sp = Savepoint.open(path)
    t = sp.keyed_table("bench", with_key_group=True)
    timers = sp.timers("bench")
    kg = np.bincount(t.column("key_group").to_numpy(), minlength=128)
    if timers.num_rows:
        kg += np.bincount(timers.column("key_group").to_numpy(), minlength=128)
    return kg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=10_000_000)
    args = ap.parse_args()
    n = args.keys
    paths = savepoints(n)
    env = installed_env()
    print(f"stats on {n:,} keys ({load()})")
    for fmt, path in paths.items():
        t_stats, s = timed(lambda: savepoint_stats(path, top=0))
        t_top, s_top = timed(lambda: savepoint_stats(path, top=10), repeat=1)
        t0 = time.perf_counter()
        proc = subprocess.run([str(Path(sys.executable).with_name("statekit")), "stats", str(path), "--json", "--top", "0"],
                              env=env, capture_output=True, text=True)
        t_proc = time.perf_counter() - t0
        assert proc.returncode == 0, proc.stderr
        t_naive, counts = timed(lambda: naive(path), repeat=1)
        o = s.operator("bench")  # type: ignore[attr-defined]
        per_state = {x.name: x.entries for x in o.states if x.kind == "keyed"}
        want = 2 * counts if fmt == "flink" else counts  # Flink: one entry per state, statekit: one row per key
        assert np.array_equal(o.key_group_entries, want), "stats disagree with the decoded count"
        assert per_state == {"a": n, "b": n}, per_state
        assert len(s_top.operator("bench").top_keys) == 10  # type: ignore[attr-defined]
        print(f"  {fmt:8s} stats (top 0) {t_stats:6.2f} s | with --top 10 {t_top:6.2f} s | whole process "
              f"{t_proc:6.2f} s | baseline decode-and-count {t_naive:6.2f} s | speed-up x{t_naive / t_stats:.1f}")
    from statekit.savepoint.compat import compat

    t_compat, report = timed(lambda: compat(paths["flink"], paths["flink"]))
    t_cross, _ = timed(lambda: compat(paths["flink"], paths["statekit"]))
    assert report.restores  # type: ignore[attr-defined]
    print(f"  compat Flink vs Flink {t_compat:6.3f} s | Flink vs statekit {t_cross:6.3f} s")
    print(f"  ({load()})")


if __name__ == "__main__":
    main()
