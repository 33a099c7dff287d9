"""`stats` of one operator of a statekit savepoint: manifest and Parquet footers, the `key_group` column, no values."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from statekit.format.manifest import FileEntry, OperatorMetadata, safe_relative_path
from statekit.format.storage import StoragePath
from statekit.keygroups import KeyGroupRange, key_group_range
from statekit.savepoint.stats_figures import KeySize, OperatorStats, StateStats, SubtaskStats, new_operator_stats

if TYPE_CHECKING:
    from statekit.savepoint.reader import Savepoint

__all__ = ["row_bytes", "statekit_operator_stats"]


def row_bytes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The bytes of each value of `arr` as Arrow holds them (fixed widths, string and binary lengths, nested summed)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    n = len(arr)
    t = arr.type
    valid = np.ones(n, bool) if not arr.null_count else arr.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_boolean(t):
        return valid.astype(np.int64)
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        if pa.types.is_map(t):  # a map's entries as a list of structs (key, value)
            arr = pa.ListArray.from_arrays(arr.offsets, arr.values)
        child = row_bytes(arr.flatten())
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        parent = np.repeat(np.arange(n), lengths)
        return np.bincount(parent, weights=child, minlength=n).astype(np.int64)
    if pa.types.is_struct(t):
        out = np.zeros(n, np.int64)
        for f in arr.flatten():
            out += row_bytes(f)
        return np.where(valid, out, 0)
    try:
        width = t.bit_width // 8
    except ValueError:
        width = arr.nbytes // max(n, 1)
    return np.where(valid, width, 0).astype(np.int64)


def _key_group_rows(pf: pq.ParquetFile, m: int) -> np.ndarray:
    """Rows per key group of one file: from the footer where a row group holds one key group (statekit's writers cut
    row groups where the key group changes), else from that row group's ``key_group`` column."""
    counts = np.zeros(m, np.int64)
    md = pf.metadata
    col = pf.schema_arrow.get_field_index("key_group")
    for rg in range(md.num_row_groups):
        g = md.row_group(rg)
        st = g.column(col).statistics
        if st is not None and st.has_min_max and st.min == st.max and not st.null_count:
            counts[int(st.min)] += g.num_rows
        else:
            kg = pf.read_row_group(rg, columns=["key_group"]).column("key_group").to_numpy()
            counts += np.bincount(kg, minlength=m)
    return counts


def _spread(total: int, rows_per_kg: np.ndarray) -> np.ndarray:
    """`total` bytes spread over key groups in proportion to their rows (integers summing to `total`)."""
    rows = rows_per_kg.sum()
    if not rows:
        return np.zeros_like(rows_per_kg)
    out = (rows_per_kg * total) // rows
    out[int(np.argmax(rows_per_kg))] += total - int(out.sum())
    return out


def _path(sp: Savepoint, f: FileEntry):
    return safe_relative_path(sp.path, f.path)


def _parquet(sp: Savepoint, f: FileEntry) -> pq.ParquetFile:
    """A listed Parquet file, local or on object storage (read by ranges through the store's filesystem)."""
    p = _path(sp, f)
    if isinstance(p, StoragePath):
        return pq.ParquetFile(p.path, filesystem=p.fs)
    return pq.ParquetFile(p)


def statekit_operator_stats(sp: Savepoint, meta: OperatorMetadata, *, top: int = 10) -> OperatorStats:
    """Entries and bytes per key group, state and subtask of a statekit operator; its `top` largest keys by Arrow bytes."""
    o = new_operator_stats(meta)
    m = meta.max_parallelism
    state_entries: dict[str, int] = {}
    state_bytes: dict[str, int] = {}
    if meta.key_type is not None:
        kg_bytes = np.zeros(m, np.int64)
        kg_entries = np.zeros(m, np.int64)
        if meta.is_native:  # native RocksDB files: rows from the reader, bytes from the files
            table = sp.keyed_table(meta.identifier, with_key_group=True)
            counts = np.bincount(table.column("key_group").to_numpy(), minlength=m)
            kg_entries += counts
            kg_bytes += _spread(sum(f.bytes for f in meta.files_of("rocksdb")), counts)
            for s in meta.keyed_states:
                state_entries[s.name] = table.num_rows - table.column(s.name).null_count
        for f in meta.files_of("keyed") + meta.files_of("timers"):
            pf = _parquet(sp, f)
            counts = _key_group_rows(pf, m)
            kg_entries += counts
            kg_bytes += _spread(f.bytes, counts)
            if f.table == "timers":
                state_entries["timers"] = state_entries.get("timers", 0) + f.rows
                state_bytes["timers"] = state_bytes.get("timers", 0) + f.bytes
                continue
            md = pf.metadata
            names = {s.name for s in meta.keyed_states}
            nested: set[str] = set()
            for rg in range(md.num_row_groups):
                g = md.row_group(rg)
                for c in range(g.num_columns):
                    col = g.column(c)
                    name = col.path_in_schema.split(".")[0]
                    if name not in names:
                        continue
                    state_bytes[name] = state_bytes.get(name, 0) + col.total_compressed_size
                    st = col.statistics
                    if "." in col.path_in_schema or st is None or not st.has_null_count:
                        nested.add(name)  # a nested column's leaf nulls are not its rows' nulls
                    else:
                        state_entries[name] = state_entries.get(name, 0) + g.num_rows - st.null_count
            for name in sorted(nested):  # only these columns are read, for their validity
                state_entries[name] = state_entries.get(name, 0) + f.rows - pf.read(columns=[name]).column(name).null_count
        o.key_group_bytes, o.key_group_entries = kg_bytes, kg_entries
        for s in meta.keyed_states:
            o.states.append(StateStats(s.name, "keyed", state_entries.get(s.name, 0), state_bytes.get(s.name, 0)))
        if "timers" in state_entries:
            o.states.append(StateStats("timers", "timers", state_entries["timers"], state_bytes["timers"]))
        if top:
            o.top_keys = _top_keys(sp, meta, top)
    sub_bytes = o.subtask_bytes() if o.key_group_bytes is not None else [0] * meta.parallelism
    sub_entries = [0] * len(sub_bytes)
    if o.key_group_entries is not None:
        for i in range(len(sub_bytes)):
            r = key_group_range(m, meta.parallelism, i)
            sub_entries[i] = int(o.key_group_entries[r.start : r.end + 1].sum())
    for info in meta.operator_states:
        files = meta.files_of("broadcast" if info.redistribution == "broadcast" else "operator", info.name)
        rows, nbytes = sum(f.rows for f in files), sum(f.bytes for f in files)
        o.states.append(StateStats(info.name, info.redistribution, rows, nbytes))
        for f in files:
            if info.redistribution == "broadcast":
                continue  # one copy, every subtask's
            sub = _parquet(sp, f).read(columns=["subtask"]).column("subtask").to_numpy()
            per = np.bincount(sub, minlength=len(sub_bytes))
            share = _spread(f.bytes, per)
            while len(sub_bytes) < len(per):
                sub_bytes.append(0)
                sub_entries.append(0)
            for i in range(len(per)):
                sub_bytes[i] += int(share[i])
                sub_entries[i] += int(per[i])
    ranges: list[KeyGroupRange | None] = [None] * len(sub_bytes)
    if meta.key_type is not None:
        ranges = [key_group_range(m, meta.parallelism, i) if i < meta.parallelism else None for i in range(len(sub_bytes))]
    o.subtasks = [SubtaskStats(i, r.start if r else None, r.end if r else None, sub_bytes[i], sub_entries[i])
                  for i, r in enumerate(ranges)]
    o.bytes = meta.total_bytes
    o.entries = int(o.key_group_entries.sum()) if o.key_group_entries is not None else 0
    o.entries += sum(s.entries for s in o.states if s.kind in ("split", "union", "broadcast"))
    return o


def _top_keys(sp: Savepoint, meta: OperatorMetadata, n: int) -> list[KeySize]:
    table = sp.keyed_table(meta.identifier, with_key_group=True)
    if not table.num_rows:
        return []
    size = np.zeros(table.num_rows, np.int64)
    for s in meta.keyed_states:
        size += row_bytes(table.column(s.name))
    size += row_bytes(table.column("key"))
    best = np.argsort(-size, kind="stable")[:n]
    keys = table.column("key").take(pa.array(best)).to_pylist()
    kgs = table.column("key_group").take(pa.array(best)).to_pylist()
    return [KeySize(k, int(g), int(size[i]), 1) for k, g, i in zip(keys, kgs, best.tolist())]
