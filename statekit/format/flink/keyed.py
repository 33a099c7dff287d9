"""Canonical keyed state streams decoded in bulk: entries located with numpy, then one Arrow keyed table and one timers table.

Boundary: input is one operator's `KeyGroupsHandle`s (from `metadata`) and their files (`files`);
output is statekit's keyed table (``key_group``, ``key``, [``namespace``], one column per state)
and timers table. Layout (section 3.5 of `../shared/flink/FORMAT.md`): per key group
``i16 stateId`` then ``(i32 klen, key, i32 vlen, value)*``; the last entry of a state run has
0x80 in its first key byte and is followed by the next state id or 0xFFFF.

Locating entries: each key group is a chain. Runs of equal-sized entries are found with one
strided probe (the ``strided`` path: Long keys and values); chains with variable-sized entries
advance all together, one entry per numpy step over every key group at once (the ``chained``
path). Values are then decoded column-wise (`values.bulk`), with per-record decoding only for
irregular layouts (the ``per-record`` path). `DecodeStats` says which path each state took.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.flink.binary import DataInput
from statekit.format.flink.files import StateFiles
from statekit.format.flink.metadata import KeyGroupsHandle
from statekit.format.flink.proxy import KeyedProxy, StateMeta, read_keyed_proxy
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.values import bulk, decode_records, gather_fixed, gather_ranges, reader, to_arrow
from statekit.types import parse_ddl

END_OF_KEY_GROUP = 0xFFFF
_PROBE = 64  # first strided probe; doubled while the run goes on


@dataclass
class DecodeStats:
    """How each part was decoded: ``strided`` / ``chained`` entries, and per state ``bulk`` or ``per-record``."""

    strided_entries: int = 0
    chained_entries: int = 0
    states: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        where = f"entries located: {self.strided_entries} strided, {self.chained_entries} chained"
        return where + "; " + ", ".join(f"{k}: {v}" for k, v in sorted(self.states.items()))


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
    if not proxies:
        raise ValueError("no keyed streams")
    key_type = proxies[0].key_type
    states: dict[str, StateMeta] = {}
    timers: dict[str, StateMeta] = {}
    for p in proxies:
        if p.key_type.raw != key_type.raw:
            raise CorruptSavepointError(f"{where}: subtasks disagree on the key serializer")
        for s in p.states:
            if s.is_timer:
                timers.setdefault(s.name, s)
            elif s.backend_type in ("KEY_VALUE", "KEY_VALUE_V2"):
                states.setdefault(s.name, s)
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


# -- locating entries -------------------------------------------------------------------------------
def _u16(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    return buf[at].astype(np.int64) << 8 | buf[at + 1]


def _be32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    b = gather_fixed(buf, at, 4).astype(np.int64)
    v = b[:, 0] << 24 | b[:, 1] << 16 | b[:, 2] << 8 | b[:, 3]
    return np.where(v >= 1 << 31, v - (1 << 32), v)


@dataclass
class Entries:
    chain: np.ndarray
    sid: np.ndarray
    kp: np.ndarray
    klen: np.ndarray
    vp: np.ndarray
    vlen: np.ndarray


def _corrupt(where: str, why: str) -> CorruptSavepointError:
    return CorruptSavepointError(
        f"{where}: {why}. The key group is damaged (a bad length or offset); the savepoint cannot be read. "
        "Take a new savepoint or restore this one from a copy."
    )


def locate(buf: np.ndarray, starts: np.ndarray, limits: np.ndarray, where: str, stats: DecodeStats) -> Entries:
    """Every entry of the key groups starting at `starts` (each ending before `limits`), chain-major order."""
    parts: list[tuple[np.ndarray, ...]] = []
    pending: list[tuple[int, int, int]] = []  # (chain, position, state id) left for the chained walk
    n = len(buf)
    for c, (p, lim) in enumerate(zip(starts.tolist(), limits.tolist())):
        if p + 2 > lim or lim > n:
            raise _corrupt(where, f"key group at offset {p} lies outside its stream")
        sid = int(buf[p]) << 8 | int(buf[p + 1])
        p += 2
        while True:
            got = _strided(buf, p, lim)
            if got is None:
                pending.append((c, p, sid))
                break
            count, stride, k, v, ends_run = got
            pos = p + np.arange(count, dtype=np.int64) * stride
            parts.append((np.full(count, c), np.full(count, sid), pos + 4, np.full(count, k), pos + 8 + k,
                          np.full(count, v)))
            stats.strided_entries += count
            p += count * stride
            if ends_run:
                if p + 2 > lim:
                    raise _corrupt(where, f"a state run ends at offset {p} without a following state id")
                sid = int(buf[p]) << 8 | int(buf[p + 1])
                p += 2
                if sid == END_OF_KEY_GROUP:
                    break
    if pending:
        parts.extend(_chained(buf, pending, limits, where, stats))
    if not parts:
        e = np.zeros(0, np.int64)
        return Entries(e, e, e, e, e, e)
    cols = [np.concatenate([p[i] for p in parts]).astype(np.int64) for i in range(6)]
    order = np.argsort(cols[0].astype(np.int32 if len(starts) >= 1 << 15 else np.int16), kind="stable")
    if not (order[:-1] < order[1:]).all():
        cols = [c[order] for c in cols]
    return Entries(*cols)


def _strided(buf: np.ndarray, p: int, lim: int) -> tuple[int, int, int, int, bool] | None:
    """A run of equal-sized entries from `p`: (count, stride, klen, vlen, run ends), or None if under 2 entries."""
    if p + 8 > lim:
        return None
    k = int.from_bytes(buf[p : p + 4].tobytes(), "big", signed=True)
    if k <= 0 or p + 8 + k > lim:
        return None
    v = int.from_bytes(buf[p + 4 + k : p + 8 + k].tobytes(), "big", signed=True)
    if v < 0 or p + 8 + k + v > lim:
        return None
    stride = 8 + k + v
    room = (lim - p) // stride
    done, block = 0, _PROBE
    header = np.frombuffer(np.array([k], ">i4").tobytes() + b"", np.uint8)
    vheader = np.frombuffer(np.array([v], ">i4").tobytes(), np.uint8)
    while done < room:
        m = min(block, room - done)
        pos = p + (done + np.arange(m, dtype=np.int64)) * stride
        ok = (gather_fixed(buf, pos, 4) == header).all(axis=1) & (gather_fixed(buf, pos + 4 + k, 4) == vheader).all(axis=1)
        flags = (buf[pos + 4] & 0x80) != 0
        bad = np.flatnonzero(~ok)
        flagged = np.flatnonzero(flags)
        first_bad = int(bad[0]) if len(bad) else m
        first_flag = int(flagged[0]) if len(flagged) else m
        if first_flag < first_bad:
            count = done + first_flag + 1
            return (count, stride, k, v, True) if count >= 2 else None
        if first_bad < m:
            count = done + first_bad
            return (count, stride, k, v, False) if count >= 2 else None
        done += m
        block *= 4
    return None  # runs to the end of the stream without an end flag: let the chained walk report it


def _chained(buf: np.ndarray, pending: list[tuple[int, int, int]], limits: np.ndarray, where: str,
             stats: DecodeStats) -> list[tuple[np.ndarray, ...]]:
    """Advance every pending chain by one entry per step (variable-sized entries)."""
    C = np.array([c for c, _, _ in pending], np.int64)
    P = np.array([p for _, p, _ in pending], np.int64)
    S = np.array([s for _, _, s in pending], np.int64)
    L = limits[C].astype(np.int64)
    out: list[tuple[np.ndarray, ...]] = []
    ar4 = np.arange(4)
    while len(P):
        if (P + 8 > L).any():
            raise _corrupt(where, "an entry starts too close to the end of its key group")
        b = buf[P[:, None] + ar4].astype(np.int64)
        K = b[:, 0] << 24 | b[:, 1] << 16 | b[:, 2] << 8 | b[:, 3]
        kp = P + 4
        vq = kp + K
        if (K <= 0).any() or (K >= 1 << 31).any() or (vq + 4 > L).any():
            raise _corrupt(where, "an entry's key length runs past its key group")
        b = buf[vq[:, None] + ar4].astype(np.int64)
        V = b[:, 0] << 24 | b[:, 1] << 16 | b[:, 2] << 8 | b[:, 3]
        vp = vq + 4
        P = vp + V
        if (V >= 1 << 31).any() or (P > L).any():
            raise _corrupt(where, "an entry's value length runs past its key group")
        out.append((C, S, kp, K, vp, V))
        f = np.flatnonzero(buf[kp] & 0x80)
        if len(f):
            at = P[f]
            if (at + 2 > L[f]).any():
                raise _corrupt(where, "a state run ends without a following state id")
            nxt = _u16(buf, at)
            P[f] = at + 2
            S = S.copy()
            S[f] = nxt
            done = f[nxt == END_OF_KEY_GROUP]
            if len(done):
                keep = np.ones(len(P), bool)
                keep[done] = False
                C, P, S, L = C[keep], P[keep], S[keep], L[keep]
    stats.chained_entries += sum(len(o[0]) for o in out)
    return out


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
    mv = memoryview(buf)
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
    mv = memoryview(buf)
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
    table: pa.Table  # key_group, key, [namespace], one column per state
    timers: pa.Table  # key_group, key, [namespace], timestamp, domain


def decode(lay: KeyedLayout, buf: np.ndarray, entries: Entries, stream_of_chain: np.ndarray,
           sid_maps: list[dict[int, StateMeta]], where: str, stats: DecodeStats) -> KeyedResult:
    """Turn located entries into the keyed and timers tables."""
    P = lay.prefix_bytes
    kp, klen, vp, vlen = entries.kp, entries.klen, entries.vp, entries.vlen
    if len(kp):
        first = buf[kp].astype(np.int64) & 0x7F
        kg_all = (first << 8 | buf[kp + 1]) if P == 2 else first
    else:
        kg_all = np.zeros(0, np.int64)
    # map per-stream state ids to states
    by_state: dict[str, np.ndarray] = {}
    metas: dict[str, StateMeta] = {}
    if len(kp):
        streams = stream_of_chain[entries.chain]
        key = streams * 65536 + entries.sid
        uniq, inv = np.unique(key, return_inverse=True)
        for u_i, u in enumerate(uniq.tolist()):
            s, sid = divmod(u, 65536)
            meta = sid_maps[s].get(sid)
            if meta is None:
                raise _corrupt(where, f"an entry names state id {sid}, which the stream's proxy does not declare")
            sel = np.flatnonzero(inv == u_i)
            prev = by_state.get(meta.name)
            by_state[meta.name] = sel if prev is None else np.sort(np.concatenate([prev, sel]))
            metas[meta.name] = meta
    key_t, ns_t = lay.key_type, lay.namespace_type
    timer_tables = []
    row_keys: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, pa.Array, pa.Array | None]] = []
    for name, sel in by_state.items():
        meta = metas[name]
        kstart = kp[sel] + P
        kend_all = kp[sel] + klen[sel]
        if meta.is_timer:
            ts = gather_fixed(buf, kstart, 8).copy().view(">i8").ravel().astype(np.int64) ^ np.int64(-(1 << 63))
            keys, kend = _decode_open(key_t, buf, kstart + 8, kend_all, where, stats, f"{name} (key)")
            ntype = meta.value_type.children[1] if meta.value_type.kind == "timer" else None
            cols = {"key_group": pa.array(kg_all[sel].astype(np.int32)), "key": keys}
            if ns_t is not None:
                if ntype is not None and ntype.kind == "window":
                    cols["namespace"], _ = _decode_open(ntype, buf, kend, kend_all, where, stats, f"{name} (ns)")
                else:
                    cols["namespace"] = pa.nulls(len(sel), parse_ddl(ns_t.ddl()))
            cols["timestamp"] = pa.array(ts)
            cols["domain"] = pa.array([meta.timer_domain] * len(sel), pa.string())
            timer_tables.append(pa.table(cols))
            stats.states.setdefault(name, "bulk")
            continue
        keys, kend = _decode_open(key_t, buf, kstart, kend_all, where, stats, "key")
        nst = meta.serializers.get("NAMESPACE_SERIALIZER")
        nsw = 16 if nst is not None and nst.kind == "window" else 1
        ns_arr = None
        if nsw == 16:
            ns_arr, _ = _decode_open(nst, buf, kend, kend_all, where, stats, f"{name} (ns)")
        nsend = kend + nsw
        if meta.keyed_kind != "map" and not np.array_equal(nsend, kend_all):
            raise _corrupt(where, f"keys of state {name!r} do not end where their entries do")
        row_keys.append((name, sel, kstart, nsend, keys, ns_arr))
    # rows: one per distinct (key, namespace) bytes; fast path when every state lists the same keys in order
    if row_keys:
        rowid, nrows, firsts = _rows(buf, row_keys)
        srcs = [rk[4] for rk in row_keys]
        allkeys = pa.concat_arrays(srcs) if len(srcs) > 1 else srcs[0]
        take = pa.array(firsts)
        allkg = np.concatenate([kg_all[rk[1]] for rk in row_keys]) if len(row_keys) > 1 else kg_all[row_keys[0][1]]
        cols = {"key_group": pa.array(allkg[firsts].astype(np.int32)), "key": allkeys.take(take)}
        if ns_t is not None:
            ns_parts = [rk[5] if rk[5] is not None else pa.nulls(len(rk[1]), parse_ddl(ns_t.ddl())) for rk in row_keys]
            cols["namespace"] = pa.concat_arrays(ns_parts).take(take)
        offset = 0
        pieces = {}
        for (name, sel, kstart, nsend, _, _) in row_keys:
            rows = rowid[offset : offset + len(sel)]
            offset += len(sel)
            pieces[name] = _state_column(metas[name], buf, sel, entries, nsend, rows, nrows, where, stats)
        for meta in lay.states:
            cols[meta.name] = pieces.get(meta.name, pa.nulls(nrows, _column_type(meta)))
        table = pa.table(cols)
    else:
        table = _empty_keyed(lay)
    timers = pa.concat_tables(timer_tables) if timer_tables else _empty_timers(lay)
    return KeyedResult(table, timers)


def _rows(buf: np.ndarray, row_keys: list) -> tuple[np.ndarray, int, np.ndarray]:
    """Row id of every entry (states concatenated), the row count, and each row's first entry."""
    lens = [rk[3] - rk[2] for rk in row_keys]
    n0 = len(row_keys[0][1])
    same = all(len(rk[1]) == n0 for rk in row_keys) and all(np.array_equal(lens[0], l) for l in lens)
    if same and len(row_keys) > 1:
        w = int(lens[0][0]) if n0 and (lens[0] == lens[0][0]).all() else None
        if w is not None:
            base = gather_fixed(buf, row_keys[0][2], w)
            same = all(np.array_equal(base, gather_fixed(buf, rk[2], w)) for rk in row_keys[1:])
        else:
            base = gather_ranges(buf, row_keys[0][2], lens[0])
            same = all(np.array_equal(base, gather_ranges(buf, rk[2], l)) for rk, l in zip(row_keys[1:], lens[1:]))
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


def _state_column(meta: StateMeta, buf: np.ndarray, sel: np.ndarray, e: Entries, nsend: np.ndarray,
                  rows: np.ndarray, nrows: int, where: str, stats: DecodeStats) -> pa.Array:
    vp, vlen = e.vp[sel], e.vlen[sel]
    name = meta.name
    if meta.keyed_kind == "map":
        t = meta.value_type
        kt, vt = t.children if t.kind == "map" else (t, t)
        ukeys = _decode_exact(kt, buf, nsend, e.kp[sel] + e.klen[sel], where, stats, name)
        if (vlen < 1).any():
            raise _corrupt(where, f"a map entry of state {name!r} has no null flag")
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
        raise _corrupt(where, f"state {name!r} holds one key twice")
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
