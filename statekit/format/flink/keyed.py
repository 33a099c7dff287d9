"""Canonical keyed state streams decoded in bulk: entries located with numpy, then one Arrow keyed table and one timers table.

Boundary: input is one operator's `KeyGroupsHandle`s (from `metadata`) and their files (`files`);
output is statekit's keyed table (``key_group``, ``key``, [``namespace``], one column per state)
and timers table. Layout (section 3.5 of `../shared/flink/FORMAT.md`): per key group
``i16 stateId`` then ``(i32 klen, key, i32 vlen, value)*``; the last entry of a state run has
0x80 in its first key byte and is followed by the next state id or 0xFFFF.

Entries are located by `locate`. When every state is a strided run of fixed-width keys and values
(Long keys, numeric ValueStates) the table is cut straight out of 2-D strided views of the bytes
(``strided-view``). Otherwise keys and values are decoded column-wise (`values.bulk`, ``bulk``),
with per-record decoding only for irregular layouts (``per-record``). `DecodeStats` says which
path each state took.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.flink.binary import DataInput
from statekit.format.flink.files import StateFiles
from statekit.format.flink.locate import DecodeStats, Entries, Located, Run, corrupt
from statekit.format.flink.metadata import KeyGroupsHandle
from statekit.format.flink.proxy import KeyedProxy, StateMeta, read_keyed_proxy
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.values import (
    FIXED_DTYPES,
    bulk,
    decode_records,
    gather_fixed,
    gather_ranges,
    reader,
    to_arrow,
)
from statekit.types import parse_ddl

__all__ = ["DecodeStats", "Entries", "KeyedLayout", "KeyedResult", "decode", "layout", "read_proxy", "state_ddl"]


@dataclass(frozen=True)
class KeyedLayout:
    """What the proxies of an operator's keyed streams declare, merged over subtasks (states by name)."""

    key_type: FlinkType
    states: tuple[StateMeta, ...]  # keyed states (KEY_VALUE), first-seen order
    timers: tuple[StateMeta, ...]  # timer queues
    namespace_type: FlinkType | None  # None: VoidNamespace only
    prefix_bytes: int


def prefix_bytes(max_parallelism: int) -> int:
    return 1 if max_parallelism <= 128 else 2


def _proxy_end(h: KeyGroupsHandle, size: int) -> int:
    nz = [o for o in h.offsets if o]
    return min(nz) if nz else size


def read_proxy(files: StateFiles, h: KeyGroupsHandle) -> KeyedProxy:
    """The backend proxy of one keyed stream (reads only the bytes before its first key group)."""
    size = files.size(h.delegate)
    end = _proxy_end(h, size)
    if end > size:
        raise CorruptSavepointError(
            f"{files.root}: _metadata points at offset {end} of {files.describe(h.delegate)}, past its end "
            f"({size} bytes). The savepoint is damaged; take a new one."
        )
    data = files.read_range(h.delegate, 0, end)
    return read_keyed_proxy(DataInput(data, files.describe(h.delegate)))


def layout(proxies: list[KeyedProxy], max_parallelism: int, where: str) -> KeyedLayout:
    """The table layout (key type, namespace type, state columns) shared by an operator's keyed streams."""
    if not proxies:
        raise ValueError("no keyed streams")
    key_type = proxies[0].key_type
    states: dict[str, StateMeta] = {}
    timers: dict[str, StateMeta] = {}
    for p in proxies:
        if p.key_type.raw != key_type.raw:
            raise CorruptSavepointError(f"{where}: subtasks disagree on the key serializer")
        for s in p.states:
            into = timers if s.is_timer else states if s.backend_type in ("KEY_VALUE", "KEY_VALUE_V2") else None
            if into is None:
                continue
            seen = into.setdefault(s.name, s)
            if {k: v.raw for k, v in seen.serializers.items()} != {k: v.raw for k, v in s.serializers.items()}:
                raise CorruptSavepointError(f"{where}: subtasks disagree on the serializers of state {s.name!r}")
    ns: FlinkType | None = None
    for s in list(states.values()):
        t = s.serializers.get("NAMESPACE_SERIALIZER")
        if t is not None and t.kind != "void":
            if t.kind != "window":
                raise UnsupportedFormatError(
                    f"{where}: state {s.name!r} uses namespace serializer {t.serializer}; statekit reads "
                    "VoidNamespace and TimeWindow namespaces."
                )
            ns = t
    for s in timers.values():
        t = s.value_type.children[1] if s.value_type.kind == "timer" else None
        if t is not None and t.kind == "window":
            ns = t
    return KeyedLayout(key_type, tuple(states.values()), tuple(timers.values()), ns, prefix_bytes(max_parallelism))


# -- decoding ---------------------------------------------------------------------------------------
def _decode_open(t: FlinkType, buf: np.ndarray, starts: np.ndarray, limits: np.ndarray, where: str,
                 stats: DecodeStats, label: str) -> tuple[pa.Array, np.ndarray]:
    """Values of `t` at `starts` whose ends are not known in advance (keys, namespaces)."""
    try:
        got = bulk(t, buf, starts)
    except IndexError:
        got = None
    if got is not None and (got[1] <= limits).all():
        stats.states.setdefault(label, "bulk")
        return got
    stats.states[label] = "per-record"
    r = reader(t)
    mv = buf.data
    vals, ends = [], np.empty(len(starts), np.int64)
    for i, (s, e) in enumerate(zip(starts.tolist(), limits.tolist())):
        inp = DataInput(mv, where, pos=s, end=e)
        vals.append(r(inp))
        ends[i] = inp.pos
    return to_arrow(vals, t), ends


def _decode_exact(t: FlinkType, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, where: str,
                  stats: DecodeStats, label: str) -> pa.Array:
    """Values of `t` spanning exactly [starts, ends); opaque serializers give the raw bytes."""
    if not t.decodable:
        stats.states[label] = f"raw bytes ({t.serializer})"
        data = gather_ranges(buf, starts, ends - starts)
        offsets = np.zeros(len(starts) + 1, np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        return pa.Array.from_buffers(pa.large_binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]).cast(pa.binary())
    try:
        got = bulk(t, buf, starts)
    except IndexError:
        got = None
    if got is not None and np.array_equal(got[1], ends):
        stats.states.setdefault(label, "bulk")
        return got[0]
    stats.states[label] = "per-record"
    return decode_records(t, buf, starts, ends, where)


def _decode_list(t: FlinkType, buf: np.ndarray, vp: np.ndarray, vlen: np.ndarray, where: str,
                 stats: DecodeStats, label: str) -> pa.Array:
    """ListState values: elements separated by one ',' byte (ListDelimitedSerializer)."""
    elem = t.children[0] if t.kind == "list" else t
    if not elem.decodable:
        return _decode_exact(FlinkType("binary", elem.snapshot_class, 0, b""), buf, vp, vp + vlen, where, stats, label)
    w = elem.fixed_size
    if w is not None and len(vp):
        counts, rem = np.divmod(vlen + 1, w + 1)
        if not rem.any() and counts.min() > 0:
            total = int(counts.sum())
            row = np.repeat(np.arange(len(vp)), counts)
            first = np.zeros(len(vp) + 1, np.int64)
            np.cumsum(counts, out=first[1:])
            j = np.arange(total) - first[row][:total]
            starts = vp[row] + j * (w + 1)
            commas = starts[j < counts[row] - 1] + w
            if (buf[commas] == 0x2C).all():
                got = bulk(elem, buf, starts)
                if got is not None:
                    stats.states.setdefault(label, "bulk")
                    return pa.ListArray.from_arrays(pa.array(first, pa.int32()), got[0])
    stats.states[label] = "per-record"
    r = reader(elem)
    mv = buf.data
    out = []
    for s, n in zip(vp.tolist(), vlen.tolist()):
        inp = DataInput(mv, where, pos=s, end=s + n)
        items = [r(inp)]
        while inp.pos < s + n:
            if inp.u8("a list delimiter") != 0x2C:
                raise inp.fail("list elements are not separated by ','")
            items.append(r(inp))
        out.append(items)
    return pa.array(out, pa.list_(parse_ddl(elem.ddl())))


@dataclass(frozen=True)
class KeyedResult:
    """The rows of one keyed operator: its keyed table and its timers table."""
    table: pa.Table  # key_group, key, [namespace], one column per state
    timers: pa.Table  # key_group, key, [namespace], timestamp, domain


@dataclass
class _Group:
    meta: StateMeta
    runs: list[Run]
    chained: np.ndarray  # indexes into Located.chained
    pieces: list[Entries] | None = None  # scanned state runs

    def entries(self, located: Located) -> Entries:
        """The state's entries: key groups located by strided runs first, then the scanned/walked ones."""
        # A key group is located wholly one way (runs, scan or walk), so every state lists its keys in the
        # same order here; `_assemble` restores key-group order if the ways were mixed.
        parts = [Entries.of_runs(self.runs)] if self.runs else []
        parts += self.pieces or []
        if len(self.chained):
            parts.append(located.chained.take(self.chained))
        return Entries.concat(parts)


def group_entries(located: Located, stream_of_chain: np.ndarray, sid_maps: list[dict[int, StateMeta]],
           where: str) -> dict[str, _Group]:
    """Entries by state (per-stream state ids resolved through each stream's proxy)."""
    groups: dict[str, _Group] = {}
    empty = np.zeros(0, np.int64)

    def meta_of(stream: int, sid: int) -> StateMeta:
        meta = sid_maps[stream].get(sid)
        if meta is None:
            raise corrupt(where, f"an entry names state id {sid}, which its stream's proxy does not declare")
        return meta

    for r in located.runs:
        m = meta_of(int(stream_of_chain[r.chain]), r.sid)
        groups.setdefault(m.name, _Group(m, [], empty)).runs.append(r)
    for chain, sid, piece in located.pieces or []:
        m = meta_of(int(stream_of_chain[chain]), sid)
        g = groups.setdefault(m.name, _Group(m, [], empty))
        if g.pieces is None:
            g.pieces = []
        g.pieces.append(piece)  # scanned entries carry their key group: the scan only takes matching prefixes
    ch = located.chained
    if len(ch):
        codes = stream_of_chain[ch.chain] * 65536 + ch.sid
        for code in np.flatnonzero(np.bincount(codes)).tolist():
            m = meta_of(*divmod(code, 65536))
            g = groups.setdefault(m.name, _Group(m, [], empty))
            g.chained = np.concatenate([g.chained, np.flatnonzero(codes == code)])
    return groups


def _strided_state(lay: KeyedLayout, buf: np.ndarray, g: _Group, chain_kg: np.ndarray) -> list | None:
    """Per run (key groups, keys, values) as numpy arrays copied out of strided views, if the state allows it."""
    P, kt, vt, meta = lay.prefix_bytes, lay.key_type, g.meta.value_type, g.meta
    ns = meta.serializers.get("NAMESPACE_SERIALIZER")
    wk, wv = FIXED_DTYPES.get(kt.kind), FIXED_DTYPES.get(vt.kind)
    if (len(g.chained) or g.pieces or not g.runs or wk is None or wv is None or meta.keyed_kind not in ("value", "reducing", "aggregating")
            or (ns is not None and ns.kind != "void")):
        return None
    wk_, wv_ = np.dtype(wk).itemsize, np.dtype(wv).itemsize
    if any(r.klen != P + wk_ + 1 or r.vlen != wv_ for r in g.runs):
        return None
    nk, nv = np.dtype(wk).newbyteorder("="), np.dtype(wv).newbyteorder("=")
    # astype straight from the unaligned big-endian strided views is numpy's fastest path here; the
    # parts stay separate chunks (no concatenation copy). A run lies in one key group (the reader checked
    # every entry's prefix), so its key-group column is a constant.
    return [(np.full(r.count, chain_kg[r.chain], np.int32), r.field(buf, 4 + P, wk).astype(nk),
             r.field(buf, 8 + r.klen, wv).astype(nv)) for r in g.runs]


def _strided_table(lay: KeyedLayout, buf: np.ndarray, groups: dict[str, _Group], chain_kg: np.ndarray,
                   stats: DecodeStats) -> pa.Table | None:
    """The keyed table straight from strided views: every state fixed-width, every state listing the same keys."""
    keyed = [g for g in groups.values() if not g.meta.is_timer]
    if not keyed or lay.namespace_type is not None:
        return None
    cut = []
    for g in keyed:
        got = _strided_state(lay, buf, g, chain_kg)
        if got is None:
            return None
        cut.append((g, got))
    base = cut[0][1]
    for _, parts in cut[1:]:  # the same keys in the same order: then one row per entry, no join
        if len(parts) != len(base) or not all(np.array_equal(a[1], b[1]) for a, b in zip(parts, base)):
            return None
    cols = {"key_group": pa.chunked_array([pa.array(p[0]) for p in base], pa.int32()),
            "key": pa.chunked_array([pa.array(p[1]) for p in base])}
    for g, parts in cut:
        cols[g.meta.name] = pa.chunked_array([pa.array(p[2]) for p in parts])
        stats.states[g.meta.name] = "strided-view"  # type: ignore[index]
    stats.states["key"] = "strided-view"  # type: ignore[index]
    n = sum(len(p[0]) for p in base)
    for meta in lay.states:
        if meta.name not in cols:
            cols[meta.name] = pa.nulls(n, _column_type(meta))
    return pa.table({k: cols[k] for k in ["key_group", "key"] + [m.name for m in lay.states]})


def decode(lay: KeyedLayout, buf: np.ndarray, located: Located, stream_of_chain: np.ndarray, chain_kg: np.ndarray | None,
           sid_maps: list[dict[int, StateMeta]], where: str, stats: DecodeStats) -> KeyedResult:
    """Turn located entries into the keyed and timers tables."""
    P = lay.prefix_bytes
    groups = group_entries(located, stream_of_chain, sid_maps, where)
    key_t = lay.key_type
    timer_tables = []
    for name, g in groups.items():
        if g.meta.is_timer:
            timer_tables.append(_timers(lay, buf, g.meta, g.entries(located), where, stats))
    table = _strided_table(lay, buf, groups, chain_kg, stats) if chain_kg is not None else None
    if table is None:
        row_keys = []
        for name, g in groups.items():
            meta = g.meta
            if meta.is_timer:
                continue
            e = g.entries(located)
            kstart = e.kp + P
            kend_all = e.kp + e.klen
            keys, kend = _decode_open(key_t, buf, kstart, kend_all, where, stats, "key")
            nst = meta.serializers.get("NAMESPACE_SERIALIZER")
            nsw = 16 if nst is not None and nst.kind == "window" else 1
            ns_arr = None
            if nst is not None and nsw == 16:
                ns_arr, _ = _decode_open(nst, buf, kend, kend_all, where, stats, f"{name} (ns)")
            nsend = kend + nsw
            if meta.keyed_kind != "map" and not np.array_equal(nsend, kend_all):
                raise corrupt(where, f"keys of state {name!r} do not end where their entries do")
            row_keys.append((name, e, kstart, nsend, keys, ns_arr, _key_groups(buf, e.kp, P)))
        table = _assemble(lay, buf, row_keys, groups, where, stats) if row_keys else _empty_keyed(lay)
    timers = pa.concat_tables(timer_tables) if timer_tables else _empty_timers(lay)
    return KeyedResult(table, timers)


def _key_groups(buf: np.ndarray, kp: np.ndarray, P: int) -> np.ndarray:
    first = buf[kp].astype(np.int64) & 0x7F
    return (first << 8 | buf[kp + 1]) if P == 2 else first


def _timers(lay: KeyedLayout, buf: np.ndarray, meta: StateMeta, e: Entries, where: str, stats: DecodeStats) -> pa.Table:
    P, name = lay.prefix_bytes, meta.name
    kstart, kend_all = e.kp + P, e.kp + e.klen
    raw = gather_fixed(buf, kstart, 8).reshape(-1).view(">i8")
    ts = raw.astype(np.int64) ^ np.int64(-(1 << 63))  # TimerSerializer flips the sign bit
    keys, kend = _decode_open(lay.key_type, buf, kstart + 8, kend_all, where, stats, f"{name} (key)")
    ntype = meta.value_type.children[1] if meta.value_type.kind == "timer" else None
    cols = {"key_group": pa.array(_key_groups(buf, e.kp, P).astype(np.int32)), "key": keys}
    if lay.namespace_type is not None:
        if ntype is not None and ntype.kind == "window":
            cols["namespace"], _ = _decode_open(ntype, buf, kend, kend_all, where, stats, f"{name} (ns)")
        else:
            cols["namespace"] = pa.nulls(len(e), parse_ddl(lay.namespace_type.ddl()))
    cols["timestamp"] = pa.array(ts)
    cols["domain"] = pa.array([meta.timer_domain] * len(e), pa.string())
    stats.states.setdefault(name, "bulk")  # type: ignore[union-attr]
    return pa.table(cols)


def _assemble(lay: KeyedLayout, buf: np.ndarray, row_keys: list, groups: dict[str, _Group], where: str,
              stats: DecodeStats) -> pa.Table:
    """One row per distinct (key, namespace); fast when every state lists the same keys in the same order."""
    rowid, nrows, firsts = _rows(buf, row_keys)
    srcs = [rk[4] for rk in row_keys]
    allkeys = pa.concat_arrays(srcs) if len(srcs) > 1 else srcs[0]
    take = pa.array(firsts)
    allkg = np.concatenate([rk[6] for rk in row_keys])
    cols = {"key_group": pa.array(allkg[firsts].astype(np.int32)), "key": allkeys.take(take)}
    if lay.namespace_type is not None:
        nt = parse_ddl(lay.namespace_type.ddl())
        cols["namespace"] = pa.concat_arrays([rk[5] if rk[5] is not None else pa.nulls(len(rk[1]), nt)
                                              for rk in row_keys]).take(take)
    offset = 0
    pieces = {}
    for (name, e, kstart, nsend, _, _, _) in row_keys:
        rows = rowid[offset : offset + len(e)]
        offset += len(e)
        pieces[name] = _state_column(groups[name].meta, buf, e, nsend, rows, nrows, where, stats)
    for meta in lay.states:
        cols[meta.name] = pieces.get(meta.name, pa.nulls(nrows, _column_type(meta)))
    table = pa.table(cols)
    kg = cols["key_group"].to_numpy()
    if len(kg) > 1 and not (kg[1:] >= kg[:-1]).all():  # chained entries come step by step: group by key group
        table = table.take(pa.array(np.argsort(kg.astype(np.int16 if lay.prefix_bytes == 1 else np.int32),
                                               kind="stable")))
    return table


def _rows(buf: np.ndarray, row_keys: list) -> tuple[np.ndarray, int, np.ndarray]:
    """Row id of every entry (states concatenated), the row count, and each row's first entry."""
    lens = [rk[3] - rk[2] for rk in row_keys]
    n0 = len(row_keys[0][1])
    same = all(len(rk[1]) == n0 for rk in row_keys) and all(np.array_equal(lens[0], ln) for ln in lens)
    if same and len(row_keys) > 1:
        w = int(lens[0][0]) if n0 and (lens[0] == lens[0][0]).all() else None
        if w is not None:
            base = gather_fixed(buf, row_keys[0][2], w)
            same = all(np.array_equal(base, gather_fixed(buf, rk[2], w)) for rk in row_keys[1:])
        else:
            base = gather_ranges(buf, row_keys[0][2], lens[0])
            same = all(np.array_equal(base, gather_ranges(buf, rk[2], ln)) for rk, ln in zip(row_keys[1:], lens[1:]))
    if same:
        ids = np.arange(n0, dtype=np.int64)
        return np.tile(ids, len(row_keys)), n0, ids
    starts = np.concatenate([rk[2] for rk in row_keys])
    ln = np.concatenate(lens)
    data = gather_ranges(buf, starts, ln)
    offsets = np.zeros(len(ln) + 1, np.int64)
    np.cumsum(ln, out=offsets[1:])
    raw = pa.Array.from_buffers(pa.large_binary(), len(ln), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    enc = raw.dictionary_encode()
    rowid = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    nrows = len(enc.dictionary)
    firsts = np.empty(nrows, np.int64)
    firsts[rowid[::-1]] = np.arange(len(rowid) - 1, -1, -1)
    return rowid, nrows, firsts


def _column_type(meta: StateMeta) -> pa.DataType:
    return parse_ddl(state_ddl(meta))


def state_ddl(meta: StateMeta) -> str:
    """The column type of a keyed state: T, array<T> for ListState, map<K,V> for MapState."""
    t = meta.value_type
    if meta.keyed_kind == "list":
        elem = t.children[0] if t.kind == "list" else t
        return f"array<{elem.ddl()}>" if elem.decodable else "binary"
    if meta.keyed_kind == "map" and t.kind == "map":
        return f"map<{t.children[0].ddl()},{t.children[1].ddl()}>"
    return t.ddl()


def _state_column(meta: StateMeta, buf: np.ndarray, e: Entries, nsend: np.ndarray,
                  rows: np.ndarray, nrows: int, where: str, stats: DecodeStats) -> pa.Array:
    vp, vlen = e.vp, e.vlen
    name = meta.name
    if meta.keyed_kind == "map":
        t = meta.value_type
        kt, vt = t.children if t.kind == "map" else (t, t)
        ukeys = _decode_exact(kt, buf, nsend, e.kp + e.klen, where, stats, name)
        if (vlen < 1).any():
            raise corrupt(where, f"a map entry of state {name!r} has no null flag")
        isnull = buf[vp] != 0
        vals = _decode_exact(vt, buf, vp + 1, vp + vlen, where, stats, name) if not isnull.any() else \
            _nullable(vt, buf, vp, vlen, isnull, where, stats, name)
        order = np.argsort(rows, kind="stable")
        counts = np.bincount(rows, minlength=nrows)
        offsets = np.zeros(nrows + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        take = pa.array(order)
        m = pa.MapArray.from_arrays(pa.array(offsets), ukeys.take(take), vals.take(take),
                                    mask=pa.array(counts == 0))
        return m.cast(_column_type(meta))
    in_order = len(rows) == nrows and np.array_equal(rows, np.arange(nrows))
    if not in_order and len(np.unique(rows)) != len(rows):
        raise corrupt(where, f"state {name!r} holds one key twice")
    if meta.keyed_kind == "list":
        vals = _decode_list(meta.value_type, buf, vp, vlen, where, stats, name)
    else:
        vals = _decode_exact(meta.value_type, buf, vp, vp + vlen, where, stats, name)
    if in_order:
        return vals.cast(_column_type(meta)) if vals.type != _column_type(meta) else vals
    idx = np.full(nrows, -1, np.int64)
    idx[rows] = np.arange(len(rows))
    return vals.take(pa.array(idx, mask=idx < 0)).cast(_column_type(meta))


def _nullable(t: FlinkType, buf, vp, vlen, isnull, where, stats, name) -> pa.Array:
    ok = np.flatnonzero(~isnull)
    vals = _decode_exact(t, buf, vp[ok] + 1, vp[ok] + vlen[ok], where, stats, name)
    idx = np.full(len(vp), -1, np.int64)
    idx[ok] = np.arange(len(ok))
    return vals.take(pa.array(idx, mask=idx < 0))


def keyed_schema_of(lay: KeyedLayout) -> pa.Schema:
    fields = [pa.field("key_group", pa.int32(), nullable=False), pa.field("key", parse_ddl(lay.key_type.ddl()))]
    if lay.namespace_type is not None:
        fields.append(pa.field("namespace", parse_ddl(lay.namespace_type.ddl())))
    fields += [pa.field(s.name, _column_type(s)) for s in lay.states]
    return pa.schema(fields)


def _empty_keyed(lay: KeyedLayout) -> pa.Table:
    return keyed_schema_of(lay).empty_table()


def _empty_timers(lay: KeyedLayout) -> pa.Table:
    fields = [pa.field("key_group", pa.int32(), nullable=False), pa.field("key", parse_ddl(lay.key_type.ddl()))]
    if lay.namespace_type is not None:
        fields.append(pa.field("namespace", parse_ddl(lay.namespace_type.ddl())))
    fields += [pa.field("timestamp", pa.int64()), pa.field("domain", pa.string())]
    return pa.schema(fields).empty_table()
