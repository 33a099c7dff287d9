"""Java ``hashCode()`` of typed keys, one key at a time or vectorised over Arrow/numpy arrays."""

from __future__ import annotations

import functools
import math
import numbers
import struct
from typing import Any, Callable, Union

import numpy as np
import pyarrow as pa

from statekit.errors import NullKeyError, StateTypeError
from statekit.types import parse_ddl

__all__ = ["KeyType", "binary_row_hash", "binary_row_hashes", "java_hash", "java_hash_array"]

KeyType = Union[str, pa.DataType, None]

M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
INT32_MIN = -(2**31)


def int32(v: int) -> int:
    """Reinterpret the low 32 bits of ``v`` as a signed Java int."""
    v &= M32
    return v - (1 << 32) if v & 0x80000000 else v

# --- key types -----------------------------------------------------------------------------------
#
# A key type (DDL string or Arrow type) is resolved to a "kind": one of the primitive names below,
# or for structs a tuple of (field name, kind) pairs. Kinds are hashable, so resolution is cached.

_INT_BITS = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
_ARROW_OF_KIND = {
    "int": pa.int32(), "bigint": pa.int64(), "smallint": pa.int16(), "tinyint": pa.int8(),
    "string": pa.string(), "boolean": pa.bool_(), "double": pa.float64(), "float": pa.float32(),
}  # fmt: skip
_SUPPORTED = "int, bigint, smallint, tinyint, string, boolean, double, float, struct<name:type,...>"
Kind = Union[str, tuple]


def _describe(kind: Kind) -> str:
    if isinstance(kind, str):
        return kind
    return "struct<" + ",".join(f"{name}:{_describe(k)}" for name, k in kind) + ">"


def _kind_of_arrow(dtype: pa.DataType) -> Kind:
    for kind, arrow_type in _ARROW_OF_KIND.items():
        if dtype == arrow_type:
            return kind
    if _is_string_type(dtype):
        return "string"
    if pa.types.is_dictionary(dtype):
        return _kind_of_arrow(dtype.value_type)
    if pa.types.is_struct(dtype):
        names = [f.name for f in dtype]
        if not names or len(set(names)) != len(names):
            raise StateTypeError(f"struct key type {dtype} needs at least one field and unique field names")
        return tuple((f.name, _kind_of_arrow(f.type)) for f in dtype)
    raise StateTypeError(
        f"arrow type {dtype} cannot be a key type; use one of int32, int64, int16, int8, string, bool, "
        f"float64, float32 or a struct of those (DDL: {_SUPPORTED})"
    )


@functools.lru_cache(maxsize=256)
def _resolve(key_type: str | pa.DataType) -> Kind:
    if isinstance(key_type, pa.DataType):
        return _kind_of_arrow(key_type)
    if isinstance(key_type, str):
        try:
            dtype = parse_ddl(key_type)  # the project's one DDL grammar
        except StateTypeError as e:
            raise StateTypeError(
                f"cannot use {key_type!r} as a key type; key types are {_SUPPORTED} (the DDL parser said: {e})"
            ) from None
        return _kind_of_arrow(dtype)
    raise StateTypeError(f"key_type must be a DDL string or a pyarrow.DataType, got {key_type!r}")


def _infer_kind(key: Any) -> Kind:
    """The kind Flink would see for a Python value (the scalar inference rules of `java_hash`)."""
    if isinstance(key, (bool, np.bool_)):
        return "boolean"
    if isinstance(key, np.integer):
        kind = {8: "tinyint", 16: "smallint", 32: "int", 64: "bigint"}.get(key.dtype.itemsize * 8)
        if key.dtype.kind == "i" and kind:
            return kind
    elif isinstance(key, numbers.Integral):
        return "bigint"
    elif isinstance(key, np.float32):
        return "float"
    elif isinstance(key, float):
        return "double"
    elif isinstance(key, str):
        return "string"
    elif isinstance(key, tuple):
        if any(v is None for v in key):
            raise StateTypeError(f"cannot infer the type of key {key!r} with a null field; pass key_type")
        return tuple((f"f{i}", _infer_kind(v)) for i, v in enumerate(key))
    raise StateTypeError(
        f"cannot infer a Flink key type for {key!r} ({type(key).__name__}); "
        f"pass key_type, one of {_SUPPORTED}"
    )


# --- scalar Java hashCode ------------------------------------------------------------------------


def _misfit(key: Any, kind: Kind, fix: str) -> StateTypeError:
    shown = f"key {key!r} ({type(key).__name__})"
    return StateTypeError(f"{shown} does not fit key type {_describe(kind)}; {fix}")


def _hash_value(key: Any, kind: Kind) -> int:
    if isinstance(kind, tuple):
        return _hash_struct(key, kind)
    if kind in _INT_BITS:
        # type() first: exact ints are the common case and ABC isinstance checks are slow
        exact_int = type(key) is int
        if not exact_int and (isinstance(key, (bool, np.bool_)) or not isinstance(key, numbers.Integral)):
            raise _misfit(key, kind, "pass an int")
        v, bits = int(key), _INT_BITS[kind]
        if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
            wider = "bigint" if bits == 32 else "int or bigint" if bits < 32 else "a string key"
            raise _misfit(key, kind, f"it needs {bits}-bit signed range; declare the key type as {wider}")
        if bits < 64:
            return v  # Integer, Short and Byte hash to their value
        v &= _M64
        return int32(v ^ (v >> 32))  # Long.hashCode
    if kind == "string":
        if not isinstance(key, str):
            raise _misfit(key, kind, "pass a str, or declare the key's real type")
        # Java hashes UTF-16 code units; surrogatepass keeps lone surrogates as single units too
        units = key.encode("utf-16-le", "surrogatepass")
        h = 0
        for unit in struct.unpack(f"<{len(units) // 2}H", units):
            h = (31 * h + unit) & M32
        return int32(h)
    if kind == "boolean":
        if not isinstance(key, (bool, np.bool_)):
            raise _misfit(key, kind, "pass True or False")
        return 1231 if key else 1237
    if not isinstance(key, (float, np.floating)):  # double and float: ints are refused, as in Java
        raise _misfit(key, kind, f"pass a float, e.g. {key!r}.0" if isinstance(key, int) else "pass a float")
    if kind == "double":
        bits = 0x7FF8000000000000 if math.isnan(key) else struct.unpack("<Q", struct.pack("<d", key))[0]
        return int32(bits ^ (bits >> 32))
    if math.isnan(key):
        return 0x7FC00000
    try:
        return int32(struct.unpack("<I", struct.pack("<f", key))[0])
    except OverflowError:
        raise _misfit(key, kind, "it is beyond float32 range; declare the key type as double") from None


def _hash_struct(key: Any, kind: tuple) -> int:
    if isinstance(key, dict):
        names = [name for name, _ in kind]
        if set(key) != set(names):
            raise _misfit(key, kind, f"give exactly the fields {names} (None for a null field)")
        values = [key[name] for name in names]
    elif isinstance(key, (tuple, list)):
        if len(key) != len(kind):
            raise _misfit(key, kind, f"give {len(kind)} fields in declaration order, or a dict by field name")
        values = list(key)
    else:
        raise _misfit(key, kind, "pass a dict by field name or a tuple in field order")
    h = 0
    for value, (_, field_kind) in zip(values, kind):
        h = 31 * h + (0 if value is None else _hash_value(value, field_kind))  # Flink Tuple.hashCode
    return int32(h)


def java_hash(key: Any, key_type: KeyType = None) -> int:
    """The Java ``hashCode()`` of ``key`` as its declared Flink type, as a signed 32-bit int.

    Parameters
    ----------
    key
        The key. Struct keys are a dict by field name or a tuple in field order; a null (None) field
        hashes to 0, as in a Flink Tuple.
    key_type
        A DDL string as `statekit.types.parse_ddl` reads it (``int``, ``bigint``, ``smallint``,
        ``tinyint``, ``string``, ``boolean``, ``double``, ``float``, ``struct<name:type,...>``, and
        aliases such as ``integer``, ``long``, ``short``), a ``pyarrow.DataType`` (``large_string``
        and dictionaries count as their value type), or None to infer: ``int`` → bigint, ``str`` → string, ``bool`` →
        boolean, ``float`` → double, ``tuple`` → struct of its elements' inferred types. Python's
        ``hash()`` is never used.

    Raises
    ------
    NullKeyError
        If ``key`` is None.
    StateTypeError
        If ``key`` does not fit ``key_type`` or the type cannot be parsed or inferred.

    Examples
    --------
    >>> java_hash("hello"), java_hash(-1, "bigint"), java_hash(True), java_hash((1, "a"))
    (99162322, 0, 1231, 128)
    """
    if key is None:
        raise NullKeyError("key is None; Flink keys cannot be null, filter out or replace null keys first")
    kind = _infer_kind(key) if key_type is None else _resolve(key_type)
    return _hash_value(key, kind)


# --- vectorised ----------------------------------------------------------------------------------
#
# Everything below works on uint32 numpy arrays, whose arithmetic wraps mod 2**32 exactly like
# Java int arithmetic. Each hasher returns the Java hashCode bits of every element.

U32 = np.uint32
_INV31 = pow(31, -1, 2**32)  # 31 is odd, hence invertible mod 2**32
_pow_tables = (np.ones(1, U32), np.ones(1, U32))  # (31**k, 31**-k) mod 2**32, replaced as a whole
_STRING_SLICE = 1 << 16  # strings per slice: keeps the temporaries in cache and the tables small


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``31**k`` and ``31**-k`` (mod 2**32) for ``k < n``, grown and cached on demand."""
    global _pow_tables
    tables = _pow_tables  # one read: another thread may swap in bigger tables meanwhile
    if len(tables[0]) < n:
        size = max(n, 2 * len(tables[0]))
        grown = []
        for base in (31, _INV31):
            table = np.full(size, base, U32)
            table[0] = 1
            grown.append(np.cumprod(table, dtype=U32))
        tables = _pow_tables = (grown[0], grown[1])
    return tables[0][:n], tables[1][:n]


def _hash_utf8(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Java String.hashCode of each string given Arrow-style UTF-8 ``data`` and ``offsets``."""
    if data.size == 0:
        return np.zeros(len(offsets) - 1, U32)
    if data.max() < 0x80:  # ASCII: one byte is one UTF-16 unit
        units, unit_offsets = data, offsets
    else:
        units = np.frombuffer(data.tobytes().decode("utf-8").encode("utf-16-le"), "<u2")
        # UTF-16 units per byte: 1 per lead byte (non-continuation), +1 for 4-byte leads (surrogate pairs)
        per_byte = ((data & 0xC0) != 0x80).view(np.uint8) + (data >= 0xF0).view(np.uint8)
        cum = np.zeros(data.size + 1, np.int64)
        np.cumsum(per_byte, out=cum[1:])
        unit_offsets = cum[offsets]
    # hash(s) = sum c_i 31**(end-1-i) = 31**(end-1) * sum c_i 31**-i over global positions i, which
    # makes the inner sum one segmented sum over the strings' contiguous units: no per-string loop.
    # (np.add.reduceat runs ~3x faster than a prefix sum here; it gives an empty segment the element
    # at its start instead of 0, so empty strings are zeroed after.)
    pow31, inv31 = _powers(len(units) + 1)
    starts, ends = unit_offsets[:-1], unit_offsets[1:]
    weighted = np.zeros(len(units) + 1, U32)  # + one 0: an empty string at the very end still has an index
    np.multiply(units, inv31[: len(units)], out=weighted[:-1], dtype=U32)
    sums = np.add.reduceat(weighted, starts, dtype=U32)
    sums[starts == ends] = 0
    return sums * pow31[np.maximum(ends - 1, 0)]


def _is_string_type(dtype: pa.DataType) -> bool:
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype)


def _hash_strings(arr: pa.Array) -> np.ndarray:
    if pa.types.is_string_view(arr.type):  # no offsets buffer to read; convert once
        arr = arr.cast(pa.large_string())
    offset_type = np.int32 if pa.types.is_string(arr.type) else np.int64
    _, offsets_buf, data_buf = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(offsets_buf, offset_type, n + 1, arr.offset * np.dtype(offset_type).itemsize)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    out = np.empty(n, U32)
    for lo in range(0, n, _STRING_SLICE):
        hi = min(lo + _STRING_SLICE, n)
        first, last = int(offsets[lo]), int(offsets[hi])
        out[lo:hi] = _hash_utf8((offsets[lo : hi + 1] - first).astype(np.int64), data[first:last])
    return out


def _long_hash(values: np.ndarray) -> np.ndarray:
    bits = values.view(np.uint64)
    return (bits ^ (bits >> np.uint64(32))).astype(U32)  # astype keeps the low 32 bits


def _cast(arr: pa.Array, target: pa.DataType, kind: Kind) -> pa.Array:
    """Cast within a type family only, refusing values that do not fit (no silent conversion)."""
    if arr.type == target:
        return arr
    is_float = pa.types.is_floating
    same_family: dict[Kind, Callable[[pa.DataType], bool]] = {"boolean": pa.types.is_boolean, "double": is_float, "float": is_float}
    if not same_family.get(kind, pa.types.is_integer)(arr.type):
        raise StateTypeError(
            f"keys of arrow type {arr.type} do not fit key type {kind}; "
            f"pass {target} values or declare the key type that matches the data"
        )
    if kind == "float":  # narrowing double to float rounds like Java's (float) cast, but must not overflow
        wide = arr.to_numpy(zero_copy_only=False).astype(np.float64)
        with np.errstate(over="ignore"):  # overflow is detected just below, with a clear error
            narrow = wide.astype(np.float32)
        bad = np.flatnonzero(np.isinf(narrow) & np.isfinite(wide))
        if bad.size:
            _hash_value(float(wide[bad[0]]), kind)  # raises the scalar path's error
        return pa.array(narrow, mask=arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None)
    try:
        return arr.cast(target, safe=True)
    except pa.ArrowInvalid:
        _raise_first_misfit(arr.to_pylist(), kind)
        raise


def _raise_first_misfit(values: list, kind: Kind) -> None:
    """Raise the scalar path's error for the first key that does not fit ``kind`` (for messages)."""
    for value in values:
        if value is not None:
            _hash_value(value, kind)


def _hash_arrow(arr: pa.Array, kind: Kind) -> np.ndarray:
    """Java hashCode bits (uint32) of every element; null elements hash to 0."""
    if pa.types.is_dictionary(arr.type):  # hash each distinct value once
        hashes = _hash_arrow(arr.dictionary, kind)
        indices = arr.indices.fill_null(0).to_numpy(zero_copy_only=False)
        out = hashes[indices] if len(hashes) else np.zeros(len(arr), U32)
    elif isinstance(kind, tuple):
        if not pa.types.is_struct(arr.type):
            raise StateTypeError(f"keys of arrow type {arr.type} do not fit key type {_describe(kind)}")
        names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
        if sorted(names) != sorted(name for name, _ in kind):
            raise StateTypeError(
                f"struct keys have fields {names} but key type {_describe(kind)} declares "
                f"{[name for name, _ in kind]}; rename or select the fields to match"
            )
        children = dict(zip(names, arr.flatten()))  # flatten() applies the slice offset and parent nulls
        out = np.zeros(len(arr), U32)
        for name, field_kind in kind:  # Flink Tuple: h = 31*h + field_hash
            out = out * U32(31) + _hash_arrow(children[name], field_kind)
    elif kind == "string":
        if not _is_string_type(arr.type):
            raise StateTypeError(f"keys of arrow type {arr.type} do not fit key type string; pass strings")
        out = _hash_strings(arr)
    else:
        arr = _cast(arr, _ARROW_OF_KIND[kind], kind)
        # nulls are masked to 0 below; filling them first keeps numpy off NaN-to-int casts
        filled = arr.fill_null(False if kind == "boolean" else 0) if arr.null_count else arr
        values = filled.to_numpy(zero_copy_only=False)
        if kind == "boolean":
            out = np.where(values.astype(bool), U32(1231), U32(1237))
        elif kind == "bigint":
            out = _long_hash(values.astype(np.int64, copy=False))
        elif kind == "double":
            values = values.astype(np.float64)  # a copy, so canonicalising NaN is safe
            values[np.isnan(values)] = np.nan  # Double.doubleToLongBits: one canonical NaN
            out = _long_hash(values)
        elif kind == "float":
            bits = values.astype(np.float32).view(U32)
            out = np.where(np.isnan(values), U32(0x7FC00000), bits)
        else:  # int, smallint, tinyint hash to their value; sign-extend then reinterpret
            out = values.astype(np.int32).view(U32)
    if arr.null_count:
        out = np.where(arr.is_null().to_numpy(zero_copy_only=False), U32(0), out)
    return out


_FLOATS = (float, np.floating)
# Python classes each kind accepts (integer kinds: numbers.Integral), as the scalar path does
_PY_CLASSES: dict[Kind, type | tuple[type, ...]] = {"string": str, "boolean": (bool, np.bool_), "double": _FLOATS, "float": _FLOATS}


def _from_python(values: list, kind: Kind) -> pa.Array:
    """An Arrow array of Python keys, refusing exactly what the scalar path refuses."""
    if isinstance(kind, tuple):
        return _struct_from_python(values, kind)
    for cls in set(map(type, values)) - {type(None)}:
        is_bool = issubclass(cls, (bool, np.bool_))
        if not issubclass(cls, _PY_CLASSES.get(kind, numbers.Integral)) or (is_bool and kind != "boolean"):
            example = next(v for v in values if type(v) is cls)
            _hash_value(example, kind)  # raises the scalar path's error for this key
    # float keys go in as double: the narrowing cast in _hash_arrow checks float32 range
    target = pa.float64() if kind == "float" else _ARROW_OF_KIND[kind]
    try:
        return pa.array(values, type=target)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        _raise_first_misfit(values, kind)
        raise


def _struct_from_python(values: list, kind: tuple) -> pa.StructArray:
    names = [name for name, _ in kind]
    columns: list[list] = [[] for _ in kind]
    for value in values:
        if value is None:
            fields: Any = [None] * len(kind)
        elif isinstance(value, dict):
            if value.keys() != set(names):
                raise _misfit(value, kind, f"give exactly the fields {names} (None for a null field)")
            fields = [value[name] for name in names]
        elif isinstance(value, (tuple, list)) and len(value) == len(kind):
            fields = value
        else:
            raise _misfit(value, kind, f"give a dict by field name or a tuple of {len(kind)} fields in order")
        for column, field in zip(columns, fields):
            column.append(field)
    children = [_from_python(column, field_kind) for column, (_, field_kind) in zip(columns, kind)]
    mask = pa.array([value is None for value in values], pa.bool_())
    return pa.StructArray.from_arrays(children, names=names, mask=mask)


def java_hash_array(values: Any, key_type: KeyType = None) -> np.ndarray:
    """Vectorised `java_hash`: the Java ``hashCode()`` of every key, as a uint32 numpy array.

    Accepts what `statekit.keygroups.assign_key_groups` accepts and raises the same errors.
    """
    kind = None if key_type is None else _resolve(key_type)
    if isinstance(values, np.ndarray) and values.dtype.kind in "iufb":
        values = pa.array(values)  # zero copy; _hash_arrow checks the dtype against the key type
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        arr = values
    else:
        keys = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if keys and kind is None and keys[0] is not None:
            classes = {type(k) for k in keys} - {type(None)}
            if len(classes) > 1:
                names = sorted(c.__name__ for c in classes)
                raise StateTypeError(f"keys mix the Python types {names}; pass key_type to say how to hash")
            kind = _infer_kind(keys[0])
        arr = _from_python(keys, kind) if kind is not None else pa.array(keys)
    if arr.null_count:
        first = int(np.argmax(arr.is_null().to_numpy(zero_copy_only=False)))
        raise NullKeyError(f"key at index {first} is null; Flink keys cannot be null, filter or fill them")
    if len(arr) == 0:
        return np.zeros(0, np.uint32)
    if kind is None:
        value_type = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
        kind = _kind_of_arrow(value_type)
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    return np.concatenate([_hash_arrow(chunk, kind) for chunk in chunks if len(chunk)])


# -- Flink SQL keys: BinaryRowData.hashCode ------------------------------------------------------------
_ROW_SEED = 42  # MurmurHashUtils.DEFAULT_SEED


def binary_row_hashes(rows: "list[bytes] | pa.Array") -> np.ndarray:
    """``BinaryRowData.hashCode()`` of every serialized SQL key row, as uint32 (vectorised per row length).

    Flink SQL keys are BinaryRowData, hashed as murmur3-32 with seed 42 over the row's bytes read as
    little-endian ints (row sizes are multiples of 8), then the finalizer over ``h ^ length``
    (`MurmurHashUtils.hashBytesByWords`; `../shared/flink/sql/SQL-FORMAT.md` section 2). Rows of one
    length are hashed together, one numpy pass per 4-byte word.

    >>> binary_row_hashes([bytes(16)]).dtype
    dtype('uint32')
    """
    if isinstance(rows, (pa.Array, pa.ChunkedArray)):
        rows = rows.to_pylist()
    out = np.zeros(len(rows), U32)
    by_len: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_len.setdefault(len(r), []).append(i)
    for n, idx in by_len.items():
        if n % 4:
            raise StateTypeError(f"a SQL key row of {n} bytes is not whole 4-byte words; BinaryRowData rows are")
        words = np.frombuffer(b"".join(rows[i] for i in idx), "<u4").reshape(len(idx), n // 4)
        h = binary_row_words_hashes(words)
        out[idx] = h
    return out


def binary_row_words_hashes(words: np.ndarray) -> np.ndarray:
    """`binary_row_hashes` of rows of one length given as a (rows, 4-byte words) little-endian uint32 matrix."""
    n = words.shape[1] * 4
    h = np.full(len(words), _ROW_SEED, U32)
    with np.errstate(over="ignore"):
        for j in range(n // 4):
            k = words[:, j] * U32(0xCC9E2D51)
            k = (k << U32(15)) | (k >> U32(17))
            k *= U32(0x1B873593)
            h ^= k
            h = (h << U32(13)) | (h >> U32(19))
            h = h * U32(5) + U32(0xE6546B64)
        h ^= U32(n)
        h ^= h >> U32(16)
        h *= U32(0x85EBCA6B)
        h ^= h >> U32(13)
        h *= U32(0xC2B2AE35)
        h ^= h >> U32(16)
    return h


def binary_row_hash(row: bytes) -> int:
    """``BinaryRowData.hashCode()`` of one serialized SQL key row, as Java's signed int (see `binary_row_hashes`).

    >>> binary_row_hash(bytes(16)) == binary_row_hash(bytes(16))
    True
    """
    return int(binary_row_hashes([row]).view(np.int32)[0])
