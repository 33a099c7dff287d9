"""Avro values written back as flink-avro writes them (`DataOutputEncoder`), and Avro keys' key groups from Avro's own record hash.

Boundary: the write side of `avro_values`. `encode` turns an Arrow column of an `AvroType` into each
value's bytes (the inverse of the reader, so an unchanged value is written byte for byte as Flink
wrote it); `hash_code` is `GenericData.hashCode(datum, schema)` (what `SpecificRecordBase.hashCode()`
and `GenericData.Record.hashCode()` return, so Flink's key group of an Avro key) computed from the
values statekit reads. A generated SpecificRecord holds logical types as Java objects (`Instant`,
`LocalDate`) whose own hashCode counts; a GenericRecord holds the raw numbers. Keys whose hash
depends on what statekit cannot know (maps, decimals, time-of-day) are refused by name.
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import StateTypeError, UnsupportedFormatError
from statekit.format.flink.avro import AvroType

if TYPE_CHECKING:
    from statekit.format.flink.encoded import Encoded

__all__ = ["GENERIC_CLASSES", "encode", "encode_column", "encoder", "hash_code", "hash_codes", "key_groups"]

Encoder = Callable[[Any, bytearray], None]
GENERIC_CLASSES = ("org.apache.avro.generic.GenericRecord", "org.apache.avro.generic.GenericData$Record",
                   "org.apache.avro.generic.IndexedRecord")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1)
_PACK = {"int": struct.Struct(">i"), "long": struct.Struct(">q"), "float": struct.Struct(">f"),
         "double": struct.Struct(">d")}
_I32 = struct.Struct(">i")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _micros(v: dt.datetime) -> int:
    d = v - (_EPOCH if v.tzinfo is not None else _EPOCH_NAIVE)
    return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds


def _unscaled(v: Any, t: AvroType, what: str) -> int:
    try:
        q = Decimal(v).scaleb(t.scale)
        if q != q.to_integral_value():
            raise InvalidOperation
        return int(q)
    except (InvalidOperation, TypeError, ValueError):
        raise StateTypeError(f"{what}: {v!r} is not a decimal({t.precision},{t.scale}) value") from None


def _twos(n: int) -> bytes:
    """`BigInteger.toByteArray()`: the shortest big-endian two's complement."""
    return n.to_bytes(((n if n >= 0 else ~n).bit_length()) // 8 + 1, "big", signed=True)


def encoder(t: AvroType, what: str = "an Avro value") -> Encoder:
    """A function appending one Python value of `t` (as `avro_values.reader` gives it) to a bytearray."""
    k, lg = t.kind, t.logical
    if k == "null":
        def null(v: Any, out: bytearray) -> None:
            if v is not None:
                raise StateTypeError(f"{what}: {v!r} where the Avro schema allows only null")
        return null
    if k == "boolean":
        return lambda v, out: out.append(1 if _need(v, what) else 0)
    if k in _PACK:
        pack = _PACK[k].pack
        conv: Callable[[Any], Any] = lambda v: v  # noqa: E731
        if lg == "date":
            conv = lambda v: (v - _EPOCH_DAY).days if isinstance(v, dt.date) else v  # noqa: E731
        elif lg in ("timestamp-micros", "local-timestamp-micros"):
            conv = lambda v: _micros(v) if isinstance(v, dt.datetime) else v  # noqa: E731
        elif lg in ("timestamp-millis", "local-timestamp-millis"):
            def conv(v: Any) -> Any:
                us = _micros(v) if isinstance(v, dt.datetime) else v
                if us % 1000:
                    raise StateTypeError(f"{what}: {v!r} has microseconds; the Avro field is {lg}")
                return us // 1000

        def number(v: Any, out: bytearray) -> None:
            try:
                out += pack(conv(_need(v, what)))
            except struct.error:
                raise StateTypeError(f"{what}: {v!r} does not fit an Avro {k}") from None
        return number
    if k == "string":
        def string(v: Any, out: bytearray) -> None:
            b = str(_need(v, what)).encode("utf-8", "replace")
            out += _I32.pack(len(b))
            out += b
        return string
    if k in ("bytes", "fixed"):
        size = t.size

        def raw(v: Any, out: bytearray) -> None:
            v = _need(v, what)
            if lg == "decimal":
                b = _twos(_unscaled(v, t, what))
                if k == "fixed":
                    if len(b) > size:
                        raise StateTypeError(f"{what}: {v!r} needs {len(b)} bytes; the Avro fixed {t.name} has {size}")
                    b = (b"\xff" if b[0] >= 0x80 else b"\x00") * (size - len(b)) + b
            else:
                b = bytes(v)
            if k == "bytes":
                out += _I32.pack(len(b))
            elif len(b) != size:
                raise StateTypeError(f"{what}: {len(b)} bytes for the Avro fixed {t.name} of {size}")
            out += b
        return raw
    if k == "enum":
        index = {s: i for i, s in enumerate(t.symbols)}

        def enum(v: Any, out: bytearray) -> None:
            if v not in index:
                raise StateTypeError(f"{what}: {v!r} is not a symbol of Avro enum {t.name} {list(t.symbols)}")
            out += _I32.pack(index[v])
        return enum
    if k == "record":
        fields = [(f.name, encoder(f.type, f"field {f.name!r} of {t.name}")) for f in t.fields]

        def record(v: Any, out: bytearray) -> None:
            v = _need(v, what)
            for name, enc in fields:
                enc(v.get(name), out)
        return record
    if k in ("array", "map"):
        assert t.items is not None
        item = encoder(t.items, f"an item of {what}")
        key = encoder(AvroType("string"), f"a key of {what}")

        def collection(v: Any, out: bytearray) -> None:
            v = _need(v, what)
            items = list(v.items()) if isinstance(v, dict) else list(v)
            if items:
                out += _varint(len(items))
                for x in items:
                    if k == "map":
                        key(x[0], out)
                        item(x[1], out)
                    else:
                        item(x, out)
            out.append(0)
        return collection
    if k == "union":
        encs = [encoder(b, what) for b in t.branches]
        null_at, nb = t.null_branch, t.nullable_branch
        names = {b.branch_name(): i for i, b in enumerate(t.branches) if b.kind != "null"}

        def union(v: Any, out: bytearray) -> None:
            if v is None:
                if null_at is None:
                    raise StateTypeError(f"{what}: null where the Avro union has no null branch")
                out += _I32.pack(null_at)
                return
            if nb is not None:
                out += _I32.pack(nb)
                encs[nb](v, out)
                return
            set_ = [n for n, x in v.items() if x is not None]
            if len(set_) != 1 or set_[0] not in names:
                raise StateTypeError(f"{what}: a value of the Avro union {list(names)} sets exactly one branch, "
                                     f"not {set_}")
            b = names[set_[0]]
            out += _I32.pack(b)
            encs[b](v[set_[0]], out)
        return union
    raise UnsupportedFormatError(f"statekit cannot write Avro {k} values")


def _need(v: Any, what: str) -> Any:
    if v is None:
        raise StateTypeError(f"{what}: null where the Avro schema has no null branch (make the field a union with null)")
    return v


def encode(arr: pa.Array | pa.ChunkedArray, t: AvroType, *, what: str = "an Avro value") -> list[bytes]:
    """Each value of Arrow column `arr` as flink-avro's `AvroSerializer` writes it."""
    enc = encoder(t, what)
    out = []
    for v in arr.to_pylist():
        b = bytearray()
        enc(v, b)
        out.append(bytes(b))
    return out


# -- hashCode ----------------------------------------------------------------------------------------------
def _i32(h: int) -> int:
    return ((h + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def _long_hash(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return _i32(v ^ (v >> 32))


def _utf8_hash(s: str) -> int:
    h = 0
    for b in s.encode("utf-8", "replace"):
        h = (31 * h + (b - 256 if b > 127 else b)) & 0xFFFFFFFF
    return _i32(h)


def hash_code(v: Any, t: AvroType, *, specific: bool, what: str = "an Avro key") -> int:
    """`GenericData.hashCode(v, schema)` of a value as statekit reads it (int32).

    `specific`: the datum is a generated SpecificRecord, whose logical-type fields hold Java objects
    (`Instant`, `LocalDate`) that hash as those classes do.
    """
    if v is None:
        return 0
    k, lg = t.kind, t.logical
    if k == "record":
        h = 1
        for f in t.fields:
            if not f.ignored:
                h = _i32(31 * h + hash_code(v.get(f.name), f.type, specific=specific, what=f"{what} field {f.name!r}"))
        return h
    if k == "array":
        assert t.items is not None
        h = 1
        for x in v:
            h = _i32(31 * h + hash_code(x, t.items, specific=specific, what=what))
        return h
    if k == "union":
        nb = t.nullable_branch
        if nb is not None:
            return hash_code(v, t.branches[nb], specific=specific, what=what)
        for b in t.branches:
            if b.kind != "null" and v.get(b.branch_name()) is not None:
                return hash_code(v[b.branch_name()], b, specific=specific, what=what)
        return 0
    if k == "enum":
        return t.symbols.index(v)
    if k == "null":
        return 0
    if k == "string":
        return _utf8_hash(v)
    if k == "boolean":
        return 1231 if v else 1237
    if lg == "decimal" or (lg is not None and lg not in ("date", "timestamp-millis", "timestamp-micros")) \
            or k == "map":
        raise UnsupportedFormatError(
            f"{what}: the hashCode of an Avro {lg or k} depends on the Java class the job holds it in; statekit "
            "computes key groups of Avro keys of records, enums, strings, numbers, booleans, bytes, fixed, arrays, "
            "dates and timestamps")
    if k == "int":
        if lg == "date":
            days = (v - _EPOCH_DAY).days if isinstance(v, dt.date) else int(v)
            if not specific:
                return days
            d = _EPOCH_DAY + dt.timedelta(days=days)  # java.time.LocalDate.hashCode
            return _i32((d.year & 0xFFFFF800) ^ ((d.year << 11) + (d.month << 6) + d.day))
        return int(v)
    if k == "long":
        n = _micros(v) if isinstance(v, dt.datetime) else int(v)
        if lg is None:
            return _long_hash(n)
        if lg == "timestamp-millis":
            n //= 1000
        if not specific:
            return _long_hash(n)
        unit = 1000 if lg == "timestamp-millis" else 1_000_000
        secs, frac = divmod(n, unit)  # java.time.Instant.hashCode
        nanos = frac * (1_000_000 if lg == "timestamp-millis" else 1000)
        return _i32(_long_hash(secs) + 51 * nanos)
    if k == "float":
        bits = struct.unpack(">i", struct.pack(">f", v))[0]
        return 0x7FC00000 if v != v else bits
    if k == "double":
        bits = struct.unpack(">q", struct.pack(">d", v))[0]
        return _long_hash(0x7FF8000000000000 if v != v else bits)
    if k == "bytes":  # java.nio.ByteBuffer.hashCode: from the last byte back
        h = 1
        for byte in reversed(bytes(v)):
            h = _i32(31 * h + (byte - 256 if byte > 127 else byte))
        return h
    if k == "fixed":  # Arrays.hashCode(bytes)
        h = 1
        for byte in bytes(v):
            h = _i32(31 * h + (byte - 256 if byte > 127 else byte))
        return h
    raise UnsupportedFormatError(f"{what}: statekit cannot compute the hashCode of an Avro {k}")


def hash_codes(keys: pa.Array | pa.ChunkedArray | list[Any], t: AvroType, type_class: str | None) -> np.ndarray:
    """`hashCode()` of every key (int32), as the job's key class computes it."""
    specific = type_class not in GENERIC_CLASSES
    values = keys.to_pylist() if isinstance(keys, (pa.Array, pa.ChunkedArray)) else keys
    return np.array([hash_code(v, t, specific=specific) for v in values], np.int64).astype(np.int32)


def key_groups(keys: pa.Array | pa.ChunkedArray | list[Any], t: AvroType, type_class: str | None,
               max_parallelism: int) -> np.ndarray:
    """Flink's key group (int32) of every Avro key: `murmurHash(key.hashCode()) % max_parallelism`."""
    from statekit.keygroups import compute_key_groups_for_key_hashes  # here: keygroups is not needed to encode

    return compute_key_groups_for_key_hashes(hash_codes(keys, t, type_class).view(np.uint32).copy(), max_parallelism)


# -- bulk -------------------------------------------------------------------------------------------------
# Each node becomes one Arrow large_binary column (value i = the bytes of row i); records, arrays and
# unions are joined row-wise by Arrow's binary kernels, so bytes are copied once per nesting level in C++.
_EMPTY = pa.scalar(b"", pa.large_binary())


def encode_column(arr: pa.Array | pa.ChunkedArray, t: AvroType, *, what: str = "an Avro value") -> "Encoded":
    """`encode` column by column: numpy and Arrow per field for the regular parts, per record only for values
    that do not fit (which then raise the per-record encoder's error). Same bytes as `encode`."""
    from statekit.format.flink.encoded import Encoded

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    col = _column(arr, t, what)
    n = len(col)
    offs = np.frombuffer(col.buffers()[1], np.int64, n + 1, col.offset * 8)
    data = np.frombuffer(col.buffers()[2], np.uint8) if col.buffers()[2] is not None else np.zeros(0, np.uint8)
    return Encoded(data[offs[0] : offs[-1]], offs - offs[0])


def _cum(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _bin(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(np.ascontiguousarray(offsets, np.int64)),
                                  pa.py_buffer(np.ascontiguousarray(data, np.uint8))])


def _fixed(matrix: np.ndarray) -> pa.Array:
    n, w = matrix.shape
    return _bin(matrix.reshape(-1), np.arange(n + 1, dtype=np.int64) * w)


def _join(parts: list[pa.Array]) -> pa.Array:
    return parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, _EMPTY)


def _per_record(arr: pa.Array, t: AvroType, what: str) -> pa.Array:
    return pa.array(encode(arr, t, what=what), pa.large_binary())


def _column(arr: pa.Array, t: AvroType, what: str) -> pa.Array:
    k, lg, n = t.kind, t.logical, len(arr)
    if arr.null_count and k not in ("union", "null"):
        return _per_record(arr, t, what)  # raises, naming the null
    if k == "null":
        return _bin(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64))
    if k in _PACK:
        if pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type):
            arr = arr.cast(pa.int64() if k == "long" else pa.int32())
        vals = arr.to_numpy(zero_copy_only=False)
        if lg in ("timestamp-millis", "local-timestamp-millis"):
            if (vals % 1000).any():
                return _per_record(arr.cast(pa.timestamp("us")), t, what)  # raises, naming the value
            vals = vals // 1000
        be = {"int": ">i4", "long": ">i8", "float": ">f4", "double": ">f8"}[k]
        try:
            return _fixed(vals.astype(be).view(np.uint8).reshape(n, -1))
        except (OverflowError, ValueError):
            return _per_record(arr, t, what)
    if k == "boolean":
        return _fixed(arr.to_numpy(zero_copy_only=False).astype(np.uint8).reshape(n, 1))
    if lg == "decimal":
        if pa.types.is_decimal128(arr.type) and arr.type.scale == t.scale and (k == "bytes" or t.size <= 16):
            got = _decimals(arr, k, t.size)
            if got is not None:
                return got
        return _per_record(arr, t, what)
    if k in ("string", "bytes", "fixed"):
        raw = arr.cast(pa.large_binary())
        if k == "fixed":
            if n and not (pc.binary_length(raw).to_numpy(zero_copy_only=False) == t.size).all():
                return _per_record(arr, t, what)  # raises, naming the size
            return raw
        lengths = pc.binary_length(raw).to_numpy(zero_copy_only=False)
        if n and lengths.max() > 0x7FFFFFFF:
            return _per_record(arr, t, what)
        return _join([_fixed(lengths.astype(">i4").view(np.uint8).reshape(n, 4)), raw])
    if k == "enum":
        idx = pc.index_in(arr, value_set=pa.array(list(t.symbols), pa.string()))
        if idx.null_count:
            return _per_record(arr, t, what)  # raises, naming the symbol
        return _fixed(idx.to_numpy(zero_copy_only=False).astype(">i4").view(np.uint8).reshape(n, 4))
    if k == "record":
        if not t.fields:
            return _bin(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64))
        children = arr.flatten()
        return _join([_column(c, f.type, f"field {f.name!r} of {t.name}") for c, f in zip(children, t.fields)])
    if k in ("array", "map"):
        assert t.items is not None
        if k == "array":
            counts = arr.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
            elements = _column(arr.flatten(), t.items, f"an item of {what}")
        else:
            offs = arr.offsets.to_numpy()
            counts = np.diff(offs).astype(np.int64)
            lo, hi = int(offs[0]), int(offs[-1])  # .keys / .items ignore the array's slice
            elements = _join([_column(arr.keys.slice(lo, hi - lo), AvroType("string"), f"a key of {what}"),
                              _column(arr.items.slice(lo, hi - lo), t.items, f"a value of {what}")])
        body = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(_cum(counts)), elements), _EMPTY)
        if n and counts.max() >= 0x80:
            prefix = pa.array([_varint(int(c)) if c else b"" for c in counts.tolist()], pa.large_binary())
        else:
            prefix = _bin(counts[counts > 0].astype(np.uint8), _cum((counts > 0).astype(np.int64)))
        return _join([prefix, body, _fixed(np.zeros((n, 1), np.uint8))])
    if k == "union":
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        null_at, nb = t.null_branch, t.nullable_branch
        if (~valid).any() and null_at is None:
            return _per_record(arr, t, what)  # raises: the union has no null branch
        branch = np.full(n, -1 if null_at is None else null_at, np.int64)
        present: list[pa.Array] = []
        if nb is not None:
            branch[valid] = nb
            present.append(_spread(_column(arr.filter(pa.array(valid)), t.branches[nb], what), valid))
        else:
            children = arr.flatten()
            set_ = np.zeros(n, np.int64)
            for c in children:
                set_ += c.is_valid().to_numpy(zero_copy_only=False)
            if (set_[valid] != 1).any():
                return _per_record(arr, t, what)  # raises: exactly one branch per value
            for c, b in zip(children, [b for b in t.branches if b.kind != "null"]):
                mask = c.is_valid().to_numpy(zero_copy_only=False) & valid
                branch[mask] = t.branches.index(b)
                present.append(_spread(_column(c.filter(pa.array(mask)), b, what), mask))
        body = pc.coalesce(*present, _EMPTY) if present else _bin(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64))
        return _join([_fixed(branch.astype(">i4").view(np.uint8).reshape(n, 4)), body])
    return _per_record(arr, t, what)


def _spread(values: pa.Array, mask: np.ndarray) -> pa.Array:
    """`values` (one per set row of `mask`) at their rows, null elsewhere."""
    idx = np.full(len(mask), -1, np.int64)
    idx[mask] = np.arange(int(mask.sum()))
    return values.take(pa.array(idx, mask=idx < 0))


def _decimals(arr: pa.Array, k: str, size: int) -> pa.Array | None:
    """decimal128 values as `BigInteger.toByteArray()` (bytes: shortest two's complement after ``i32 length``)
    or sign-padded to the fixed size; None when a value does not fit the fixed size."""
    n = len(arr)
    le = np.frombuffer(arr.buffers()[1], np.uint8, n * 16, arr.offset * 16).reshape(n, 16)
    sign = np.where(le[:, 15] >= 0x80, 0xFF, 0).astype(np.uint8)
    if k == "fixed":
        width = np.full(n, size, np.int64)
        if n and not ((le[:, size:] == sign[:, None]).all() and ((le[:, size - 1] & 0x80) == (sign & 0x80)).all()):
            return None
    else:
        width = np.full(n, 16, np.int64)
        for w in range(15, 0, -1):  # the shortest width whose sign extension gives the value
            fits = (le[:, w:] == sign[:, None]).all(axis=1) & ((le[:, w - 1] & 0x80) == (sign & 0x80))
            width[fits] = w
    keep = np.arange(16)[None, :] >= (16 - width)[:, None]
    raw = _bin(np.ascontiguousarray(le[:, ::-1])[keep], _cum(width))
    if k == "fixed":
        return raw
    return _join([_fixed(width.astype(">i4").view(np.uint8).reshape(n, 4)), raw])
