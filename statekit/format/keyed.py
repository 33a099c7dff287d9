"""The keyed-table layout as Arrow data: columns, namespaces, timers, window contents, key groups and file splits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from statekit.errors import DuplicateKeyError, InvalidArgumentError, NullKeyError, StateTypeError
from statekit.format.arrow_memory import from_numpy
from statekit.keygroups import check_max_parallelism, compute_key_groups_for_key_hashes
from statekit.keyhash import java_hash_array
from statekit.state.descriptors import StateInfo
from statekit.types import parse_ddl, to_ddl

#: Type of the ``namespace`` column of window operators (a window ``[start, end)``), in DDL and as Arrow.
NAMESPACE_TYPE = "struct<start:bigint,end:bigint>"
NAMESPACE_ARROW = parse_ddl(NAMESPACE_TYPE)
#: Values of the timers table's ``domain`` column.
EVENT, PROCESSING = "event", "processing"
#: Keyed states of window operators: the buffered elements (or the pre-aggregate) of a window; with an
#: evictor, each buffered element's timestamp, in step with CONTENTS; the active session windows of a
#: key (start -> end, in the void namespace).
CONTENTS = "window-contents"
TIMESTAMPS = "window-timestamps"
SESSIONS = "session-windows"
#: List state holds no nulls: Long.MIN_VALUE stands for "no timestamp" in TIMESTAMPS, as in Flink.
NO_TIMESTAMP = -(2**63)
#: Below this many rows the key-group hash runs on one thread; above, in slices of HASH_SLICE_ROWS on two threads.
PARALLEL_HASH_ROWS = 1_000_000
HASH_SLICE_ROWS = 1 << 18


#: numpy dtypes of the fixed-width Arrow types `column_values` reads.
_NUMPY_DTYPES = {"int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "uint8": "u1", "uint16": "u2",
                 "uint32": "u4", "uint64": "u8", "float": "f4", "double": "f8"}


def column_values(col: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """A column of integers or floats without nulls as numpy values, read from its Arrow buffers; None
    for other columns. (pyarrow's ``to_numpy`` imports pandas on first use, about a second of start-up
    that a one-key read such as ``statekit get`` must not pay.)"""
    dtype = _NUMPY_DTYPES.get(str(col.type))
    if dtype is None or col.null_count:
        return None
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    dt = np.dtype(dtype)
    parts = [np.frombuffer(c.buffers()[1], dtype=dt, count=len(c), offset=c.offset * dt.itemsize) for c in chunks]
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


def keyed_schema(
    key_type: str, infos: Sequence[StateInfo], *, namespace_type: str | None = None, with_key_group: bool = True
) -> pa.Schema:
    """The keyed table's schema: ``key_group``, ``key``, [``namespace``], one column per state."""
    fields = [pa.field("key_group", pa.int32(), nullable=False)] if with_key_group else []
    fields.append(pa.field("key", parse_ddl(key_type), nullable=False))
    if namespace_type is not None:
        fields.append(pa.field("namespace", parse_ddl(namespace_type)))
    fields.extend(pa.field(s.name, parse_ddl(s.type)) for s in infos)
    return pa.schema(fields)


def timers_schema(key_type: str, *, namespace_type: str | None = None) -> pa.Schema:
    """The timers table's schema for a key type (and a namespace type for windows)."""
    fields = [pa.field("key_group", pa.int32(), nullable=False), pa.field("key", parse_ddl(key_type), nullable=False)]
    if namespace_type is not None:
        fields.append(pa.field("namespace", parse_ddl(namespace_type)))
    fields += [pa.field("timestamp", pa.int64(), nullable=False), pa.field("domain", pa.string(), nullable=False)]
    return pa.schema(fields)


def timers_table(rows: list[tuple], key_type: pa.DataType, namespace_type: pa.DataType | None) -> pa.Table:
    """Timer rows in the savepoint layout (``key_group, key, [namespace], timestamp, domain``)."""
    rows = sorted(rows, key=lambda r: (r[0], r[3], r[4]))
    cols: dict[str, pa.Array] = {
        "key_group": pa.array([r[0] for r in rows], pa.int32()),
        "key": pa.array([r[1] for r in rows], key_type),
    }
    if namespace_type is not None:
        cols["namespace"] = pa.array(
            [None if r[2] is None else {"start": r[2][0], "end": r[2][1]} for r in rows], namespace_type
        )
    cols["timestamp"] = pa.array([r[3] for r in rows], pa.int64())
    cols["domain"] = pa.array([r[4] for r in rows], pa.string())
    return pa.table(cols)


def timer_rows_from_table(table: pa.Table) -> list[tuple]:
    """Inverse of `timers_table`."""
    d = table.to_pydict()
    n = table.num_rows
    ns = d.get("namespace") or [None] * n
    ns = [None if v is None else (v["start"], v["end"]) for v in ns]
    keys = [_as_key(k) for k in d["key"]]
    return [(d["key_group"][i], keys[i], ns[i], d["timestamp"][i], d["domain"][i]) for i in range(n)]


def _as_key(value: Any) -> Any:
    """Struct keys come back from Arrow as dicts; the runtime keys them as tuples in field order."""
    if isinstance(value, dict):
        return tuple(_as_key(v) for v in value.values())
    return value


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Type equality that ignores list/map child field names (Parquet renames them)."""
    try:
        return to_ddl(a) == to_ddl(b)
    except StateTypeError:
        return a == b


def castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether values of `src` may be stored in a column declared `dst` without changing their meaning.

    Only conversions within one family are allowed (integers to wider or checked-narrower integers
    or to floats, floats to floats, text to text, bytes to bytes, nested types member by member);
    ``"123"`` is not silently stored as a number, nor ``True`` as ``1``. Looks at types only, never
    at the data.
    """
    T = pa.types
    if T.is_dictionary(src):
        return castable(src.value_type, dst)
    if T.is_null(src) or src == dst:
        return True
    if T.is_integer(dst):
        return T.is_integer(src)
    if T.is_floating(dst):
        return T.is_integer(src) or T.is_floating(src)
    if T.is_decimal(dst):
        return T.is_integer(src) or T.is_decimal(src)
    if T.is_boolean(dst):
        return T.is_boolean(src)
    if T.is_string(dst) or T.is_large_string(dst):
        return T.is_string(src) or T.is_large_string(src) or T.is_string_view(src)
    if T.is_binary(dst) or T.is_large_binary(dst):
        return T.is_binary(src) or T.is_large_binary(src) or T.is_binary_view(src) or T.is_fixed_size_binary(src)
    if T.is_date(dst):
        return T.is_date(src)
    if T.is_timestamp(dst):
        return T.is_timestamp(src)
    if T.is_map(dst):
        return T.is_map(src) and castable(src.key_type, dst.key_type) and castable(src.item_type, dst.item_type)
    if T.is_list(dst) or T.is_large_list(dst):
        return (
            T.is_list(src) or T.is_large_list(src) or T.is_fixed_size_list(src) or T.is_list_view(src)
        ) and castable(src.value_type, dst.value_type)
    if T.is_struct(dst):
        if not T.is_struct(src) or sorted(f.name for f in src) != sorted(f.name for f in dst):
            return False
        return all(castable(src.field(f.name).type, f.type) for f in dst)
    return False


def conform(table: pa.Table, schema: pa.Schema, *, what: str) -> pa.Table:
    """Select, order and cast `table`'s columns to `schema`; missing state columns become all-null.

    Raises `StateTypeError` for a column whose type is of another family than declared (see
    `castable`) or whose values do not fit, `NullKeyError` for null keys, and
    `InvalidArgumentError` for unknown columns, missing required columns or nulls in a required
    column, naming them and the declared schema.
    """
    names = set(table.column_names)
    extra = sorted(names - set(schema.names))
    if extra:
        raise InvalidArgumentError(
            f"{what}: column(s) {extra} are not declared; declared columns are {schema.names}. "
            "Declare the state on the operator or drop the column."
        )
    columns = []
    for f in schema:
        if f.name not in names:
            if not f.nullable:
                raise InvalidArgumentError(f"{what}: required column {f.name!r} is missing.")
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(f.name)
        if not f.nullable and col.null_count:  # null_count is metadata: no pass over the data
            if f.name == "key":
                raise NullKeyError(
                    f"{what}: the key column holds {col.null_count} null key(s); Flink forbids null keys. "
                    "Drop or fill them."
                )
            raise InvalidArgumentError(
                f"{what}: column {f.name!r} holds {col.null_count} null(s) but is required; fill or drop those rows."
            )
        if col.type != f.type:
            if not same_type(col.type, f.type) and not castable(col.type, f.type):
                raise StateTypeError(
                    f"{what}: column {f.name!r} has type {col.type} but is declared {to_ddl(f.type)}; statekit "
                    "does not convert between type families. Convert the data or change the declaration."
                )
            try:  # widening, checked narrowing, or the same logical type with other child names
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise StateTypeError(
                    f"{what}: column {f.name!r} has type {col.type} but is declared {to_ddl(f.type)} and cannot be "
                    f"converted ({exc}). Convert the data or change the declaration."
                ) from None
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def compute_key_groups(keys: pa.ChunkedArray | pa.Array, max_parallelism: int, key_type: str) -> np.ndarray:
    """Key groups for a key column (`key_groups_and_hashes` also gives the Java hashCodes they come from)."""
    return key_groups_and_hashes(keys, max_parallelism, key_type)[0]


def key_groups_and_hashes(keys: pa.ChunkedArray | pa.Array, max_parallelism: int,
                          key_type: str) -> tuple[np.ndarray, np.ndarray]:
    """Key groups (int32) and Java hashCodes (uint32) of a key column; a large column is hashed in slices of
    `HASH_SLICE_ROWS` on two threads.

    Why slices, not halves: each slice's scratch arrays stay in cache and are reused from the
    allocator, where a half's are fresh memory (10M String keys: ~0.2 s against 0.22-0.44 s).
    The hashCodes serve `check_unique_keys` as fingerprints of String keys.
    """
    if keys.null_count:
        raise NullKeyError(
            f"the key column holds {keys.null_count} null key(s); Flink forbids null keys. Drop or fill them."
        )
    m = check_max_parallelism(max_parallelism)
    n = len(keys)
    kg, hashes = np.empty(n, np.int32), np.empty(n, np.uint32)

    def hash_slice(job: tuple[int, pa.Array | pa.ChunkedArray]) -> None:
        start, part = job
        h = java_hash_array(part, key_type)
        hashes[start : start + len(part)] = h
        kg[start : start + len(part)] = compute_key_groups_for_key_hashes(h, m)  # (overwrites `h`)

    if n < PARALLEL_HASH_ROWS:
        if n:
            hash_slice((0, keys))
        return kg, hashes
    from concurrent.futures import ThreadPoolExecutor  # here: a one-key read loads this module without it

    slices, at = [], 0  # (first row, slice): chunks are sliced where they are, never combined (a copy)
    for chunk in keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]:
        slices += [(at + a, chunk.slice(a, HASH_SLICE_ROWS)) for a in range(0, len(chunk), HASH_SLICE_ROWS)]
        at += len(chunk)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(hash_slice, slices))
    return kg, hashes


def drop_unset_rows(table: pa.Table, kg: np.ndarray, state_names: Sequence[str]) -> tuple[pa.Table, np.ndarray]:
    """Drop rows where every state is null (the format keeps only rows with some state set)."""
    if not state_names or all(table.column(n).null_count == 0 for n in state_names):
        return table, kg
    import pyarrow.compute as pc  # here: reading one key (statekit get) uses this module without compute

    mask = pc.is_valid(table.column(state_names[0]))
    for n in state_names[1:]:
        mask = pc.or_(mask, pc.is_valid(table.column(n)))
    keep = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
    return table.filter(mask), kg[keep]


def first_duplicate(table: pa.Table, cols: list[str], key_hashes: np.ndarray | None = None) -> int | None:
    """Row index of the first row whose `cols` repeat an earlier row's, or None when all are distinct.

    `key_hashes`: the Java hashCodes of a single String key column (`key_groups_and_hashes`), when
    known; with the key lengths they are its fingerprints, instead of computing others.
    """
    flat = table.select(cols).flatten()
    if flat.num_columns == 1:
        candidates = _maybe_repeated(flat.column(0), key_hashes)
        if candidates is not None:
            if not len(candidates):
                return None
            if len(candidates) <= len(flat) // 8:  # few rows share a fingerprint: compare only those exactly
                seen: set = set()
                for row, value in zip(candidates.tolist(), flat.column(0).take(candidates).to_pylist()):
                    if value in seen:
                        return row
                    seen.add(value)
                return None
    import pandas as pd  # pandas' hash table is the fastest duplicate check available here (imported only now: ~0.2 s)

    if flat.num_columns == 1 and pa.types.is_primitive(flat.schema.types[0]):
        dup = pd.Series(flat.column(0).to_numpy()).duplicated().to_numpy()
    else:
        dup = flat.to_pandas(use_threads=False).duplicated().to_numpy()  # no Arrow pool thread left holding `flat`
    return int(np.argmax(dup)) if dup.any() else None


def check_unique_keys(table: pa.Table, *, has_namespace: bool, what: str, key_hashes: np.ndarray | None = None) -> None:
    """Raise `DuplicateKeyError` naming a duplicated key (and namespace) if any (`key_hashes`: see `first_duplicate`)."""
    cols = ["key", "namespace"] if has_namespace else ["key"]
    index = first_duplicate(table, cols, None if has_namespace else key_hashes)
    if index is None:
        return
    row = table.select(cols).slice(index, 1).to_pylist()[0]
    raise DuplicateKeyError(
        f"{what}: key {row['key']!r}{' in namespace ' + repr(row['namespace']) if has_namespace else ''} "
        f"appears more than once; it must hold one row per key{' and namespace' if has_namespace else ''}. "
        "Deduplicate (e.g. keep the latest row) before writing."
    )


def _maybe_repeated(col: pa.ChunkedArray, key_hashes: np.ndarray | None) -> np.ndarray | None:
    """Rows that may repeat another row (ascending; empty: every value is distinct), found by sorting fingerprints
    (equal values, equal fingerprints); None for types without one (floats: NaN, -0.0; nested keys)."""
    t = col.type
    if pa.types.is_integer(t):  # sorting integers beats hashing them several times over; the values are exact
        fp = col.to_numpy()
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if key_hashes is not None and (pa.types.is_string(t) or pa.types.is_large_string(t)):
            fp = key_hashes.astype(np.uint64) << np.uint64(32)
            fp |= np.concatenate([np.diff(_offsets(c)) for c in col.chunks]).astype(np.uint64)
        else:
            fp = np.concatenate([_fingerprints(c) for c in col.chunks])
    elif pa.types.is_boolean(t) and len(col) <= 2:  # (more than two rows always repeat a value: the exact path names it)
        fp = col.to_numpy(zero_copy_only=False).astype(np.uint8)
    else:
        return None
    ordered = np.sort(fp)
    same = ordered[1:] == ordered[:-1]
    if not same.any():
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.isin(fp, ordered[1:][same]))


_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9),
        np.uint64(0xD6E8FEB86659FD93))


def _fingerprints(arr: pa.Array) -> np.ndarray:
    """A 64-bit fingerprint of every string/binary value: equal values, equal fingerprints.

    Made of the value's length and its first, middle and last 8 bytes (so it sees every byte of values
    up to 16 bytes), mixed; sorting fingerprints finds candidate duplicates several times faster than
    Arrow's hash table (`pc.unique`). Distinct values may share one (the caller then checks exactly).
    Computed `_FINGERPRINT_ROWS` values at a time: the scratch arrays stay in cache and are reused
    (900k String keys: ~50 -> ~25 ms).
    """
    n = len(arr)
    offsets = _offsets(arr)
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    out = np.empty(n, np.uint64)
    for a in range(0, n, _FINGERPRINT_ROWS):
        b = min(n, a + _FINGERPRINT_ROWS)
        lo, hi = int(offsets[a]), int(offsets[b])
        if hi + 8 <= len(data):  # an 8-byte read at any value's start stays inside the data
            window = data[lo : hi + 8]
        else:
            window = np.zeros(hi - lo + 8, np.uint8)
            window[: hi - lo] = data[lo:hi]
        out[a:b] = _mix(window, offsets[a : b + 1].astype(np.int64) - lo)
    return out


def _offsets(arr: pa.Array) -> np.ndarray:
    """The value offsets of a (large) string or binary array, zero-copy."""
    offset_type = np.int32 if pa.types.is_string(arr.type) or pa.types.is_binary(arr.type) else np.int64
    return np.frombuffer(arr.buffers()[1], offset_type, len(arr) + 1, arr.offset * np.dtype(offset_type).itemsize)


_FINGERPRINT_ROWS = 1 << 15


def _mix(window: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The fingerprints of the values at `offsets` in `window` (readable 8 bytes past the last value)."""
    u64_at = np.ndarray((len(window) - 7,), np.dtype("<u8"), buffer=window.data, offset=0, strides=(1,))
    starts, ends = offsets[:-1], offsets[1:]
    length = ends - starts
    width = (np.minimum(length, 8) << 3).view(np.uint64)
    mask = np.full(len(starts), np.uint64(0xFFFFFFFFFFFFFFFF))
    short = width < 64
    if short.any():
        mask[short] = (np.uint64(1) << width[short]) - np.uint64(1)
    fp = u64_at[starts]
    fp &= mask
    fp *= _MIX[0]
    tail = u64_at[np.maximum(ends - 8, starts)]
    tail &= mask
    tail *= _MIX[1]
    fp ^= (tail >> np.uint64(7)) | (tail << np.uint64(57))
    middle = u64_at[starts + np.maximum(length // 2 - 4, 0)]
    middle &= mask
    middle *= _MIX[2]
    fp ^= middle
    fp ^= length.view(np.uint64) * _MIX[3]
    return fp


@dataclass(frozen=True)
class KeyGroupSplit:
    """Rows ``[row_start, row_end)`` of the key-group-sorted table, covering key groups ``[kg_start, kg_end]``."""

    kg_start: int
    kg_end: int
    row_start: int
    row_end: int

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start


def is_grouped(kg: np.ndarray) -> bool:
    """True when rows already come in ascending key-group order."""
    return len(kg) < 2 or bool(np.all(kg[1:] >= kg[:-1]))


def key_group_order(kg: np.ndarray) -> np.ndarray | None:
    """Row order that groups rows by ascending key group (stable radix sort), or None if already grouped."""
    if is_grouped(kg):
        return None
    return np.argsort(kg.astype(np.uint16), kind="stable")


def take_rows(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table.take(rows)``, with list-of-number columns (typical list state) gathered by numpy.

    Arrow's list take appends element by element; gathering offsets and values with numpy costs
    about a third less, and taking rows is the writer's largest cost after Parquet encoding.
    """
    indices = pa.array(rows)
    columns = []
    for col in table.columns:
        arr = col.chunk(0) if col.num_chunks == 1 else None
        if arr is not None and _numpy_list_take_applies(arr):
            columns.append(_take_list(arr, rows))
        else:
            columns.append(col.take(indices))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _numpy_list_take_applies(arr: pa.Array) -> bool:
    t = arr.type
    return (
        pa.types.is_list(t)
        and (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type))
        and arr.values.null_count == 0
    )


def _take_list(arr: pa.ListArray, rows: np.ndarray) -> pa.ListArray:
    offsets = arr.offsets.to_numpy()  # absolute positions in arr.values, slicing included
    starts = offsets[:-1][rows]
    lengths = offsets[1:][rows] - starts
    new_offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    if new_offsets[-1] > np.iinfo(np.int32).max:  # cannot happen for a slice of a valid list array
        return arr.take(pa.array(rows))
    gather = np.repeat(starts.astype(np.int64) - new_offsets[:-1], lengths)
    gather += np.arange(new_offsets[-1], dtype=np.int64)
    values = from_numpy(arr.values.to_numpy()[gather], arr.type.value_type)
    mask = pa.array(arr.is_null().to_numpy(zero_copy_only=False)[rows]) if arr.null_count else None
    return pa.ListArray.from_arrays(from_numpy(new_offsets.astype(np.int32)), values, type=arr.type, mask=mask)


def with_key_group_column(table: pa.Table, kg: np.ndarray) -> pa.Table:
    """`table` with ``key_group`` as its first column."""
    if "key_group" in table.column_names:
        table = table.drop_columns(["key_group"])
    return table.add_column(0, pa.field("key_group", pa.int32(), nullable=False), from_numpy(kg, pa.int32()))


def sort_by_key_group(table: pa.Table, kg: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """Rows grouped by ascending key group, with ``key_group`` prepended."""
    order = key_group_order(kg)
    if order is not None:
        table, kg = table.take(pa.array(order)), kg[order]
    return with_key_group_column(table, kg), kg


def split_by_key_group(kg: np.ndarray, rows_per_file: int) -> list[KeyGroupSplit]:
    """Cut rows at key-group boundaries into files of at most `rows_per_file` rows.

    Row ranges refer to the rows grouped by ascending key group; `kg` itself need not be sorted
    (only per-key-group counts are used). A key group is never split, so a file holding a single
    key group may be larger.

    >>> [(s.kg_start, s.kg_end, s.row_start, s.row_end) for s in split_by_key_group(np.array([2, 0, 0, 5, 1, 2, 2]), 3)]
    [(0, 1, 0, 3), (2, 2, 3, 6), (5, 5, 6, 7)]
    """
    n = len(kg)
    if n == 0:
        return []
    counts = np.bincount(kg)
    groups = np.flatnonzero(counts)  # key groups present, ascending
    # Start row of each present key group in grouped order.
    starts = np.concatenate(([0], np.cumsum(counts[groups])[:-1]))
    splits: list[KeyGroupSplit] = []
    i = 0
    while i < len(starts):
        row_start = int(starts[i])
        # The last key-group start at or before row_start + rows_per_file ends this file.
        j = int(np.searchsorted(starts, row_start + rows_per_file, side="right")) - 1
        if n - row_start <= rows_per_file:
            j = len(starts)
        j = max(j, i + 1)  # a file holds at least one whole key group
        row_end = int(starts[j]) if j < len(starts) else n
        splits.append(KeyGroupSplit(int(groups[i]), int(groups[j - 1]), row_start, row_end))
        i = j
    return splits
