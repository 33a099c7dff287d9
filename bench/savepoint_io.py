"""Benchmark: savepoint write/read of a 10M-key keyed table vs raw pyarrow.parquet, point lookups, key groups."""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from statekit.keygroups import assign_key_groups
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.state import ListStateDescriptor, ValueStateDescriptor


def make_table(n: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.permutation(n).astype(np.int64) * 7919 - n  # distinct, negative and positive
    values = rng.integers(-(1 << 40), 1 << 40, n, dtype=np.int64)
    lengths = rng.integers(0, 4, n)  # 0..3 elements per list
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    elems = rng.integers(0, 1 << 50, int(offsets[-1]), dtype=np.int64)
    lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(elems))
    return pa.table({"key": keys, "count": values, "history": lists})


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--lookups", type=int, default=25)
    args = ap.parse_args()
    n = args.n
    table = make_table(n)
    work = Path(tempfile.mkdtemp(prefix="statekit-bench-"))
    try:
        raw_path = work / "raw.parquet"
        t_raw_w, _ = timed(lambda: pq.write_table(table, raw_path))
        states = [ValueStateDescriptor("count", "bigint"), ListStateDescriptor("history", "bigint")]

        def write():
            with SavepointBuilder(work / "sp", checkpoint_id=1) as b:
                b.add_operator("counter", parallelism=1, max_parallelism=128, key_type="bigint",
                               keyed_states=states).write_keyed(table)

        t_sk_w, _ = timed(write)
        t_raw_r, raw_back = timed(lambda: pq.read_table(raw_path))
        sp = Savepoint.open(work / "sp")
        t_sk_r, back = timed(lambda: sp.keyed_table("counter"))
        assert back.num_rows == raw_back.num_rows == n

        print(f"rows: {n:,}")
        print(f"write  raw pyarrow.parquet : {n / t_raw_w / 1e6:7.2f} M rows/s ({t_raw_w:.2f} s)")
        print(f"write  statekit savepoint  : {n / t_sk_w / 1e6:7.2f} M rows/s ({t_sk_w:.2f} s)  "
              f"ratio {t_raw_w / t_sk_w:.2f}x raw (target >= 0.5x)")
        print(f"read   raw pyarrow.parquet : {n / t_raw_r / 1e6:7.2f} M rows/s ({t_raw_r:.2f} s)")
        print(f"read   statekit savepoint  : {n / t_sk_r / 1e6:7.2f} M rows/s ({t_sk_r:.2f} s)  "
              f"ratio {t_raw_r / t_sk_r:.2f}x raw (target >= 0.7x)")

        rng = np.random.default_rng(1)
        probe = table.column("key").to_numpy()[rng.integers(0, n, args.lookups)]
        lat = []
        for k in probe:
            t, row = timed(lambda: sp.get("counter", int(k)))
            assert row is not None
            lat.append(t)
        files = len(sp.keyed_files("counter"))
        print(f"get    one key             : median {statistics.median(lat) * 1e3:.1f} ms over {len(lat)} lookups "
              f"({files} keyed files; target < 100 ms)")

        keys = table.column("key")
        t_kg, _ = timed(lambda: assign_key_groups(keys, 128, "bigint"))
        strs = pa.array([f"user-{i}" for i in range(min(n, 2_000_000))])
        t_kgs, _ = timed(lambda: assign_key_groups(strs, 128, "string"))
        print(f"assign_key_groups bigint   : {n / t_kg / 1e6:7.2f} M keys/s (target >= 5)")
        print(f"assign_key_groups string   : {len(strs) / t_kgs / 1e6:7.2f} M keys/s (target >= 1)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
