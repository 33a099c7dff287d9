"""Flink SQL rows written back: Arrow struct columns as `BinaryRowData` bytes in bulk, and SQL keys' key groups.

Boundary: the write side of `rowdata` (which decodes the same layout): `row_bytes` builds every
row of a struct column as Flink's `BinaryRowWriter` does (`../shared/flink/sql/SQL-FORMAT.md` 4.1:
little-endian, RowKind byte and null bits, one 8-byte slot per field, strings and byte strings of up
to 7 bytes inline, longer ones and RAW values in the 8-byte-aligned variable part, zero padding), with
numpy over whole columns (nested ARRAY/MAP/MULTISET/ROW fields per record, `sqlnested`);
`encode_serialized` adds `RowDataSerializer`'s ``i32`` length; `key_groups`
places SQL keys by `BinaryRowData.hashCode()` (`statekit.keyhash.binary_row_hashes`), not by the
DataStream hash of the same values.
"""

from __future__ import annotations

import decimal
from typing import Sequence

import numpy as np
import pyarrow as pa

from statekit.errors import StateTypeError
from statekit.format.flink.encoded import Encoded, concat
from statekit.format.flink.logical import LogicalType
from statekit.format.flink.rowdata import ROW_KINDS, header_bytes
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.sqlnested import NESTED, nested_field
from statekit.keygroups import compute_key_groups_for_key_hashes
from statekit.keyhash import binary_row_hashes, binary_row_words_hashes

__all__ = ["encode_serialized", "key_groups", "row_bytes"]

_INTS = {"BOOLEAN": "<u1", "TINYINT": "<i1", "SMALLINT": "<i2", "INTEGER": "<i4", "DATE": "<i4",
         "TIME_WITHOUT_TIME_ZONE": "<i4", "INTERVAL_YEAR_MONTH": "<i4", "FLOAT": "<f4", "BIGINT": "<i8",
         "INTERVAL_DAY_TIME": "<i8", "DOUBLE": "<f8"}
_STRINGS = ("CHAR", "VARCHAR")
_INLINE_OK = ("CHAR", "VARCHAR", "BINARY", "VARBINARY")  # BinaryWriter.writeString/writeBinary inline <= 7 bytes
_VAR_ONLY = ("RAW", "SYMBOL")  # writeRawValue: always in the variable part
_EXACT = decimal.Context(prec=80)


def _pad8(n: np.ndarray) -> np.ndarray:
    return (n + 7) // 8 * 8


def _bytes_of(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The values of a string/binary column as (data, n+1 offsets), nulls empty."""
    arr = arr.cast(pa.large_binary())
    n = len(arr)
    offs = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8).astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    return data, offs


def _ragged(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, widths: np.ndarray) -> Encoded:
    """Pieces ``data[starts[i]:starts[i]+lengths[i]]`` each zero-padded to ``widths[i]`` bytes."""
    offsets = np.zeros(len(widths) + 1, np.int64)
    np.cumsum(widths, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    total = int(lengths.sum())
    if total:
        rows = np.repeat(np.arange(len(lengths)), lengths)
        within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[offsets[:-1][rows] + within] = data[starts[rows] + within]
    return Encoded(out, offsets)


def _field(arr: pa.Array, t: LogicalType, isnull: np.ndarray, var_at: np.ndarray,
           what: str) -> tuple[np.ndarray, Encoded | None]:
    """(the n 8-byte slots as uint64, the variable-part pieces or None) of one field; `var_at` is where each
    row's variable part for this field starts (bytes from the row start)."""
    r = t.root
    n = len(arr)
    slots = np.zeros(n, np.uint64)
    if r == "NULL":
        return slots, None
    if r in _INTS:
        code = _INTS[r]
        if r == "DATE":
            arr = arr.cast(pa.int32())
        vals = arr.fill_null(False if r == "BOOLEAN" else 0).to_numpy(zero_copy_only=False).astype(code)
        raw = np.zeros((n, 8), np.uint8)
        w = np.dtype(code).itemsize
        raw[:, :w] = vals.view(np.uint8).reshape(n, w)
        return raw.view("<u8").reshape(-1), None
    if r.startswith("TIMESTAMP"):
        if not pa.types.is_timestamp(arr.type):
            raise StateTypeError(f"{what}: a {t} field needs timestamps, got {arr.type}.")
        micros = arr.cast(pa.timestamp("us", arr.type.tz)).view(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        millis, sub = np.divmod(micros, 1000)
        if t.fixed:
            return millis.astype("<i8").view(np.uint64), None
        slots = (var_at.astype(np.uint64) << np.uint64(32)) | (sub * 1000).astype(np.uint64)
        slots[isnull] = 0
        pieces = np.where(isnull[:, None], 0, millis.astype("<i8")[:, None]).astype("<i8").view(np.uint8)
        widths = np.where(isnull, 0, 8)
        return slots, _ragged(pieces.reshape(-1), np.arange(n) * 8, widths, widths)
    if r == "DECIMAL":
        if not pa.types.is_decimal(arr.type):
            raise StateTypeError(f"{what}: a {t} field needs decimals, got {arr.type}.")
        # exactly (DECIMAL(38) needs more than the default context's 28 digits), and as few bytes as Java's
        # BigInteger.toByteArray gives
        unscaled = [None if v is None else int(v.scaleb(t.scale or 0, _EXACT)) for v in arr.to_pylist()]
        if t.fixed:
            return np.array([v or 0 for v in unscaled], "<i8").view(np.uint64), None
        parts = [b"" if v is None else v.to_bytes((v if v >= 0 else ~v).bit_length() // 8 + 1, "big", signed=True)
                 for v in unscaled]
        lengths = np.array([len(p) for p in parts], np.int64)
        slots = np.where(isnull, 0, (var_at.astype(np.uint64) << np.uint64(32)) | lengths.astype(np.uint64))
        data = np.frombuffer(b"".join(parts), np.uint8)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return slots.astype(np.uint64), _ragged(data, starts, lengths, np.where(isnull, 0, 16))
    if r in _INLINE_OK or r in _VAR_ONLY:
        if r in _STRINGS and not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            raise StateTypeError(f"{what}: a {t} field needs strings, got {arr.type}.")
        if r not in _STRINGS and not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
            raise StateTypeError(f"{what}: a {t} field needs bytes, got {arr.type}.")
        data, offs = _bytes_of(arr)
        lengths = np.diff(offs)
        lengths[isnull] = 0
        inline = (lengths <= 7) & ~isnull if r in _INLINE_OK else np.zeros(n, bool)
        raw = np.zeros((n, 8), np.uint8)
        for j in range(7):  # inline values: up to 7 bytes in the slot, byte 7 = 0x80 | length
            rows = np.flatnonzero(inline & (lengths > j))
            raw[rows, j] = data[offs[rows] + j]
        raw[inline, 7] = (0x80 | lengths[inline]).astype(np.uint8)
        slots = raw.view("<u8").reshape(-1).copy()
        out = ~inline & ~isnull
        slots[out] = (var_at[out].astype(np.uint64) << np.uint64(32)) | lengths[out].astype(np.uint64)
        plen = np.where(out, lengths, 0)
        return slots, _ragged(data, offs[:-1], plen, _pad8(plen))
    if r in NESTED:
        return nested_field(arr, t, isnull, var_at, what)
    raise StateTypeError(f"{what}: statekit does not write SQL fields of type {t}; keep such state as Flink wrote it.")


def row_bytes(arr: pa.Array, types: Sequence[LogicalType], *, row_kind: bool = False, what: str = "a SQL row") -> Encoded:
    """Every row of struct column `arr` (fields in `types` order, then ``row_kind`` when `row_kind`) as
    `BinaryRowData` bytes, without a length prefix."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if not isinstance(arr, pa.StructArray):
        raise StateTypeError(f"{what}: a SQL row needs a struct column, got {arr.type}.")
    want = len(types) + (1 if row_kind else 0)
    if arr.type.num_fields != want:
        names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
        raise StateTypeError(f"{what}: the SQL row has {len(types)} field(s){' and row_kind' if row_kind else ''}, "
                             f"the column {arr.type.num_fields} ({names}).")
    if arr.null_count:
        raise StateTypeError(f"{what}: a null SQL row; Flink stores rows, not nulls, there.")
    n = len(arr)
    arity = len(types)
    hb = header_bytes(arity)
    head = np.zeros((n, hb), np.uint8)
    if row_kind:
        kinds = arr.field(arity).to_numpy(zero_copy_only=False)
        codes = np.full(n, -1, np.int16)
        for c, name in enumerate(ROW_KINDS):
            codes[kinds == name] = c
        if (codes < 0).any():
            bad = kinds[np.flatnonzero(codes < 0)[0]]
            raise StateTypeError(f"{what}: row_kind {bad!r} is not one of {', '.join(ROW_KINDS)}.")
        head[:, 0] = codes.astype(np.uint8)
    slots = np.zeros((n, arity), np.uint64)
    var_len = np.full(n, hb + 8 * arity, np.int64)  # where the next variable piece of each row starts
    pieces: list[Encoded] = []
    for i, t in enumerate(types):
        f = arr.field(i)
        isnull = f.is_null().to_numpy(zero_copy_only=False) if f.null_count else np.zeros(n, bool)
        # a PROCTIME attribute is stored NULL although declared NOT NULL: Flink materializes it when it is read
        if isnull.any() and not t.nullable and t.time_kind != "PROCTIME":
            raise StateTypeError(f"{what}: field {i} ({t}) is NOT NULL; a value is null.")
        bit = 8 + i
        head[isnull, bit // 8] |= np.uint8(1 << (bit % 8))
        s, var = _field(f, t, isnull, var_len, f"{what}, field {i}")
        slots[:, i] = np.where(isnull, np.uint64(0), s)
        if var is not None:
            var_len = var_len + var.lengths
            pieces.append(var)
    fixed = np.concatenate([head, slots.astype("<u8").view(np.uint8).reshape(n, 8 * arity)], axis=1)
    return concat([Encoded.fixed(fixed), *pieces]) if pieces else Encoded.fixed(fixed)


def encode_serialized(arr: pa.Array, t: FlinkType, *, what: str = "a SQL row") -> Encoded:
    """`RowDataSerializer` bytes of every row: ``i32`` length (big-endian), then the `BinaryRowData`."""
    rows = row_bytes(arr, t.logical, row_kind=t.row_kind, what=what)
    lengths = rows.lengths.astype(">i4").view(np.uint8).reshape(-1, 4)
    return concat([Encoded.fixed(lengths), rows])


def key_groups(keys: pa.Array, key: FlinkType, max_parallelism: int) -> np.ndarray:
    """The key group of every SQL key row of `keys` (int32): murmur of ``BinaryRowData.hashCode()``."""
    from statekit.format.flink.sqlfixed import fixed_rows

    matrix = fixed_rows(keys, key.logical, what="a SQL key")  # fixed-width key rows: one structured fill
    if matrix is not None:
        words = matrix.view("<u4") if len(matrix) else np.zeros((0, matrix.shape[1] // 4), np.uint32)
        return compute_key_groups_for_key_hashes(binary_row_words_hashes(words), max_parallelism).astype(np.int32)
    rows = row_bytes(keys, key.logical, what="a SQL key")
    data, offs = rows.data, rows.offsets
    lengths = np.diff(offs)
    hashes = np.zeros(len(rows), np.uint32)
    for n in np.unique(lengths):  # rows of one length hashed together, gathered by numpy (no bytes per row)
        idx = np.flatnonzero(lengths == n)
        if n % 4:
            return compute_key_groups_for_key_hashes(binary_row_hashes(
                [data[offs[i]: offs[i + 1]].tobytes() for i in range(len(rows))]), max_parallelism).astype(np.int32)
        gathered = data[offs[idx][:, None] + np.arange(n)] if len(idx) != len(rows) or n * len(rows) != len(data) \
            else data.reshape(len(rows), n)
        hashes[idx] = binary_row_words_hashes(np.ascontiguousarray(gathered).view("<u4").reshape(len(idx), n // 4))
    return compute_key_groups_for_key_hashes(hashes, max_parallelism).astype(np.int32)

