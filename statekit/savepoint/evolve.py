"""State schema evolution: change a keyed state's type or kind, add a state with a default, drop a state (the manifest follows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import InvalidArgumentError, StateTypeError, UnknownStateError
from statekit.format.keyed import castable, same_type
from statekit.format.manifest import OperatorMetadata
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.reader import Savepoint
from statekit.savepoint.writer import OperatorWriter, SavepointBuilder
from statekit.state.descriptors import StateInfo
from statekit.types import parse_ddl, to_ddl

__all__ = ["StateTransform", "apply_python_transforms", "check_result_type", "evolve_states", "write_evolved"]

#: Kinds a transform may give a state (reducing/aggregating states keep their kind: they need functions).
KINDS = ("value", "list", "map")


@dataclass(frozen=True)
class StateTransform:
    """One step of ``with_state_transform``: `state` gets `value` (None drops it) of DDL type `new_type`."""

    state: str
    value: Any  # an engine's expression, a Python function of the row dict, or None to drop the state
    new_type: str | None = None
    kind: str | None = None

    @property
    def drops(self) -> bool:
        return self.value is None


def _kind_of(ddl: str) -> str:
    t = parse_ddl(ddl)
    return "list" if pa.types.is_list(t) else "map" if pa.types.is_map(t) else "value"


def evolve_states(meta: OperatorMetadata, transforms: list[StateTransform]) -> tuple[StateInfo, ...]:
    """The operator's keyed states after `transforms` (in order), checked: a dropped or retyped state must
    exist, an added one needs its type, kinds are value/list/map and agree with the type."""
    what = f"operator {meta.display_name!r}"
    if meta.key_type is None:
        raise InvalidArgumentError(f"{what} has no keyed state; with_state_transform changes keyed state.")
    states: dict[str, StateInfo] = {s.name: s for s in meta.keyed_states}
    for t in transforms:
        old = states.get(t.state)
        if t.drops:
            if old is None:
                raise UnknownStateError(f"{what} has no state {t.state!r} to drop; its states: {sorted(states)}.")
            del states[t.state]
            continue
        ddl = t.new_type or (old.type if old is not None else None)
        if ddl is None:
            raise InvalidArgumentError(
                f"state {t.state!r} is new in {what}: pass new_type= (a DDL type such as 'bigint' or 'array<string>')."
            )
        ddl = to_ddl(parse_ddl(ddl))  # validates and normalises the DDL
        kind = t.kind or (old.kind if old is not None and t.new_type is None else _kind_of(ddl))
        if old is not None and t.kind is None and old.kind in ("reducing", "aggregating") and t.new_type is not None:
            kind = old.kind  # a reducing/aggregating state keeps its kind when only its type changes
        if kind not in KINDS + ("reducing", "aggregating") or (kind in KINDS and kind != _kind_of(ddl)):
            raise StateTypeError(
                f"state {t.state!r}: kind {kind!r} does not fit type {ddl} (value: any non-list/map type, "
                "list: array<T>, map: map<K,V>)."
            )
        if old is not None and old.pickled:
            raise StateTypeError(f"state {t.state!r} holds pickled values; statekit does not transform pickled state.")
        states[t.state] = StateInfo(t.state, kind, ddl, False, old.ttl_ms if old is not None else None)  # type: ignore[arg-type]
    return tuple(states.values())


def check_result_type(state: str, produced: pa.DataType, ddl: str) -> None:
    """Refuse a transform whose values are not of (or safely castable to) the declared type."""
    target = parse_ddl(ddl)
    if not same_type(produced, target) and not castable(produced, target):
        raise StateTypeError(
            f"the transform of state {state!r} produces {to_ddl(produced) if not pa.types.is_null(produced) else 'null'} "
            f"values, but the state is declared {ddl}; cast in the transform or declare new_type={to_ddl(produced)!r}. "
            "Nothing was written."
        )


def apply_python_transforms(table: pa.Table, transforms: list[StateTransform], infos: tuple[StateInfo, ...]) -> pa.Table:
    """Run Python transforms (functions of the row dict: key, [namespace], states) over `table`, in order."""
    types = {s.name: s.type for s in infos}
    for t in transforms:
        if t.drops:
            table = table.drop_columns([t.state])
            continue
        fn: Callable[[dict], Any] = t.value
        ddl = types.get(t.state, t.new_type)
        values = [fn(row) for row in table.to_pylist()]
        try:
            column = pa.array(values, parse_ddl(ddl))  # type: ignore[arg-type]
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            raise StateTypeError(
                f"the transform of state {t.state!r} returned a value that is not {ddl} ({e}). Nothing was written."
            ) from None
        if t.state in table.column_names:
            table = table.set_column(table.column_names.index(t.state), t.state, column)
        else:
            table = table.append_column(t.state, column)
    return table


def add_evolved_operator(builder: SavepointBuilder, meta: OperatorMetadata, ident: OperatorIdentifier,
                         infos: tuple[StateInfo, ...], *, max_parallelism: int | None = None,
                         name: str | None = None) -> OperatorWriter:  # fmt: skip
    """The writer of operator `meta` re-declared with the keyed states `infos` (both engines' evolve)."""
    mp = max_parallelism or meta.max_parallelism
    from statekit.savepoint.transforms import require_hashed_key_groups

    require_hashed_key_groups(meta, "a state transform (it writes the keyed table anew)")
    return builder.add_operator(
        ident, name=name or meta.name, parallelism=min(meta.parallelism, mp), max_parallelism=mp,
        key_type=meta.key_type, keyed_states=infos, namespace_type=meta.namespace_type,
    )  # fmt: skip


def write_evolved(builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata, ident: OperatorIdentifier,
                  keyed: pa.Table, infos: tuple[StateInfo, ...], *, max_parallelism: int | None = None,
                  name: str | None = None) -> None:  # fmt: skip
    """Write operator `meta` with the evolved keyed table `keyed` (key, [namespace], the states of `infos`);
    timers and operator state are carried over. Rows left with no state set are dropped."""
    writer = add_evolved_operator(builder, meta, ident, infos, max_parallelism=max_parallelism, name=name)
    names = [s.name for s in infos]
    keep = ["key", *(["namespace"] if "namespace" in keyed.column_names else []), *names]
    keyed = keyed.select(keep)
    if names and keyed.num_rows:
        mask = None
        for n in names:
            valid = pc.is_valid(keyed.column(n))
            mask = valid if mask is None else pc.or_(mask, valid)
        keyed = keyed.filter(mask)
    if keyed.num_rows and names:
        writer.write_keyed(keyed)
    op = meta.identifier
    timers = source.timers(op)
    if timers.num_rows:
        writer.write_timers(timers.drop_columns(["key_group"]))
    for info in meta.operator_states:
        if info.redistribution == "broadcast":
            writer.write_broadcast_state(info, source.broadcast_state(op, info.name))
        else:
            writer.write_list_state(info, source.operator_state_lists(op, info.name)[1])
