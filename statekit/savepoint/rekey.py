"""Re-keying an operator: every key of its keyed state and timers replaced through a mapping, key groups recomputed."""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import InvalidArgumentError, InvalidMergeError
from statekit.format.manifest import OperatorMetadata
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.key_mapping import (
    check_collisions,
    check_mapping,
    distinct_rows,
    hashable_key,
    remap_keys,
)
from statekit.savepoint.reader import Savepoint
from statekit.savepoint.transforms import carried_flink, require_hashed_key_groups, write_operator_states
from statekit.savepoint.writer import SavepointBuilder
from statekit.types import to_ddl

__all__ = ["MergeFunction", "merge_collisions", "rekey_operator", "remap_keys"]

#: ``merge(new_key, states)``: one dict of states from the colliding keys' dicts (one per old key, in
#: the savepoint's row order, i.e. by key group).
MergeFunction = Callable[[Any, list[dict[str, Any]]], dict[str, Any]]


def _duplicated(keys: pa.ChunkedArray) -> pa.Array:
    """True for every row whose key appears more than once."""
    try:
        counts = pc.value_counts(keys)
        repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
        return pc.is_in(keys, value_set=repeated)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # struct keys: count them in Python
        hashed = [hashable_key(k) for k in keys.to_pylist()]
        seen: dict = {}
        for h in hashed:
            seen[h] = seen.get(h, 0) + 1
        return pa.array([seen[h] > 1 for h in hashed], pa.bool_())


def merge_collisions(rekeyed: pa.Table, states: list[str], merge: MergeFunction | pa.Table, what: str) -> pa.Table:
    """Replace the rows of keys that several old keys became by one merged row each.

    `merge` is a `MergeFunction`, called once per new key with the colliding rows' states, or a
    table of already merged rows (``key`` and the states, e.g. computed by Spark SQL aggregates).
    A merge giving null, or null for a state some colliding row had set, raises
    `InvalidMergeError`, as does a merged value that does not fit the state's type.
    """
    dup = _duplicated(rekeyed.column("key"))
    if not pc.any(dup).as_py():
        return rekeyed
    collided, rest = rekeyed.filter(dup), rekeyed.filter(pc.invert(dup))
    groups: dict[Any, tuple[Any, list[dict[str, Any]]]] = {}
    for row in collided.to_pylist():
        groups.setdefault(hashable_key(row["key"]), (row["key"], []))[1].append({n: row[n] for n in states})
    given: dict[Any, dict[str, Any]] = {}
    if isinstance(merge, pa.Table):
        given = {hashable_key(r["key"]): r for r in merge.to_pylist()}
    merged = []
    for h, (key, rows) in groups.items():
        out = merge(key, [dict(r) for r in rows]) if callable(merge) else given.get(h)
        if out is None or not isinstance(out, dict):
            raise InvalidMergeError(
                f"{what}: merging the {len(rows)} old keys that become {key!r} gave {out!r}; the merge must "
                "return one dict of states {state: value}. Nothing was written."
            )
        for n in states:
            if out.get(n) is None and any(r[n] is not None for r in rows):
                raise InvalidMergeError(
                    f"{what}: merging the old keys that become {key!r} gave null for state {n!r}, which they had "
                    "set; a merge must keep every state (return its merged value). Nothing was written."
                )
        merged.append({"key": key, **{n: out.get(n) for n in states}})
    try:
        table = pa.Table.from_pylist(merged, schema=rekeyed.schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
        raise InvalidMergeError(
            f"{what}: a merged value does not fit its state's type ({e}); return values of the states' types "
            f"({', '.join(f'{f.name} {f.type}' for f in rekeyed.schema if f.name != 'key')}). Nothing was written."
        ) from None
    return pa.concat_tables([rest, table])


def rekey_operator(builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata, ident: OperatorIdentifier,
                   mapping: pa.Table, *, key_type: str | None = None, max_parallelism: int | None = None,
                   name: str | None = None, merge: MergeFunction | pa.Table | None = None) -> None:  # fmt: skip
    """Write operator `meta` of `source` with every key replaced through `mapping` (``key`` -> ``new_key``).

    Keyed state moves to the new keys' key groups; timers follow their keys (timers of two keys that
    become one are kept once each, as a timer service holds a set). Operator state is carried over.
    `key_type` (DDL) defaults to the mapping's ``new_key`` type. Keys that collide are refused unless
    `merge` is given (see `merge_collisions`; not for window operators).

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
    require_hashed_key_groups(meta, "a re-key")
    op = meta.identifier
    keyed = source.keyed_table(op)
    rekeyed = remap_keys(keyed, mapping, what)
    if merge is not None:
        if meta.namespace_type is not None:
            raise InvalidArgumentError(f"{what}: merge= applies to keyed state outside windows; this is a window operator.")
        rekeyed = merge_collisions(rekeyed, [s.name for s in meta.keyed_states], merge, what)
    elif meta.namespace_type is None:
        check_collisions(keyed, rekeyed, what)
    mp = max_parallelism or meta.max_parallelism
    new_type = key_type or to_ddl(mapping.schema.field("new_key").type)
    flink = carried_flink(source, meta)
    writer = builder.add_operator(
        ident, name=name or meta.name, parallelism=min(meta.parallelism, mp), max_parallelism=mp,
        key_type=new_type, keyed_states=meta.keyed_states, namespace_type=meta.namespace_type,
        flink=flink if flink is None or new_type == meta.key_type else flink.without_key(),
    )  # fmt: skip
    if rekeyed.num_rows:
        writer.write_keyed(rekeyed)
    timers = source.timers(op)
    if timers.num_rows:
        timers = remap_keys(timers.drop_columns(["key_group"]), mapping, what)
        writer.write_timers(distinct_rows(timers))
    write_operator_states(writer, source, meta)
