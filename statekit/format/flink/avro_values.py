"""Avro values as flink-avro writes them (`DataOutputEncoder`), decoded per record and in bulk into typed Arrow columns.

Boundary: an `AvroType` and byte positions in, Python values (`reader`) or Arrow arrays (`bulk`) out.
The encoding is not Avro's binary encoding: Flink's `DataOutputEncoder` writes int, long, float,
double, enum ordinals and union indexes as big-endian `DataOutput` numbers (4 or 8 bytes), boolean
as one byte, bytes and strings as ``i32 length`` + bytes (UTF-8), fixed as its bytes, and arrays and
maps as one block: ``varint count`` (omitted when 0) + items + a ``0`` byte. Readers accept several
blocks as `DataInputDecoder` does; the bulk path returns None for layouts it does not cover (the
caller then reads per record, which names the fault).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from statekit.format.arrow_memory import from_numpy
from statekit.format.flink.avro import AvroType
from statekit.format.flink.binary import DataInput
from statekit.format.flink.gather import binary_array, gather_values
from statekit.types import parse_ddl

__all__ = ["bulk", "bulk_delimited", "reader", "to_arrow"]

Reader = Callable[[DataInput], Any]
_FIXED = {"int": ">i4", "long": ">i8", "float": ">f4", "double": ">f8"}
_MAX_COUNT = 1 << 28


# -- per record ---------------------------------------------------------------------------------------
def _count(inp: DataInput, what: str) -> int:
    """`DataInputDecoder.readVarLongCount`: 7 bits per byte, low group first."""
    shift = value = 0
    while True:
        b = inp.u8(what)
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise inp.fail(f"{what} has a malformed varint")
    if value > _MAX_COUNT:
        inp.pos -= 1
        raise inp.fail(f"{what} is {value}, not a valid count")
    return value


def _length(inp: DataInput, what: str) -> int:
    n = inp.i32(f"the length of {what}")
    if n < 0:
        inp.pos -= 4
        raise inp.fail(f"the length of {what} is {n}")
    return n


def _utf8(inp: DataInput, what: str) -> str:
    raw = inp.bytes(_length(inp, what), what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        inp.pos -= len(raw)
        raise inp.fail(f"{what} is not UTF-8") from None


def _decimal(raw: bytes, scale: int) -> Decimal:
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)


def reader(t: AvroType, what: str = "an Avro value") -> Reader:
    """A function reading one value of `t` from a `DataInput` as the Python value of its Arrow column."""
    k, lg = t.kind, t.logical
    if k == "null":
        return lambda i: None
    if k == "boolean":
        return lambda i: i.bool(f"{what} (boolean)")
    if k in ("int", "long"):
        read = (lambda i: i.i32(f"{what} (int)")) if k == "int" else (lambda i: i.i64(f"{what} (long)"))
        if lg in ("timestamp-millis", "local-timestamp-millis"):
            return lambda i: read(i) * 1000
        return read
    if k == "float":
        return lambda i: i.f32(f"{what} (float)")
    if k == "double":
        return lambda i: i.f64(f"{what} (double)")
    if k == "string":
        return lambda i: _utf8(i, f"{what} (string)")
    if k in ("bytes", "fixed"):
        if k == "bytes":
            def raw(i: DataInput) -> bytes:
                return i.bytes(_length(i, f"{what} (bytes)"), f"{what} (bytes)")
        else:
            size = t.size

            def raw(i: DataInput) -> bytes:
                return i.bytes(size, f"{what} (fixed {t.name})")
        if lg == "decimal":
            scale = t.scale
            return lambda i: _decimal(raw(i), scale)
        return raw
    if k == "enum":
        symbols = t.symbols

        def enum(i: DataInput) -> str:
            o = i.i32(f"{what} (enum {t.name} ordinal)")
            if not 0 <= o < len(symbols):
                i.pos -= 4
                raise i.fail(f"enum ordinal {o} outside the {len(symbols)} symbols of Avro enum {t.name}")
            return symbols[o]
        return enum
    if k == "record":
        fields = [(f.name, reader(f.type, f"field {f.name!r} of {t.name}")) for f in t.fields]
        return lambda i: {n: r(i) for n, r in fields}
    if k in ("array", "map"):
        assert t.items is not None
        item = reader(t.items, f"an item of {what}")
        is_map = k == "map"

        def collection(i: DataInput) -> list[Any]:
            out: list[Any] = []
            n = _count(i, f"an Avro {k} block count")
            while n:
                for _ in range(n):
                    out.append((_utf8(i, "an Avro map key"), item(i)) if is_map else item(i))
                n = _count(i, f"an Avro {k} block count")
            return out
        return collection
    if k == "union":
        readers = [reader(b, what) for b in t.branches]
        nb = t.nullable_branch
        names = [b.branch_name() for b in t.branches]

        def index(i: DataInput) -> int:
            b = i.i32(f"{what} (union branch index)")
            if not 0 <= b < len(readers):
                i.pos -= 4
                raise i.fail(f"union branch {b} outside the {len(readers)} branches of {names}")
            return b
        if nb is not None:
            return lambda i: readers[index(i)](i)
        keep = [n for b, n in zip(t.branches, names) if b.kind != "null"]

        def union(i: DataInput) -> dict[str, Any] | None:
            b = index(i)
            v = readers[b](i)
            if t.branches[b].kind == "null":
                return None
            return {n: (v if n == names[b] else None) for n in keep}
        return union
    raise ValueError(f"no reader for Avro {k}")


def to_arrow(values: list[Any], t: AvroType) -> pa.Array:
    """Python values of `t` (from `reader`) as an Arrow array of its DDL type."""
    return pa.array(values, parse_ddl(t.ddl()))


# -- bulk -----------------------------------------------------------------------------------------------
class _Irregular(Exception):
    """A layout the bulk decoder does not cover: the caller reads per record."""


def bulk(t: AvroType, buf: np.ndarray, starts: np.ndarray) -> tuple[pa.Array, np.ndarray] | None:
    """One value of `t` at each start, decoded column by column over all values: (array, ends), or None.

    Each step handles one field (or one element index of arrays and maps) for every value at once with
    numpy; IndexError when a value runs past `buf`.
    """
    try:
        return _decode(t, buf, starts.astype(np.int64, copy=False), parse_ddl(t.ddl()))
    except _Irregular:
        return None


def bulk_delimited(t: AvroType, buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array | None:
    """ListState values of `t` (elements separated by one ',' byte, `ListDelimitedSerializer`) in bulk, or None."""
    ends = starts + lengths
    rows = np.arange(len(starts))
    cur = starts.astype(np.int64, copy=True)
    pieces, owners, orders = [], [], []
    j = 0
    try:
        while len(rows):
            arr, after = _decode(t, buf, cur, parse_ddl(t.ddl()))
            pieces.append(arr)
            owners.append(rows)
            orders.append(np.full(len(rows), j))
            more = after < ends[rows]
            if (after > ends[rows]).any() or (more.any() and (buf[after[more]] != 0x2C).any()):
                return None
            rows, cur = rows[more], after[more] + 1
            j += 1
    except (_Irregular, IndexError):
        return None
    return _lists(pieces, owners, orders, len(starts), parse_ddl(t.ddl()))


def _lists(pieces: list[pa.Array], owners: list[np.ndarray], orders: list[np.ndarray], n: int,
           item_type: pa.DataType) -> pa.Array:
    """Element arrays decoded by element index, regrouped into one list per owner row."""
    if not pieces:
        return pa.ListArray.from_arrays(from_numpy(np.zeros(n + 1, np.int32)), pa.array([], item_type))
    owner = np.concatenate(owners)
    order = np.concatenate(orders)
    perm = np.lexsort((order, owner))
    values = pa.concat_arrays(pieces).take(from_numpy(perm.astype(np.int64)))
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(owner, minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(from_numpy(offsets), values)


def _counts(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Block counts (varints) at `pos`, with the positions after them."""
    if not len(pos):
        return pos.copy(), pos.copy()
    b = buf[pos].astype(np.int64)
    if (b < 0x80).all():
        return b, pos + 1
    value, cur, shift = b & 0x7F, pos + 1, 7
    going = b >= 0x80
    while going.any():
        nxt = buf[cur[going]].astype(np.int64)
        value[going] |= (nxt & 0x7F) << shift
        cur[going] += 1
        g = np.flatnonzero(going)
        going[g[nxt < 0x80]] = False
        shift += 7
        if shift > 35:
            raise _Irregular
    return value, cur


def _decode(t: AvroType, buf: np.ndarray, pos: np.ndarray, typ: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    k, n = t.kind, len(pos)
    if k in _FIXED:
        vals = gather_values(buf, pos, _FIXED[k])
        w = np.dtype(_FIXED[k]).itemsize
        if t.logical in ("timestamp-millis", "local-timestamp-millis"):
            vals = vals * 1000
        if t.logical in ("date",) or pa.types.is_timestamp(typ):
            return pa.array(vals, type=pa.int64() if k == "long" else pa.int32()).view(typ), pos + w
        return from_numpy(vals), pos + w
    if k == "boolean":
        return from_numpy(buf[pos] != 0), pos + 1
    if k == "null":
        return pa.nulls(n, typ), pos
    if k in ("string", "bytes"):
        lengths = gather_values(buf, pos, ">i4").astype(np.int64)
        if n and lengths.min() < 0:
            raise _Irregular
        arr = binary_array(buf, pos + 4, lengths)
        if t.logical == "decimal":
            return _decimals(arr, typ), pos + 4 + lengths
        if k == "string":
            try:
                arr = arr.cast(pa.string())  # validates UTF-8
            except pa.ArrowInvalid:
                raise _Irregular from None
        return arr, pos + 4 + lengths
    if k == "fixed":
        arr = binary_array(buf, pos, np.full(n, t.size, np.int64))
        if t.logical == "decimal":
            return _decimals(arr, typ), pos + t.size
        return arr, pos + t.size
    if k == "enum":
        o = gather_values(buf, pos, ">i4").astype(np.int64)
        if n and (o.min() < 0 or o.max() >= len(t.symbols)):
            raise _Irregular
        return pa.DictionaryArray.from_arrays(from_numpy(o.astype(np.int32)), pa.array(t.symbols, pa.string())) \
            .cast(pa.string()), pos + 4
    if k == "record":
        arrays = []
        for f, ft in zip(t.fields, typ):
            a, pos = _decode(f.type, buf, pos, ft.type)
            arrays.append(a)
        return pa.StructArray.from_arrays(arrays, fields=list(typ)), pos
    if k == "union":
        b = gather_values(buf, pos, ">i4").astype(np.int64)
        if n and (b.min() < 0 or b.max() >= len(t.branches)):
            raise _Irregular
        pos = pos + 4
        nb = t.nullable_branch
        if nb is not None:
            rows = np.flatnonzero(b == nb)
            vals, after = _decode(t.branches[nb], buf, pos[rows], typ)
            pos[rows] = after
            idx = np.full(n, -1, np.int64)
            idx[rows] = np.arange(len(rows))
            return vals.take(pa.array(idx, mask=idx < 0)), pos
        children = []
        for j, (br, ft) in enumerate(zip([x for x in t.branches if x.kind != "null"], typ)):
            bi = t.branches.index(br)
            rows = np.flatnonzero(b == bi)
            vals, after = _decode(br, buf, pos[rows], ft.type)
            pos[rows] = after
            idx = np.full(n, -1, np.int64)
            idx[rows] = np.arange(len(rows))
            children.append(vals.take(pa.array(idx, mask=idx < 0)))
        null = t.null_branch
        mask = pa.array(b == null) if null is not None else None
        return pa.StructArray.from_arrays(children, fields=list(typ), mask=mask), pos
    if k in ("array", "map"):
        assert t.items is not None
        counts, pos = _counts(buf, pos)
        rows = np.flatnonzero(counts > 0)
        cur = pos[rows]
        left = counts[rows]
        item_type = typ.value_type if k == "array" else typ.item_type
        pieces, owners, orders, key_pieces = [], [], [], []
        j = 0
        while len(rows):
            if k == "map":
                keys, cur = _decode(AvroType("string"), buf, cur, pa.string())
                key_pieces.append(keys)
            vals, cur = _decode(t.items, buf, cur, item_type)
            pieces.append(vals)
            owners.append(rows)
            orders.append(np.full(len(rows), j))
            left = left - 1
            done = left == 0
            if done.any():  # the block ends: Flink writes one block, then 0
                nxt, _ = _counts(buf, cur[done])
                if nxt.any():
                    raise _Irregular
                pos[rows[done]] = cur[done] + 1
            keep = ~done
            rows, cur, left = rows[keep], cur[keep], left[keep]
            j += 1
        if k == "array":
            return _lists(pieces, owners, orders, n, item_type), pos
        lists = _lists([pa.StructArray.from_arrays([kp, vp], ["key", "value"]) for kp, vp in zip(key_pieces, pieces)],
                       owners, orders, n, pa.struct([("key", pa.string()), ("value", item_type)]))
        entries = lists.flatten()
        return pa.MapArray.from_arrays(lists.offsets, entries.field("key"), entries.field("value"), type=typ), pos
    raise _Irregular


def _decimals(arr: pa.Array, typ: pa.DataType) -> pa.Array:
    """Two's-complement big-endian unscaled values (bytes or fixed) as a decimal128 array."""
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4).astype(np.int64)
    lengths = np.diff(offsets)
    if n and lengths.max() > 16:
        raise _Irregular
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    out = np.zeros((n, 16), np.uint8)
    nonempty = lengths > 0
    neg = np.zeros(n, bool)
    neg[nonempty] = data[offsets[:-1][nonempty]] >= 0x80
    out[neg] = 0xFF
    for j in range(int(lengths.max()) if n else 0):  # byte j from the end goes to little-endian byte j
        has = lengths > j
        out[has, j] = data[offsets[1:][has] - 1 - j]
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(out.reshape(-1))])
