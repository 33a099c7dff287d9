"""Savepoints on object storage: statekit reading and converting the 10M-key Flink savepoints on a local S3 server,
against a raw `pyarrow.fs` download of the same objects and the same operations on local disk, in one run.

The S3 server is the test suite's (`tests/storage/s3_server.py`: moto's standalone server in its own process
on 127.0.0.1, authenticated users). The savepoints are those of `bench/flink_read.py` (Flink's State Processor
API, 10M keys, two ValueState<Long>, max parallelism 128, canonical) when its cache holds them; otherwise
statekit writes the same layout itself (a canonical Flink savepoint through `write_flink`) and caches it beside.
Measured per savepoint (Long keys, String keys "key-" + k):

* raw download: `pyarrow.fs.copy_files` of every object to local disk, and every object read into memory on 4
  threads (the baselines: nothing decoded)
* full read to Arrow (`Savepoint.open(uri).keyed_table`), on S3 and on local disk; throughput in MB/s of the
  savepoint's bytes and the ratio to each raw download (target >= 0.8); both downloads and the full read from S3 are
  taken in turn ``--rounds`` times, and compared three ways: best against best, median against median, and the
  median of each round's ratio (a round's runs back to back, so a slow phase of the shared machine moves all of them)
* conversion to statekit's format (`convert_to_statekit`), S3 -> local disk, S3 -> S3, and local -> local
* one-key `get`: the bytes it transferred (`StoragePath.stats`) against its key group's bytes (target < 2x),
  in-process and as a whole process with the credentials in the environment (target < 1 s)

    python bench/object_store.py [--keys N] [--only long|string] [--server moto|s3proxy] [--repair]

``--repair`` measures instead a one-key repair (`repair(src, dst, [SetValue(...)])`) of the same state as a statekit
savepoint on the server, S3 -> S3, against the same repair on local disk: the time (best of 3) and the bytes that
passed through this process (read, written) or were copied by the store itself (S3 CopyObject of unchanged files).

``--server s3proxy`` runs the same measurements against S3Proxy (`bench/s3proxy_server.py`, from Maven Central):
moto copies a whole object for every request, which dominates whole-process timings of small ranged reads.

The machine is shared (2 cores; the S3 server runs on them too): numbers move with load, printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import best, load  # bench/ is on sys.path when run as a script
from processes import installed_env

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "storage"))
from s3_server import BUCKET, S3Server  # noqa: E402

CACHE = Path(os.environ.get("STATEKIT_FLINK_BENCH_DIR", Path.home() / ".cache" / "statekit" / "flink-bench"))
KINDS = ("long", "string")  # the key looked up: 4242424 (or "key-4242424"), or the last one of fewer keys


def savepoint(kind: str, n: int) -> Path:
    """The Flink SPA savepoint of `bench/flink_read.py` if cached, else one statekit writes (and caches)."""
    spa = CACHE / f"sp-{kind}-{n}"
    if (spa / "_metadata").exists():
        return spa
    own = CACHE / f"statekit-sp-{kind}-{n}"
    if (own / "_metadata").exists():
        return own
    import numpy as np
    import pyarrow as pa

    from statekit.savepoint import SavepointBuilder
    from statekit.savepoint.flink_out import write_flink
    from statekit.state import ValueStateDescriptor

    print(f"building {own} with statekit's Flink writer (once) ...", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    k = np.arange(n, dtype=np.int64)
    keys = pa.array(k) if kind == "long" else pa.array(np.char.add("key-", k.astype(str)).astype(object), pa.string())
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        with SavepointBuilder(Path(tmp) / "sk", checkpoint_id=1) as b:
            op = b.add_operator("bench", parallelism=4, max_parallelism=128,
                                key_type="bigint" if kind == "long" else "string",
                                keyed_states=[ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "bigint")])
            op.write_keyed(pa.table({"key": keys, "a": pa.array(k), "b": pa.array(2 * k + 1)}))
        write_flink(Path(tmp) / "sk", Path(tmp) / "flink")
        (Path(tmp) / "flink").rename(own)
    return own


def bench_one(server: Any, kind: str, n: int, rounds: int = 5) -> None:
    import pyarrow.fs as pafs

    from statekit.format.storage import locate
    from statekit.keygroups import assign_to_key_group
    from statekit.savepoint import Savepoint
    from statekit.savepoint.convert import convert_to_statekit

    local = savepoint(kind, n)
    size = sum(p.stat().st_size for p in local.iterdir())
    bucket = getattr(server, "bucket", BUCKET)
    prefix = f"bench/{kind}-{n}"
    if not server.keys(prefix + "/"):
        t0 = time.perf_counter()
        remote = locate(f"s3://{bucket}/{prefix}", storage_options=server.options())
        for p in sorted(local.iterdir()):
            (remote / p.name).upload(p)
        print(f"uploaded in {time.perf_counter() - t0:.1f} s")
    uri = f"s3://{bucket}/{prefix}"
    opts = server.options()
    k = min(4242424, n - 1)
    key = k if kind == "long" else f"key-{k}"
    print(f"\n== {kind} keys: {local.name} ({size / 1e6:.0f} MB, {n:,} keys) at {uri}, load {load()}", flush=True)

    # -- baselines: the same objects downloaded raw by pyarrow.fs ---------------------------------------------
    fs = locate(uri, storage_options=opts).fs
    objects = [i.path for i in fs.get_file_info(pafs.FileSelector(f"{bucket}/{prefix}")) if i.type == pafs.FileType.File]

    def into_memory():
        def one(p):  # one request per object (a stream's plain read() asks in 256 KB ranges)
            with fs.open_input_file(p) as f:
                return len(f.read_at(f.size(), 0))
        with ThreadPoolExecutor(4) as pool:
            return sum(pool.map(one, objects))


    def full_s3():
        return Savepoint.open(uri, storage_options=opts).keyed_table("bench").num_rows

    def full_local():
        return Savepoint.open(local).keyed_table("bench").num_rows

    # The raw downloads and the full read taken in turn, `rounds` times: a burst of the machine's other work (or of
    # the server's JIT and GC, on the same two cores) then moves one round, not every sample of one side
    copies, mems, fulls = [], [], []
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        def copy():
            dst = Path(tmp) / f"copy-{time.monotonic_ns()}"
            dst.mkdir()
            # 64 MB reads: each read of an S3 stream is one ranged request (Arrow's default chunk is 1 MB)
            pafs.copy_files(f"{bucket}/{prefix}", str(dst), source_filesystem=fs,
                            destination_filesystem=pafs.LocalFileSystem(), chunk_size=64 << 20, use_threads=True)
            shutil.rmtree(dst)

        # The server is a JVM: its first requests run interpreted (a first download took 2-4x its later ones). One
        # untimed round first, so that every side meets the server at its steady speed
        copy()
        into_memory()
        full_s3()
        for _ in range(rounds):
            for f, times, want in ((copy, copies, None), (into_memory, mems, size), (full_s3, fulls, n)):
                t0 = time.perf_counter()
                got = f()
                times.append(time.perf_counter() - t0)
                assert got == want, (f.__name__, got, want)
    t_copy, t_mem, t_full = min(copies), min(mems), min(fulls)
    raw = size / t_copy

    def against(download: list[float]) -> str:  # the full read's throughput against a download's, three ways
        return (f"{min(download) / t_full:.2f}x best against best, "
                f"{statistics.median(download) / statistics.median(fulls):.2f}x median against median, "
                f"{statistics.median(d / f for d, f in zip(download, fulls)):.2f}x the median of the {rounds} rounds' "
                "ratios")

    def runs(times: list[float]) -> str:
        return ", ".join(f"{x:.2f}" for x in times)

    print(f"raw pyarrow.fs download: copy_files to disk {t_copy:.2f} s {size / t_copy / 1e6:.0f} MB/s (all: "
          f"{runs(copies)} s); into memory (4 threads) {t_mem:.2f} s {size / t_mem / 1e6:.0f} MB/s (all: {runs(mems)} s)")
    t_full_local, _ = best(full_local, 2)
    print(f"full read to Arrow: S3 {t_full:.2f} s {size / t_full / 1e6:.0f} MB/s {n / t_full / 1e6:.1f} M keys/s (all: "
          f"{runs(fulls)} s); local disk {t_full_local:.2f} s (S3 costs {t_full / t_full_local:.1f}x)\n"
          f"  against copy_files: {against(copies)}\n  against into memory: {against(mems)}")

    # -- conversion -------------------------------------------------------------------------------------------
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        t0 = time.perf_counter()
        convert_to_statekit(locate(uri, storage_options=opts), Path(tmp) / "from-s3", uids=["bench"])
        t_conv = time.perf_counter() - t0
        t0 = time.perf_counter()
        convert_to_statekit(local, Path(tmp) / "from-local", uids=["bench"])
        t_conv_local = time.perf_counter() - t0
    out = locate(f"s3://{bucket}/bench/converted-{kind}-{time.monotonic_ns()}", storage_options=opts)
    t0 = time.perf_counter()
    convert_to_statekit(locate(uri, storage_options=opts), out, uids=["bench"])
    t_conv_s3 = time.perf_counter() - t0
    print(f"conversion to statekit format: S3 -> local {t_conv:.2f} s ({size / t_conv / 1e6:.0f} MB/s, "
          f"{size / t_conv / raw:.2f}x raw), S3 -> S3 {t_conv_s3:.2f} s, local -> local {t_conv_local:.2f} s")

    # -- one key ----------------------------------------------------------------------------------------------
    sp = Savepoint.open(uri, storage_options=opts)
    op = sp.flink_operator("bench")
    kg = assign_to_key_group(key, op.max_parallelism, "bigint" if kind == "long" else "string")
    h = next(h for h in sp.flink.keyed_handles(op) if h.start <= kg <= h.end)
    off = h.offsets[kg - h.start]
    later = [o for o in h.offsets if o > off]
    kg_bytes = (min(later) if later else sp.flink.files.size(h.delegate)) - off

    def one():
        s = Savepoint.open(uri, storage_options=opts)
        before = s.path.stats.bytes_read
        got = s.get("bench", key)
        return got, s.path.stats.bytes_read - before, s.path.stats.reads

    t_one, (got, moved, reads) = best(one, 5)
    assert got is not None and got["a"] == int(str(key).removeprefix("key-")), got
    metadata = (local / "_metadata").stat().st_size
    print(f"one key get: {t_one * 1000:.0f} ms in-process; {moved / 1e6:.2f} MB transferred by get ({reads} requests "
          f"with open) (its key group: {kg_bytes / 1e6:.2f} MB, ratio {moved / kg_bytes:.2f}x; _metadata "
          f"{metadata / 1e3:.0f} KB read by open)")
    env = dict(installed_env(), AWS_ACCESS_KEY_ID=opts["access_key"], AWS_SECRET_ACCESS_KEY=opts["secret_key"],
               AWS_ENDPOINT_URL=opts["endpoint_url"], AWS_REGION=opts["region"])
    code = f"from statekit.savepoint import Savepoint; assert Savepoint.open({uri!r}).get('bench', {key!r})"
    code_local = f"from statekit.savepoint import Savepoint; assert Savepoint.open({str(local)!r}).get('bench', {key!r})"
    runs, runs_local = [], []
    for _ in range(3):
        for c, into in ((code, runs), (code_local, runs_local)):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", c], check=True, env=env)
            into.append(time.perf_counter() - t0)
    print(f"one key get, whole process (credentials from the environment): {min(runs):.2f} s best of 3 "
          f"(all: {', '.join(f'{r:.2f}' for r in runs)} s); from local disk {min(runs_local):.2f} s "
          f"(all: {', '.join(f'{r:.2f}' for r in runs_local)} s)")


def bench_repair(server: Any, kind: str, n: int) -> None:
    from statekit.format.storage import locate
    from statekit.savepoint import Savepoint
    from statekit.savepoint.convert import convert_to_statekit
    from statekit.savepoint.patch import SetValue, repair

    bucket = getattr(server, "bucket", BUCKET)
    opts = server.options()
    local_sk = CACHE / f"statekit-format-{kind}-{n}"
    if not (local_sk / "_metadata.json").exists():
        convert_to_statekit(savepoint(kind, n), local_sk)
    size = sum(p.stat().st_size for p in local_sk.rglob("*") if p.is_file())
    files = sum(1 for p in local_sk.rglob("*.parquet"))
    src_uri = f"s3://{bucket}/bench/statekit-{kind}-{n}"
    if not server.keys(src_uri.split("/", 3)[3] + "/"):
        src = locate(src_uri, storage_options=opts)
        for p in sorted(p for p in local_sk.rglob("*") if p.is_file()):
            (src / p.relative_to(local_sk).as_posix()).upload(p)
    k = min(4242424, n - 1)
    key = k if kind == "long" else f"key-{k}"
    print(f"\n== one-key repair, {kind} keys: statekit savepoint ({size / 1e6:.0f} MB in {files} Parquet files, "
          f"{n:,} keys), load {load()}", flush=True)
    runs: list[tuple[float, int, int, int]] = []
    for i in range(3):
        src = locate(src_uri, storage_options=opts)
        dst = locate(f"s3://{bucket}/bench/repaired-{kind}-{n}-{time.monotonic_ns()}", storage_options=opts)
        t0 = time.perf_counter()
        repair(src, dst, [SetValue("bench", key, "a", -1)])
        copied = getattr(dst.stats, "bytes_copied", 0)  # no such counter before server-side copies
        runs.append((time.perf_counter() - t0, src.stats.bytes_read + dst.stats.bytes_read,
                     src.stats.bytes_written + dst.stats.bytes_written, copied))
        assert Savepoint.open(dst).get("bench", key)["a"] == -1
    t, read, written, copied = min(runs)
    print(f"S3 -> S3: {t:.2f} s best of 3 (all: {', '.join(f'{r[0]:.2f}' for r in runs)} s); through this process "
          f"{read / 1e6:.1f} MB read, {written / 1e6:.1f} MB written; copied by the store {copied / 1e6:.1f} MB")
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        def local_repair():
            repair(local_sk, Path(tmp) / f"r-{time.monotonic_ns()}", [SetValue("bench", key, "a", -1)])

        t_local, _ = best(local_repair, 3)
    print(f"local -> local: {t_local:.2f} s best of 3 (hard links)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--only", choices=KINDS)
    ap.add_argument("--server", choices=("moto", "s3proxy"), default="moto")
    ap.add_argument("--repair", action="store_true", help="only the one-key repair S3 -> S3 (and local)")
    ap.add_argument("--rounds", type=int, default=5, help="raw downloads and full reads, taken in turn (best counts)")
    args = ap.parse_args()
    kinds = [args.only] if args.only else list(KINDS)
    for k in kinds:
        savepoint(k, args.keys)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    if args.server == "s3proxy":
        from s3proxy_server import BUCKET as PROXY_BUCKET
        from s3proxy_server import S3ProxyServer

        server: Any = S3ProxyServer()
        server.bucket = PROXY_BUCKET
    else:
        server = S3Server()
    try:
        print(f"S3 server: {args.server} pid {server.proc.pid} at {server.endpoint}")
        for k in kinds:
            if args.repair:
                bench_repair(server, k, args.keys)
            else:
                bench_one(server, k, args.keys, args.rounds)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
