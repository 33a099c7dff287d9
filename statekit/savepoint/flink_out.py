"""Any savepoint (statekit's or Flink's) written as a canonical Flink savepoint: serializers carried or mapped from DDL.

Boundary: decides *what* each operator becomes in Flink - its key and state serializers (the
snapshots read from a Flink savepoint, reused byte for byte; otherwise statekit DDL mapped by
`statekit.format.flink.serializers_out`, with `FlinkTuple`/`FlinkPojo` hints per state), its
placement (uid hash, parallelism, max parallelism, key groups) - and hands the tables to
`statekit.format.flink.writer`, which writes the bytes. Used by `write_flink`, `SavepointWriter
.write(format="flink")` and `statekit convert --to flink`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError, ParallelismError, StateTypeError
from statekit.format.arrow_memory import empty_table, from_numpy
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.serializers_out import (
    FlinkPojo,
    FlinkTuple,
    Hint,
    flink_type,
    keyed_meta_info,
    list_of,
    map_of,
    operator_meta_info,
    timer_meta_info,
)
from statekit.format.flink.versions import FlinkVersion
from statekit.format.flink.writer import (
    KeyedLayoutOut,
    KeyedStateOut,
    OperatorData,
    OperatorStateOut,
    write_flink_savepoint,
)
from statekit.format.manifest import OperatorMetadata
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import assign_key_groups
from statekit.savepoint.kinds import is_flink_source
from statekit.savepoint.reader import Savepoint
from statekit.types import parse_ddl

if TYPE_CHECKING:
    pass

#: per operator (uid or uid hash) and state name, how a struct is written: `FlinkTuple` or `FlinkPojo`
TypeHints = Mapping[str, Mapping[str, Hint]]
_KEY = "<key>"  # the hint entry of an operator's key type


@dataclass(frozen=True)
class Carried:
    """Serializers of one operator as read from a Flink savepoint (exact snapshot and meta-info bytes)."""

    key: FlinkType | None
    states: dict[str, Any]  # name -> StateMeta (keyed)
    timers: tuple[Any, ...]  # StateMeta of timer queues
    namespace: FlinkType | None
    operator_states: dict[str, Any]  # name -> StateMeta (operator / broadcast)


def carried_serializers(sp: Savepoint, meta: OperatorMetadata) -> Carried | None:
    """The serializers a Flink savepoint holds for `meta`'s operator, or None for statekit savepoints."""
    if not is_flink_source(sp):
        return _from_manifest(meta) if meta.flink is not None else None
    fop = sp.flink.metadata.operator(meta.uid_hash)
    if fop is None:
        return None
    lay = sp.flink.layout(fop)
    ops = sp.flink.operator_states(fop)
    if lay is None:
        return Carried(None, {}, (), None, ops)
    return Carried(lay.key_type, {s.name: s for s in lay.states}, lay.timers, lay.namespace_type, ops)


def _from_manifest(meta: OperatorMetadata) -> Carried:
    """Serializers a statekit savepoint carries from the Flink savepoint it was converted from (manifest `flink`)."""
    from statekit.format.flink.binary import DataInput
    from statekit.format.flink.proxy import read_meta_info
    from statekit.format.flink.serializers import read_versioned

    fl = meta.flink
    assert fl is not None
    where = f"operator {meta.display_name!r} (carried Flink serializers)"
    key = read_versioned(DataInput(fl.key, where), "the key serializer") if fl.key is not None else None
    states = {n: read_meta_info(DataInput(b, where)) for n, b in fl.states}
    if key is not None and key.kind in ("pojo", "row", "binary") and meta.key_type is not None \
            and not meta.stored_key_groups and not _carried_pyflink(key, states):
        raise StateTypeError(
            f"operator {meta.display_name!r} has {key.serializer} keys, whose key groups come from the key class's "
            "hashCode(); after a conversion to statekit's format statekit cannot place them as Flink does. Write the "
            "Flink savepoint straight from the Flink one (write_flink on it, with uids=/max_parallelism=/rekey=)."
        )
    timers = tuple(read_meta_info(DataInput(b, where)) for b in fl.timers)
    ops = {n: read_meta_info(DataInput(b, where)) for n, b in fl.operator_states}
    ns = None
    for s in states.values():
        t = s.serializers.get("NAMESPACE_SERIALIZER")
        if t is not None and t.kind == "window":
            ns = t
    return Carried(key, states, timers, ns, ops)


def _carried_pyflink(key: FlinkType | None, states: Mapping[str, Any]) -> bool:
    """Whether carried serializers are a PyFlink operator's (one-field Row key, ``python-state-`` states)."""
    from statekit.format.flink import pyflink_out  # here: PyFlink's coders need the reader's modules
    return (key is not None and key.kind == "row" and len(key.children) == 1
            and any(n.startswith(pyflink_out.PREFIX) for n in states))


def pyflink_types(sp: Savepoint, meta: OperatorMetadata, carried: Carried | None,
                  declared: Mapping[str, str] | None) -> dict[str, str] | None:
    """The PyFlink types of `meta`'s states when it is written as a PyFlink operator (declared for it, read from
    a PyFlink savepoint, or carried from one through statekit's format), else None."""
    if declared is not None:
        return dict(declared)
    if meta.key_type is None:
        return None
    if is_flink_source(sp):
        return sp.pyflink_types(meta.identifier) if sp.is_pyflink(meta.identifier) else None
    if carried is not None and _carried_pyflink(carried.key, carried.states):
        return {}
    return None


def pyflink_keyed(meta: OperatorMetadata, carried: Carried | None, types: Mapping[str, str], keyed: pa.Table,
                  timers: pa.Table, max_parallelism: int) -> tuple[KeyedLayoutOut, pa.Table, pa.Table]:
    """Layout, keyed table and timers of a PyFlink operator (see `statekit.format.flink.pyflink_out`): key groups
    of the Row-wrapped key, keys wrapped, states coded (or passed through when stored and undeclared)."""
    from statekit.format.flink import pyflink_out
    from statekit.format.flink.keyed import state_ddl
    from statekit.format.flink.pyflink import parse_type

    op = meta.display_name
    assert meta.key_type is not None
    if meta.namespace_type is not None:
        raise StateTypeError(f"operator {op!r}: statekit writes PyFlink state without window namespaces only.")
    unknown = set(types) - {s.name for s in meta.keyed_states}
    if unknown:
        raise InvalidArgumentError(f"PyFlink types name states {sorted(unknown)} that operator {op!r} does not have.")
    key = carried.key if carried is not None and carried.key is not None else pyflink_out.key_serializer(meta.key_type)
    kg = pa.array(pyflink_out.key_groups(keyed.column("key"), meta.key_type, max_parallelism))
    cols: dict[str, Any] = {"key_group": kg, "key": pyflink_out.wrap_keys(keyed.column("key"))}
    states = []
    for s in meta.keyed_states:
        what = f"PyFlink state {s.name!r} of operator {op!r}"
        name = pyflink_out.stored_name(s.name)
        got = carried.states.get(name) if carried is not None else None
        spec = types.get(s.name)
        kind = "map" if s.kind == "map" else "list"
        if spec is None and got is not None and s.type == state_ddl(got):  # still the stored coder bytes
            col = keyed.column(s.name)
        else:
            if spec is None and got is not None and "struct<" in s.type:
                raise StateTypeError(
                    f"{what} was read from a PyFlink savepoint as {s.type}, which PyFlink codes as a ROW or a TUPLE "
                    f"(different bytes); declare which: pyflink={{{op!r}: {{{s.name!r}: 'ROW(...)' or 'TUPLE(...)'}}}}."
                )
            t = parse_type(spec) if spec is not None else pyflink_out.infer_type(s.kind, s.type, what)
            if (t.kind == "map") != (kind == "map") or (t.kind == "list") != (s.kind == "list"):
                raise StateTypeError(f"{what} is a {s.kind} state but is declared {spec!r}.")
            pyflink_out.check_fits(s.type, t, what)
            col = pyflink_out.encode_column(keyed.column(s.name), t, what)
        value = pyflink_out.MAP_STATE if kind == "map" else pyflink_out.LIST_STATE
        raw = got.raw if got is not None else keyed_meta_info(name, kind, value)
        states.append(KeyedStateOut(name, kind, value, raw, name))
        cols[name] = col
    if timers.num_rows:
        timers = timers.set_column(timers.schema.get_field_index("key_group"), "key_group",
                                   pa.array(pyflink_out.key_groups(timers.column("key"), meta.key_type, max_parallelism)))
        timers = timers.set_column(timers.schema.get_field_index("key"), "key",
                                   pyflink_out.wrap_keys(timers.column("key")))
    if carried is not None and carried.timers:
        timer_meta = tuple((t.timer_domain, t.raw) for t in carried.timers)
    else:  # PyFlink registers both queues
        timer_meta = tuple((d, timer_meta_info(d, key)) for d in ("processing", "event"))
    return KeyedLayoutOut(key, tuple(states), timer_meta, max_parallelism), pa.table(cols), timers


def _hint(hints: TypeHints | None, meta: OperatorMetadata, name: str) -> Hint | None:
    if not hints:
        return None
    for k in (meta.uid, meta.uid_hash, meta.name):
        if k is not None and k in hints:
            return hints[k].get(name)
    return None


def _value_serializer(kind: str, ddl: str, hint: Hint | None, what: str) -> FlinkType:
    """The VALUE_SERIALIZER of a keyed state from its column type."""
    t = parse_ddl(ddl)
    if kind == "list":
        if not pa.types.is_list(t):
            raise StateTypeError(f"{what}: a list state's column must be an array, not {ddl}.")
        return list_of(flink_type(t.value_type, hint, what=what))
    if kind == "map":
        if not pa.types.is_map(t):
            raise StateTypeError(f"{what}: a map state's column must be a map, not {ddl}.")
        return map_of(flink_type(t.key_type, what=what), flink_type(t.item_type, hint, what=what))
    return flink_type(t, hint, what=what)


def keyed_layout(meta: OperatorMetadata, carried: Carried | None, hints: TypeHints | None, *,
                 max_parallelism: int, has_timers: bool) -> KeyedLayoutOut:
    """The keyed serializers of `meta`: carried ones where the state came from Flink, DDL-mapped otherwise."""
    assert meta.key_type is not None
    op = meta.display_name
    if carried is not None and carried.key is not None:
        key = carried.key
    else:
        hint = _hint(hints, meta, _KEY) or FlinkTuple()
        if isinstance(hint, FlinkPojo):
            raise StateTypeError(
                f"operator {op!r}: a POJO key's key group comes from its class's hashCode(), which statekit cannot "
                "compute; write struct keys as Flink Tuples (the default), whose hash statekit matches."
            )
        key = flink_type(meta.key_type, hint if meta.key_type.startswith("struct") else None, what=f"operator {op!r} key")
    namespace = None
    if meta.namespace_type is not None:
        if carried is not None and carried.namespace is not None:
            namespace = carried.namespace
        else:
            raise StateTypeError(
                f"operator {op!r} keeps window namespaces ({meta.namespace_type}) that were not read from Flink; "
                "statekit writes window state to Flink only when it came from a Flink savepoint."
            )
    states = []
    for s in meta.keyed_states:
        what = f"state {s.name!r} of operator {op!r}"
        got = carried.states.get(s.name) if carried is not None else None
        if got is not None:
            states.append(KeyedStateOut(s.name, got.keyed_kind or s.kind, got.value_type, got.raw, s.name))
            continue
        if s.pickled:
            raise StateTypeError(f"{what} holds pickled Python values, which have no Flink serializer; declare a type.")
        if s.ttl_ms is not None:
            raise StateTypeError(f"{what} has a TTL; statekit does not write Flink's TTL serializer. Drop the TTL first.")
        value = _value_serializer(s.kind, s.type, _hint(hints, meta, s.name), what)
        states.append(KeyedStateOut(s.name, s.kind, value, keyed_meta_info(s.name, s.kind, value, namespace), s.name))
    if carried is not None and carried.timers:
        timers = tuple((t.timer_domain, t.raw) for t in carried.timers)
    elif has_timers:
        timers = tuple((d, timer_meta_info(d, key, namespace)) for d in ("processing", "event"))
    else:
        timers = ()
    return KeyedLayoutOut(key, tuple(states), timers, max_parallelism, namespace)


def operator_state_layouts(meta: OperatorMetadata, carried: Carried | None,
                           hints: TypeHints | None) -> list[OperatorStateOut]:
    """The serializers of `meta`'s operator states (carried or DDL-mapped), without their data."""
    out = []
    for info in meta.operator_states:
        what = f"operator state {info.name!r} of operator {meta.display_name!r}"
        got = carried.operator_states.get(info.name) if carried is not None else None
        if info.pickled and got is None:
            raise StateTypeError(f"{what} holds pickled Python values, which have no Flink serializer; declare a type.")
        if info.redistribution == "broadcast":
            if got is not None:
                value, key, raw = got.value_type, got.serializers["KEY_SERIALIZER"], got.raw
            else:
                assert info.key_type is not None
                value = flink_type(info.type, _hint(hints, meta, info.name), what=what)
                key = flink_type(info.key_type, what=what)
                raw = operator_meta_info(info.name, "broadcast", value, key)
            out.append(OperatorStateOut(info.name, "broadcast", value, raw, key=key))
            continue
        if got is not None:
            value, raw = got.value_type, got.raw
        else:
            value = flink_type(info.type, _hint(hints, meta, info.name), what=what)
            raw = operator_meta_info(info.name, info.redistribution, value)
        out.append(OperatorStateOut(info.name, info.redistribution, value, raw))
    return out


def with_operator_data(sp: Savepoint, meta: OperatorMetadata, layouts: list[OperatorStateOut]) -> list[OperatorStateOut]:
    """`layouts` with their elements (list/union, per subtask) and entries (broadcast) read from `sp`."""
    out = []
    for s in layouts:
        info = meta.operator_state(s.name)
        if s.mode == "broadcast":
            out.append(replace(s, entries=sp.broadcast_state(meta.identifier, s.name)))
            continue
        _, lists = sp.operator_state_lists(meta.identifier, s.name)
        vtype = parse_ddl(info.type)
        arrays = [items if isinstance(items, pa.Array) else pa.array(items, vtype) for items in lists]
        out.append(replace(s, per_subtask=arrays))
    return out


def rehash(table: pa.Table, key_type: str, max_parallelism: int, key_layout: KeyedLayoutOut) -> pa.Table:
    """`table` with its ``key_group`` column recomputed for `max_parallelism` (Flink's hash of the key)."""
    if key_layout.key.kind == "avro":  # Avro's own record hash, as the key class computes it
        from statekit.format.flink.avro_out import key_groups  # here: only Avro keys need it

        kg = key_groups(table.column("key"), key_layout.key.avro, key_layout.key.type_class, max_parallelism)
        return table.set_column(table.schema.get_field_index("key_group"), "key_group", from_numpy(kg))
    if key_layout.key.form == "row":  # a Flink SQL key: BinaryRowData.hashCode()
        from statekit.format.flink.sqlwrite import key_groups as sql_key_groups  # here: only SQL keys need it

        kg = sql_key_groups(table.column("key"), key_layout.key, max_parallelism)
        return table.set_column(table.schema.get_field_index("key_group"), "key_group", from_numpy(kg))
    if key_layout.key.kind in ("pojo", "row", "binary"):
        raise StateTypeError(
            f"keys of serializer {key_layout.key.serializer} hash with the key class's own hashCode(), which statekit "
            "cannot compute; max parallelism and keys of such operators cannot be changed offline."
        )
    kg = assign_key_groups(table.column("key"), max_parallelism, key_type)
    return table.set_column(table.schema.get_field_index("key_group"), "key_group", from_numpy(kg.astype(np.int32)))


def _rekeyed(sp: Savepoint, meta: OperatorMetadata, new_key: Any, key_type: str | None,
             keyed: pa.Table, timers: pa.Table) -> tuple[pa.Table, pa.Table, str]:
    """Keyed table and timers with every key replaced through `new_key` (a function or a key/new_key table)."""
    from statekit.savepoint.key_mapping import check_collisions, check_mapping, distinct_rows, remap_keys
    from statekit.types import to_arrow_array, to_ddl

    what = f"rekeying operator {meta.display_name!r}"
    if isinstance(new_key, pa.Table):
        mapping = new_key
    else:
        olds = pa.concat_arrays([keyed.column("key").combine_chunks(), timers.column("key").combine_chunks()]).unique()
        news = [new_key(k) for k in olds.to_pylist()]
        new_arr = to_arrow_array(news, key_type, what="new key") if key_type else pa.array(news)
        mapping = pa.table({"key": olds, "new_key": new_arr})
    check_mapping(mapping, what)
    out = remap_keys(keyed, mapping, what)
    check_collisions(keyed, out, what)
    t = remap_keys(timers, mapping, what) if timers.num_rows else timers.cast(
        timers.schema.set(timers.schema.get_field_index("key"), pa.field("key", mapping.schema.field("new_key").type)))
    return out, distinct_rows(t) if t.num_rows else t, key_type or to_ddl(mapping.schema.field("new_key").type)


def operator_data(sp: Savepoint, meta: OperatorMetadata, *, hints: TypeHints | None = None,
                  uid: str | None = None, uid_hash: str | None = None, name: str | None = None,
                  max_parallelism: int | None = None, parallelism: int | None = None,
                  new_key: Any = None, new_key_type: str | None = None,
                  pyflink: Mapping[str, str] | None = None, stream: bool = False,
                  edit: Any = None) -> OperatorData:
    """What to write for operator `meta` of `sp`, optionally under another identity / max parallelism / keys
    (`pyflink`: the PyFlink types of its states, to write it as a PyFlink job's operator). With `stream`, keyed
    state copied unchanged from a statekit savepoint is handed over as `KeyedFiles` (read file by file by the
    writer) instead of a table. `edit` (``(keyed, timers) -> (keyed, timers)``, tables with their ``key_group``
    column) changes the state on the way (`statekit.savepoint.flink_repair`)."""
    carried = carried_serializers(sp, meta)
    py = pyflink_types(sp, meta, carried, pyflink)
    maxp = max_parallelism or meta.max_parallelism
    par = parallelism or meta.parallelism
    if maxp < par:
        raise ParallelismError(
            f"operator {meta.display_name!r} runs at parallelism {par}, above max parallelism {maxp}; Flink refuses "
            f"such a job. Choose a max parallelism of at least {par}."
        )
    uid = uid if uid is not None else meta.uid
    uid_hash = uid_hash or meta.uid_hash
    data = OperatorData(uid, uid_hash, name or meta.name or uid or uid_hash, par, maxp)
    if meta.key_type is not None:
        timers = sp.timers(meta.identifier)
        files = None
        # statekit's format keeps struct keys in its own key groups: Avro keys go back to Avro's record hash
        avro_key = carried is not None and carried.key is not None and carried.key.kind == "avro" and not is_flink_source(sp)
        if stream and new_key is None and py is None and maxp == meta.max_parallelism and not avro_key and edit is None:
            files = sp.keyed_stream(meta.identifier)  # the writer reads it file by file where it can
        keyed = sp.keyed_table(meta.identifier, with_key_group=True) if files is None else empty_table(pa.schema([]))
        key_type = meta.key_type
        if edit is not None:
            keyed, timers = edit(keyed, timers)
        if new_key is not None:
            keyed, timers, new_type = _rekeyed(sp, meta, new_key, new_key_type, keyed, timers)
            if carried is not None and new_type != key_type:  # the old key serializer no longer applies
                carried = replace(carried, key=None, timers=())
            meta = replace(meta, key_type=new_type)
            key_type = new_type
        has_timers = timers.num_rows > 0
        if py is not None:
            data.layout, keyed, timers = pyflink_keyed(meta, carried, py, keyed, timers, maxp)
            data.keyed, data.timers = keyed, timers if has_timers else None
            data.operator_states = with_operator_data(sp, meta, operator_state_layouts(meta, carried, hints))
            return data
        data.layout = keyed_layout(meta, carried, hints, max_parallelism=maxp, has_timers=has_timers)
        if maxp != meta.max_parallelism or new_key is not None or avro_key:
            keyed = rehash(keyed, key_type, maxp, data.layout)
            if has_timers:
                timers = rehash(timers, key_type, maxp, data.layout)
        data.keyed, data.timers = keyed if files is None else files, timers if has_timers else None
    data.operator_states = with_operator_data(sp, meta, operator_state_layouts(meta, carried, hints))
    return data


def write_flink(source: str | os.PathLike[str] | Savepoint, target: str | os.PathLike[str], *,
                types: TypeHints | None = None, uids: Mapping[str, str] | None = None,
                remove: Sequence[str] = (), max_parallelism: int | Mapping[str, int] | None = None,
                rekey: Mapping[str, Any] | None = None, key_types: Mapping[str, str] | None = None,
                job_max_parallelism: int | None = None, checkpoint_id: int | None = None,
                pyflink: Mapping[str, Mapping[str, str]] | None = None,
                flink_version: str | FlinkVersion | None = None,
                coordinators: Mapping[str, bytes] | None = None) -> Path:
    """Write savepoint `source` (statekit or Flink) as a canonical Flink savepoint at `target`.

    Serializers read from a Flink savepoint are reused unchanged; other state maps its DDL types
    to Flink's serializers (struct -> Row, struct keys -> Tuple, unless `types` names a
    `FlinkTuple`/`FlinkPojo` as ``{operator uid: {state name or "<key>": hint}}``). On the way:
    `uids` renames operators (``{old uid or uid hash: new uid}``), `remove` drops operators,
    `max_parallelism` sets it for every operator (an int: stateless ones too, as a job that sets it
    checks them all) or per operator (a mapping), re-hashing keyed state; `rekey` replaces the keys
    of an operator through a function of the old key or a ``key``/``new_key`` table (`key_types`
    gives the new key's DDL type). `job_max_parallelism` is the max parallelism the restoring job
    declares (``env.setMaxParallelism``): Flink then requires it of every operator in the savepoint,
    so a savepoint that does not match is refused (`ParallelismError`) instead of written. `pyflink`
    names operators to write as a PyFlink job keeps them (``{uid: {state: PyFlink type}}``, types as
    `statekit.format.flink.pyflink.parse_type` reads them, ``{}`` to infer every one from its column);
    operators read from a PyFlink savepoint are written that way anyway. `flink_version` ("1.20", "2.0",
    "2.3", ...) is the Flink the savepoint is for (its `_metadata` layout); by default the version the state
    came from (`Savepoint.flink_version`), else the newest. `coordinators` are the operator coordinators' states
    to carry (a new-style source's split enumerator: Kafka's partitions) by the uid hash the operator has in
    `source`; by default a Flink source's own (`coordinator_states`): without them a restored source would start
    its enumerator afresh and read its input again. The source is never modified; `target` must not exist.
    """
    from statekit.keygroups import check_max_parallelism

    sp = source if isinstance(source, Savepoint) else Savepoint.open(source)
    version = target_version(sp, flink_version)
    coordinators = coordinator_states(sp) if coordinators is None else coordinators
    uids, rekey, key_types = dict(uids or {}), dict(rekey or {}), dict(key_types or {})
    per_op = dict(max_parallelism) if isinstance(max_parallelism, Mapping) else {}
    for v in ([max_parallelism] if isinstance(max_parallelism, int) else list(per_op.values())):
        check_max_parallelism(v)
    named = [*uids, *remove, *rekey, *per_op, *(types or {}), *(pyflink or {})]
    ops = []
    used: set[str] = set()

    def pick(table: Mapping[str, Any], meta: OperatorMetadata) -> Any:
        for k in (meta.uid, meta.uid_hash, meta.name):
            if k is not None and k in table:
                used.add(k)
                return table[k]
        return None

    for meta in sp.operators:
        if pick({k: True for k in remove}, meta):
            continue
        new_uid = pick(uids, meta)
        ident = OperatorIdentifier.for_uid(new_uid) if new_uid else None
        maxp = max_parallelism if isinstance(max_parallelism, int) else pick(per_op, meta)
        pick(types or {}, meta)
        data = operator_data(
            sp, meta, hints=types, uid=new_uid, uid_hash=ident.uid_hash if ident else None,
            name=new_uid, max_parallelism=maxp, new_key=pick(rekey, meta), new_key_type=pick(key_types, meta),
            pyflink=pick(pyflink or {}, meta), stream=True)
        data.coordinator = coordinators.get(meta.uid_hash)
        ops.append(data)
    unknown = sorted(set(named) - used)
    if unknown:
        listing = ", ".join(m.uid or m.uid_hash for m in sp.operators)
        raise InvalidArgumentError(f"operator(s) {unknown} are not in {sp.path} (it holds: {listing}).")
    if job_max_parallelism is not None:
        off = [f"{o.uid or o.uid_hash} ({o.max_parallelism})" for o in ops if o.max_parallelism != job_max_parallelism]
        if off:
            raise ParallelismError(
                f"the job declares max parallelism {job_max_parallelism}, but operator(s) {', '.join(off)} would have "
                f"another; Flink refuses to restore such a savepoint. Pass max_parallelism={job_max_parallelism} to "
                "rescale every operator (stateless ones too)."
            )
    cid = sp.checkpoint_id if checkpoint_id is None else checkpoint_id
    return write_flink_savepoint(target, ops, checkpoint_id=cid, flink_version=version)


def coordinator_states(sp: Savepoint) -> dict[str, bytes]:
    """The operator coordinators' states of a savepoint by uid hash (a new-style source's split enumerator): a Flink
    savepoint's from its `_metadata`, a statekit savepoint's from its manifest (the ``flink.coordinator`` of an
    operator converted from Flink)."""
    if not is_flink_source(sp):
        return {m.uid_hash: m.flink.coordinator for m in sp.operators
                if m.flink is not None and m.flink.coordinator is not None}
    return {op.operator_id: sp.flink.files.read(op.coordinator) for op in sp.flink.metadata.operators
            if op.coordinator is not None}


def target_version(sp: Savepoint | None, flink_version: str | FlinkVersion | None) -> FlinkVersion:
    """The Flink version a write targets: the one asked for, else the one `sp`'s state came from, else the newest."""
    if flink_version is not None:
        return FlinkVersion.parse(flink_version)
    came_from = sp.flink_version if sp is not None else None
    return came_from if came_from is not None else FlinkVersion.newest()


__all__ = ["TypeHints", "carried_serializers", "coordinator_states", "is_flink_source", "keyed_layout", "operator_data", "operator_state_layouts",
           "pyflink_keyed", "pyflink_types", "target_version", "with_operator_data", "write_flink"]
