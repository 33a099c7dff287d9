"""UnsafeRows decoded column by column with numpy: many rows of one schema straight into Arrow arrays.

The rows are in one buffer; the fixed part of every row (null bits, then one 8-byte word a field) is
gathered once (read in place when the rows lie at a fixed stride), each field is then a strided view of it,
and variable-width values (strings, binary, nested structs) come from their ``offset << 32 | size`` words.
Types without a vector form here (decimals) make `decode_columns` return None, and the caller decodes row
by row (`statekit.format.spark.unsaferow`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from statekit.errors import CorruptSavepointError
from statekit.format.spark.types import Struct, arrow_type

_FIXED = {"long": np.int64, "timestamp": np.int64, "timestamp_ntz": np.int64, "integer": np.int32, "date": np.int32,
          "short": np.int16, "byte": np.int8, "boolean": np.bool_, "float": np.float32, "double": np.float64}


def supported(schema: Struct) -> bool:
    """Whether every field of `schema` has a vector decoder here."""
    for f in schema.fields:
        if isinstance(f.type, Struct):
            if not supported(f.type):
                return False
        elif f.type not in _FIXED and f.type not in ("string", "binary", "null", "void"):
            return False
    return True


def _at(buf: np.ndarray, at: np.ndarray, dtype: str) -> np.ndarray:
    """The little-endian `dtype` value at each byte offset of `at`: a view with an item at every byte of `buf`
    (overlapping, unaligned), so one gather moves whole values instead of their bytes one by one."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((len(buf) - size + 1,), dtype, buf, 0, (1,))[at]


def arrow_array(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """`values` (numbers or booleans) as an Arrow array, null where `null` is True. Not `pa.array`: its check for
    array-likes imports pandas (a third of a second the first time)."""
    data = np.packbits(values, bitorder="little") if values.dtype == np.bool_ else np.ascontiguousarray(values)
    valid = None if null is None else pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [valid, pa.py_buffer(data)])


@dataclass
class _Rows:
    """The fixed parts of `count` rows: row i at byte ``first + i * stride`` of `base`."""

    base: np.ndarray
    first: int
    stride: int
    count: int

    def field(self, offset: int, dtype: str) -> np.ndarray:
        """The `dtype` value at byte `offset` of every row (one item a row): a strided view."""
        if not self.count:
            return np.zeros(0, dtype)
        return np.ndarray((self.count,), dtype, self.base, self.first + offset, (self.stride,))


def _columns(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, schema: Struct, *, skip: int = 0,
             stride: int = 0) -> list[pa.Array] | None:
    """The fields of rows ``buf[starts[i] + skip:ends[i]]`` (``starts[i] = starts[0] + i * stride`` when `stride`),
    or None when a row's `skip` leading bytes are not all 0 (RocksDB's encoding version)."""
    n = len(schema.fields)
    bitset = ((n + 63) // 64) * 8
    fixed = skip + bitset + 8 * n
    if len(starts) and int(np.min(ends - starts)) < fixed:
        if skip and (int(np.min(ends - starts)) < skip or buf[starts].any()):
            return None
        raise CorruptSavepointError(f"an UnsafeRow is shorter than its schema's {fixed - skip} bytes")
    # the fixed part of every row (null bits, then a word a field) in one gather: each row's memory is read once,
    # then every field is a strided view of the gathered rows (rows at a stride are read where they are)
    if stride and len(starts):
        rows = _Rows(buf, int(starts[0]), stride, len(starts))
    elif len(starts) and fixed:
        rows = _Rows(np.ndarray((len(buf) - fixed + 1,), f"V{fixed}", buf, 0, (1,))[starts], 0, fixed, len(starts))
    else:
        rows = _Rows(np.zeros(0, np.uint8), 0, 1, 0) if not len(starts) else \
            _Rows(np.zeros(len(starts), np.uint8), 0, 1, len(starts))  # (no fixed part: no field read)
    if any(rows.field(i, "u1").any() for i in range(skip)):
        return None
    # the null bits of up to 64 fields are one word: when no row has one set (the common case), no field needs a mask
    nulls = bitset > 8 or bool(bitset and rows.field(skip, "<u8").any())
    out = []
    base = None  # where a row's offsets count from: only variable-width values need it, computed at the first
    for i, f in enumerate(schema.fields):
        null = (rows.field(skip + (i >> 3), "u1") >> (i & 7)) & 1 == 1 if nulls else None
        at = skip + bitset + 8 * i
        t = f.type
        if isinstance(t, Struct):
            w = rows.field(at, "<i8")
            base = starts + skip if base is None else base
            sub = base + (w >> 32)
            size = w & 0xFFFFFFFF
            children = _columns(buf, sub, sub + size, t) if null is None else \
                _columns(buf, np.where(null, base, sub), np.where(null, ends, sub + size), t)
            assert children is not None  # (no leading bytes to check)
            out.append(pa.StructArray.from_arrays(children, fields=[pa.field(c.name, arrow_type(c.type))
                                                                    for c in t.fields],
                                                  mask=None if null is None else arrow_array(null)))
        elif t in ("null", "void"):
            out.append(pa.nulls(len(starts)))
        elif t in ("string", "binary"):
            w = rows.field(at, "<i8")
            base = starts + skip if base is None else base
            off = base + (w >> 32) if null is None else np.where(null, 0, base + (w >> 32))
            size = w & 0xFFFFFFFF if null is None else np.where(null, 0, w & 0xFFFFFFFF)
            if len(off) and int(np.max(off + size)) > len(buf):
                raise CorruptSavepointError("an UnsafeRow's variable-width value lies beyond its row")
            offsets = np.zeros(len(size) + 1, np.int64)
            np.cumsum(size, out=offsets[1:])
            total = int(offsets[-1])
            pos = np.repeat(off - offsets[:-1], size) + np.arange(total, dtype=np.int64)
            data = buf[pos].tobytes()
            typ = pa.large_string() if t == "string" else pa.large_binary()
            valid = None if null is None else pa.py_buffer(np.packbits(~null, bitorder="little"))
            arr = pa.Array.from_buffers(typ, len(size), [valid, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])
            out.append(arr.cast(pa.string() if t == "string" else pa.binary()))
        else:
            dt = np.dtype(_FIXED[t])
            values = rows.field(at, "<" + dt.str[1:]).astype(dt) if t != "boolean" else rows.field(at, "u1") != 0
            arr = arrow_array(values, null)
            out.append(arr if t not in ("timestamp", "timestamp_ntz", "date") else arr.cast(arrow_type(t)))
    return out


def decode_columns(rows: list[bytes], schema: Struct, *, skip: int = 0) -> list[pa.Array] | None:
    """One Arrow array per field of `schema` for `rows` (each after `skip` leading bytes), or None if unsupported."""
    if not supported(schema):
        return None
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    ends = np.cumsum(lengths)
    buf = np.frombuffer(b"".join(rows) + b"\0" * 8, np.uint8)
    return decode_buffer(buf, ends - lengths, ends, schema, skip=skip)


def decode_buffer(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, schema: Struct, *,
                  skip: int = 0, stride: int = 0) -> list[pa.Array] | None:
    """`decode_columns` of rows ``buf[starts[i]:ends[i]]`` already in one buffer (padded with 8 bytes after the last
    row), or None if unsupported. `stride`, when given: ``starts[i] = starts[0] + i * stride`` (read in place)."""
    if not supported(schema):
        return None
    try:  # None for a leading byte that is not RocksDB's encoding version 0: the row decoder names the entry
        return _columns(buf, starts, ends, schema, skip=skip, stride=stride)
    except IndexError:
        raise CorruptSavepointError("an UnsafeRow's offsets point outside the row") from None
