"""One key's states straight from its key group's bytes: entries matched on the serialized key, values decoded per record.

Boundary: the one-key path of `FlinkStateReader` (used by `Savepoint.get`). It reads only the key
group's byte range, locates its entries (`locate`), compares key bytes with numpy and decodes the
few matching values in Python - no Arrow table is built, so a lookup in a fresh process costs
`_metadata`, one range read and a few numpy calls. Returns NotImplemented where the general path
must answer (non-canonical handles, namespaced state).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from statekit.format.flink.binary import DataInput
from statekit.format.flink.keyed import group_entries, value_width
from statekit.format.flink.locate import DecodeStats, Entries, Located, field_view, locate
from statekit.format.flink.metadata import KeyGroupsHandle, OperatorState
from statekit.format.flink.values import FIXED_DTYPES, reader


def lookup(fr: Any, op: OperatorState, key_bytes: bytes, kg: int, stats: DecodeStats, named: Any = None) -> Any:
    """``{state: value}`` of the key whose serialized form is `key_bytes` in key group `kg`; None if absent.

    `named`: the operator's layout with a job kind's names (a SQL plan's), whose state types decode the values.
    """
    lay = fr.layout(op)
    typed = {s.name: s for s in (named.states if named is not None else ())}
    handles = [h for h in fr.keyed_handles(op) if h.start <= kg <= h.end]
    if lay is None or lay.namespace_type is not None or len(handles) != 1 or not isinstance(handles[0], KeyGroupsHandle):
        return NotImplemented
    h = handles[0]
    if hasattr(fr, "handle_layout") and fr.handle_layout(h) != "canonical":
        return NotImplemented
    off = h.offsets[kg - h.start]
    if not off:
        return None
    proxy = fr.proxy(h)
    size = fr.files.size(h.delegate)
    later = [o for o in h.offsets if o > off]
    end = min(later) if later else size
    if end > size:
        return NotImplemented  # the general path reports the damage
    data = fr.files.read_range(h.delegate, off, end)
    where = f"{fr.root} operator {op.uid or op.operator_id}"
    if proxy.compressed:
        from statekit.format.flink.snappy import unframe_snappy

        data, _ = unframe_snappy(data, where)
    buf = np.frombuffer(data, np.uint8)
    P = lay.prefix_bytes
    n = len(key_bytes)
    until = None
    at: np.ndarray | None = None
    if lay.key_type.kind not in FIXED_DTYPES:
        # Variable-sized keys: where the key's bytes (and the VoidNamespace byte) occur at all, by one
        # substring search. No occurrence: the key is not here. Otherwise the chain of entries needs
        # proving only as far as the last occurrence.
        at = _key_starts(data, key_bytes, P)
        if not len(at):
            return None
        until = int(at[-1])
    located = locate(buf, np.array([0]), np.array([len(buf)]), where, stats, chain_kg=np.array([kg]), prefix_bytes=P,
                     value_width=value_width(lay), until=until)
    groups = group_entries(located, np.zeros(1, np.int64), [dict(enumerate(proxy.states))], where)

    def key_at() -> np.ndarray:  # where the key starts a key, if anywhere (searched once, when first needed)
        nonlocal at
        if at is None:
            at = _key_starts(data, key_bytes, P)
        return at
    out: dict[str, Any] = {}
    found = False
    mv = buf.data
    for name, g in groups.items():
        meta = g.meta
        if meta.is_timer:
            continue
        is_map = meta.keyed_kind == "map"
        e = _matching(buf, key_at, located, g, P, n, key_bytes, is_map)
        if not len(e):
            continue
        found = True
        t = typed[name].value_type if name in typed else meta.value_type
        if is_map:
            kt, vt = t.children if t.kind == "map" else (t, t)
            kr, vr = _reader_or_bytes(kt), _reader_or_bytes(vt)
            items = []
            for i in range(len(e)):
                ks, ke = int(e.kp[i]) + P + n + 1, int(e.kp[i] + e.klen[i])
                vs, ve = int(e.vp[i]), int(e.vp[i] + e.vlen[i])
                k = kr(DataInput(mv, where, pos=ks, end=ke), ke)
                isnull = buf[vs] != 0
                items.append((k, None if isnull else vr(DataInput(mv, where, pos=vs + 1, end=ve), ve)))
            out[name] = items
            continue
        vs, ve = int(e.vp[0]), int(e.vp[0] + e.vlen[0])  # one entry per key outside map state
        if meta.keyed_kind == "list":
            elem = t.children[0] if t.kind == "list" else t
            if not elem.decodable:
                out[name] = bytes(mv[vs:ve])
                continue
            r = reader(elem)
            inp = DataInput(mv, where, pos=vs, end=ve)
            items = [r(inp)]
            while inp.pos < ve:
                if inp.u8("a list delimiter") != 0x2C:
                    raise inp.fail("list elements are not separated by ','")
                items.append(r(inp))
            out[name] = items
        else:
            out[name] = _reader_or_bytes(t)(DataInput(mv, where, pos=vs, end=ve), ve)
    stats.states.setdefault("key", "lookup")  # type: ignore[union-attr]
    return out if found else None


def _matching(buf: np.ndarray, key_at: Callable[[], np.ndarray], located: Located, g: Any, P: int, n: int,
              key_bytes: bytes, is_map: bool) -> Entries:
    """The entries of state group `g` whose key (after the `P` key-group bytes) is `key_bytes`.

    Strided runs are compared in place through one strided view of their key bytes (no per-entry
    positions are built for the ~N/max-parallelism entries of the key group); scanned and walked
    entries through their positions.
    """
    klen = P + n + 1  # + the VoidNamespace byte

    def fits(lengths: Any) -> Any:  # key lengths (an array, or one run's) that can hold the key
        return lengths > klen if is_map else lengths == klen

    found: list[Entries] = []
    # equal bytes <=> equal values of one dtype of their width (unsigned ints, else opaque bytes)
    dtype = f"u{n}" if n in (1, 2, 4, 8) else f"V{n}"
    for r in g.runs:
        if fits(r.klen):
            keys = field_view(buf, r.pos + 4 + P, r.count, r.stride, dtype)
            found.append(r.entries(np.flatnonzero(keys == np.frombuffer(key_bytes, dtype)[0])))
    rest_parts = list(g.pieces or [])
    if len(g.chained):
        rest_parts.append(located.chained.take(g.chained))
    for rest in rest_parts:
        # Which of the key's occurrences are located entries' keys: a membership test per state run,
        # no gather of key bytes over the key group.
        at = key_at()
        if len(at) and len(rest):
            found.append(rest.take(np.flatnonzero(np.isin(rest.kp, at) & fits(rest.klen))))
    return Entries.concat(found)


def _key_starts(data: bytes | memoryview, key_bytes: bytes, P: int) -> np.ndarray:
    """Where an entry's key would start (`P` bytes before `key_bytes`) for every occurrence of the key and its VoidNamespace byte."""
    hay = data if isinstance(data, bytes) else bytes(data)
    return np.array([i - P for i in _occurrences(hay, key_bytes + b"\x00") if i >= P], np.int64)


def _occurrences(hay: bytes, needle: bytes) -> list[int]:
    """Every start of `needle` in `hay` (overlapping ones included)."""
    out, i = [], hay.find(needle)
    while i >= 0:
        out.append(i)
        i = hay.find(needle, i + 1)
    return out


def _reader_or_bytes(t: Any):
    if not t.decodable:
        return lambda inp, end: bytes(inp.data[inp.pos : end])
    r = reader(t)

    def read(inp: DataInput, end: int) -> Any:
        v = r(inp)
        if inp.pos != end:
            raise inp.fail(f"a {t.serializer} value ends {end - inp.pos} byte(s) before its entry does")
        return v
    return read
