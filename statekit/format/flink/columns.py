"""Columns of located entries decoded: in bulk where the layout is regular, per record otherwise; `DecodeStats` records which.

Boundary: byte positions in (from `locate`), Arrow arrays out. `values` holds the encodings; this
module chooses between its bulk and per-record decoders for keys, namespaces, values and
ListState values (elements separated by one ',' byte, `ListDelimitedSerializer`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from statekit.format.arrow_memory import from_numpy
from statekit.format.flink.binary import DataInput
from statekit.format.flink.gather import binary_array
from statekit.format.flink.locate import DecodeStats
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.values import bulk, decode_records, reader, to_arrow
from statekit.types import parse_ddl

__all__ = ["decode_exact", "decode_list", "decode_nullable", "decode_open"]


def decode_open(t: FlinkType, buf: np.ndarray, starts: np.ndarray, limits: np.ndarray, where: str,
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


def decode_exact(t: FlinkType, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, where: str,
                 stats: DecodeStats, label: str) -> pa.Array:
    """Values of `t` spanning exactly [starts, ends); opaque serializers give the raw bytes."""
    if not t.decodable:
        stats.states[label] = f"raw bytes ({t.serializer})"
        return binary_array(buf, starts, ends - starts)
    try:
        got = bulk(t, buf, starts)
    except IndexError:
        got = None
    if got is not None and np.array_equal(got[1], ends):
        stats.states.setdefault(label, "bulk")
        return got[0]
    stats.states[label] = "per-record"
    return decode_records(t, buf, starts, ends, where)


def decode_list(t: FlinkType, buf: np.ndarray, vp: np.ndarray, vlen: np.ndarray, where: str,
                stats: DecodeStats, label: str) -> pa.Array:
    """ListState values: elements separated by one ',' byte (ListDelimitedSerializer)."""
    elem = t.children[0] if t.kind == "list" else t
    if not elem.decodable:
        return decode_exact(FlinkType("binary", elem.snapshot_class, 0, b""), buf, vp, vp + vlen, where, stats, label)
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
                    return pa.ListArray.from_arrays(from_numpy(first, pa.int32()), got[0])
    if elem.kind == "avro" and len(vp):
        from statekit.format.flink.avro_values import bulk_delimited  # here: only Avro lists need it

        arr = bulk_delimited(elem.avro, buf, vp, vlen)
        if arr is not None:
            stats.states.setdefault(label, "bulk")
            return arr
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


def decode_nullable(t: FlinkType, buf: np.ndarray, vp: np.ndarray, vlen: np.ndarray, isnull: np.ndarray, where: str,
                    stats: DecodeStats, name: str) -> pa.Array:
    """Values behind a null flag byte (MapState values): nulls where the flag is set."""
    ok = np.flatnonzero(~isnull)
    vals = decode_exact(t, buf, vp[ok] + 1, vp[ok] + vlen[ok], where, stats, name)
    idx = np.full(len(vp), -1, np.int64)
    idx[ok] = np.arange(len(ok))
    return vals.take(pa.array(idx, mask=idx < 0))
