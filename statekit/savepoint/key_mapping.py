"""Key mappings applied to Arrow tables: a ``key``, ``new_key`` table checked (`check_mapping`), applied to a keyed or
timer table (`remap_keys`), and its outcome checked (`check_collisions`, `distinct_rows`).

Shared by the re-key of statekit savepoints (`statekit.savepoint.rekey`), of Flink savepoints written directly
(`statekit.savepoint.flink_out`) and the repair edit (`statekit.savepoint.patch`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import DuplicateKeyError, InvalidArgumentError, NullKeyError
from statekit.format.keyed import first_duplicate

__all__ = ["check_collisions", "check_mapping", "distinct_rows", "hashable_key", "remap_keys"]


def hashable_key(value: Any) -> Any:
    """`value` as a dict key: a struct key (a dict) as the tuple of its fields."""
    return tuple(value.values()) if isinstance(value, dict) else value


def _positions(keys: pa.ChunkedArray | pa.Array, mapping_keys: pa.Array) -> pa.Array:
    """For each key its row in the mapping (null when absent)."""
    try:
        return pc.index_in(keys, value_set=mapping_keys)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # e.g. struct keys: look them up in Python
        where = {hashable_key(k): i for i, k in enumerate(mapping_keys.to_pylist())}
        return pa.array([where.get(hashable_key(k)) for k in keys.to_pylist()], pa.int64())


def check_mapping(mapping: pa.Table, what: str) -> None:
    """A key mapping has columns ``key`` and ``new_key``, each old key once, and no null new key."""
    if mapping.column_names[:2] != ["key", "new_key"]:
        raise InvalidArgumentError(f"{what}: the key mapping needs columns key, new_key; got {mapping.column_names}.")
    if first_duplicate(mapping, ["key"]) is not None:
        raise DuplicateKeyError(f"{what}: the key mapping lists an old key more than once; give each key one new key.")
    nulls = pc.is_null(mapping.column("new_key"))
    if pc.any(nulls).as_py():
        old = mapping.filter(nulls).column("key")[0].as_py()
        raise NullKeyError(f"{what}: key {old!r} maps to a null key; keys are never null. Map it to a value.")


def remap_keys(table: pa.Table, mapping: pa.Table, what: str) -> pa.Table:
    """`table` with its ``key`` column replaced by the mapping's ``new_key`` (every key must be mapped)."""
    if not table.num_rows:
        return table.set_column(table.column_names.index("key"), "key", mapping.column("new_key").slice(0, 0))
    keys = mapping.column("key").combine_chunks()
    pos = _positions(table.column("key"), keys)
    missing = pc.is_null(pos)
    if pc.any(missing).as_py():
        count = pc.sum(missing.cast(pa.int64())).as_py()
        example = table.filter(missing).column("key")[0].as_py()
        raise InvalidArgumentError(
            f"{what}: the key mapping has no new key for {count} key(s), e.g. {example!r}; map every key."
        )
    new = mapping.column("new_key").combine_chunks().take(pos)
    return table.set_column(table.column_names.index("key"), "key", new)


def check_collisions(keyed: pa.Table, rekeyed: pa.Table, what: str) -> None:
    """Name two old keys that became one (outside windows; in windows the builder's check applies)."""
    index = first_duplicate(rekeyed, ["key"])
    if index is None:
        return
    new_keys = rekeyed.column("key").to_pylist()  # only on the error path
    after = new_keys[index]
    before = [keyed.column("key")[i].as_py() for i in (new_keys.index(after), index)]
    raise DuplicateKeyError(
        f"{what}: keys {before[0]!r} and {before[1]!r} both become {after!r}, and a key holds one "
        "row of state. Merge their state first (read_keyed_state, aggregate, bootstrap) or map them apart."
    )


def distinct_rows(table: pa.Table) -> pa.Table:
    """`table` without repeated rows (the first of each kept, in order): timers of keys that merged, once each."""
    seen: set = set()
    keep = []
    for i, row in enumerate(table.to_pylist()):
        ident = tuple(hashable_key(v) for v in row.values())
        if ident not in seen:
            seen.add(ident)
            keep.append(i)
    return table if len(keep) == table.num_rows else table.take(pa.array(keep, pa.int64()))
