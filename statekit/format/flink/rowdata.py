"""Flink SQL's `BinaryRowData` decoded: columnar with numpy for many rows at once, per record for nested values; keys encoded back for lookups.

Boundary: rows' byte ranges and their `LogicalType`s in, Arrow arrays (or Python values) out;
`encode_row` writes a key the way Flink's `BinaryRowWriter` does, so its bytes hash to the key's
key group (`statekit.keyhash.binary_row_hash`). Layout (`../shared/flink/sql/SQL-FORMAT.md` 4.1,
all little-endian): byte 0 the RowKind, null bits from bit 8 (LSB first), the header
``((arity + 63 + 8) // 64) * 8`` bytes, one 8-byte slot per field, then the variable part. Strings
and byte strings of up to 7 bytes sit inline in their slot (slot byte 7 = ``0x80 | length``); longer
ones, and nested ARRAY/MAP/ROW/RAW values, DECIMAL(p > 18) and the millis of TIMESTAMP(p > 3), are
``offset << 32 | length`` into the row (a timestamp's low word is its nanos of the millisecond).
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError
from statekit.format.arrow_memory import allocate, arrow_type, copy_buffer, from_numpy, primitive
from statekit.format.flink.gather import binary_array, gather_fixed
from statekit.format.flink.logical import LogicalType
from statekit.types import parse_ddl

__all__ = ["ROW_KINDS", "decode_row", "decode_rows", "decode_sized_rows", "encode_nested", "encode_row", "header_bytes",
           "row_kinds"]

ROW_KINDS = ("+I", "-U", "+U", "-D")
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: DECIMAL(38) and wider need more than the default context's 28 digits: scaling must never round
_EXACT = decimal.Context(prec=80)
_STRINGS = ("CHAR", "VARCHAR")
_BYTES = ("BINARY", "VARBINARY", "RAW", "SYMBOL")
_INT_WIDTH = {"BOOLEAN": ("<u1", 1), "TINYINT": ("<i1", 1), "SMALLINT": ("<i2", 2), "INTEGER": ("<i4", 4),
              "DATE": ("<i4", 4), "TIME_WITHOUT_TIME_ZONE": ("<i4", 4), "INTERVAL_YEAR_MONTH": ("<i4", 4),
              "FLOAT": ("<f4", 4), "BIGINT": ("<i8", 8), "INTERVAL_DAY_TIME": ("<i8", 8), "DOUBLE": ("<f8", 8)}


def header_bytes(arity: int) -> int:
    """`BinaryRowData.calculateBitSetWidthInBytes`: RowKind byte and null bits, in whole 8-byte words."""
    return ((arity + 63 + 8) // 64) * 8


class RowFault(ValueError):
    """A row's bytes contradict its layout (an offset past its end); the caller names the file."""


# -- columnar ------------------------------------------------------------------------------------------
def decode_rows(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, types: Sequence[LogicalType],
                names: Sequence[str], *, row_kind: bool = False) -> pa.StructArray:
    """The rows at [starts, starts + lengths) of `buf` as one struct array (fields `names`, then ``row_kind``).

    Fixed-width fields and strings are cut from every row at once; nested values and wide decimals
    are decoded per record (their layout is irregular).
    """
    starts = starts.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    width = _fixed_width(types)
    if len(starts) and (lengths < width).any():
        raise RowFault(f"a row is shorter than the {width} bytes of its {len(types)} fields")
    return _Rows(buf, starts, lengths, gather_fixed(buf, starts, width), 0).decode(types, names, row_kind)


def decode_sized_rows(buf: np.ndarray, at: np.ndarray, types: Sequence[LogicalType], names: Sequence[str], *,
                      row_kind: bool = False) -> tuple[pa.StructArray, np.ndarray]:
    """Rows as `BinaryRowDataSerializer` writes them at `at` (a big-endian i32 length, then the row): the struct
    array (as `decode_rows`) and where each ends. One gather reads every row's length and fixed part together.

    Raises
    ------
    IndexError
        If a row's fixed part runs past the end of `buf`.
    RowFault
        If a length is shorter than the row's fixed part or runs past the end of `buf`.
    """
    at = at.astype(np.int64, copy=False)
    width = _fixed_width(types)
    fixed = gather_fixed(buf, at, 4 + width)
    lengths = _field(fixed, 0, ">i4").astype(np.int64)
    if len(at) and lengths.min() < width:
        raise RowFault(f"a row is shorter than the {width} bytes of its {len(types)} fields")
    starts = at + 4
    ends = starts + lengths
    if len(at) and int(ends.max()) > len(buf):
        raise RowFault("a row's length runs past the end of its bytes")
    return _Rows(buf, starts, lengths, fixed, 4).decode(types, names, row_kind), ends


def _fixed_width(types: Sequence[LogicalType]) -> int:
    """The bytes of a row's fixed part: its header and one 8-byte slot per field."""
    return header_bytes(len(types)) + 8 * len(types)


def _field(fixed: np.ndarray, at: int, dtype: str) -> np.ndarray:
    """The `dtype` value at byte `at` of every line of `fixed` (one row's bytes each), as a strided view (no copy)."""
    if not len(fixed):
        return np.zeros(0, np.dtype(dtype))
    return np.ndarray((len(fixed),), np.dtype(dtype), buffer=fixed, offset=at, strides=(fixed.shape[1],))


@dataclass(frozen=True)
class _Rows:
    """Rows at [starts, starts + lengths) of `buf`, with each row's fixed part gathered once: line i of `fixed` is
    `skip` bytes before row i (its length), then the row's header and slots."""

    buf: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    fixed: np.ndarray
    skip: int

    def field(self, at: int, dtype: str) -> np.ndarray:
        """The `dtype` value at byte `at` of every row (a strided view of `fixed`)."""
        return _field(self.fixed, self.skip + at, dtype)

    def decode(self, types: Sequence[LogicalType], names: Sequence[str], row_kind: bool) -> pa.StructArray:
        hb = header_bytes(len(types))
        arrays = []
        no_nulls = np.zeros(len(self.fixed), bool)
        seen: dict[int, int] = {}  # header byte -> its bits set in any row
        for i, t in enumerate(types):
            byte, bit = divmod(8 + i, 8)
            col = self.fixed[:, self.skip + byte]
            if byte not in seen:
                seen[byte] = int(np.bitwise_or.reduce(col)) if len(col) else 0
            isnull = (col & np.uint8(1 << bit)) != 0 if seen[byte] >> bit & 1 else no_nulls
            arrays.append(_column(self, hb + 8 * i, isnull, t))
        fields = list(names)
        if row_kind:
            kinds = self.fixed[:, self.skip]
            if len(kinds) and kinds.max() > 3:
                raise RowFault(f"a row's RowKind byte is {int(kinds.max())}, not one of 0..3")
            arrays.append(row_kinds(kinds))
            fields.append("row_kind")
        return pa.StructArray.from_arrays(arrays, fields)


#: every RowKind's 2-character name, one 2-byte item each
_KIND_NAMES = np.frombuffer("".join(ROW_KINDS).encode(), np.dtype("V2"))


def row_kinds(kinds: np.ndarray) -> pa.Array:
    """RowKind bytes (0..3) as their names ('+I', ...), built as Arrow buffers (no Python string per row)."""
    n = len(kinds)
    offsets, offsets_buf = allocate(n + 1, np.int32)
    offsets[:] = np.arange(0, 2 * n + 1, 2, dtype=np.int32)
    data, data_buf = allocate(n, _KIND_NAMES.dtype)
    data[:] = _KIND_NAMES[0] if not kinds.any() else _KIND_NAMES[kinds]  # (an accumulator row is mostly +I)
    return pa.Array.from_buffers(pa.string(), n, [None, offsets_buf, data_buf])


def _with_nulls(arr: pa.Array, isnull: np.ndarray) -> pa.Array:
    """`arr` (flat, without nulls, not sliced) with the rows where `isnull` is set NULL: a validity bitmap added."""
    if not isnull.any():
        return arr
    validity = copy_buffer(np.packbits(~isnull, bitorder="little"))
    return pa.Array.from_buffers(arr.type, len(arr), [validity, *arr.buffers()[1:]], null_count=int(isnull.sum()))


def _column(rows: _Rows, slot: int, isnull: np.ndarray, t: LogicalType) -> pa.Array:
    """Field `t` of every row, its 8-byte slot at byte `slot` of each row."""
    r = t.root
    n = len(rows.starts)
    if r == "NULL":
        return pa.nulls(n, pa.string())
    if r in _INT_WIDTH:
        code, _ = _INT_WIDTH[r]
        raw = rows.field(slot, code)
        if r == "BOOLEAN":
            return _with_nulls(from_numpy(raw != 0), isnull)
        out, data = allocate(n, code)
        out[:] = raw
        arr = _with_nulls(primitive(data, n, arrow_type(out.dtype)), isnull)
        return arr.view(pa.date32()) if r == "DATE" else arr
    if r in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "TIMESTAMP_WITH_TIME_ZONE"):
        target = parse_ddl(t.ddl())
        slots = rows.field(slot, "<u8")
        if t.fixed:
            micros = slots.view(np.int64) * 1000
        else:
            off = (slots >> np.uint64(32)).astype(np.int64)
            nanos = (slots & np.uint64(0xFFFFFFFF)).astype(np.int64)
            _check_within(off, 8, rows.lengths, isnull)
            millis = gather_fixed(rows.buf, rows.starts + np.where(isnull, 0, off), 8).view("<i8").reshape(-1)
            micros = millis * 1000 + nanos // 1000
        return _with_nulls(from_numpy(micros, pa.int64()), isnull).view(target)
    if r == "DECIMAL":
        target = parse_ddl(t.ddl())
        if t.fixed:
            unscaled = rows.field(slot, "<i8")
            words, data = allocate(2 * n, np.int64)
            words[0::2] = unscaled
            words[1::2] = unscaled >> 63  # the high word: the sign
            validity = None if not isnull.any() else copy_buffer(np.packbits(~isnull, bitorder="little"))
            return pa.Array.from_buffers(target, n, [validity, data])
    if r in _STRINGS or r in _BYTES:
        return _with_nulls(_strings(rows, slot, isnull, pa.string() if r in _STRINGS else pa.binary()), isnull)
    # nested values and wide decimals: per record
    mv = rows.buf.data
    starts, lengths = rows.starts.tolist(), rows.lengths.tolist()
    out_ = [None if isnull[i] else _slot_value(mv, starts[i], starts[i] + lengths[i], starts[i] + slot, t)
            for i in range(n)]
    return pa.array(out_, parse_ddl(t.ddl()))


def _strings(rows: _Rows, slot: int, isnull: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A string (or bytes) field of every row, NULLs as empty values: each inline in its slot (up to 7 bytes, the
    slot's last byte ``0x80 | length``) or ``offset << 32 | length`` into its row; no Python object per row."""
    low = rows.field(slot, "<u4")  # a long value's length
    high = rows.field(slot + 4, "<u4")  # its offset in the row; inline: the length byte on top
    off = high.astype(np.int64)
    ln = low.astype(np.int64)
    inline = np.flatnonzero(high >= 0x80000000)
    if len(inline):
        ln[inline] = off[inline] >> 24 & 0x7F
        off[inline] = slot  # the bytes sit in the slot itself
    if isnull.any():
        ln[isnull] = 0
        off[isnull] = 0
    if (off + ln > rows.lengths).any():
        raise RowFault("a field's offset and length point past the end of its row")
    off += rows.starts
    return binary_array(rows.buf, off, ln, type_)


def _check_within(off: np.ndarray, ln: Any, lengths: np.ndarray, isnull: np.ndarray) -> None:
    bad = (off < 0) | (off + ln > lengths)
    if (bad & ~isnull).any():
        raise RowFault("a field's offset and length point past the end of its row")


# -- per record ----------------------------------------------------------------------------------------
def decode_row(data: bytes | memoryview, types: Sequence[LogicalType], names: Sequence[str], *,
               row_kind: bool = False, base: int = 0, end: int | None = None) -> dict[str, Any]:
    """One row at ``data[base:end]`` as ``{name: value}`` (Python values as Arrow's ``to_pylist`` gives them)."""
    end = len(data) if end is None else end
    hb = header_bytes(len(types))
    if end - base < hb + 8 * len(types):
        raise RowFault(f"a row of {end - base} bytes is shorter than its {len(types)} fields")
    out: dict[str, Any] = {}
    for i, (t, name) in enumerate(zip(types, names)):
        bit = 8 + i
        if data[base + bit // 8] >> (bit % 8) & 1:
            out[name] = None
        else:
            out[name] = _slot_value(data, base, end, base + hb + 8 * i, t)
    if row_kind:
        k = data[base]
        if k > 3:
            raise RowFault(f"a row's RowKind byte is {k}, not one of 0..3")
        out["row_kind"] = ROW_KINDS[k]
    return out


def _part(data: Any, base: int, end: int, slot: int) -> tuple[int, int]:
    """(start, length) of a variable-length value whose slot is at `slot` (inline or offset and length)."""
    word = int.from_bytes(data[slot : slot + 8], "little")
    if word >> 63:
        return slot, (word >> 56) & 0x7F
    off, ln = word >> 32, word & 0xFFFFFFFF
    if base + off + ln > end:
        raise RowFault("a field's offset and length point past the end of its row")
    return base + off, ln


def _slot_value(data: Any, base: int, end: int, slot: int, t: LogicalType) -> Any:
    """The value of type `t` whose 8-byte slot is at `slot` in the structure starting at `base`."""
    r = t.root
    if r in _INT_WIDTH:
        code, w = _INT_WIDTH[r]
        v = np.frombuffer(bytes(data[slot : slot + w]), code)[0].item()
        if r == "BOOLEAN":
            return v != 0
        return _EPOCH.date() + dt.timedelta(days=v) if r == "DATE" else v
    if r == "NULL":
        return None
    if r.startswith("TIMESTAMP"):
        word = int.from_bytes(data[slot : slot + 8], "little", signed=not (t.precision or 0) > 3)
        if t.fixed:
            micros = word * 1000
        else:
            off, nanos = word >> 32, word & 0xFFFFFFFF
            if base + off + 8 > end:
                raise RowFault("a timestamp's offset points past the end of its row")
            micros = int.from_bytes(data[base + off : base + off + 8], "little", signed=True) * 1000 + nanos // 1000
        when = dt.timedelta(microseconds=micros)
        return _EPOCH + when if r == "TIMESTAMP_WITHOUT_TIME_ZONE" else _EPOCH_UTC + when
    if r == "DECIMAL":
        if t.fixed:
            unscaled = int.from_bytes(data[slot : slot + 8], "little", signed=True)
        else:
            s, ln = _part(data, base, end, slot)
            unscaled = int.from_bytes(data[s : s + ln], "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-(t.scale or 0), _EXACT)
    s, ln = _part(data, base, end, slot)
    if r in _STRINGS:
        return bytes(data[s : s + ln]).decode("utf-8")
    if r in _BYTES:
        return bytes(data[s : s + ln])
    if r == "ROW":
        return decode_row(data, t.children, t.field_names, base=s, end=s + ln)
    if r == "ARRAY":
        return _array(data, s, s + ln, t.children[0])
    if r in ("MAP", "MULTISET"):
        kt = t.children[0]
        vt = t.children[1] if r == "MAP" else LogicalType("INTEGER", False)
        kbytes = int.from_bytes(data[s : s + 4], "little", signed=True)
        if not 0 <= kbytes <= ln - 4:
            raise RowFault("a map's key array is longer than the map")
        keys = _array(data, s + 4, s + 4 + kbytes, kt)
        values = _array(data, s + 4 + kbytes, s + ln, vt)
        if len(keys) != len(values):
            raise RowFault("a map holds different numbers of keys and values")
        return list(zip(keys, values))
    raise RowFault(f"no decoding for SQL type {t}")


def _element_size(t: LogicalType) -> int:
    """`BinaryArrayData.calculateFixLengthPartSize`."""
    r = t.root
    if r in ("BOOLEAN", "TINYINT"):
        return 1
    if r == "SMALLINT":
        return 2
    if r in ("INTEGER", "FLOAT", "DATE", "TIME_WITHOUT_TIME_ZONE", "INTERVAL_YEAR_MONTH"):
        return 4
    return 8


def _array(data: Any, base: int, end: int, t: LogicalType) -> list[Any]:
    """A `BinaryArrayData` at ``data[base:end]``: i32 count, null bits in 4-byte words, fixed part, variable part."""
    n = int.from_bytes(data[base : base + 4], "little", signed=True)
    nulls = ((n + 31) // 32) * 4
    w = _element_size(t)
    if n < 0 or base + 4 + nulls + n * w > end:
        raise RowFault(f"an array claims {n} elements, more than its bytes hold")
    out: list[Any] = []
    for i in range(n):
        if data[base + 4 + i // 8] >> (i % 8) & 1:
            out.append(None)
            continue
        at = base + 4 + nulls + i * w
        if w < 8 and t.root in _INT_WIDTH:
            code, _ = _INT_WIDTH[t.root]
            v = np.frombuffer(bytes(data[at : at + w]), code)[0].item()
            out.append(v != 0 if t.root == "BOOLEAN" else _EPOCH.date() + dt.timedelta(days=v) if t.root == "DATE" else v)
        else:
            out.append(_slot_value(data, base, end, at, t))
    return out


# -- encoding keys --------------------------------------------------------------------------------------
def encode_row(values: Sequence[Any], types: Sequence[LogicalType]) -> bytes:
    """A key row as Flink's `BinaryRowWriter` writes it (RowKind +I), for the key's key group and byte match.

    Nested ARRAY/MAP/MULTISET/ROW fields are written as `BinaryArrayWriter`/`BinaryMapData` lay them out;
    a NULL DECIMAL(p > 18) or TIMESTAMP(p > 3) keeps its reserved bytes in the variable part, as Flink's
    generated projections write it (`writeDecimal(i, null, p)`), so such keys hash as Flink's do.

    Raises
    ------
    InvalidArgumentError
        If a value does not fit its field's type.
    """
    if len(values) != len(types):
        raise InvalidArgumentError(f"the key has {len(types)} field(s) ({', '.join(map(str, types))}); got "
                                   f"{len(values)} value(s)")
    return _encode_struct(values, types, top=True)


def _round8(n: int) -> int:
    return (n + 7) // 8 * 8


def _encode_struct(values: Sequence[Any], types: Sequence[LogicalType], *, top: bool = False) -> bytes:
    """A `BinaryRowData` (RowKind +I): header with null bits, one 8-byte slot per field, the variable part.

    `top`: a key row written by the planner's generated projection, where a NULL DECIMAL(p > 18) or
    TIMESTAMP(p > 3) keeps its bytes; nested rows are written by `RowDataSerializer.toBinaryRow`
    (`setNullAt`: a zeroed slot, nothing reserved).
    """
    hb = header_bytes(len(types))
    head = bytearray(hb)
    slots = bytearray(8 * len(types))
    var = bytearray()
    fixed = hb + 8 * len(types)
    for i, (v, t) in enumerate(zip(values, types)):
        if v is None:
            head[(8 + i) // 8] |= 1 << ((8 + i) % 8)
        slots[8 * i : 8 * i + 8], extra = _encode_slot(v, t, fixed + len(var), reserve=top)
        var += extra
    return bytes(head + slots + var)


def _encode_slot(v: Any, t: LogicalType, offset: int, *, reserve: bool = False) -> tuple[bytes, bytes]:
    """(8-byte slot, variable-part bytes) of one value at variable-part `offset` of its structure (None: NULL)."""
    r = t.root
    reserved = 16 if r == "DECIMAL" and not t.fixed else 8 if r.startswith("TIMESTAMP") and not t.fixed else 0
    reserved = reserved if reserve else 0
    if v is None:  # a non-compact NULL still takes its bytes (AbstractBinaryWriter.writeDecimal/writeTimestamp)
        return ((offset << 32).to_bytes(8, "little") if reserved else bytes(8)), bytes(reserved)
    if r == "DECIMAL" and not t.fixed:
        try:
            unscaled = int(decimal.Decimal(v).scaleb(t.scale or 0, _EXACT).to_integral_exact(context=_EXACT))
        except (TypeError, ValueError, decimal.InvalidOperation):
            raise InvalidArgumentError(f"value {v!r} does not fit its SQL type {t}; give a Decimal") from None
        b = unscaled.to_bytes((unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1, "big", signed=True)
        return ((offset << 32) | len(b)).to_bytes(8, "little"), b.ljust(16, b"\0")
    if r in ("ARRAY", "MAP", "MULTISET", "ROW"):
        b = _encode_nested(v, t)
        return ((offset << 32) | len(b)).to_bytes(8, "little"), b.ljust(_round8(len(b)), b"\0")
    return _encode_field(v, t, offset)


def encode_nested(v: Any, t: LogicalType) -> bytes:
    """One ARRAY/MAP/MULTISET/ROW value (as Arrow's ``to_pylist`` gives it) as Flink writes it into a row's
    variable part: a `BinaryArrayData`, a `BinaryMapData` (i32 key-array size, key array, value array) or a
    nested `BinaryRowData` (RowKind +I, NULL fields zeroed), unpadded; RAW values inside (a structured
    accumulator's views) are bytes in the variable part, never inline (`writeRawValue`).

    Raises
    ------
    InvalidArgumentError
        If a value does not fit its type (the value and type named).
    """
    return _encode_nested(v, t)


def _encode_nested(v: Any, t: LogicalType) -> bytes:
    r = t.root
    try:
        if r == "ROW":
            vals = [v.get(n) for n in t.field_names] if isinstance(v, dict) else list(v)
            if len(vals) != len(t.children):
                raise TypeError
            return _encode_struct(vals, t.children)
        if r == "ARRAY":
            if isinstance(v, (str, bytes, dict)):
                raise TypeError
            return _encode_array(list(v), t.children[0])
        pairs = list(v.items()) if isinstance(v, dict) else [tuple(p) for p in v]
        kt = t.children[0]
        vt = t.children[1] if r == "MAP" else LogicalType("INTEGER", False)
        keys = _encode_array([p[0] for p in pairs], kt)
        return len(keys).to_bytes(4, "little", signed=True) + keys + _encode_array([p[1] for p in pairs], vt)
    except (TypeError, ValueError, IndexError):
        raise InvalidArgumentError(f"value {v!r} does not fit its SQL type {t}") from None


def _encode_array(values: list[Any], t: LogicalType) -> bytes:
    """A `BinaryArrayData` as `BinaryArrayWriter` writes it: i32 count, null bits in 4-byte words, fixed part
    rounded to 8 bytes, then the variable part (offsets from the array's start)."""
    n = len(values)
    w = _element_size(t)
    head = 4 + (n + 31) // 32 * 4
    fixed = _round8(head + w * n)
    out = bytearray(fixed)
    out[0:4] = n.to_bytes(4, "little", signed=True)
    var = bytearray()
    for i, v in enumerate(values):
        at = head + i * w
        if v is None:  # BinaryArrayWriter.setNullAt: the bit and a zeroed element
            out[4 + i // 8] |= 1 << (i % 8)
            continue
        slot, extra = _encode_slot(v, t, fixed + len(var))
        out[at : at + w] = slot[:w]
        var += extra
    return bytes(out + var)


def _encode_field(v: Any, t: LogicalType, offset: int) -> tuple[bytes, bytes]:
    r = t.root
    try:
        if r in _INT_WIDTH:
            code, _ = _INT_WIDTH[r]
            if r == "BOOLEAN":
                if not isinstance(v, bool):
                    raise TypeError
                return bytes([int(v)]).ljust(8, b"\0"), b""
            if r == "DATE" and isinstance(v, dt.date):
                v = (v - _EPOCH.date()).days
            if code[1] == "f":
                return struct.pack("<" + ("f" if code == "<f4" else "d"), float(v)).ljust(8, b"\0"), b""
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError
            return struct.pack("<" + {"<i1": "b", "<i2": "h", "<i4": "i", "<i8": "q"}[code], v).ljust(8, b"\0"), b""
        if r in _STRINGS or r in ("BINARY", "VARBINARY"):
            if r in _STRINGS and not isinstance(v, str) or r not in _STRINGS and not isinstance(v, (bytes, bytearray)):
                raise TypeError
            b = v.encode("utf-8") if isinstance(v, str) else bytes(v)
            if len(b) <= 7:
                return b.ljust(7, b"\0") + bytes([0x80 | len(b)]), b""
            return ((offset << 32) | len(b)).to_bytes(8, "little"), b.ljust((len(b) + 7) // 8 * 8, b"\0")
        if r in ("RAW", "SYMBOL"):  # nested in a structured accumulator; writeRawValue: never inline
            if not isinstance(v, (bytes, bytearray)):
                raise TypeError
            return ((offset << 32) | len(v)).to_bytes(8, "little"), bytes(v).ljust(_round8(len(v)), b"\0")
        if r == "DECIMAL" and t.fixed:
            unscaled = int(decimal.Decimal(v).scaleb(t.scale or 0).to_integral_exact())
            return unscaled.to_bytes(8, "little", signed=True), b""
        if r.startswith("TIMESTAMP") and isinstance(v, dt.datetime):
            base = _EPOCH_UTC if v.tzinfo is not None else _EPOCH
            micros = (v - base) // dt.timedelta(microseconds=1)
            millis, sub = divmod(micros, 1000)
            if t.fixed:
                return millis.to_bytes(8, "little", signed=True), b""
            return ((offset << 32) | sub * 1000).to_bytes(8, "little"), millis.to_bytes(8, "little", signed=True)
    except (TypeError, ValueError, OverflowError, struct.error, decimal.InvalidOperation):
        pass
    raise InvalidArgumentError(f"value {v!r} does not fit its SQL type {t}; give a {_python_name(t)}")


def _python_name(t: LogicalType) -> str:
    r = t.root
    return ("bool" if r == "BOOLEAN" else "str" if r in _STRINGS else "bytes" if r in _BYTES else
            "datetime" if r.startswith("TIMESTAMP") else "Decimal" if r == "DECIMAL" else
            "date" if r == "DATE" else "float" if r in ("FLOAT", "DOUBLE") else "int")
