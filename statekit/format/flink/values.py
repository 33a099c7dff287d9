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
from statekit.format.arrow_memory import from_numpy
from statekit.format.flink.binary import DataInput, java_string
from statekit.format.flink.gather import (
    binary_array,
    fixed_array,
    gather_fixed,
    gather_values,
)
from statekit.format.flink.serializers import FlinkType
from statekit.types import parse_ddl

Reader = Callable[[DataInput], Any]

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
    if k == "bytes" and t.form in ("row", "string"):
        return _sql_reader(t)
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
    if k == "avro":
        from statekit.format.flink import avro_values  # here: avro_values builds on this module

        return avro_values.reader(t.avro, f"an Avro value of {t.type_class}")
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


def _sql_reader(t: FlinkType) -> Reader:
    """Flink SQL's length-prefixed values: a BinaryRowData of known field types, or UTF-8 StringData."""
    from statekit.format.flink import rowdata  # here: DataStream savepoints never load the SQL decoders

    def row(i: DataInput) -> dict[str, Any]:
        n = i.count("a row length", limit=(1 << 31) - 1)
        at = i.pos
        i.skip(n, "a row")
        try:
            return rowdata.decode_row(i.data, t.logical, t.field_names, row_kind=t.row_kind, base=at, end=at + n)
        except rowdata.RowFault as exc:
            i.pos = at
            raise i.fail(f"a SQL row does not decode ({exc})") from None

    def string(i: DataInput) -> str:
        raw = i.bytes(i.count("a string length", limit=(1 << 31) - 1), "a string")
        try:
            return raw.decode("utf-8")
        except UnicodeError:
            raise i.fail("a SQL string is not UTF-8") from None

    return row if t.form == "row" else string


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
def strings(buf: np.ndarray, starts: np.ndarray) -> tuple[pa.Array, np.ndarray] | None:
    """Flink `StringValue`s at `starts` in bulk, when every one is ASCII (then its bytes are its UTF-8), with their ends.

    Encoding: varint(length + 1) (7 bits per byte, low group first; 0 = null), then each UTF-16
    char as the same varint, so a char below 0x80 is one byte. Lengths of one or two varint bytes
    (< 16383 chars) are read here; null or non-ASCII strings give None (the per-record decoder).
    """
    n = len(starts)
    if not n:
        return binary_array(buf, starts, starts, pa.string()), starts
    head = buf[starts].astype(np.int32)
    two = np.flatnonzero(head >= 0x80)
    lengths = head & 0x7F
    if len(two):
        second = buf[starts[two] + 1].astype(np.int32)
        if second.max() >= 0x80:
            return None
        lengths[two] |= second << 7
    if lengths.min() == 0:  # a null string
        return None
    lengths -= 1
    chars = starts + 1
    if len(two):
        chars[two] += 1
    arr = binary_array(buf, chars, lengths, pa.string())
    total = int(lengths.sum())
    if total and np.frombuffer(arr.buffers()[2], np.uint8, count=total).max() >= 0x80:
        return None  # a char of 0x80 or more is a multi-byte varint, not UTF-8
    return arr, chars + lengths


def _be32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    return gather_values(buf, at, ">i4").astype(np.int64)


def bulk(t: FlinkType, buf: np.ndarray, starts: np.ndarray) -> tuple[pa.Array, np.ndarray] | None:
    """Decode one value of `t` at each start in bulk: (Arrow array, end offsets), or None if the layout is not regular."""
    k = t.kind
    n = len(starts)
    if k in FIXED_DTYPES:
        w = np.dtype(FIXED_DTYPES[k]).itemsize
        return fixed_array(buf, starts, FIXED_DTYPES[k]), starts + w
    if k == "boolean":
        return from_numpy(buf[starts] != 0), starts + 1
    if k == "string":
        return strings(buf, starts)
    if k == "bytes":
        if t.form == "row":
            from statekit.format.flink import rowdata  # here: DataStream savepoints never load the SQL decoders

            try:
                return rowdata.decode_sized_rows(buf, starts, t.logical, t.field_names, row_kind=t.row_kind)
            except rowdata.RowFault:
                return None  # the per-record decoder names the row at fault
        lengths = _be32(buf, starts)
        if n and lengths.min() < 0:
            return None
        return binary_array(buf, starts + 4, lengths, pa.string() if t.form == "string" else pa.binary()), \
            starts + 4 + lengths
    if k == "enum":
        ordinals = _be32(buf, starts)
        if n and (ordinals.min() < 0 or ordinals.max() >= len(t.enum_values)):
            return None
        return pa.array(np.array(t.enum_values, dtype=object)[ordinals], pa.string()), starts + 4
    if k == "window":
        s = gather_fixed(buf, starts, 8).reshape(-1).view(">i8").astype(np.int64)
        e = gather_fixed(buf, starts + 8, 8).reshape(-1).view(">i8").astype(np.int64)
        return pa.StructArray.from_arrays([from_numpy(s), from_numpy(e)], ["start", "end"]), starts + 16
    if k == "avro":
        from statekit.format.flink import avro_values  # here: avro_values builds on this module

        return avro_values.bulk(t.avro, buf, starts)
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
