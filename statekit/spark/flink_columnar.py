"""The columnar bootstrap written straight into Flink's format by Spark, without a shuffle: fragments per input partition, one file per subtask.

Boundary: for ``key_by(col).columns(...)`` bootstraps whose keys and values have fixed-width Flink
encodings (Long, Integer, Double, ... - the regular layout), each Spark task encodes its input
partition's entries (`statekit.format.flink.writer.keyed_runs`) into a fragment file sorted by
key group, and reports where each (key group, state) run lies; then one task per subtask
concatenates the runs of its key-group range from every fragment into the subtask's Flink file,
flags each run's last entry and checks that no key appears twice. Only run positions (O(fragments
x key groups)) reach the driver, which writes `_metadata`. Other layouts take the general path
(`statekit.spark.flink_writer`). With a JDK, `statekit.spark.flink_jvm` writes these bootstraps (and
String keys and values) inside Spark's JVM instead; this path is the one without it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from statekit.errors import DuplicateKeyError
from statekit.format.files import remove_tree, storage_errors
from statekit.format.flink.writer import (
    END_OF_KEY_GROUP,
    PRIMITIVE,
    PRIMITIVE_BLOCK,
    KeyedLayoutOut,
    OperatorOut,
    SubtaskOut,
    keyed_runs,
    primitive_entries,
)
from statekit.keygroups import assign_key_groups, key_group_range

_RUNS = StructType([StructField("fragment", StringType(), False), StructField("sid", IntegerType(), False),
                    StructField("key_group", IntegerType(), False), StructField("start", LongType(), False),
                    StructField("end", LongType(), False), StructField("last", LongType(), False),
                    StructField("count", LongType(), False)])


_RUNS_ARROW = pa.schema([("fragment", pa.string()), ("sid", pa.int32()), ("key_group", pa.int32()),
                         ("start", pa.int64()), ("end", pa.int64()), ("last", pa.int64()), ("count", pa.int64())])


def _has_duplicates(values: np.ndarray) -> bool:
    """Whether a value repeats (a sort: numpy 2.4's `np.unique` is ~50x slower on 1M int64s)."""
    s = np.sort(values)
    return bool(len(s) > 1 and (s[1:] == s[:-1]).any())


def regular(layout: KeyedLayoutOut) -> bool:
    """Whether every entry of `layout` has one fixed size (the layout this path handles)."""
    return layout.key.fixed_size is not None and layout.namespace is None and not layout.timers and all(
        s.kind in ("value", "reducing", "aggregating") and s.value.fixed_size is not None for s in layout.states)


def _fragments(layout: KeyedLayoutOut, key_type: str, scratch: str, what: str):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(list(batches))
        if not table.num_rows:
            return
        keys = table.column("key").to_numpy()
        bits = keys.view(f"u{keys.dtype.itemsize}") if keys.dtype.kind in "if" else keys
        if _has_duplicates(bits):
            raise DuplicateKeyError(
                f"{what}: a key appears in more than one row of the bootstrap DataFrame; the columnar path takes "
                "one row per key. Aggregate the rows per key first."
            )
        kg = assign_key_groups(table.column("key"), layout.max_parallelism, key_type)
        name = str(uuid.uuid4())
        rows: dict[str, list] = {f.name: [] for f in _RUNS.fields}
        if _primitive(layout, table):
            with storage_errors(Path(scratch).parent):  # an executor's full disk: a typed error on the driver
                _write_streamed(layout, table, keys, kg, Path(scratch) / name, name, rows)
            yield pa.RecordBatch.from_pydict(rows, schema=_RUNS_ARROW)
            return
        table = table.append_column("key_group", pa.array(kg.astype(np.int32)))
        pos = 0
        # an executor's full disk: a typed error on the driver
        with storage_errors(Path(scratch).parent), open(Path(scratch) / name, "xb") as f:
            for r in keyed_runs(layout, table, None):
                offs = r.entries.offsets
                bounds = np.flatnonzero(np.diff(r.key_groups)) + 1
                starts = np.concatenate([[0], bounds])
                ends = np.concatenate([bounds, [len(r.key_groups)]])
                f.write(r.entries.data.data)
                rows["fragment"] += [name] * len(starts)
                rows["sid"] += [r.sid] * len(starts)
                rows["key_group"] += r.key_groups[starts].tolist()
                rows["start"] += (pos + offs[starts]).tolist()
                rows["end"] += (pos + offs[ends]).tolist()
                rows["last"] += (pos + offs[ends - 1]).tolist()
                rows["count"] += (ends - starts).tolist()
                pos += int(offs[-1])
        yield pa.RecordBatch.from_pydict(rows, schema=_RUNS_ARROW)
    return run


def _primitive(layout: KeyedLayoutOut, table: pa.Table) -> bool:
    return layout.key.kind in PRIMITIVE and all(
        s.value.kind in PRIMITIVE and not table.column(s.column).null_count for s in layout.states)


def _write_streamed(layout: KeyedLayoutOut, table: pa.Table, keys: np.ndarray, kg: np.ndarray, path: Path,
                    name: str, rows: dict[str, list]) -> None:
    """A fragment of the regular layout: rows in key-group order, encoded block by block into reused buffers
    (fresh memory is what costs most on a busy machine), each state's entries contiguous; its runs in `rows`."""
    order = np.argsort(kg.astype(np.int16), kind="stable")  # key groups < 32768: numpy's radix sort
    kg_sorted = kg[order].astype(np.int32)
    firsts = np.flatnonzero(np.diff(kg_sorted)) + 1
    starts = np.concatenate([[0], firsts])
    ends = np.concatenate([firsts, [len(kg_sorted)]])
    n, nb = len(kg_sorted), layout.prefix_bytes
    key_buf = np.empty(min(n, PRIMITIVE_BLOCK), keys.dtype)
    buf: np.ndarray | None = None
    pos = 0
    with open(path, "xb") as f:
        for sid, s in enumerate(layout.states):
            values = table.column(s.column).to_numpy()
            val_buf = np.empty(min(n, PRIMITIVE_BLOCK), values.dtype)
            w = 0
            for lo in range(0, n, PRIMITIVE_BLOCK):
                hi = min(n, lo + PRIMITIVE_BLOCK)
                idx = order[lo:hi]
                k = np.take(keys, idx, out=key_buf[: hi - lo])
                v = np.take(values, idx, out=val_buf[: hi - lo])
                arr = primitive_entries(kg_sorted[lo:hi], nb, k, layout.key.kind, v, s.value.kind, out=buf)
                buf = arr.base if arr.base is not None else arr
                w = arr.dtype.itemsize
                f.write(arr.view(np.uint8).reshape(-1).data)
            rows["fragment"] += [name] * len(starts)
            rows["sid"] += [sid] * len(starts)
            rows["key_group"] += kg_sorted[starts].tolist()
            rows["start"] += (pos + starts * w).tolist()
            rows["end"] += (pos + ends * w).tolist()
            rows["last"] += (pos + (ends - 1) * w).tolist()
            rows["count"] += (ends - starts).tolist()
            pos += n * w


def _assemble(layout: KeyedLayoutOut, scratch: str, staging: str, runs: list[tuple], start: int, end: int,
              what: str) -> tuple[str, int, list[int]]:
    """One subtask's file from the fragments' runs of key groups [start, end]; (name, size, offsets)."""
    by: dict[tuple[int, int], list[tuple]] = {}
    for frag, sid, kg, s, e, last, count in runs:
        by.setdefault((kg, sid), []).append((frag, s, e, last, count))
    klen = 4 + layout.prefix_bytes + (layout.key.fixed_size or 0) + 1  # i32 klen | kg | key | void namespace
    stride = {sid: klen + 4 + (s.value.fixed_size or 0) for sid, s in enumerate(layout.states)}
    name = str(uuid.uuid4())
    proxy = layout.proxy()
    fds: dict[str, int] = {}
    bufs: dict[int, np.ndarray] = {}
    offsets = [0] * (end - start + 1)
    try:
        with open(Path(staging) / name, "xb") as out:
            out.write(proxy)
            pos = len(proxy)
            for kg in range(start, end + 1):
                first = True
                keys_seen: list[np.ndarray] = []
                for sid in range(len(layout.states)):
                    pieces = by.get((kg, sid))
                    if not pieces:
                        continue
                    if first:
                        offsets[kg - start] = pos
                        first = False
                    out.write(sid.to_bytes(2, "big"))
                    pos += 2
                    total = sum(e - s for _, s, e, _, _ in pieces)
                    buf = bufs.get(sid)
                    if buf is None or len(buf) < total:  # one buffer per state, reused from key group to key group
                        buf = bufs[sid] = np.empty(max(total, 2 * len(buf) if buf is not None else 0), np.uint8)
                    at = 0
                    for frag, s, e, last, count in pieces:
                        fd = fds.get(frag)
                        if fd is None:
                            fd = fds[frag] = os.open(Path(scratch) / frag, os.O_RDONLY)
                        if os.preadv(fd, [buf[at : at + e - s].data], s) != e - s:
                            raise OSError(f"short read of fragment {frag}")
                        at += e - s
                    data = buf[:total]
                    w = stride[sid]
                    if len(pieces) > 1:  # within one fragment keys are unique (checked when it was written)
                        keys_seen.append(data.reshape(-1, w)[:, 4:klen])
                    data[len(data) - w + 4] |= 0x80  # the run's last entry: its first key byte
                    out.write(data.data)
                    pos += len(data)
                if not first:
                    out.write(END_OF_KEY_GROUP)
                    pos += 2
                    _check_unique(keys_seen, what, kg)
            size = out.tell()
            out.flush()
            os.fsync(out.fileno())
    finally:
        for fd in fds.values():
            os.close(fd)
    return name, size, offsets


def _check_unique(keys_seen: list[np.ndarray], what: str, kg: int) -> None:
    """Each state lists a key once (one key group's keys, as fixed-width bytes)."""
    for keys in keys_seen:
        if len(keys) > 1:
            rows = np.ascontiguousarray(keys).view(f"V{keys.shape[1]}").ravel()
            if _has_duplicates(rows):
                raise DuplicateKeyError(
                    f"{what}: a key appears in more than one row of the bootstrap DataFrame (key group {kg}); "
                    "the columnar path takes one row per key. Aggregate the rows per key first."
                )


def write_columnar(df: DataFrame, key_col: str, key_type: str, columns: list[tuple[str, str]],
                   layout: KeyedLayoutOut, uid: str | None, uid_hash: str, parallelism: int,
                   staging_dir: Path) -> OperatorOut:
    """Write one columnar bootstrap's keyed files into `staging_dir`; the operator's `_metadata` entry."""
    spark = df.sparkSession
    scratch = staging_dir.parent / f".{staging_dir.name}.fragments-{uuid.uuid4().hex[:8]}"
    with storage_errors(staging_dir):
        scratch.mkdir()
    what = f"operator {uid or uid_hash}"
    batch_conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    batch_size = spark.conf.get(batch_conf, None)
    try:
        frame = df.select(F.col(key_col).alias("key"), *[F.col(c).alias(n) for c, n in columns])
        # a task encodes its whole partition at once: big Arrow batches cut the per-batch overhead
        spark.conf.set(batch_conf, str(1 << 20))
        try:
            runs = frame.mapInArrow(_fragments(layout, key_type, str(scratch), what), _RUNS).collect()
        finally:
            if batch_size is None:
                spark.conf.unset(batch_conf)
            else:
                spark.conf.set(batch_conf, batch_size)
        per_subtask: dict[int, list[tuple]] = {}
        maxp = layout.max_parallelism
        for r in runs:
            sub = int(r["key_group"]) * parallelism // maxp
            per_subtask.setdefault(sub, []).append(tuple(r))
        tasks = [(s, per_subtask.get(s, [])) for s in range(parallelism)]
        # absolute for the executors, whose working directory is not the driver's
        scratch_s, staging_s = os.path.abspath(scratch), os.path.abspath(staging_dir)

        def assemble(task: tuple[int, list[tuple]]) -> tuple[int, str, int, list[int]]:
            s, rs = task
            rng = key_group_range(maxp, parallelism, s)
            with storage_errors(Path(staging_s)):
                name, size, offsets = _assemble(layout, scratch_s, staging_s, rs, rng.start, rng.end, what)
            return s, name, size, offsets

        done = spark.sparkContext.parallelize(tasks, len(tasks)).map(assemble).collect()
    finally:
        remove_tree(scratch)  # also what tasks of a failed stage write after the failure
    out = OperatorOut(uid, uid_hash, uid or uid_hash, parallelism, maxp,
                      [SubtaskOut(s) for s in range(parallelism)])
    for s, name, size, offsets in done:
        out.subtasks[s].keyed = (key_group_range(maxp, parallelism, s).start, offsets, name, size)
    return out


__all__ = ["regular", "write_columnar"]
