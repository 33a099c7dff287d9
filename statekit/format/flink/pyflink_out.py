"""PyFlink keyed state written as a PyFlink job keeps it (process mode): Row-wrapped keys, Python states as coder bytes.

Boundary: the write side of `statekit.format.flink.pyflink`. Input is a keyed table with plain keys
and decoded values (as `pyflink.decode` gives them, or bootstrapped from DDL columns) plus each
state's PyFlink type (declared, or inferred from its column: bigint -> LONG, struct -> ROW...);
output is that table in PyFlink's layout - key wrapped in a one-field Row, key groups of
``Row(Row(key))``, every value/list/reducing/aggregating state a ``ListState<byte[]>`` named
``python-state-<name>`` and every map state a ``MapState<ByteArrayWrapper, byte[]>`` - with the
serializers that layout declares. States read from a PyFlink savepoint without a declared type
hold their stored coder bytes already and are passed through unchanged.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa

from statekit.errors import StateTypeError
from statekit.format.flink.pyflink import FIXED, PREFIX, PyType, parse_type
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.serializers_out import DataOutput, flink_type, list_of, map_of
from statekit.keygroups import check_max_parallelism, compute_key_groups_for_key_hashes
from statekit.keyhash import java_hash_array
from statekit.types import parse_ddl, to_ddl

_WRAPPER = "org.apache.flink.streaming.api.utils.ByteArrayWrapperSerializer$ByteArrayWrapperSerializerSnapshot"
_BYTES = "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot"
_ATOMS = {"LONG": "long", "INT": "int", "SHORT": "short", "BYTE": "byte", "DOUBLE": "double", "FLOAT": "float",
          "BOOLEAN": "boolean", "STRING": "string", "BYTES": "bytes"}
_ROW_HASH = 62  # hash(Row(Row(key))) = 31 * (31 * 0 + (31 + hash(key))) ... = 62 + hash(key) for RowKind INSERT


def _simple(kind: str, cls: str) -> FlinkType:
    return FlinkType(kind, cls, 3, bytes(DataOutput().utf(cls).i32(3).buf))


BYTES = _simple("bytes", _BYTES)
WRAPPER = _simple("binary", _WRAPPER)  # the column holds the wrapper's bytes: i32 length + the coder bytes
LIST_STATE = list_of(BYTES)
MAP_STATE = map_of(WRAPPER, BYTES)


def stored_name(name: str) -> str:
    """The name PyFlink stores state `name` under."""
    return PREFIX + name


def key_serializer(key_ddl: str) -> FlinkType:
    """The Java key serializer of a PyFlink job keyed by `key_ddl`: a Row with one field ``f0``."""
    return flink_type(f"struct<f0:{key_ddl}>", what="the PyFlink key")


def key_groups(keys: pa.Array | pa.ChunkedArray, key_ddl: str, max_parallelism: int) -> np.ndarray:
    """The key group the PyFlink job's Java side gives each (plain) key, as int32 (see `pyflink.key_group`)."""
    m = check_max_parallelism(max_parallelism)
    h = java_hash_array(keys, key_ddl)
    h += np.uint32(_ROW_HASH)
    return compute_key_groups_for_key_hashes(h, m)


def wrap_keys(keys: pa.Array | pa.ChunkedArray) -> pa.StructArray:
    """Plain keys as the one-field Rows PyFlink's Java side keys its state by."""
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    return pa.StructArray.from_arrays([keys], names=["f0"])


# -- types ---------------------------------------------------------------------------------------------
_ATOM_OF = [(pa.types.is_int64, "LONG"), (pa.types.is_int32, "INT"), (pa.types.is_int16, "SHORT"),
            (pa.types.is_int8, "BYTE"), (pa.types.is_float64, "DOUBLE"), (pa.types.is_float32, "FLOAT"),
            (pa.types.is_boolean, "BOOLEAN"), (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "STRING"),
            (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "BYTES")]


def _field_spec(t: pa.DataType, what: str) -> str:
    for test, name in _ATOM_OF:
        if test(t):
            return name
    if pa.types.is_struct(t):
        return "ROW(" + ", ".join(f"{t.field(i).name} {_field_spec(t.field(i).type, what)}"
                                  for i in range(t.num_fields)) + ")"
    raise StateTypeError(
        f"{what}: type {to_ddl(t)} has no PyFlink coder statekit writes; PyFlink state values are LONG, INT, SHORT, "
        "BYTE, FLOAT, DOUBLE, BOOLEAN, STRING, BYTES, PICKLED, ROW or TUPLE (lists and maps only as List/MapState)."
    )


def infer_type(kind: str, ddl: str, what: str) -> PyType:
    """The PyFlink type of a state of `kind` whose column type is `ddl` (struct -> ROW; declare TUPLE to differ)."""
    t = parse_ddl(ddl)
    if kind == "map":
        if not pa.types.is_map(t):
            raise StateTypeError(f"{what}: a map state's column must be a map, not {ddl}.")
        return parse_type(f"MAP({_field_spec(t.key_type, what)}, {_field_spec(t.item_type, what)})")
    if kind == "list":
        if not pa.types.is_list(t):
            raise StateTypeError(f"{what}: a list state's column must be an array, not {ddl}.")
        return parse_type(f"LIST({_field_spec(t.value_type, what)})")
    inner = _field_spec(t, what)
    return parse_type(f"{kind.upper()}({inner})" if kind in ("reducing", "aggregating") else inner)


def _fits(t: pa.DataType, py: PyType) -> bool:
    """Whether column values of Arrow type `t` can be written by coder `py` (struct fields by position)."""
    k = py.kind
    if k in ("reducing", "aggregating"):
        return _fits(t, py.children[0])
    if k == "list":
        return pa.types.is_list(t) and _fits(t.value_type, py.children[0])
    if k == "map":
        return pa.types.is_map(t) and _fits(t.key_type, py.children[0]) and _fits(t.item_type, py.children[1])
    if k in ("row", "tuple"):
        return pa.types.is_struct(t) and t.num_fields == len(py.children) and all(
            _fits(t.field(i).type, c) for i, c in enumerate(py.children))
    if k == "pickled":
        k = "bytes"
    return any(test(t) and _ATOMS[name] == k for test, name in _ATOM_OF)


def check_fits(ddl: str, py: PyType, what: str) -> None:
    """Refuse (`StateTypeError`) a column of type `ddl` that the declared coder `py` cannot write."""
    if not _fits(parse_ddl(ddl), py):
        raise StateTypeError(f"{what}: its column is {ddl}, which PyFlink type {py.ddl} cannot code; declare the "
                             "state's type as the PyFlink job does, matching the column.")


# -- coders --------------------------------------------------------------------------------------------
def _write(t: PyType, v: Any, out: bytearray, what: str) -> None:
    k = t.kind
    if v is None:
        raise StateTypeError(f"{what}: a null {t.ddl} value; PyFlink's coder writes nulls only inside ROW fields.")
    if k in FIXED:
        out += struct.pack(FIXED[k], v)
    elif k == "boolean":
        out.append(1 if v else 0)
    elif k in ("string", "bytes", "pickled"):
        b = v.encode("utf-8") if k == "string" else bytes(v)
        out += struct.pack(">i", len(b))
        out += b
    elif k == "tuple":
        for n, c in zip(t.names, t.children):
            _write(c, v[n], out, what)
    elif k == "row":
        mask = bytearray((2 + len(t.children) + 7) // 8)  # 2 row-kind bits (INSERT: 0) then one bit per field
        for i, n in enumerate(t.names):
            if v.get(n) is None:
                bit = 2 + i
                mask[bit // 8] |= 0x80 >> (bit % 8)
        out += mask
        for n, c in zip(t.names, t.children):
            if v.get(n) is not None:
                _write(c, v[n], out, what)
    else:
        raise StateTypeError(f"{what}: {t.ddl} is not a PyFlink field type.")


def _fixed_bytes(arr: pa.Array, t: PyType) -> list[bytes] | None:
    """Fixed-width values encoded with numpy (the common case), or None when `t` is not fixed width."""
    if t.kind not in FIXED and t.kind != "boolean":
        return None
    np_arr = arr.to_numpy(zero_copy_only=False)
    width = struct.calcsize(FIXED[t.kind]) if t.kind != "boolean" else 1
    raw = (np_arr.astype(FIXED[t.kind]) if t.kind != "boolean" else np_arr.astype(np.uint8)).tobytes()
    return [raw[i : i + width] for i in range(0, len(raw), width)]


def encode_column(col: pa.Array | pa.ChunkedArray, t: PyType, what: str) -> pa.Array:
    """A state column as PyFlink stores it: ``list<binary>`` (one element per value, list elements back to
    back in one element as PyFlink's ``update`` writes them) or ``map<binary, binary>`` (wrapped keys)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    if t.kind == "map":
        kt, vt = t.children
        out: list[Any] = []
        for m in col.to_pylist():
            if m is None:
                out.append(None)
                continue
            entries = []
            for k, v in m:
                kb = bytearray()
                _write(kt, k, kb, what)
                vb = bytearray()
                _write(vt, v, vb, what)
                entries.append((struct.pack(">i", len(kb)) + bytes(kb), bytes(vb)))
            out.append(entries)
        return pa.array(out, pa.map_(pa.binary(), pa.binary()))
    if t.kind == "list":
        elem = t.children[0]
        out = []
        for vals in col.to_pylist():
            if vals is None or not vals:
                out.append(None)
                continue
            b = bytearray()
            for v in vals:
                _write(elem, v, b, what)
            out.append([bytes(b)])
        return pa.array(out, pa.list_(pa.binary()))
    elem = t.children[0] if t.kind in ("reducing", "aggregating") else t
    fixed = _fixed_bytes(col.fill_null(0) if col.null_count and elem.kind in FIXED else col, elem) \
        if elem.kind in FIXED or (elem.kind == "boolean" and not col.null_count) else None
    if fixed is not None:
        return pa.array([[b] if ok else None for b, ok in zip(fixed, valid)], pa.list_(pa.binary()))
    out = []
    for v in col.to_pylist():
        if v is None:
            out.append(None)
            continue
        b = bytearray()
        _write(elem, v, b, what)
        out.append([bytes(b)])
    return pa.array(out, pa.list_(pa.binary()))


__all__ = ["BYTES", "check_fits", "LIST_STATE", "MAP_STATE", "WRAPPER", "encode_column", "infer_type", "key_groups",
           "key_serializer", "stored_name", "wrap_keys"]
