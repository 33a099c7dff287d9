"""Where the bytes of a Flink operator's keyed state are: entries and bytes per key group and state, and the largest keys.

Boundary: bytes in, counts out. Canonical key groups are measured from `_metadata`'s key-group offsets
(stored bytes, compressed where Snappy is on) and their entries found by `locate` - lengths only, no
value is decoded; keys are decoded only for the largest-keys list (``top > 0``). Native RocksDB and heap
checkpoint handles are re-laid canonically by the reader's own functions and measured the same way
(their bytes then are the canonical entry sizes; the files' sizes are per subtask).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from statekit.format.flink import keyed as K
from statekit.format.flink.checkpoints import read_heap
from statekit.format.flink.columns import decode_open
from statekit.format.flink.gather import gather_fixed, gather_ranges
from statekit.format.flink.locate import DecodeStats, Entries, Located, locate
from statekit.format.flink.metadata import IncrementalKeyedHandle, KeyGroupsHandle, OperatorState
from statekit.format.flink.native import concat_entries, read_native
from statekit.format.flink.reader import FlinkStateReader
from statekit.format.flink.snappy import unframe_snappy

BATCH = 32 << 20  # bytes of key groups measured at a time (as the reader decodes them)

__all__ = ["KeyedSizes", "keyed_sizes"]


@dataclass
class KeyedSizes:
    """One operator's keyed state measured: per key group and state, per subtask (handle), and its largest keys."""

    max_parallelism: int
    kg_bytes: np.ndarray  # stored bytes per key group (int64, length max_parallelism)
    kg_entries: np.ndarray  # entries (KV pairs: a map entry, a list, a value, a timer) per key group
    state_entries: dict[str, int] = field(default_factory=dict)
    state_bytes: dict[str, int] = field(default_factory=dict)  # entry bytes (i32 lengths, key, value)
    subtasks: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # (index, kg start, end, bytes, entries)
    top: list[tuple[object, int, int, int]] = field(default_factory=list)  # (key, key group, bytes, entries)


def _count(located: Located, n_chains: int, n_states: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries per chain, and entries and entry bytes per state id, of every located entry (runs by their counts)."""
    per_chain = np.zeros(n_chains, np.int64)
    entries = np.zeros(n_states, np.int64)
    nbytes = np.zeros(n_states, np.int64)
    for r in located.runs:
        per_chain[r.chain] += r.count
        entries[r.sid] += r.count
        nbytes[r.sid] += r.count * r.stride
    for e in [located.chained, *(p[2] for p in (located.pieces or []))]:
        if len(e):
            per_chain += np.bincount(e.chain, minlength=n_chains)
            entries += np.bincount(e.sid, minlength=n_states)
            nbytes += np.bincount(e.sid, weights=8 + e.klen + e.vlen, minlength=n_states).astype(np.int64)
    return per_chain, entries, nbytes


def _all_entries(located: Located) -> Entries:
    return Entries.concat([*(r.entries() for r in located.runs), located.chained,
                           *(p[2] for p in (located.pieces or []))])


def _top_keys(lay: K.KeyedLayout, buf: np.ndarray, e: Entries, names: list[str], kg_of_chain: np.ndarray | None,
              n: int, where: str) -> list[tuple[object, int, int, int]]:
    """The `n` keys of `e` with the most entry bytes (every state, timers too): key bytes grouped, then decoded."""
    if not len(e) or n <= 0:
        return []
    P = lay.prefix_bytes
    timer_state = np.array([n.startswith("_timer_state/") for n in names] or [False], bool)
    kstart = e.kp + P + np.where(timer_state[e.sid], 8, 0)  # a timer's key follows its timestamp
    keys, kend = decode_open(lay.key_type, buf, kstart, e.kp + e.klen, where, DecodeStats(), "key")
    lens = kend - kstart
    if len(lens) and (lens == lens[0]).all() and lens[0] <= 8:  # fixed-width keys: their bytes as one integer
        w = int(lens[0])
        raw = np.zeros((len(lens), 8), np.uint8)
        raw[:, 8 - w:] = gather_fixed(buf, kstart, w)
        rowid = np.unique(raw.view(">u8").reshape(-1), return_inverse=True)[1].reshape(-1)
    else:
        data = gather_ranges(buf, kstart, lens)
        offsets = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        arr = pa.Array.from_buffers(pa.large_binary(), len(lens), [None, pa.py_buffer(offsets.tobytes()),
                                                                   pa.py_buffer(data.tobytes())])
        rowid = arr.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.int64)
    # a key's bytes identify it (its key group follows from it), so `rowid` numbers the keys 0..k-1
    kg = K.key_group_of_entries(buf, e.kp, P)
    size = np.bincount(rowid, weights=8 + e.klen + e.vlen).astype(np.int64)
    count = np.bincount(rowid)
    first = np.full(len(size), len(rowid), np.int64)
    first[rowid[::-1]] = np.arange(len(rowid) - 1, -1, -1)
    best = np.argsort(-size, kind="stable")[:n]
    return [(keys[int(first[i])].as_py(), int(kg[first[i]]), int(size[i]), int(count[i])) for i in best.tolist()]


def keyed_sizes(reader: FlinkStateReader, op: OperatorState, *, top: int = 0) -> KeyedSizes | None:
    """Entries and bytes of `op`'s keyed state per key group, state and subtask, and its `top` largest keys."""
    lay = reader.layout(op)
    if lay is None:
        return None
    m = op.max_parallelism
    out = KeyedSizes(m, np.zeros(m, np.int64), np.zeros(m, np.int64))
    where = f"{reader.root} operator {op.uid or op.operator_id}"
    best: list[tuple[object, int, int, int]] = []
    for h in reader.keyed_handles(op):
        names = [s.name for s in reader.proxy(h).states]
        sub_entries = 0
        if isinstance(h, KeyGroupsHandle) and reader.handle_layout(h) == "canonical":
            spans = reader.key_group_spans(h)
            stored = sum(end - o for _, o, end in spans)
            for batch in _batches(spans):
                got = _measure_canonical(reader, h, lay, batch, names, out, where, top)
                sub_entries += got[0]
                best += got[1]
            for kg, o, end in spans:
                out.kg_bytes[kg] += end - o
        else:  # native RocksDB or a heap checkpoint: the reader's canonical re-lay, measured by entry sizes
            part = (read_native(reader.files, h, reader.proxy(h), lay.prefix_bytes, None, reader.native)
                    if isinstance(h, IncrementalKeyedHandle) else
                    read_heap(reader.files, h, reader.proxy(h), lay.prefix_bytes, None))
            buf, e = concat_entries([part])
            groups = K.key_group_of_entries(buf, e.kp, lay.prefix_bytes)
            entry_bytes = 8 + e.klen + e.vlen
            out.kg_bytes += np.bincount(groups, weights=entry_bytes, minlength=m).astype(np.int64)
            out.kg_entries += np.bincount(groups, minlength=m)
            _add_states(out, names, e.sid, entry_bytes)
            sub_entries = len(e)
            best += _top_keys(lay, buf, e, names, None, top, where)
            stored = _handle_bytes(reader, h)
        start = h.start
        end = h.end if isinstance(h, KeyGroupsHandle) else h.start + h.count - 1
        index = next((st.index for st in op.subtasks if st.managed_keyed is h), len(out.subtasks))
        out.subtasks.append((index, start, end, stored, sub_entries))
    out.top = sorted(best, key=lambda t: -t[2])[:top]
    return out


def _handle_bytes(reader: FlinkStateReader, h) -> int:
    if isinstance(h, IncrementalKeyedHandle):
        return sum(reader.files.size(s) for _, s in (*h.shared, *h.private)) + reader.files.size(h.meta)
    return reader.files.size(h.delegate)


def _batches(spans: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    out: list[list[tuple[int, int, int]]] = []
    size = BATCH
    for s in spans:
        if size >= BATCH:
            out.append([])
            size = 0
        out[-1].append(s)
        size += s[2] - s[1]
    return out


def _add_states(out: KeyedSizes, names: list[str], sid: np.ndarray, size: np.ndarray) -> None:
    if not len(sid):
        return
    n = np.bincount(sid, minlength=len(names))
    b = np.bincount(sid, weights=size, minlength=len(names)).astype(np.int64)
    for i, name in enumerate(names):
        if n[i]:
            out.state_entries[name] = out.state_entries.get(name, 0) + int(n[i])
            out.state_bytes[name] = out.state_bytes.get(name, 0) + int(b[i])


def _measure_canonical(reader: FlinkStateReader, h: KeyGroupsHandle, lay: K.KeyedLayout,
                       spans: list[tuple[int, int, int]], names: list[str], out: KeyedSizes, where: str,
                       top: int) -> tuple[int, list]:
    lo, hi = spans[0][1], max(end for _, _, end in spans)
    buf = reader.files.range_array(h.delegate, lo, hi)
    starts = np.array([o - lo for _, o, _ in spans], np.int64)
    limits = np.array([end - lo for _, _, end in spans], np.int64)
    if reader.proxy(h).compressed:
        pieces, new_starts, pos = [], [], 0
        for s, lim in zip(starts.tolist(), limits.tolist()):
            data, _ = unframe_snappy(buf[s:lim].tobytes(), f"{where} (Snappy key group at {lo + s})")
            pieces.append(np.frombuffer(data, np.uint8))
            new_starts.append(pos)
            pos += len(data)
        buf = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
        starts = np.array(new_starts, np.int64)
        limits = np.append(starts[1:], pos)
    chain_kg = np.array([kg for kg, _, _ in spans], np.int64)
    located = locate(buf, starts, limits, where, DecodeStats(), chain_kg=chain_kg, prefix_bytes=lay.prefix_bytes,
                     value_width=K.value_width(lay))
    per_chain, entries, nbytes = _count(located, len(spans), len(names))
    out.kg_entries[chain_kg] += per_chain
    for i, name in enumerate(names):
        if entries[i]:
            out.state_entries[name] = out.state_entries.get(name, 0) + int(entries[i])
            out.state_bytes[name] = out.state_bytes.get(name, 0) + int(nbytes[i])
    found = int(per_chain.sum())
    return found, _top_keys(lay, buf, _all_entries(located), names, chain_kg, top, where) if top else []
