"""Re-keying an operator: every key of its keyed state and timers replaced through a mapping, key groups recomputed."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import DuplicateKeyError, InvalidArgumentError, NullKeyError
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.keyed import first_duplicate
from statekit.savepoint.manifest import OperatorMetadata
from statekit.savepoint.reader import Savepoint
from statekit.savepoint.writer import SavepointBuilder
from statekit.types import to_ddl

__all__ = ["rekey_operator", "remap_keys"]


def _hashable(value: Any) -> Any:
    return tuple(value.values()) if isinstance(value, dict) else value


def _positions(keys: pa.ChunkedArray | pa.Array, mapping_keys: pa.Array) -> pa.Array:
    """For each key its row in the mapping (null when absent)."""
    try:
        return pc.index_in(keys, value_set=mapping_keys)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # e.g. struct keys: look them up in Python
        where = {_hashable(k): i for i, k in enumerate(mapping_keys.to_pylist())}
        return pa.array([where.get(_hashable(k)) for k in keys.to_pylist()], pa.int64())


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


def _check_collisions(keyed: pa.Table, rekeyed: pa.Table, what: str) -> None:
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


def rekey_operator(builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata, ident: OperatorIdentifier,
                   mapping: pa.Table, *, key_type: str | None = None, max_parallelism: int | None = None,
                   name: str | None = None) -> None:  # fmt: skip
    """Write operator `meta` of `source` with every key replaced through `mapping` (``key`` -> ``new_key``).

    Keyed state moves to the new keys' key groups; timers follow their keys (timers of two keys that
    become one are kept once each, as a timer service holds a set). Operator state is carried over.
    `key_type` (DDL) defaults to the mapping's ``new_key`` type.

    Raises
    ------
    InvalidArgumentError
        A key has no new key, or the operator has no keyed state.
    DuplicateKeyError
        Two keys with state become one key, or the mapping lists a key twice.
    NullKeyError
        A key maps to null.
    """
    what = f"rekeying operator {meta.display_name!r}"
    if meta.key_type is None:
        raise InvalidArgumentError(f"{what}: it has no keyed state, so it has no keys.")
    check_mapping(mapping, what)
    op = meta.identifier
    keyed = source.keyed_table(op)
    rekeyed = remap_keys(keyed, mapping, what)
    if meta.namespace_type is None:
        _check_collisions(keyed, rekeyed, what)
    mp = max_parallelism or meta.max_parallelism
    new_type = key_type or to_ddl(mapping.schema.field("new_key").type)
    writer = builder.add_operator(
        ident, name=name or meta.name, parallelism=min(meta.parallelism, mp), max_parallelism=mp,
        key_type=new_type, keyed_states=meta.keyed_states, namespace_type=meta.namespace_type,
        flink=meta.flink if meta.flink is None or new_type == meta.key_type else meta.flink.without_key(),
    )  # fmt: skip
    if rekeyed.num_rows:
        writer.write_keyed(rekeyed)
    timers = source.timers(op)
    if timers.num_rows:
        timers = remap_keys(timers.drop_columns(["key_group"]), mapping, what)
        writer.write_timers(_distinct_rows(timers))
    for info in meta.operator_states:
        if info.redistribution == "broadcast":
            writer.write_broadcast_state(info, source.broadcast_state(op, info.name))
        else:
            writer.write_list_state(info, source.operator_state_lists(op, info.name)[1])


def _distinct_rows(table: pa.Table) -> pa.Table:
    seen: set = set()
    keep = []
    for i, row in enumerate(table.to_pylist()):
        ident = tuple(_hashable(v) for v in row.values())
        if ident not in seen:
            seen.add(ident)
            keep.append(i)
    return table if len(keep) == table.num_rows else table.take(pa.array(keep, pa.int64()))
