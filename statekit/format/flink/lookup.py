"""One key's states straight from its key group's bytes: entries matched on the serialized key, values decoded per record.

Boundary: the one-key path of `FlinkStateReader` (used by `Savepoint.get`). It reads only the key
group's byte range, locates its entries (`locate`), compares key bytes with numpy and decodes the
few matching values in Python - no Arrow table is built, so a lookup in a fresh process costs
`_metadata`, one range read and a few numpy calls. Returns NotImplemented where the general path
must answer (non-canonical handles, namespaced state).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from statekit.format.flink.binary import DataInput
from statekit.format.flink.keyed import group_entries, value_width
from statekit.format.flink.locate import DecodeStats, locate
from statekit.format.flink.metadata import KeyGroupsHandle, OperatorState
from statekit.format.flink.values import gather_fixed, reader


def lookup(fr: Any, op: OperatorState, key_bytes: bytes, kg: int, stats: DecodeStats) -> Any:
    """``{state: value}`` of the key whose serialized form is `key_bytes` in key group `kg`; None if absent."""
    lay = fr.layout(op)
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
        from statekit.format.flink.reader import unframe_snappy

        data, _ = unframe_snappy(data, where)
    buf = np.frombuffer(data, np.uint8)
    P = lay.prefix_bytes
    located = locate(buf, np.array([0]), np.array([len(buf)]), where, stats, chain_kg=np.array([kg]), prefix_bytes=P,
                     value_width=value_width(lay))
    groups = group_entries(located, np.zeros(1, np.int64), [dict(enumerate(proxy.states))], where)
    want = np.frombuffer(key_bytes, np.uint8)
    n = len(key_bytes)
    out: dict[str, Any] = {}
    found = False
    mv = buf.data
    for name, g in groups.items():
        meta = g.meta
        if meta.is_timer:
            continue
        e = g.entries(located)
        is_map = meta.keyed_kind == "map"
        fits = (e.klen > P + n + 1) if is_map else (e.klen == P + n + 1)  # + VoidNamespace byte
        cand = np.flatnonzero(fits)
        if len(cand):
            same = (gather_fixed(buf, e.kp[cand] + P, n) == want).all(axis=1)
            cand = cand[same]
        if not len(cand):
            continue
        found = True
        t = meta.value_type
        if is_map:
            kt, vt = t.children if t.kind == "map" else (t, t)
            kr, vr = _reader_or_bytes(kt), _reader_or_bytes(vt)
            items = []
            for i in cand.tolist():
                ks, ke = int(e.kp[i]) + P + n + 1, int(e.kp[i] + e.klen[i])
                vs, ve = int(e.vp[i]), int(e.vp[i] + e.vlen[i])
                k = kr(DataInput(mv, where, pos=ks, end=ke), ke)
                isnull = buf[vs] != 0
                items.append((k, None if isnull else vr(DataInput(mv, where, pos=vs + 1, end=ve), ve)))
            out[name] = items
            continue
        i = int(cand[0])
        vs, ve = int(e.vp[i]), int(e.vp[i] + e.vlen[i])
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
