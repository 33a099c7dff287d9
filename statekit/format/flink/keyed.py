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

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.arrow_memory import allocate, copy_buffer, empty_table, from_numpy, primitive
from statekit.format.flink.binary import DataInput
from statekit.format.flink.columns import decode_exact, decode_list, decode_nullable, decode_open
from statekit.format.flink.files import StateFiles
from statekit.format.flink.gather import gather_fixed, gather_ranges, ranges_equal
from statekit.format.flink.locate import DecodeStats, Entries, Located, Run, corrupt, equal_except_values
from statekit.format.flink.metadata import KeyGroupsHandle
from statekit.format.flink.proxy import KeyedProxy, StateMeta, read_keyed_proxy
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.strided import constant_column, fixed_column, fixed_columns, same_bytes, string_column
from statekit.format.flink.values import FIXED_DTYPES
from statekit.types import parse_ddl

__all__ = ["DecodeStats", "Entries", "KeyedLayout", "KeyedResult", "decode", "layout", "read_proxy", "state_ddl",
           "value_width"]


@dataclass(frozen=True)
class KeyedLayout:
    """What the proxies of an operator's keyed streams declare, merged over subtasks (states by name)."""

    key_type: FlinkType
    states: tuple[StateMeta, ...]  # keyed states (KEY_VALUE), first-seen order
    timers: tuple[StateMeta, ...]  # timer queues
    namespace_type: FlinkType | None  # None: VoidNamespace only
    prefix_bytes: int


#: namespace serializer kind -> its fixed width (VoidNamespace, TimeWindow, a SQL slice end)
NAMESPACE_WIDTHS = {"void": 1, "window": 16, "long": 8}


def value_width(lay: KeyedLayout) -> int | None:
    """The one width of every value in the key groups, when all keyed states hold fixed-width values (no timers)."""
    if lay.timers or not lay.states:
        return None
    widths = {np.dtype(FIXED_DTYPES[s.value_type.kind]).itemsize if s.keyed_kind in ("value", "reducing", "aggregating")
              and s.value_type.kind in FIXED_DTYPES else None for s in lay.states}
    return widths.pop() if len(widths) == 1 else None


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
    if key_type.form == "row":  # a SQL key row: fields k0, k1, ... and no RowKind (keys are always +I)
        key_type = replace(key_type, field_names=tuple(f"k{i}" for i in range(len(key_type.logical))), row_kind=False)
    states: dict[str, StateMeta] = {}
    timers: dict[str, StateMeta] = {}
    for p in proxies:
        if p.key_type.raw != proxies[0].key_type.raw:
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
            if t.kind not in NAMESPACE_WIDTHS:
                raise UnsupportedFormatError(
                    f"{where}: state {s.name!r} uses namespace serializer {t.serializer}; statekit reads "
                    "VoidNamespace, TimeWindow and Long (a SQL window's slice end) namespaces."
                )
            ns = t
    for s in timers.values():
        t = s.value_type.children[1] if s.value_type.kind == "timer" else None
        if t is not None and t.kind in NAMESPACE_WIDTHS and t.kind != "void":
            ns = t
    return KeyedLayout(key_type, tuple(states.values()), tuple(timers.values()), ns, prefix_bytes(max_parallelism))


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


def _direct_state(lay: KeyedLayout, g: _Group) -> bool:
    """Whether a state can be cut straight into columns: one value per key, no namespace."""
    ns = g.meta.serializers.get("NAMESPACE_SERIALIZER")
    return g.meta.keyed_kind in ("value", "reducing", "aggregating") and (ns is None or ns.kind == "void")


#: a table is cut from strided runs while they hold this many entries on average; shorter runs (many odd entries)
#: cost more per run than `_scanned_table`'s gathers do per entry
_MIN_MEAN_RUN = 16


def _run_table(lay: KeyedLayout, buf: np.ndarray, located: Located, groups: dict[str, _Group], chain_kg: np.ndarray,
               where: str, stats: DecodeStats) -> pa.Table | None:
    """The keyed table cut from strided runs (`strided`) when every state's entries are runs listing the same keys.

    The states' runs must pair up (same key group, count and key size); the other states' keys are
    proven equal to the first's run by run, 8-byte windows of strided views. Fixed-width keys and
    values and ASCII `StringValue`s are copied from 2-D strided views (``strided-view``), no
    per-entry position; other types are decoded from the runs' entries (`columns`).
    """
    keyed = [g for g in groups.values() if not g.meta.is_timer]
    if not keyed or lay.namespace_type is not None or not all(
            g.runs and not len(g.chained) and not g.pieces and _direct_state(lay, g) for g in keyed):
        return None
    base = keyed[0].runs
    n = sum(r.count for r in base)
    if n < _MIN_MEAN_RUN * len(base):
        return None
    P = lay.prefix_bytes
    widths = [r.klen - P - 1 for r in base]  # the key's bytes, before VoidNamespace's one
    wk = _fixed_dtype(lay.key_type, widths)
    for g in keyed[1:]:
        if len(g.runs) != len(base) or not all(a.chain == b.chain and a.klen == b.klen and a.count == b.count
                                               for a, b in zip(base, g.runs)):
            return None
    # states `locate` proved to repeat the first's keys run by run (`Located.same_keys_as`) need no key comparison
    unproven = [g for g in keyed[1:]
                if not all(located.same_keys_as(b.chain, b.sid, a.sid) for a, b in zip(base, g.runs))]
    cut: dict[str, pa.Array] = {}
    if wk is not None:
        # The key and every fixed-width value cut in one walk over the runs, the other states' keys compared with the
        # key column as it is cut (a fixed-width key is all its bytes: VoidNamespace's byte need not be compared)
        fixed = [(g, wv) for g in keyed if (wv := _fixed_dtype(g.meta.value_type, [r.vlen for r in g.runs])) is not None]
        got = fixed_columns(buf, [(base, [4 + P] * len(base), wk)]
                            + [(g.runs, [8 + r.klen for r in g.runs], wv) for g, wv in fixed], [g.runs for g in unproven])
        if got is None:
            return None
        stats.states.setdefault("key", "strided-view")
        key = got[0]
        cut = {g.meta.name: col for (g, _), col in zip(fixed, got[1:])}
    else:
        # Every entry's key bytes (the key-group prefix is proven by `locate`) and VoidNamespace's byte, which the
        # entry path compares too (it tells rows apart there)
        if not all(same_bytes(buf, a, b, 4 + P, w + 1) for g in unproven for a, b, w in zip(base, g.runs, widths)):
            return None
        key = _run_column(lay.key_type, buf, base, [4 + P] * len(base), widths, stats, "key", keys=True)
        if key is None:
            e = Entries.of_runs(base)
            kend = e.kp + e.klen
            key, ends = decode_open(lay.key_type, buf, e.kp + P, kend, where, stats, "key")
            if not np.array_equal(ends + 1, kend):
                return None
    cols = {"key_group": constant_column(base, chain_kg[[r.chain for r in base]].tolist(), np.int32), "key": key}
    for g in keyed:
        name, vt = g.meta.name, g.meta.value_type
        vals = cut.get(name)
        if vals is not None:
            stats.states.setdefault(name, "strided-view")
        else:
            vals = _run_column(vt, buf, g.runs, [8 + r.klen for r in g.runs], [r.vlen for r in g.runs], stats, name)
        if vals is None:
            e = Entries.of_runs(g.runs)
            vals = decode_exact(vt, buf, e.vp, e.vp + e.vlen, where, stats, name)
        t = _column_type(g.meta)
        cols[name] = vals if vals.type == t else vals.cast(t)
    return _with_all_states(lay, cols, n)


def _fixed_dtype(t: FlinkType, widths: list[int]) -> str | None:
    """The dtype of `t` when it is fixed-width and every run's field is that wide, else None."""
    wt = FIXED_DTYPES.get(t.kind)
    return wt if wt is not None and all(w == np.dtype(wt).itemsize for w in widths) else None


def _run_column(t: FlinkType, buf: np.ndarray, runs: list[Run], offsets: list[int], widths: list[int],
                stats: DecodeStats, label: str, keys: bool = False) -> pa.Array | None:
    """Values of `t` of `widths[i]` bytes at `offsets[i]` of the entries of `runs[i]`, from strided views; None: not so.
    `keys`: the runs' keys (whose String headers `locate` may have checked, `Run.head`)."""
    wt = _fixed_dtype(t, widths)
    if wt is not None:
        col = fixed_column(buf, runs, offsets, wt)
    elif t.kind == "string":
        col = string_column(buf, runs, offsets, widths, keys)
    else:
        return None
    if col is not None:
        stats.states.setdefault(label, "strided-view")
    return col


def _scanned_table(lay: KeyedLayout, buf: np.ndarray, located: Located, groups: dict[str, _Group],
                   chain_kg: np.ndarray, where: str, stats: DecodeStats) -> pa.Table | None:
    """The keyed table straight from located entries (variable-width keys or values) when every state lists the same keys.

    Keys are decoded once, from the first state's entries; the other states are proven to hold the
    same key bytes in the same order (`_same_keys_in_runs` for scanned state runs, else `ranges_equal`:
    8-byte windows, no gather of the bytes), so no join is needed.
    """
    keyed = [g for g in groups.values() if not g.meta.is_timer]
    if (not keyed or lay.namespace_type is not None
            or not all(_direct_state(lay, g) for g in keyed)):
        return None
    per_state = [_by_chain(g, located) for g in keyed]
    base = per_state[0]
    for ps in per_state[1:]:
        if not (np.array_equal(ps.chains, base.chains) and np.array_equal(ps.counts, base.counts)):
            return None
    P = lay.prefix_bytes
    kp, klen = base.entries.kp, base.entries.klen
    base_runs = _one_run_per_chain(keyed[0])
    for g, ps in zip(keyed[1:], per_state[1:]):
        if base_runs and _one_run_per_chain(g):
            if not all(_same_keys_in_runs(buf, located, a, b) for a, b in zip(base.split(), ps.split())):
                return None
        elif not (np.array_equal(klen, ps.entries.klen) and ranges_equal(buf, kp, ps.entries.kp, klen)):
            return None
    kend = kp + klen
    got = decode_open(lay.key_type, buf, kp + P, kend, where, stats, "key")
    if not np.array_equal(got[1] + 1, kend):  # the key, then VoidNamespace's one byte
        return None
    n = len(kp)
    kg, kg_buf = allocate(n, np.int32)
    kg[:] = np.repeat(chain_kg[base.chains], base.counts)
    cols = {"key_group": primitive(kg_buf, n, pa.int32()), "key": got[0]}
    for g, ps in zip(keyed, per_state):
        vp = ps.entries.vp
        vals = decode_exact(g.meta.value_type, buf, vp, vp + ps.entries.vlen, where, stats, g.meta.name)
        t = _column_type(g.meta)
        cols[g.meta.name] = vals if vals.type == t else vals.cast(t)
    return _with_all_states(lay, cols, n)


def _one_run_per_chain(g: _Group) -> bool:
    """Whether the state's entries are scanned state runs, one per chain (each run's entries lie back to back)."""
    if g.runs or len(g.chained) or not g.pieces:
        return False
    chains = [int(e.chain[0]) for e in g.pieces if len(e)]
    return len(chains) == len(set(chains)) == len(g.pieces)


def _same_keys_in_runs(buf: np.ndarray, located: Located, a: Entries, b: Entries) -> bool:
    """Whether state run `b` holds the keys of state run `a` in the same order (runs of back-to-back entries).

    Runs the scan proved to be copies of one layout (`Located.same_keys_as`) are. Otherwise, when the
    values have one width, the two runs' bytes are compared whole, in one pass, with the values of `a`
    masked out: equal bytes everywhere else means equal length fields, so a walk of `b` meets its
    entries where `a`'s lie, with the same key bytes. Otherwise key by key.
    """
    if len(a) != len(b):
        return False
    if not len(a):
        return True
    if located.same_keys_as(int(a.chain[0]), int(a.sid[0]), int(b.sid[0])):
        return True
    w = int(a.vlen[0])
    a0, b0 = int(a.kp[0]) - 4, int(b.kp[0]) - 4
    a1, b1 = int(a.vp[-1]) + w, int(b.vp[-1]) + w
    if not ((a.vlen == w).all() and (b.vlen == w).all()):
        return bool(np.array_equal(a.klen, b.klen) and ranges_equal(buf, a.kp, b.kp, a.klen))
    return a1 - a0 == b1 - b0 and equal_except_values(buf, a0, b0, a1 - a0, a.vp - a0, w)


@dataclass(frozen=True)
class _ByChain:
    """A state's entries in chain order, with the chains they lie in and how many lie in each."""

    entries: Entries
    chains: np.ndarray  # ascending
    counts: np.ndarray

    def split(self) -> list[Entries]:
        """The entries of each chain (slices)."""
        ends = np.cumsum(self.counts).tolist()
        return [self.entries.take(slice(a, b)) for a, b in zip([0, *ends[:-1]], ends)]


def _by_chain(g: _Group, located: Located) -> _ByChain:
    """The state's entries in chain order (a chain is located wholly one way: runs, scan or walk)."""
    parts = [(int(e.chain[0]), e) for e in g.pieces or []]
    ran = Entries.of_runs(g.runs) if g.runs else None  # in chain order (`locate` goes chain by chain)
    if ran is not None:
        parts += _per_chain(ran)
    if len(g.chained):
        walked = located.chained.take(g.chained)  # step by step over all chains: regroup by chain, stably
        parts += _per_chain(walked.take(np.argsort(walked.chain, kind="stable")))
    if any(a[0] > b[0] for a, b in zip(parts, parts[1:])):
        parts.sort(key=lambda p: p[0])
    chains: list[int] = []
    counts: list[int] = []
    for chain, e in parts:
        if chains and chains[-1] == chain:
            counts[-1] += len(e)
        else:
            chains.append(chain)
            counts.append(len(e))
    whole = ran if ran is not None and not g.pieces and not len(g.chained) else \
        Entries.concat([e for _, e in parts])  # (runs alone: no copy of their slices)
    return _ByChain(whole, np.array(chains, np.int64), np.array(counts, np.int64))


def _per_chain(e: Entries) -> list[tuple[int, Entries]]:
    """Entries grouped by chain (`e` in chain order) as (chain, that chain's entries), slices of `e`."""
    cut = (np.flatnonzero(np.diff(e.chain)) + 1).tolist()
    return [(int(e.chain[a]), e.take(slice(a, b))) for a, b in zip([0, *cut], [*cut, len(e)])]


def _with_all_states(lay: KeyedLayout, cols: dict[str, pa.Array], n: int) -> pa.Table:
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
    table = None
    if chain_kg is not None:
        table = _run_table(lay, buf, located, groups, chain_kg, where, stats)
        if table is None:
            table = _scanned_table(lay, buf, located, groups, chain_kg, where, stats)
        stats.table = "direct" if table is not None else "joined"
    if table is None:
        row_keys = []
        for name, g in groups.items():
            meta = g.meta
            if meta.is_timer:
                continue
            e = g.entries(located)
            kstart = e.kp + P
            kend_all = e.kp + e.klen
            keys, kend = decode_open(key_t, buf, kstart, kend_all, where, stats, "key")
            nst = meta.serializers.get("NAMESPACE_SERIALIZER")
            nsw = NAMESPACE_WIDTHS.get(nst.kind, 1) if nst is not None else 1
            ns_arr = None
            if nst is not None and nst.kind != "void":
                ns_arr, _ = decode_open(nst, buf, kend, kend_all, where, stats, f"{name} (ns)")
            nsend = kend + nsw
            if meta.keyed_kind != "map" and not np.array_equal(nsend, kend_all):
                raise corrupt(where, f"keys of state {name!r} do not end where their entries do")
            row_keys.append((name, e, kstart, nsend, keys, ns_arr, _key_groups(buf, e.kp, P)))
        table = _assemble(lay, buf, row_keys, groups, where, stats) if row_keys else _empty_keyed(lay)
    timers = _in_key_group_order(pa.concat_tables(timer_tables)) if timer_tables else _empty_timers(lay)
    return KeyedResult(table, timers)


def key_group_of_entries(buf: np.ndarray, kp: np.ndarray, P: int) -> np.ndarray:
    """The key group in the prefix of every entry's key at `kp` (`P`: 1 or 2 prefix bytes, the 0x80 flag cleared)."""
    return _key_groups(buf, kp, P)


def _key_groups(buf: np.ndarray, kp: np.ndarray, P: int) -> np.ndarray:
    first = buf[kp].astype(np.int64) & 0x7F
    return (first << 8 | buf[kp + 1]) if P == 2 else first


def _timers(lay: KeyedLayout, buf: np.ndarray, meta: StateMeta, e: Entries, where: str, stats: DecodeStats) -> pa.Table:
    P, name = lay.prefix_bytes, meta.name
    kstart, kend_all = e.kp + P, e.kp + e.klen
    raw = gather_fixed(buf, kstart, 8).reshape(-1).view(">i8")
    ts = raw.astype(np.int64) ^ np.int64(-(1 << 63))  # TimerSerializer flips the sign bit
    keys, kend = decode_open(lay.key_type, buf, kstart + 8, kend_all, where, stats, f"{name} (key)")
    ntype = meta.value_type.children[1] if meta.value_type.kind == "timer" else None
    cols = {"key_group": from_numpy(_key_groups(buf, e.kp, P), pa.int32()), "key": keys}
    if lay.namespace_type is not None:
        if ntype is not None and ntype.kind in NAMESPACE_WIDTHS and ntype.kind != "void":
            cols["namespace"], _ = decode_open(ntype, buf, kend, kend_all, where, stats, f"{name} (ns)")
        else:
            cols["namespace"] = pa.nulls(len(e), parse_ddl(lay.namespace_type.ddl()))
    cols["timestamp"] = from_numpy(ts)
    cols["domain"] = pa.array([meta.timer_domain] * len(e), pa.string())
    stats.states.setdefault(name, "bulk")
    return pa.table(cols)


def _assemble(lay: KeyedLayout, buf: np.ndarray, row_keys: list, groups: dict[str, _Group], where: str,
              stats: DecodeStats) -> pa.Table:
    """One row per distinct (key, namespace); fast when every state lists the same keys in the same order."""
    rowid, nrows, firsts = _rows(buf, row_keys)
    srcs = [rk[4] for rk in row_keys]
    allkeys = pa.concat_arrays(srcs) if len(srcs) > 1 else srcs[0]
    take = pa.array(firsts)
    allkg = np.concatenate([rk[6] for rk in row_keys])
    cols = {"key_group": from_numpy(allkg[firsts], pa.int32()), "key": allkeys.take(take)}
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
    return _in_key_group_order(table)


def _in_key_group_order(table: pa.Table) -> pa.Table:
    """`table`'s rows grouped by key group, each key group's in their order (chained entries come step by step, over
    every key group of a batch at once: so the rows do not depend on how key groups were batched)."""
    col = table.column("key_group")
    kg = np.concatenate([c.to_numpy() for c in col.chunks]) if col.num_chunks else np.zeros(0, np.int32)
    if len(kg) > 1 and not (kg[1:] >= kg[:-1]).all():
        table = table.take(pa.array(np.argsort(kg, kind="stable")))
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
    if len(ln) <= _SMALL:  # a key group or two (a one-key get): no Arrow compute call, whose first use imports pandas
        seen: dict[bytes, int] = {}
        blob = data.tobytes()
        rowid = np.fromiter((seen.setdefault(blob[a:b], len(seen)) for a, b in zip(offsets[:-1], offsets[1:])),
                            np.int64, len(ln))
        nrows = len(seen)
    else:
        raw = pa.Array.from_buffers(pa.large_binary(), len(ln), [None, copy_buffer(offsets), copy_buffer(data)])
        enc = raw.dictionary_encode()
        rowid = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        nrows = len(enc.dictionary)
    firsts = np.empty(nrows, np.int64)
    firsts[rowid[::-1]] = np.arange(len(rowid) - 1, -1, -1)
    return rowid, nrows, firsts


#: up to this many stored rows, rows are matched across states in Python (see `_rows`)
_SMALL = 4096


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
        ukeys = decode_exact(kt, buf, nsend, e.kp + e.klen, where, stats, name)
        if (vlen < 1).any():
            raise corrupt(where, f"a map entry of state {name!r} has no null flag")
        isnull = buf[vp] != 0
        vals = decode_exact(vt, buf, vp + 1, vp + vlen, where, stats, name) if not isnull.any() else \
            decode_nullable(vt, buf, vp, vlen, isnull, where, stats, name)
        order = np.argsort(rows, kind="stable")
        counts = np.bincount(rows, minlength=nrows)
        offsets = np.zeros(nrows + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        take = pa.array(order)
        m = pa.MapArray.from_arrays(from_numpy(offsets), ukeys.take(take), vals.take(take),
                                    mask=pa.array(counts == 0))
        return m.cast(_column_type(meta))
    in_order = len(rows) == nrows and np.array_equal(rows, np.arange(nrows))
    if not in_order and len(np.unique(rows)) != len(rows):
        raise corrupt(where, f"state {name!r} holds one key twice")
    if meta.keyed_kind == "list":
        vals = decode_list(meta.value_type, buf, vp, vlen, where, stats, name)
    else:
        vals = decode_exact(meta.value_type, buf, vp, vp + vlen, where, stats, name)
    if in_order:
        return vals.cast(_column_type(meta)) if vals.type != _column_type(meta) else vals
    idx = np.full(nrows, -1, np.int64)
    idx[rows] = np.arange(len(rows))
    return vals.take(pa.array(idx, mask=idx < 0)).cast(_column_type(meta))


def keyed_schema_of(lay: KeyedLayout) -> pa.Schema:
    fields = [pa.field("key_group", pa.int32(), nullable=False), pa.field("key", parse_ddl(lay.key_type.ddl()))]
    if lay.namespace_type is not None:
        fields.append(pa.field("namespace", parse_ddl(lay.namespace_type.ddl())))
    fields += [pa.field(s.name, _column_type(s)) for s in lay.states]
    return pa.schema(fields)


def _empty_keyed(lay: KeyedLayout) -> pa.Table:
    return empty_table(keyed_schema_of(lay))


def _empty_timers(lay: KeyedLayout) -> pa.Table:
    fields = [pa.field("key_group", pa.int32(), nullable=False), pa.field("key", parse_ddl(lay.key_type.ddl()))]
    if lay.namespace_type is not None:
        fields.append(pa.field("namespace", parse_ddl(lay.namespace_type.ddl())))
    fields += [pa.field("timestamp", pa.int64()), pa.field("domain", pa.string())]
    return empty_table(pa.schema(fields))
