"""Flink SQL keyed state of fixed-width rows written in bulk: every entry one numpy structured element, filled per field.

Boundary: a fast path of `writer.write_keyed_file` (and of `sqlwrite.key_groups`) for the commonest SQL
state: `BinaryRowData` keys and value states whose rows have no variable-length part (integers, floats,
booleans, dates and times, compact timestamps: each field one 8-byte slot, `../shared/flink/sql/SQL-FORMAT.md`
4.1), void namespace, no timers. Such an entry (``i32 klen | key-group prefix | i32 key row length | key
row | 0x00 | i32 vlen | i32 value row length | value row``) has one width per state, so a run of entries
is a structured array: the constant fields are set once per reused buffer (`regular_out`'s), per key group
only the header word and the field slots are assigned (numpy converts each column as it assigns). The
bytes are those of the general path (`sqlwrite.row_bytes` via `writer.keyed_runs`); anything else
(strings, decimals, nested values, timers, list/map state) is left to it (`fixed_layout` returns None).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.format.direct_file import DirectFile
from statekit.format.flink.logical import LogicalType
from statekit.format.flink.regular_out import ARROW, CHUNK_ROWS, END_OF_KEY_GROUP, PRIMITIVE, EntryBuffers
from statekit.format.flink.rowdata import ROW_KINDS, header_bytes
from statekit.format.storage import StoragePath

if TYPE_CHECKING:
    from statekit.format.flink.serializers import FlinkType
    from statekit.format.flink.writer import KeyedLayoutOut

__all__ = ["fixed_layout", "fixed_rows", "write_fixed_file"]

#: the numpy type each fixed SQL field is written as (little-endian, in the low bytes of its 8-byte slot)
_SLOT = {"BOOLEAN": "u1", "TINYINT": "<i1", "SMALLINT": "<i2", "INTEGER": "<i4", "DATE": "<i4",
         "TIME_WITHOUT_TIME_ZONE": "<i4", "INTERVAL_YEAR_MONTH": "<i4", "FLOAT": "<f4", "BIGINT": "<i8",
         "INTERVAL_DAY_TIME": "<i8", "DOUBLE": "<f8"}
_TIMESTAMPS = ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE")


def _arrow_ok(t: LogicalType, at: pa.DataType) -> bool:
    """Whether a column of Arrow type `at` is written to a `t` slot here exactly as the general path writes it."""
    r = t.root
    if r == "NULL":
        return True
    if r in _TIMESTAMPS:
        return (t.precision or 0) <= 3 and pa.types.is_timestamp(at)
    if r == "BOOLEAN":
        return pa.types.is_boolean(at)
    if r == "DATE":
        return pa.types.is_date32(at)
    if r in _SLOT:
        return pa.types.is_integer(at) or pa.types.is_floating(at)
    return False


def _row_ok(types: Sequence[LogicalType], row_kind: bool, at: pa.DataType) -> bool:
    if not pa.types.is_struct(at) or len(types) > 56:  # the RowKind byte and null bits in one header word
        return False
    if at.num_fields != len(types) + (1 if row_kind else 0):
        return False
    return all(_arrow_ok(lt, at.field(i).type) for i, lt in enumerate(types))


def _sql_row_ok(t: "FlinkType", at: pa.DataType) -> bool:
    return t.kind == "bytes" and t.form == "row" and _row_ok(t.logical, t.row_kind, at)


def _primitive_ok(t: "FlinkType", at: pa.DataType) -> bool:
    return t.kind in ARROW and at == ARROW[t.kind]


def _ttl_ok(t: "FlinkType", at: pa.DataType) -> bool:
    """A SQL row or a primitive under a state TTL (``TtlSerializer``: the last access as a long, then the value)
    from its ``struct<last_access, value>`` column."""
    return (t.kind == "tuple" and t.snapshot_class.endswith("TtlSerializerSnapshot") and len(t.children) == 2
            and t.children[0].kind == "long" and pa.types.is_struct(at) and at.num_fields == 2
            and at.field(0).name == "last_access" and at.field(0).type == pa.int64()
            and (_sql_row_ok(t.children[1], at.field(1).type) or _primitive_ok(t.children[1], at.field(1).type)))


def _value_ok(t: "FlinkType", at: pa.DataType) -> bool:
    """A fixed-width SQL row (under a TTL too), or a primitive (a deduplication's flag) from exactly its Arrow type."""
    return _sql_row_ok(t, at) or _ttl_ok(t, at) or _primitive_ok(t, at)


def fixed_layout(layout: "KeyedLayoutOut", schema: pa.Schema, has_timers: bool) -> bool:
    """Whether the keyed table of `schema` is written by this module: a fixed-width SQL key row, value states
    holding fixed-width SQL rows (with or without a TTL) or primitives, void namespace, no timers."""
    if has_timers or layout.namespace is not None or "key" not in schema.names or not layout.states:
        return False
    if not _sql_row_ok(layout.key, schema.field("key").type) or layout.key.row_kind:
        return False
    return all(s.kind == "value" and s.column in schema.names and _value_ok(s.value, schema.field(s.column).type)
               for s in layout.states)


@dataclass(frozen=True)
class _Row:
    """A fixed-width row's columns prepared for assignment: the header words and each field's slot values."""

    header: np.ndarray | int  # uint64 per row (RowKind byte | null bits), or one constant
    slots: list[np.ndarray | None]  # per field its values (NULL fields zero), None for a NULL-typed field


def _values(arr: pa.Array, t: LogicalType, what: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(the slot values of one field, its null mask or None)."""
    n = len(arr)
    isnull = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    if isnull is not None and not t.nullable:
        raise StateTypeError(f"{what}: the field ({t}) is NOT NULL; a value is null.")
    r = t.root
    if r == "NULL":
        return None, isnull
    if r in _TIMESTAMPS:
        micros = arr.cast(pa.timestamp("us", arr.type.tz)).view(pa.int64())
        vals = np.floor_divide(micros.fill_null(0).to_numpy(zero_copy_only=False), 1000)
        return vals, isnull
    if r == "BOOLEAN":
        return arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8), isnull
    if r == "DATE" and pa.types.is_date32(arr.type):
        arr = arr.view(pa.int32())
    if isnull is None:  # the values buffer as it is: no copy
        width = arr.type.bit_width // 8
        kind = "f" if pa.types.is_floating(arr.type) else "u" if pa.types.is_unsigned_integer(arr.type) else "i"
        vals = np.frombuffer(arr.buffers()[1], f"<{kind}{width}", n, arr.offset * width)
    else:
        vals = arr.fill_null(0).to_numpy(zero_copy_only=False)
    if vals.dtype != np.dtype(_SLOT[r]):  # as the general path: numpy's conversion (a wider column narrows)
        vals = vals.astype(_SLOT[r])
    return vals, isnull


def _prepare(arr: Any, types: Sequence[LogicalType], row_kind: bool, what: str) -> _Row:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if arr.null_count:
        raise StateTypeError(f"{what}: a null SQL row; Flink stores rows, not nulls, there.")
    n = len(arr)
    header: np.ndarray | int = 0
    if row_kind:
        codes = _kinds(arr.field(len(types)), what)
        header = codes if codes is not None else 0
    slots: list[np.ndarray | None] = []
    for i, lt in enumerate(types):
        vals, isnull = _values(arr.field(i), lt, f"{what}, field {i}")
        if isnull is not None:
            bits = isnull.astype(np.uint64) << np.uint64(8 + i)
            header = bits if isinstance(header, int) and header == 0 else header | bits
        slots.append(vals)
    if isinstance(header, np.ndarray) and len(header) != n:
        raise AssertionError("header of another length")
    return _Row(header, slots)


def _kinds(col: pa.Array, what: str) -> np.ndarray | None:
    """The RowKind byte of every row (uint64), None when all are ``+I`` (code 0)."""
    import pyarrow.compute as pc

    codes = pc.index_in(col, value_set=pa.array(ROW_KINDS))
    if codes.null_count:
        bad = col.filter(pc.is_null(codes))[0].as_py()
        raise StateTypeError(f"{what}: row_kind {bad!r} is not one of {', '.join(ROW_KINDS)}.")
    np_codes = codes.to_numpy(zero_copy_only=False)
    return np_codes.astype(np.uint64) if np_codes.any() else None


def _row_fields(prefix: str, types: Sequence[LogicalType], at: int) -> list[tuple[str, str, int]]:
    """(name, format, offset) of a row's header word and field slots, the row starting at byte `at`."""
    hb = header_bytes(len(types))
    out = [(f"{prefix}h", "<u8", at)]
    for i, lt in enumerate(types):
        if lt.root != "NULL":
            out.append((f"{prefix}{i}", _SLOT.get(lt.root, "<i8"), at + hb + 8 * i))
    return out


def _width(types: Sequence[LogicalType]) -> int:
    return header_bytes(len(types)) + 8 * len(types)


def entry_dtype(nb: int, key: "FlinkType", value: "FlinkType") -> tuple[np.dtype, dict[str, int]]:
    """One entry of a value state as a packed structured dtype (the padding bytes of narrow slots stay zero)
    and its constant fields. A SQL row value is ``i32 length | row``; a primitive its big-endian bytes (``v``)."""
    kw = _width(key.logical)
    v0 = 4 + nb + 4 + kw + 1  # where the value's i32 length starts
    fields = [("kl", ">i4", 0), ("kg", "u1" if nb == 1 else ">u2", 4), ("krl", ">i4", 4 + nb)]
    fields += _row_fields("k", key.logical, 8 + nb)
    fields += [("ns", "u1", 8 + nb + kw), ("vl", ">i4", v0)]
    constants = {"kl": nb + 4 + kw + 1, "krl": kw, "ns": 0}
    if value.kind == "tuple" and value.children[1].form == "row":  # TtlSerializer: i64 last access, then the row
        row = value.children[1]
        vw = _width(row.logical)
        fields += [("vt", ">i8", v0 + 4), ("vrl", ">i4", v0 + 12)] + _row_fields("v", row.logical, v0 + 16)
        constants.update(vl=12 + vw, vrl=vw)
        size = v0 + 16 + vw
    elif value.kind == "tuple":  # TtlSerializer: i64 last access, then the primitive
        vt = np.dtype(PRIMITIVE[value.children[1].kind])
        fields += [("vt", ">i8", v0 + 4), ("v", vt.str, v0 + 12)]
        constants["vl"] = 8 + vt.itemsize
        size = v0 + 12 + vt.itemsize
    elif value.form == "row":
        vw = _width(value.logical)
        fields += [("vrl", ">i4", v0 + 4)] + _row_fields("v", value.logical, v0 + 8)
        constants.update(vl=4 + vw, vrl=vw)
        size = v0 + 8 + vw
    else:
        vt = np.dtype(PRIMITIVE[value.kind])
        fields.append(("v", vt.str, v0 + 4))
        constants["vl"] = vt.itemsize
        size = v0 + 4 + vt.itemsize
    dt = np.dtype({"names": [f[0] for f in fields], "formats": [f[1] for f in fields],
                   "offsets": [f[2] for f in fields], "itemsize": size})
    return dt, constants


def fixed_rows(arr: Any, types: Sequence[LogicalType], *, row_kind: bool = False,
               what: str = "a SQL row") -> np.ndarray | None:
    """Every row of struct column `arr` as `BinaryRowData` bytes, an (n, width) uint8 matrix, when all its fields
    are fixed-width (None otherwise: `sqlwrite.row_bytes` writes it)."""
    if not _row_ok(types, row_kind, arr.type):
        return None
    row = _prepare(arr, types, row_kind, what)
    fields = _row_fields("", types, 0)
    dt = np.dtype({"names": [f[0] for f in fields], "formats": [f[1] for f in fields],
                   "offsets": [f[2] for f in fields], "itemsize": _width(types)})
    out = np.zeros(len(arr), dt)
    out["h"] = row.header
    for i, vals in enumerate(row.slots):
        if vals is not None:
            out[str(i)] = vals
    return out.view(np.uint8).reshape(len(arr), dt.itemsize)


def write_fixed_file(path: "Path | StoragePath", layout: "KeyedLayoutOut", keyed: pa.Table, start: int,
                     end: int) -> tuple[list[int], int] | None:
    """One keyed state file for key groups [start, end] from `keyed` (sorted by key group, every row in that
    range; `fixed_layout` holds): the backend proxy, then per key group each state's run (rows whose state is
    NULL hold none). Returns the key-group offsets (0 = empty) and the file size; None, before anything is
    written, for a value it leaves to the general path."""
    nb = layout.prefix_bytes
    kg = keyed.column("key_group").to_numpy().astype(np.int32, copy=False)
    if len(kg) and (kg[0] < start or kg[-1] > end):
        raise InvalidArgumentError(f"keyed rows outside key groups {start}..{end} were given for one file.")
    if keyed.column("key").null_count:
        raise StateTypeError("the keyed table holds a null key; Flink forbids null keys.")
    key = _prepare(keyed.column("key"), layout.key.logical, False, "a SQL key")
    runs = []  # per state: its entries' dtype and constants, key-group bounds and fields
    for s in layout.states:
        col = keyed.column(s.column)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) and col.num_chunks != 1 else \
            col.chunk(0) if isinstance(col, pa.ChunkedArray) else col
        rows = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False)) if col.null_count else None
        if rows is not None:
            col = col.take(pa.array(rows))
        fields: dict[str, Any] = {}
        pairs: tuple[tuple[str, _Row], ...]
        if s.value.kind == "tuple":  # under a TTL: the last access, then the row or primitive
            inner = s.value.children[1]
            if col.field(0).null_count or (inner.form != "row" and col.field(1).null_count):
                return None  # a TTL entry without its time or value: the general path says what is wrong
            fields["vt"] = col.field(0).fill_null(0).to_numpy(zero_copy_only=False)
            if inner.form == "row":
                value = _prepare(col.field(1), inner.logical, inner.row_kind, f"state {s.name!r}")
                pairs = (("k", key), ("v", value))
            else:
                fields["v"] = col.field(1).to_numpy(zero_copy_only=False)
                pairs = (("k", key),)
        elif s.value.form == "row":
            value = _prepare(col, s.value.logical, s.value.row_kind, f"state {s.name!r}")
            pairs = (("k", key), ("v", value))
        else:  # a primitive, zero-copy from its Arrow buffer
            fields["v"] = col.to_numpy(zero_copy_only=False)
            pairs = (("k", key),)
        for prefix, row in pairs:
            take = rows if prefix == "k" else None
            fields[f"{prefix}h"] = row.header if isinstance(row.header, int) or take is None else row.header[take]
            for i, vals in enumerate(row.slots):
                if vals is not None:
                    fields[f"{prefix}{i}"] = vals if take is None else vals[take]
        skg = kg if rows is None else kg[rows]
        dt, constants = entry_dtype(nb, layout.key, s.value)
        for name in [f for f, v in fields.items() if isinstance(v, int)]:  # a constant header: set once
            constants[name] = fields.pop(name)
        runs.append((dt, constants, np.searchsorted(skg, np.arange(start, end + 2)), fields))
    proxy = layout.proxy()
    offsets = [0] * (end - start + 1)
    with (path.create() if isinstance(path, StoragePath) else DirectFile(path)) as f:
        f.write([proxy])
        out = EntryBuffers(f, len(proxy), [(dt, constants) for dt, constants, _, _ in runs], CHUNK_ROWS)
        widths = [dt.itemsize for dt, _, _, _ in runs]
        sids = [sid.to_bytes(2, "big") for sid in range(len(runs))]
        for g in range(start, end + 1):
            wrote = False
            for sid, (_, _, bounds, fields) in enumerate(runs):
                a, z = int(bounds[g - start]), int(bounds[g - start + 1])
                if a == z:
                    continue
                if not wrote:
                    offsets[g - start] = out.pos
                    wrote = True
                out.add(sids[sid])
                raw = out.entries(sid, g, {name: vals[a:z] for name, vals in fields.items()}, z - a)
                raw[len(raw) - widths[sid] + 4] |= 0x80  # the run's last entry: its first key byte
            if wrote:
                out.add(END_OF_KEY_GROUP)
        out.flush()
        size = f.close()
    return offsets, size
