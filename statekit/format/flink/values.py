"""Flink value encodings decoded two ways: in bulk with numpy over many values at once, and per record as a fallback.

Boundary: given a `FlinkType` and where values start in a byte buffer, produce Arrow arrays (bulk)
or Python values (`reader`). Bulk covers the regular layouts (fixed-width numbers, ASCII strings,
byte arrays, Tuple/POJO/Row without nulls, windows, enums); anything else returns None and the
caller falls back to `reader`, which handles every decodable type. Encodings: section 3.6a of
`../shared/flink/FORMAT.md` (`StringValue`, `RowSerializer`, `PojoSerializer`, ...).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa

from statekit.errors import CorruptSavepointError
from statekit.format.flink.binary import DataInput, java_string
from statekit.format.flink.serializers import FlinkType
from statekit.types import parse_ddl

Reader = Callable[[DataInput], Any]
#: entries per chunk when gathering variable-length byte ranges (bounds temporary memory)
GATHER_CHUNK = 1 << 20

FIXED_DTYPES = {"long": ">i8", "int": ">i4", "short": ">i2", "byte": "i1", "double": ">f8", "float": ">f4"}


# -- per record -------------------------------------------------------------------------------------
def reader(t: FlinkType) -> Reader:
    """A function reading one value of type `t` from a `DataInput` (types with an opaque part excluded)."""
    k = t.kind
    simple: dict[str, Reader] = {
        "long": lambda i: i.i64("a long value"),
        "int": lambda i: i.i32("an int value"),
        "short": lambda i: i.i16("a short value"),
        "byte": lambda i: i.i8("a byte value"),
        "double": lambda i: i.f64("a double value"),
        "float": lambda i: i.f32("a float value"),
        "boolean": lambda i: i.bool("a boolean value"),
        "char": lambda i: chr(i.u16("a char value")),
        "string": lambda i: java_string(i, "a string value"),
        "void": lambda i: i.u8("a namespace"),
    }
    if k in simple:
        return simple[k]
    if k == "bytes":
        return lambda i: i.bytes(i.count("a byte-array length", limit=(1 << 31) - 1), "a byte array")
    if k == "enum":
        names = t.enum_values

        def enum(i: DataInput) -> str:
            o = i.i32("an enum ordinal")
            if not 0 <= o < len(names):
                raise i.fail(f"enum ordinal {o} outside the {len(names)} constants of {t.type_class}")
            return names[o]
        return enum
    if k == "window":
        return lambda i: {"start": i.i64("a window start"), "end": i.i64("a window end")}
    if k == "list":
        elem = reader(t.children[0])
        return lambda i: [elem(i) for _ in range(i.count("a list size"))]
    if k == "map":
        kr, vr = reader(t.children[0]), reader(t.children[1])

        def map_(i: DataInput) -> list[tuple[Any, Any]]:
            out = []
            for _ in range(i.count("a map size")):
                key = kr(i)
                out.append((key, None if i.bool("a map null flag") else vr(i)))
            return out
        return map_
    if k == "tuple":
        fields = [(n, reader(c)) for n, c in zip(t.field_names, t.children)]
        return lambda i: {n: r(i) for n, r in fields}
    if k == "pojo":
        fields = [(n, reader(c)) for n, c in zip(t.field_names, t.children)]

        def pojo(i: DataInput) -> dict[str, Any] | None:
            flags = i.u8("POJO flags")
            if flags & 1:
                return None
            if flags != 2:
                raise i.fail(f"POJO {t.type_class} value is a subclass (flags {flags}); statekit reads exact POJO types")
            return {n: (None if i.bool("a POJO field null flag") else r(i)) for n, r in fields}
        return pojo
    if k == "row":
        fields = [(n, reader(c)) for n, c in zip(t.field_names, t.children)]
        extra = 2 if t.row_kind else 0

        def row(i: DataInput) -> dict[str, Any]:
            nbits = extra + len(fields)
            mask = i.bytes((nbits + 7) // 8, "a row null mask")
            bits = [(mask[b // 8] >> (7 - b % 8)) & 1 for b in range(nbits)]
            return {n: (None if bits[extra + j] else r(i)) for j, (n, r) in enumerate(fields)}
        return row
    raise CorruptSavepointError(f"values of serializer {t.serializer} cannot be decoded")


def decode_records(t: FlinkType, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, where: str) -> pa.Array:
    """Per-record fallback: each value spans exactly [start, end); opaque types become the raw bytes."""
    mv = buf.data
    if not t.decodable:
        return pa.array([bytes(mv[s:e]) for s, e in zip(starts.tolist(), ends.tolist())], pa.binary())
    r = reader(t)
    out = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        inp = DataInput(mv, where, pos=s, end=e)
        out.append(r(inp))
        if inp.pos != e:
            raise inp.fail(f"a {t.serializer} value ends {e - inp.pos} byte(s) before its entry does")
    return to_arrow(out, t)


def to_arrow(values: list[Any], t: FlinkType) -> pa.Array:
    """Python values of Flink type t as an Arrow array of its DDL type."""
    return pa.array(values, parse_ddl(t.ddl()))


# -- bulk -------------------------------------------------------------------------------------------
def gather_ranges(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes of every range [starts[i], starts[i] + lengths[i]) concatenated, in chunks."""
    total = int(lengths.sum())
    out = np.empty(total, np.uint8)
    pos = 0
    itype = np.int32 if len(buf) < (1 << 31) else np.int64
    for c in range(0, len(starts), GATHER_CHUNK):
        s: np.ndarray = starts[c : c + GATHER_CHUNK].astype(itype)
        n: np.ndarray = lengths[c : c + GATHER_CHUNK].astype(itype)
        m = int(n.sum())
        if m == 0:
            continue
        excl = np.empty_like(n)
        excl[0] = 0
        np.cumsum(n[:-1], out=excl[1:])
        idx: np.ndarray = np.repeat(s - excl, n) + np.arange(m, dtype=itype)
        np.take(buf, idx, out=out[pos : pos + m])
        pos += m
    return out


def gather_values(buf: np.ndarray, starts: np.ndarray, dtype: str) -> np.ndarray:
    """One fixed-width value at each start, in one gather: an overlapping view of `buf` with a value at every byte."""
    dt = np.dtype(dtype)
    if not len(starts):
        return np.zeros(0, dt.newbyteorder("="))
    if int(starts.max()) + dt.itemsize > len(buf) or int(starts.min()) < 0:
        raise IndexError("value past the end of the buffer")
    every = np.ndarray((len(buf) - dt.itemsize + 1,), dt, buffer=buf.data, strides=(1,))
    return every[starts].astype(dt.newbyteorder("="))


def gather_fixed(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """An (n, width) uint8 array of the bytes at each start (one 1-D gather per column: no n*width index)."""
    out = np.empty((len(starts), width), np.uint8)
    for j in range(width):
        out[:, j] = buf[starts + j]
    return out


def _be32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    return gather_values(buf, at, ">i4").astype(np.int64)


def bulk(t: FlinkType, buf: np.ndarray, starts: np.ndarray) -> tuple[pa.Array, np.ndarray] | None:
    """Decode one value of `t` at each start in bulk: (Arrow array, end offsets), or None if the layout is not regular."""
    k = t.kind
    n = len(starts)
    if k in FIXED_DTYPES:
        w = np.dtype(FIXED_DTYPES[k]).itemsize
        return pa.array(gather_values(buf, starts, FIXED_DTYPES[k])), starts + w
    if k == "boolean":
        return pa.array(buf[starts] != 0), starts + 1
    if k == "string":
        head = buf[starts]
        if n and (head.max() >= 0x80 or head.min() == 0):  # multi-byte length, or a null string
            return None
        lengths = head.astype(np.int64) - 1
        data = gather_ranges(buf, starts + 1, lengths)
        if len(data) and data.max() >= 0x80:  # a non-ASCII char: one or more bytes per char
            return None
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        arr = pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        return arr.cast(pa.string()), starts + 1 + lengths
    if k == "bytes":
        lengths = _be32(buf, starts)
        if n and lengths.min() < 0:
            return None
        data = gather_ranges(buf, starts + 4, lengths)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        arr = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        return arr.cast(pa.binary()), starts + 4 + lengths
    if k == "enum":
        ordinals = _be32(buf, starts)
        if n and (ordinals.min() < 0 or ordinals.max() >= len(t.enum_values)):
            return None
        return pa.array(np.array(t.enum_values, dtype=object)[ordinals], pa.string()), starts + 4
    if k == "window":
        s = gather_fixed(buf, starts, 8).reshape(-1).view(">i8").astype(np.int64)
        e = gather_fixed(buf, starts + 8, 8).reshape(-1).view(">i8").astype(np.int64)
        return pa.StructArray.from_arrays([pa.array(s), pa.array(e)], ["start", "end"]), starts + 16
    if k in ("tuple", "pojo", "row"):
        pos = starts
        if k == "pojo":
            if n and not (buf[pos] == 2).all():  # null POJOs or subclasses
                return None
            pos = pos + 1
        if k == "row":
            nbits = (2 if t.row_kind else 0) + len(t.children)
            width = (nbits + 7) // 8
            if n and gather_fixed(buf, pos, width).any():  # a null field or a RowKind other than INSERT
                return None
            pos = pos + width
        arrays = []
        for child in t.children:
            if k == "pojo":
                if n and buf[pos].any():  # a null field
                    return None
                pos = pos + 1
            got = bulk(child, buf, pos)
            if got is None:
                return None
            arr, pos = got
            arrays.append(arr)
        return pa.StructArray.from_arrays(arrays, list(t.field_names)), pos
    return None


# -- encoding keys (for lookups) ----------------------------------------------------------------------
def encode_key(t: FlinkType, value: Any) -> bytes | None:
    """`value` serialized as Flink's serializer for `t` writes it, or None where statekit does not encode `t`."""
    import struct

    k = t.kind
    try:
        if k in FIXED_DTYPES and not isinstance(value, bool):
            if k in ("double", "float"):
                return struct.pack(">d" if k == "double" else ">f", float(value))
            if not isinstance(value, int):
                return None
            return struct.pack({"long": ">q", "int": ">i", "short": ">h", "byte": ">b"}[k], value)
        if k == "boolean" and isinstance(value, bool):
            return b"\x01" if value else b"\x00"
        if k == "string" and isinstance(value, str):
            units = value.encode("utf-16-be", "surrogatepass")
            chars = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
            return _varint(len(chars) + 1) + b"".join(_varint(c) for c in chars)
        if k == "tuple" and isinstance(value, (tuple, list, dict)):
            items = list(value.values()) if isinstance(value, dict) else list(value)
            if len(items) != len(t.children):
                return None
            parts = [encode_key(c, v) for c, v in zip(t.children, items)]
            return None if any(p is None for p in parts) else b"".join(parts)  # type: ignore[arg-type]
    except (struct.error, OverflowError, UnicodeError):
        return None
    return None


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
