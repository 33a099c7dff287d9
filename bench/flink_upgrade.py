"""`statekit upgrade` (Flink 1.20 -> 2.3) against a plain read + write of the same savepoint, timed in one run.

Input: the upgrade pair's 1.x job (tests/flink/java, statekit.upgrade.UpgradeWrite) run with real Flink 1.20
for N keys (default 60,000; every value distinct): per key a Kryo class with nested fields, collections and an
enum, a ListState and a MapState of 1-3 of them, a Kryo List and Map, a Long and a plain Kryo class - a HashMap canonical
savepoint. A list or map state's value per key counts as one value.

  * baseline: ``write_flink(source, out, flink_version="2.3")`` - what ``statekit convert --to flink
    --flink-version 2.3`` does: every state read and written, Kryo bytes carried unchanged (which Flink 2.3 then
    refuses);
  * upgrade: ``upgrade(source, out, to_flink="2.3", classpath=[the 1.x job's classes])`` - the same read and
    write plus every Kryo value decoded and re-encoded (Kryo 5, built-in List/Map).

Prints seconds, state values/s and the ratio upgrade/baseline, with the load average (other work on the
machine moves every figure). Usage: ``python bench/flink_upgrade.py [--keys N]``.
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

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "tests" / "fixtures" / "flink" / "upgrade"
sys.path.insert(0, str(ROOT / "tests" / "flink"))

import flink_harness  # noqa: E402

from statekit.savepoint import Savepoint  # noqa: E402
from statekit.savepoint.flink_out import write_flink  # noqa: E402
from statekit.savepoint.upgrade import upgrade  # noqa: E402


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def made_by_flink(out: Path, keys: int) -> int:
    """The 1.x job's savepoint of `keys` keys made by real Flink 1.20 at `out`; returns its number of state values."""
    flink_harness.build("1.20")
    proc = subprocess.run(flink_harness.java_command("statekit.upgrade.UpgradeWrite", str(out), "hashmap", "plain",
                                                     str(keys), version="1.20"), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the Flink 1.20 job failed:\n{proc.stderr[-3000:]}")
    sp = Savepoint.open(out / "savepoint")
    return sum(sp.keyed_table(m.identifier).column(s.name).length() - sp.keyed_table(m.identifier).column(s.name).null_count
               for m in sp.operators if m.key_type for s in m.keyed_states)


def timed(fn) -> tuple[float, float]:
    """Wall and CPU seconds of `fn()` (CPU time too: the machine may be shared)."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=60_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="statekit-bench-upgrade-") as tmp:
        why = flink_harness.missing_tools()
        if why:
            raise SystemExit(why)
        values = made_by_flink(Path(tmp) / "made", args.keys)
        src = Path(tmp) / "made" / "savepoint"
        print(f"input: Flink 1.20 savepoint made by the 1.x job, {args.keys:,} keys x 4 operators, {values:,} state "
              f"values; {load()}")
        base, base_cpu = timed(lambda: write_flink(src, Path(tmp) / "convert", flink_version="2.3"))
        report = None

        def run() -> None:
            nonlocal report
            report = upgrade(src, Path(tmp) / "upgrade", to_flink="2.3", classpath=[PAIRS / "classes-1.20.jar"])

        up, up_cpu = timed(run)
        assert report is not None and report.count("migrated") == 5, report
        check = Savepoint.open(Path(tmp) / "upgrade")
        assert sum(t.num_rows for t in (check.keyed_table(m.identifier) for m in check.operators if m.key_type)) \
            == 4 * args.keys
        shutil.rmtree(Path(tmp) / "convert")
        print(f"baseline  write_flink (convert --to flink --flink-version 2.3): {base:7.2f} s  {values / base:10,.0f} values/s"
              f"   (CPU {base_cpu:.2f} s: {values / base_cpu:,.0f} values/s)")
        print(f"upgrade   statekit upgrade --to-flink 2.3 (Kryo re-encoded):     {up:7.2f} s  {values / up:10,.0f} values/s"
              f"   (CPU {up_cpu:.2f} s: {values / up_cpu:,.0f} values/s)")
        print(f"ratio     upgrade / baseline: {up / base:.2f}x wall, {up_cpu / base_cpu:.2f}x CPU   "
              f"({report.summary().split(': ', 1)[1]}); {load()}")


if __name__ == "__main__":
    sys.exit(main())
