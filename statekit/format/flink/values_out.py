"""Arrow columns encoded as Flink serializer bytes in bulk: numpy over whole columns, per record only for irregular values.

Boundary: the write side of `values`. `encode(array, flink_type)` gives every value's bytes as one
`Encoded` (a byte buffer plus n+1 offsets); `concat` joins encodings row by row, which is how
tuples, rows, POJOs, keyed entries and list runs are assembled without a Python call per value.
Encodings: section 3.6a of `../shared/flink/FORMAT.md` (`StringValue`, `RowSerializer`, ...).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from statekit.errors import StateTypeError
from statekit.format.flink.encoded import Encoded, concat, join_runs, offsets_of
from statekit.format.flink.serializers import FlinkType

_FIXED = {"long": ">i8", "int": ">i4", "short": ">i2", "byte": "i1", "double": ">f8", "float": ">f4"}
def encode(arr: pa.Array | pa.ChunkedArray, t: FlinkType, *, what: str = "a value") -> Encoded:
    """The bytes Flink's serializer for `t` writes for each (non-null, unless `t` allows it) value."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    k = t.kind
    n = len(arr)
    if k in ("tuple", "list", "map", "long", "int", "short", "byte", "double", "float", "boolean", "char", "string",
             "bytes", "enum", "window", "void") and arr.null_count:
        if k != "string":
            raise StateTypeError(f"{what}: a null {t.serializer} value; Flink's serializer cannot write nulls there.")
    if k in _FIXED:
        np_arr = arr.to_numpy(zero_copy_only=False).astype(_FIXED[k])
        return Encoded.fixed(np_arr.view(np.uint8).reshape(n, -1))
    if k == "boolean":
        return Encoded.fixed(arr.to_numpy(zero_copy_only=False).astype(np.uint8).reshape(n, 1))
    if k == "void":
        return Encoded.constant(b"\x00", n)
    if k == "string":
        return _strings(arr, what)
    if k == "bytes" and t.form == "row":  # a Flink SQL BinaryRowData
        from statekit.format.flink import sqlwrite  # here: DataStream writes never load the SQL encoders

        return sqlwrite.encode_serialized(arr, t, what=what)
    if k in ("bytes", "binary"):
        arr = arr.cast(pa.large_binary())
        offs = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8).astype(np.int64)
        data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
        raw = Encoded(data[offs[0] : offs[-1]], offs - offs[0])
        if k == "binary":  # opaque (Kryo, Avro...): the column holds the serializer's bytes as they were
            if arr.null_count:
                raise StateTypeError(f"{what}: a null value of opaque serializer {t.serializer}.")
            return raw
        lengths = raw.lengths.astype(">i4").view(np.uint8).reshape(-1, 4)
        return concat([Encoded.fixed(lengths), raw])
    if k == "window":
        import pyarrow.compute as pc  # here: writers of other layouts start without it

        s = pc.struct_field(arr, "start").to_numpy(zero_copy_only=False).astype(">i8")
        e = pc.struct_field(arr, "end").to_numpy(zero_copy_only=False).astype(">i8")
        return Encoded.fixed(np.concatenate([s.view(np.uint8).reshape(n, 8), e.view(np.uint8).reshape(n, 8)], axis=1))
    if k == "list":
        arr = arr.cast(pa.large_list(arr.type.value_type))
        flat = arr.flatten()
        counts = np.diff(np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8))
        return join_runs(encode(flat, t.children[0], what=what), counts, None, True)
    if k == "map":
        offs = arr.offsets.to_numpy()
        counts = np.diff(offs)
        lo, hi = int(offs[0]), int(offs[-1])  # .keys / .items ignore the array's slice
        kv = concat([encode(arr.keys.slice(lo, hi - lo), t.children[0], what=what),
                     nullable_values(arr.items.slice(lo, hi - lo), t.children[1], what)])
        return join_runs(kv, counts, None, True)
    if k in ("tuple", "row", "pojo"):
        return _struct(arr, t, what)
    if k == "enum":
        idx = {v: i for i, v in enumerate(t.enum_values)}
        try:
            ordinals = np.array([idx[v] for v in arr.to_pylist()], ">i4")
        except KeyError as exc:
            raise StateTypeError(f"{what}: {exc.args[0]!r} is not a constant of enum {t.type_class}.") from None
        return Encoded.fixed(ordinals.view(np.uint8).reshape(n, 4))
    if k == "avro":
        from statekit.format.flink import avro_out  # here: only Avro states need it

        return avro_out.encode_column(arr, t.avro, what=what)
    if k == "char":
        vals = np.array([ord(c) for c in arr.to_pylist()], ">u2")
        return Encoded.fixed(vals.view(np.uint8).reshape(n, 2))
    raise StateTypeError(f"{what}: values of serializer {t.serializer} cannot be written by statekit.")


def nullable_values(arr: pa.Array, t: FlinkType, what: str) -> Encoded:
    """MapSerializer values: ``bool isNull`` then the value when present."""
    n = len(arr)
    isnull = arr.is_null().to_numpy(zero_copy_only=False)
    if not isnull.any():
        return concat([Encoded.constant(b"\x00", n), encode(arr, t, what=what)])
    ok = np.flatnonzero(~isnull)
    present = encode(arr.take(pa.array(ok)), t, what=what)
    lengths = np.zeros(n, np.int64)
    lengths[ok] = present.lengths
    body = Encoded(present.data, offsets_of(lengths))
    return concat([Encoded.fixed(isnull.astype(np.uint8).reshape(n, 1)), body])


def _strings(arr: pa.Array, what: str) -> Encoded:
    """`StringValue.writeString`; ASCII strings shorter than 127 chars in bulk, the rest per record."""
    n = len(arr)
    arr = arr.cast(pa.large_string())
    offs = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8).astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    data = data[offs[0] : offs[-1]]
    offs = offs - offs[0]
    lengths = np.diff(offs)
    if not arr.null_count and (n == 0 or lengths.max() < 127) and (len(data) == 0 or data.max() < 0x80):
        head = Encoded.fixed((lengths + 1).astype(np.uint8).reshape(n, 1))
        return concat([head, Encoded(data, offs)])
    return Encoded.from_list([java_string_bytes(v) for v in arr.to_pylist()])


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def java_string_bytes(s: str | None) -> bytes:
    """One `StringValue.writeString` (None = the null string, ``00``)."""
    if s is None:
        return b"\x00"
    units = s.encode("utf-16-be", "surrogatepass")
    n = len(units) // 2
    if s.isascii():
        return _varint(n + 1) + s.encode("ascii")
    return _varint(n + 1) + b"".join(_varint(u) for (u,) in struct.iter_unpack(">H", units))


def _struct(arr: pa.Array, t: FlinkType, what: str) -> Encoded:
    n = len(arr)
    if not isinstance(arr, pa.StructArray):
        raise StateTypeError(f"{what}: a {t.serializer} value needs a struct column, got {arr.type}.")
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    if len(names) != len(t.children):
        raise StateTypeError(f"{what}: {t.serializer} has {len(t.children)} fields, the column {len(names)} ({names}).")
    by_name = set(names) == set(t.field_names) and t.kind == "pojo"
    fields = [arr.field(names.index(f)) if by_name else arr.field(i) for i, f in enumerate(t.field_names)]
    if arr.null_count and t.kind != "pojo":
        raise StateTypeError(f"{what}: a null {t.serializer} value; Flink's serializer cannot write nulls there.")
    if t.kind == "tuple":
        if any(f.null_count for f in fields):
            raise StateTypeError(f"{what}: a Flink Tuple field is null; Tuple fields cannot be null.")
        return concat([encode(f, c, what=what) for f, c in zip(fields, t.children)])
    if t.kind == "row":
        extra = 2 if t.row_kind else 0
        nbits = extra + len(fields)
        width = (nbits + 7) // 8
        if not any(f.null_count for f in fields):
            return concat([Encoded.constant(bytes(width), n)] + [encode(f, c, what=what) for f, c in zip(fields, t.children)])
        mask = np.zeros((n, width), np.uint8)
        parts = []
        for j, (f, c) in enumerate(zip(fields, t.children)):
            isnull = f.is_null().to_numpy(zero_copy_only=False)
            b = extra + j
            mask[:, b // 8] |= (isnull.astype(np.uint8) << (7 - b % 8))
            parts.append(_present(f, c, isnull, what))
        return concat([Encoded.fixed(mask)] + parts)
    # POJO: flags (1 = null, 2 = exact class), then per field: null flag + value
    top_null = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else np.zeros(n, bool)
    parts = [Encoded.fixed(np.where(top_null, 1, 2).astype(np.uint8).reshape(n, 1))]
    for f, c in zip(fields, t.children):
        isnull = f.is_null().to_numpy(zero_copy_only=False) | top_null
        parts.append(Encoded.fixed(isnull.astype(np.uint8).reshape(n, 1)) if not top_null.any() else
                     Encoded.fixed(np.where(top_null, 0, isnull).astype(np.uint8).reshape(n, 1)))
        parts[-1] = _drop_where(parts[-1], top_null)
        parts.append(_present(f, c, isnull, what))
    return concat(parts)


def _drop_where(e: Encoded, drop: np.ndarray) -> Encoded:
    if not drop.any():
        return e
    lengths = np.where(drop, 0, e.lengths)
    keep = np.flatnonzero(~drop)
    return Encoded(e.take(keep).data, offsets_of(lengths))


def _present(f: pa.Array, t: FlinkType, isnull: np.ndarray, what: str) -> Encoded:
    """Encodings of the non-null values of `f`, empty where null."""
    if not isnull.any():
        return encode(f, t, what=what)
    ok = np.flatnonzero(~isnull)
    enc = encode(f.take(pa.array(ok)), t, what=what)
    lengths = np.zeros(len(f), np.int64)
    lengths[ok] = enc.lengths
    return Encoded(enc.data, offsets_of(lengths))
