"""Keyed table ↔ Python dicts: backends hold ``{namespace: {key: value}}`` per state, savepoints one row per (key, namespace)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit import serde
from statekit.errors import StateTypeError
from statekit.format.arrow_memory import from_numpy
from statekit.format.keyed import NAMESPACE_ARROW
from statekit.format.values import python_converter, unpickle_values
from statekit.keygroups import KeyGroupRange, assign_key_groups
from statekit.state.descriptors import StateInfo
from statekit.types import to_arrow_array, to_ddl

__all__ = ["dicts_to_keyed_table", "filter_key_groups", "keyed_table_to_dicts"]

def _pickler(info: StateInfo) -> Callable[[Any], Any]:
    dumps = serde.dumps
    if info.kind == "list":
        return lambda v: [dumps(x) for x in v]
    if info.kind == "map":
        return lambda v: {k: None if x is None else dumps(x) for k, x in v.items()}
    return dumps


def dicts_to_keyed_table(
    *,
    key_type: pa.DataType,
    max_parallelism: int,
    states: Sequence[tuple[StateInfo, Mapping[Any, Mapping[Any, Any]], Callable[[Any], Any] | None]],
    pickle_values: bool = True,
    namespaced: bool = False,
) -> pa.Table:
    """Build the keyed table from per-state ``{namespace: {key: value}}`` dicts.

    Each state comes with an optional export function applied to its stored values (TTL filtering);
    an export result of None means "not set". Values of pickled states are pickled here unless
    `pickle_values` is False (they are pickled bytes already). Rows are sorted by key group, key and
    namespace; the namespace column appears when `namespaced` (the operator used windows) or some
    namespace is not None.
    """
    has_ns = namespaced or any(ns is not None for _, by_ns, _ in states for ns, d in by_ns.items() if d)
    row_of: dict[Any, int] = {}
    columns: list[tuple[StateInfo, list[int] | None, list[Any]]] = []
    first_keys: list[Any] = []
    for index, (info, by_ns, export) in enumerate(states):
        rows: list[int] = []
        values: list[Any] = []
        first = not row_of
        if index == 0 and not has_ns:
            # fast path: the first state's keys are the first rows, in order, without a dict per row
            d = by_ns.get(None) or {}
            if export is None:
                first_keys, values = list(d), list(d.values())
            else:
                pairs = [(k, e) for k, e in zip(d, map(export, d.values())) if e is not None]
                first_keys, values = [p[0] for p in pairs], [p[1] for p in pairs]
            if len(states) > 1:
                row_of = dict(zip(first_keys, range(len(first_keys))))
            by_ns = {}
        for ns, d in by_ns.items():
            items = d.items() if export is None else ((k, export(v)) for k, v in d.items())
            for k, v in items:
                if v is None:
                    continue
                rk = (k, ns) if has_ns else k
                i = row_of.get(rk)
                if i is None:
                    i = row_of[rk] = len(row_of)
                rows.append(i)
                values.append(v)
        if info.kind == "map":
            values = [_sorted_map(v) for v in values]  # entry order independent of write order
        if info.pickled and pickle_values:
            pick = _pickler(info)
            values = [pick(v) for v in values]
        # the first state's rows are 0..n-1 in order, so its values are already the column
        columns.append((info, None if first else rows, values))
    row_list = list(row_of) if row_of else first_keys
    n = len(row_list)
    keys = [rk[0] for rk in row_list] if has_ns else row_list
    key_arr = to_arrow_array(keys, key_type, what="key")
    kg = assign_key_groups(key_arr, max_parallelism, key_type) if n else np.zeros(0, np.int32)
    names = ["key_group", "key"]
    arrays: list[pa.Array] = [from_numpy(kg, pa.int32()), key_arr]
    if has_ns:
        nss = [rk[1] for rk in row_list]
        valid = np.fromiter((ns is not None for ns in nss), bool, n)
        starts = [ns[0] if ns is not None else 0 for ns in nss]
        ends = [ns[1] if ns is not None else 0 for ns in nss]
        mask = pa.array(~valid) if not valid.all() else None
        names.append("namespace")
        arrays.append(
            pa.StructArray.from_arrays(
                [pa.array(starts, pa.int64()), pa.array(ends, pa.int64())], fields=list(NAMESPACE_ARROW), mask=mask
            )
        )
    for info, at_rows, values in columns:
        if at_rows is not None and (len(at_rows) != n or at_rows != list(range(n))):
            full: list[Any] = [None] * n
            for i, v in zip(at_rows, values):
                full[i] = v
            values = full
        elif len(values) != n:
            values = values + [None] * (n - len(values))
        names.append(info.name)
        arrays.append(to_arrow_array(values, info.arrow_type, what=f"state {info.name!r} value"))
    table = pa.Table.from_arrays(arrays, names=names)
    if n > 1:
        order = _row_order(arrays[0], key_arr, arrays[2] if has_ns else None)
        if (np.diff(order) != 1).any():
            table = table.take(pa.array(order))
    return table


def _sorted_map(m: dict) -> dict:
    try:
        return dict(sorted(m.items(), key=lambda kv: kv[0]))
    except TypeError:  # keys Python cannot order (struct keys with null fields): keep as written
        return m


def _sort_columns(prefix: str, arr: pa.Array) -> list[tuple[str, pa.Array]]:
    if pa.types.is_struct(arr.type):
        return [c for i, child in enumerate(arr.flatten()) for c in _sort_columns(f"{prefix}.{i}", child)]
    return [(prefix, arr)]


def _row_order(kg: pa.Array, key_arr: pa.Array, ns_arr: pa.Array | None) -> np.ndarray:
    """Row order of the keyed table: key group, key, namespace (void first), as RocksDB orders them.

    Sorting makes tables independent of the order state was written in, so every backend and a
    native checkpoint give equal tables.
    """
    cols = [("kg", kg)] + _sort_columns("key", key_arr)
    if ns_arr is not None:
        cols += [("ns.valid", ns_arr.is_valid())] + _sort_columns("ns", ns_arr)
    names = [f"c{i}" for i in range(len(cols))]
    sort_table = pa.Table.from_arrays([c for _, c in cols], names=names)
    indices = pc.sort_indices(sort_table, sort_keys=[(nm, "ascending", "at_start") for nm in names])
    return indices.to_numpy()


def filter_key_groups(
    table: pa.Table, *, key_type: pa.DataType, max_parallelism: int, key_group_range: KeyGroupRange
) -> tuple[pa.Table, np.ndarray]:
    """The rows of `table` in `key_group_range` and their key groups (computed when the column is absent)."""
    if "key_group" in table.column_names:
        kg = table.column("key_group").to_numpy()
    else:
        kg = assign_key_groups(table.column("key"), max_parallelism, key_type)
    keep = (kg >= key_group_range.start) & (kg <= key_group_range.end)
    if not keep.all():
        table = table.filter(pa.array(keep))
        kg = kg[keep]
    return table, kg


def keyed_table_to_dicts(
    table: pa.Table,
    infos: Sequence[StateInfo],
    *,
    key_type: pa.DataType,
    max_parallelism: int,
    key_group_range: KeyGroupRange,
    trust_pickled: bool,
) -> tuple[dict[str, tuple[StateInfo, dict[Any, dict[Any, Any]]]], np.ndarray | None]:
    """Parse a keyed table into per-state ``{namespace: {key: value}}`` dicts, keeping only `key_group_range`.

    Returns the dicts (for states of `infos` present in the table) and the key groups of the kept
    rows in key order of the table (None when no row was kept).
    """
    table, kg = filter_key_groups(table, key_type=key_type, max_parallelism=max_parallelism, key_group_range=key_group_range)
    out: dict[str, tuple[StateInfo, dict[Any, dict[Any, Any]]]] = {}
    if table.num_rows == 0:
        return {info.name: (info, {}) for info in infos if info.name in table.column_names}, None
    key_col = table.column("key")
    if key_col.type != key_type:
        key_col = _cast(key_col, key_type, "key")
    keys = key_col.to_pylist()
    kconv = python_converter(key_type, hashable=True)
    if kconv is not None:
        keys = [kconv(k) for k in keys]
    nss: list[Any] | None = None
    if "namespace" in table.column_names:
        ns_col = table.column("namespace").combine_chunks()
        if ns_col.null_count < len(ns_col):
            starts = pc.struct_field(ns_col, "start").to_pylist()
            ends = pc.struct_field(ns_col, "end").to_pylist()
            valid = ns_col.is_valid().to_numpy(zero_copy_only=False)
            nss = [(s, e) if ok else None for s, e, ok in zip(starts, ends, valid)]
    for info in infos:
        if info.name not in table.column_names:
            continue
        col = table.column(info.name)
        if col.type != info.arrow_type:
            col = _cast(col, info.arrow_type, f"state {info.name!r}")
        if col.null_count:
            idx = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False))
            values = col.take(pa.array(idx)).to_pylist()
        else:
            idx = None
            values = col.to_pylist()
        if info.pickled and values:
            values = unpickle_values(info, values, trusted=trust_pickled)
        else:
            conv = python_converter(info.arrow_type)
            if conv is not None:
                values = [conv(v) for v in values]
        sel_keys = keys if idx is None else [keys[i] for i in idx]
        if nss is None:
            by_ns: dict[Any, dict[Any, Any]] = {None: dict(zip(sel_keys, values))}
        else:
            by_ns = {}
            sel_ns = nss if idx is None else [nss[i] for i in idx]
            for k, ns, v in zip(sel_keys, sel_ns, values):
                d = by_ns.get(ns)
                if d is None:
                    d = by_ns[ns] = {}
                d[k] = v
        out[info.name] = (info, by_ns)
    return out, kg


def _cast(col: Any, t: pa.DataType, what: str) -> Any:
    try:
        return col.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise StateTypeError(f"{what} column has type {col.type}, which cannot be read as {to_ddl(t)} ({exc}).") from None
