"""Repairs as edits over Arrow data - set a key's state, delete keys, drop a state, rename, rescale,
re-key, remove an operator - applied together in one pass that writes one new savepoint.

The keyed-table edits (`patch_keyed`) are pure functions over Arrow tables, so the CLI, the local
engine and Spark share them. `repair` plans every edit against the source first (a dry run
reports the plan and writes nothing; a plan with nothing to change writes nothing either), then
carries unchanged operators over by hard link and rewrites only the operators it edits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import InvalidArgumentError, SavepointExistsError, UnknownStateError
from statekit.format.manifest import OperatorMetadata
from statekit.format.storage import as_path
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import check_max_parallelism
from statekit.savepoint.edits import (
    DeleteKeys,
    Edit,
    Rekey,
    RemoveOperator,
    RemoveState,
    RenameOperator,
    SetMaxParallelism,
    SetValue,
    kind_of,
)
from statekit.savepoint.output import OutputFormat, describe, output_format, write_as
from statekit.savepoint.reader import Savepoint
from statekit.savepoint.transforms import (
    TransformPlan,
    carried_flink,
    link_operator,
    refuse_target_inside,
    require_hashed_key_groups,
)
from statekit.savepoint.writer import SavepointBuilder

__all__ = ["DeleteKeys", "Edit", "RemoveOperator", "RemoveState", "RenameOperator", "Rekey", "SetMaxParallelism",
           "SetValue", "patch_keyed", "repair"]


# -- the Arrow part ---------------------------------------------------------------------------------
def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(_hashable(v) for v in value.values())
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def key_mask(keys: pa.ChunkedArray | pa.Array, wanted: Sequence[Any]) -> pa.Array:
    """A boolean mask of the rows whose key is one of `wanted` (struct keys given as tuples)."""
    if not pa.types.is_struct(keys.type):
        return pc.is_in(keys, value_set=pa.array(list(wanted), keys.type))
    want = {_hashable(k) if not isinstance(k, tuple) else k for k in wanted}
    return pa.array([_hashable(k) in want for k in keys.to_pylist()], pa.bool_())


def patch_keyed(table: pa.Table, *, drop_states: Sequence[str] = (), delete_keys: Sequence[Any] = (),
                set_values: Sequence[tuple[Any, str, Any]] = ()) -> pa.Table:
    """`table` (a keyed table without namespaces) with states dropped, keys deleted and values set.

    ``set_values`` holds (key, state, value); a key without a row gets one (its other states unset).

    >>> t = pa.table({"key": [1, 2], "count": [10, 20], "seen": [["a"], []]})
    >>> patch_keyed(t, drop_states=["seen"], delete_keys=[1], set_values=[(3, "count", 30)]).to_pylist()
    [{'key': 2, 'count': 20}, {'key': 3, 'count': 30}]
    """
    if drop_states:
        table = table.drop_columns(list(drop_states))
    if delete_keys:
        table = table.filter(pc.invert(key_mask(table.column("key"), delete_keys)))
    if set_values:
        struct_key = pa.types.is_struct(table.schema.field("key").type)
        by_key: dict[Any, dict[str, Any]] = {}
        for key, state, value in set_values:
            by_key.setdefault(key, {})[state] = value
        mask = key_mask(table.column("key"), list(by_key))
        old = {(_hashable(r["key"])): r for r in table.filter(mask).to_pylist()}
        new_rows = []
        for key, values in by_key.items():
            row = old.get(_hashable(key) if not isinstance(key, tuple) else key)
            if row is None:
                field_names = [f.name for f in table.schema.field("key").type] if struct_key else None
                row = {c: None for c in table.column_names}
                row["key"] = dict(zip(field_names, key)) if field_names is not None else key
            new_rows.append({**row, **values})
        table = pa.concat_tables([table.filter(pc.invert(mask)), pa.Table.from_pylist(new_rows, schema=table.schema)])
    return table


# -- planning and writing ---------------------------------------------------------------------------
@dataclass
class _OperatorEdits:
    meta: OperatorMetadata
    removed: bool = False
    new_ident: OperatorIdentifier | None = None
    max_parallelism: int | None = None
    drop_states: tuple[str, ...] = ()
    delete_keys: tuple = ()
    set_values: tuple = ()
    mapping: pa.Table | None = None

    @property
    def rewrites(self) -> bool:
        return bool(self.max_parallelism or self.drop_states or self.delete_keys or self.set_values
                    or self.mapping is not None)


def repair(source: str | os.PathLike, target: str | os.PathLike, edits: Sequence[Edit], *,
           dry_run: bool = False, to: OutputFormat | None = None, flink_version: str | None = None,
           plan: str | os.PathLike | dict | None = None) -> TransformPlan:
    """Apply `edits` to the savepoint `source` and write the result to `target` in one pass.

    Every edit is checked against the source before anything is written (unknown operators or
    states, values that do not fit their types, keys of the wrong type). Edits that change nothing
    (a rename to the same uid, the same max parallelism, deleting keys that have no state, setting
    a value it already has) are reported as such; if nothing changes, nothing is written. `target`
    must not exist - a dry run says so too, since writing would fail. The output has the source's
    format (a Flink savepoint in, a Flink savepoint out that the same job restores, serializer snapshots
    carried; statekit in, statekit out) unless `to` ("statekit" or "flink") says otherwise; `flink_version`
    is the Flink a Flink output is for (by default the one the state came from). `plan` is a Flink SQL job's
    compiled plan: `SetValue` then takes the query's result columns (see `SetValue`). A Flink savepoint with SQL
    operators is written Flink to Flink (`statekit.savepoint.flink_repair`).
    """
    from statekit.savepoint import spark_repair

    if spark_repair.is_checkpoint(source):  # a Spark streaming checkpoint: the edits become a new batch of a copy
        return spark_repair.repair(source, target, edits, dry_run=dry_run, to=to)
    refuse_target_inside(source, target)
    sp = Savepoint.open(as_path(source), plan=plan) if plan is not None else Savepoint.open(as_path(source))
    result = TransformPlan(as_path(source), as_path(target))  # type: ignore[arg-type]
    fmt = output_format(sp, to)
    result.output = describe(fmt, sp, flink_version)
    if as_path(target).exists():
        raise SavepointExistsError(f"{target} already exists; savepoints are never overwritten, so this repair would "
                                   "fail. Choose a new target path.")
    per_op: dict[str, _OperatorEdits] = {}
    noops: list[str] = []
    for edit in edits:
        meta = sp.operator(edit.op)
        e = per_op.setdefault(meta.uid_hash, _OperatorEdits(meta))
        _plan_edit(sp, e, edit, result.changes, noops)
    result.noops = noops  # type: ignore[attr-defined]
    if not result.changes:
        return result
    if dry_run:
        return result
    from statekit.savepoint import flink_repair

    if flink_repair.has_sql(sp) and fmt == "statekit" and any(e.set_values for e in per_op.values()):
        from statekit.errors import UnsupportedFormatError

        raise UnsupportedFormatError(
            "set on a Flink SQL operator is written as a Flink savepoint (its rows, windows and key groups stay "
            "Flink's); drop to='statekit' (CLI --to), and convert the result to statekit's format afterwards.")
    if fmt == "flink" and flink_repair.has_sql(sp):
        flink_repair.write(sp, as_path(target), per_op, flink_version=flink_version)  # type: ignore[arg-type]
    else:
        renamed = {h: e.new_ident.uid_hash for h, e in per_op.items() if e.new_ident is not None}
        write_as(fmt, sp, target, lambda path: _write(sp, path, per_op), flink_version=flink_version, renamed=renamed)
    result.written = True
    return result


def _write(sp: Savepoint, target: Path, per_op: dict[str, _OperatorEdits]) -> None:
    """Write `sp` with the planned edits as a statekit savepoint at `target`."""
    with SavepointBuilder(target, checkpoint_id=sp.checkpoint_id, job_name=sp.job_name) as builder:
        for m in sp.operators:
            op_edits = per_op.get(m.uid_hash)
            if op_edits is None:
                link_operator(builder, sp, m, m.identifier)
            elif not op_edits.removed:
                ident = op_edits.new_ident or m.identifier
                name = (op_edits.new_ident.uid or m.name) if op_edits.new_ident else m.name
                if op_edits.rewrites and not _rewrite_key_groups(builder, sp, op_edits, ident, name):
                    _rewrite(builder, sp, op_edits, ident, name)
                elif not op_edits.rewrites:
                    link_operator(builder, sp, m, ident, name=name)


def _plan_edit(sp: Savepoint, e: _OperatorEdits, edit: Edit, changes: list[str], noops: list[str]) -> None:
    if e.removed:
        raise InvalidArgumentError(f"operator {e.meta.display_name} is removed by an earlier edit; drop the edits "
                                   "after it.")
    kind = kind_of(edit)
    if kind is None:
        raise InvalidArgumentError(f"unknown edit {edit!r}")
    PLANNERS[kind.edit](sp, e, edit, changes, noops)


#: How each edit of `statekit.savepoint.edits.EDITS` is planned: its checks against the source, its line of the
#: plan (or why it changes nothing), and what it records in the operator's `_OperatorEdits`.
PLANNERS: dict[type, Callable[[Savepoint, _OperatorEdits, Any, list[str], list[str]], None]] = {}


def _planner(edit: type) -> Callable:
    def put(fn: Callable) -> Callable:
        PLANNERS[edit] = fn
        return fn
    return put


@_planner(RemoveOperator)
def _plan_remove_operator(sp: Savepoint, e: _OperatorEdits, edit: RemoveOperator, changes: list[str],
                          noops: list[str]) -> None:
    m, name = e.meta, e.meta.display_name
    e.removed = True
    changes.append(f"remove operator {name} ({m.uid_hash}) with all its state, {len(m.files)} file(s)")


@_planner(RenameOperator)
def _plan_rename(sp: Savepoint, e: _OperatorEdits, edit: RenameOperator, changes: list[str],
                 noops: list[str]) -> None:
    m, name = e.meta, e.meta.display_name
    new = OperatorIdentifier.coerce(edit.new)
    if new.uid_hash == m.uid_hash:
        noops.append(f"operator {name} already has uid {new}")
        return
    if any(o.uid_hash == new.uid_hash for o in sp.operators):
        raise InvalidArgumentError(f"operator {new} already exists in {sp.path}; remove it first or choose "
                                   "another uid.")
    e.new_ident = new
    changes.append(f"rename operator {name} ({m.uid_hash}) to {new} ({new.uid_hash})")


@_planner(SetMaxParallelism)
def _plan_max_parallelism(sp: Savepoint, e: _OperatorEdits, edit: SetMaxParallelism, changes: list[str],
                          noops: list[str]) -> None:
    m, name = e.meta, e.meta.display_name
    check_max_parallelism(edit.max_parallelism)
    _require_keyed(m, "max parallelism only matters for keyed state")
    if edit.max_parallelism == m.max_parallelism:
        noops.append(f"operator {name} already has max parallelism {m.max_parallelism}")
        return
    require_hashed_key_groups(m, "a new max parallelism")
    e.max_parallelism = edit.max_parallelism
    changes.append(f"operator {name}: max parallelism {m.max_parallelism} -> {edit.max_parallelism}; keyed "
                   "table and timers re-hashed into the new key groups")


@_planner(RemoveState)
def _plan_remove_state(sp: Savepoint, e: _OperatorEdits, edit: RemoveState, changes: list[str],
                       noops: list[str]) -> None:
    m, name = e.meta, e.meta.display_name
    names = [s.name for s in m.keyed_states] + [s.name for s in m.operator_states]
    if edit.state not in names:
        raise UnknownStateError(f"operator {name} has no state {edit.state!r}; its states are: "
                                f"{', '.join(names) or 'none'}.")
    e.drop_states += (edit.state,)
    changes.append(f"operator {name}: remove state {edit.state!r}")


@_planner(DeleteKeys)
def _plan_delete_keys(sp: Savepoint, e: _OperatorEdits, edit: DeleteKeys, changes: list[str],
                      noops: list[str]) -> None:
    m, name = e.meta, e.meta.display_name
    _require_keyed(m, "it has no keys")
    from statekit.savepoint import flink_repair

    keys = tuple(flink_repair.sql_key(m, k) for k in edit.keys) if flink_repair.is_sql(sp, m) else edit.keys
    present = [k for k in keys if _has_state(sp, m, k)]
    for k in keys:
        if k not in present:
            noops.append(f"operator {name}: key {k!r} has no state")
    if present:
        e.delete_keys += tuple(present)
        changes.append(f"operator {name}: delete key(s) {', '.join(repr(k) for k in present)} (state and timers)")


@_planner(SetValue)
def _plan_set(sp: Savepoint, e: _OperatorEdits, edit: SetValue, changes: list[str], noops: list[str]) -> None:
    m, name = e.meta, e.meta.display_name
    _require_keyed(m, "it has no keyed state")
    from statekit.savepoint import flink_repair

    if flink_repair.is_sql(sp, m):
        flink_repair.plan_set(sp, e, edit, changes, noops)  # type: ignore[arg-type]
        return
    if edit.namespace is not None:
        raise InvalidArgumentError(f"operator {name}: namespace= is for Flink SQL window operators.")
    if m.namespace_type is not None:
        # A window operator's value belongs to a (key, window) pair, kept live by the window's firing and
        # cleanup timers and read by the window function in its own accumulator shape: a value set for a
        # key alone has no meaning there, and one set for a new window would never fire.
        raise InvalidArgumentError(f"operator {name} keeps window state: its values belong to (key, window) "
                                   "pairs with the windows' timers, so `set` of one key's value is refused. "
                                   "Write the windows with Spark's window bootstrap (OperatorTransformation"
                                   ".bootstrap_with(df).key_by(...).window(...)), or delete-key the key.")
    info = m.keyed_state(edit.state)
    value = _fit(edit.value, info.type, f"state {edit.state!r} of {name}")
    current = sp.get(m.identifier, edit.key)
    if current is None:
        require_hashed_key_groups(m, f"setting state of key {edit.key!r}, which has none yet,")
    if current is not None and _hashable(current.get(edit.state)) == _hashable(value):
        noops.append(f"operator {name}: key {edit.key!r} already has {edit.state} = {value!r}")
        return
    e.set_values += ((edit.key, edit.state, value),)
    before = "no state" if current is None else f"{current.get(edit.state)!r}"
    changes.append(f"operator {name}: key {edit.key!r} {edit.state}: {before} -> {value!r}")


@_planner(Rekey)
def _plan_rekey(sp: Savepoint, e: _OperatorEdits, edit: Rekey, changes: list[str], noops: list[str]) -> None:
    m, name = e.meta, e.meta.display_name
    _require_keyed(m, "it has no keys")
    require_hashed_key_groups(m, "a re-key")
    from statekit.savepoint.key_mapping import check_mapping

    check_mapping(edit.mapping, f"rekeying operator {name!r}")
    e.mapping = edit.mapping
    changed = pc.sum(pc.invert(pc.equal(edit.mapping.column("key"), edit.mapping.column("new_key")))
                     .cast(pa.int64())).as_py() if edit.mapping.schema.field("key").type == \
        edit.mapping.schema.field("new_key").type else edit.mapping.num_rows
    changes.append(f"operator {name}: re-key {edit.mapping.num_rows} key(s), {changed or 0} of them to a new key")


def _has_state(sp: Savepoint, m: OperatorMetadata, key: Any) -> bool:
    """Whether `key` has a row in `m`'s keyed table (in any window, for window operators) or a timer."""
    from statekit.savepoint import flink_repair

    if flink_repair.is_sql(sp, m):
        return flink_repair.has_key(sp, m, key)  # type: ignore[arg-type]
    if m.namespace_type is None and sp.get(m.identifier, key) is not None:
        return True
    from statekit.keygroups import KeyGroupRange, assign_to_key_group

    if m.namespace_type is not None:
        if m.stored_key_groups:  # user-code key hashes: the key may be in any key group
            table = sp.keyed_table(m.identifier)
        else:
            kg = assign_to_key_group(key, m.max_parallelism, m.key_type)
            table = sp.keyed_table(m.identifier, key_groups=KeyGroupRange(kg, kg))
        if table.num_rows and pc.any(key_mask(table.column("key"), [key])).as_py():
            return True
    timers = sp.timers(m.identifier)
    return bool(timers.num_rows) and bool(pc.any(key_mask(timers.column("key"), [key])).as_py())


def _require_keyed(m: OperatorMetadata, why: str) -> None:
    if m.key_type is None:
        raise InvalidArgumentError(f"operator {m.display_name} has no keyed state; {why}.")


def _fit(value: Any, ddl: str, what: str) -> Any:
    from statekit.errors import StateTypeError
    from statekit.types import parse_ddl

    try:
        return pa.array([value], parse_ddl(ddl))[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError) as exc:
        raise StateTypeError(f"{what}: {value!r} does not fit the declared type {ddl} ({exc}).") from None


def _rewrite_key_groups(builder: SavepointBuilder, sp: Savepoint, e: _OperatorEdits, ident: OperatorIdentifier,
                        name: str) -> bool:
    """Apply set/delete-key edits by rewriting only the files of their keys' key groups (keyed files,
    and the timer files of deleted keys), every other file of the operator linked; False (nothing
    done) when the edits change more than keys - states, key groups, keys - or the operator's
    keyed table is not a set of statekit files, which `_rewrite` then rewrites whole.
    """
    from statekit.keygroups import assign_to_key_group
    from statekit.savepoint.transforms import link_operator

    m = e.meta
    keyed = m.files_of("keyed")
    if e.drop_states or e.max_parallelism or e.mapping is not None or m.keyed_format != "parquet" or not keyed \
            or m.stored_key_groups:  # a key's group is found by reading, not hashing: the operator is rewritten
        return False
    ranges = {f.path: (f.key_group_start, f.key_group_end) for f in keyed}
    if any(s is None or t is None for s, t in ranges.values()):  # not written by statekit's writers
        return False
    kg_of = {}
    for key in (*e.delete_keys, *(k for k, _, _ in e.set_values)):
        kg_of[_hashable(key)] = assign_to_key_group(key, m.max_parallelism, m.key_type)
    owner: dict[str, set[int]] = {}  # file path -> the edited key groups it holds (or will hold)
    for kg in set(kg_of.values()):
        f = next((f for f in keyed if f.covers(kg)), None)
        if f is None:  # a key group without rows so far: the nearest file takes it, its range widened
            f = min(keyed, key=lambda f: min(abs((f.key_group_start or 0) - kg), abs((f.key_group_end or 0) - kg)))
        owner.setdefault(f.path, set()).add(kg)
    deleted_kgs = {kg_of[_hashable(k)] for k in e.delete_keys}
    rewrite = {}
    for f in m.files:
        if f.table == "keyed" and f.path in owner:
            kgs = owner[f.path]
            rewrite[f.path] = _keyed_file_rewrite(sp, e, f, kgs, [k for k in e.delete_keys if kg_of[_hashable(k)] in kgs],
                                                  [v for v in e.set_values if kg_of[_hashable(v[0])] in kgs])
        elif f.table == "timers" and e.delete_keys and any(f.covers(kg) for kg in deleted_kgs):
            rewrite[f.path] = _timer_file_rewrite(sp, e, f)
    link_operator(builder, sp, m, ident, name=name, rewrite=rewrite)
    return True


def _keyed_file_rewrite(sp: Savepoint, e: _OperatorEdits, f, kgs: set[int], deletes: list, sets: list):
    from statekit.format import keyed as K
    from statekit.format.files import write_parquet
    from statekit.format.manifest import FileEntry, safe_relative_path

    m = e.meta

    def write(staging: Path, rel: str) -> list:
        table = sp._check_schema(sp.read_file(f), sp.keyed_schema(m.identifier), f"file {f.path}")
        table = patch_keyed(table.drop_columns(["key_group"]), delete_keys=deletes, set_values=sets)
        kg = K.compute_key_groups(table.column("key"), m.max_parallelism, m.keyed_key_type)
        table, kg = K.drop_unset_rows(table, kg, [s.name for s in m.keyed_states])
        if not table.num_rows:
            return []
        order = K.key_group_order(kg)  # a new key's row joins its key group's rows
        if order is not None:
            table, kg = K.take_rows(table, order), kg[order]
        K.check_unique_keys(table, has_namespace=m.namespace_type is not None,
                            what=f"keyed table of operator {m.display_name}")
        nbytes, digest = write_parquet(K.with_key_group_column(table, kg), safe_relative_path(staging, rel))
        # the range may widen (a key group new to the operator); the file keeps its name, the manifest says
        start, end = min(f.key_group_start, *kgs), max(f.key_group_end, *kgs)
        return [FileEntry(rel, "keyed", table.num_rows, nbytes, digest, None, start, end, f.subtask)]

    return write


def _timer_file_rewrite(sp: Savepoint, e: _OperatorEdits, f):
    from dataclasses import replace as replace_entry

    from statekit.format.files import write_parquet
    from statekit.format.manifest import safe_relative_path

    def write(staging: Path, rel: str) -> list:
        table = sp.read_file(f)
        kept = table.filter(pc.invert(key_mask(table.column("key"), e.delete_keys)))
        if not kept.num_rows:
            return []
        nbytes, digest = write_parquet(kept, safe_relative_path(staging, rel))
        return [replace_entry(f, path=rel, rows=kept.num_rows, bytes=nbytes, checksum=digest)]

    return write


def _rewrite(builder: SavepointBuilder, sp: Savepoint, e: _OperatorEdits, ident: OperatorIdentifier,
             name: str) -> None:
    from statekit.savepoint.key_mapping import check_collisions, distinct_rows, remap_keys
    from statekit.types import to_ddl

    m = e.meta
    op = m.identifier
    mp = e.max_parallelism or m.max_parallelism
    keyed_states = tuple(s for s in m.keyed_states if s.name not in e.drop_states)
    operator_states = [s for s in m.operator_states if s.name not in e.drop_states]
    key_type = m.key_type
    stored = m.stored_key_groups  # rows keep the key groups they were read with (user-code key hashes)
    keyed = sp.keyed_table(op, with_key_group=stored)
    keyed = patch_keyed(keyed, drop_states=[s for s in e.drop_states if s in keyed.column_names],
                        delete_keys=e.delete_keys, set_values=e.set_values)
    timers = sp.timers(op)
    if timers.num_rows:
        timers = timers if stored else timers.drop_columns(["key_group"])
        if e.delete_keys:
            timers = timers.filter(pc.invert(key_mask(timers.column("key"), e.delete_keys)))
    if e.mapping is not None:
        what = f"rekeying operator {m.display_name!r}"
        before = keyed
        keyed = remap_keys(keyed, e.mapping, what)
        if m.namespace_type is None:
            check_collisions(before, keyed, what)
        if timers.num_rows:
            timers = distinct_rows(remap_keys(timers, e.mapping, what))
        key_type = to_ddl(e.mapping.schema.field("new_key").type)
    flink = carried_flink(sp, m)  # read from a Flink savepoint: its serializers go along
    if flink is not None:  # carried Flink serializers follow the repair: dropped states, a new key type
        kept = {s.name for s in keyed_states}
        flink = replace(flink, states=tuple((n, b) for n, b in flink.states if n in kept))
        if key_type != m.key_type:
            flink = flink.without_key()
    writer = builder.add_operator(ident, name=name, parallelism=min(m.parallelism, mp), max_parallelism=mp,
                                  key_type=key_type, keyed_states=keyed_states, namespace_type=m.namespace_type,
                                  flink=flink, key_groups=m.key_groups)
    if keyed.num_rows and keyed_states:
        writer.write_keyed(keyed)
    if timers.num_rows:
        writer.write_timers(timers)
    for info in operator_states:
        if info.redistribution == "broadcast":
            writer.write_broadcast_state(info, sp.broadcast_state(op, info.name))
        else:
            writer.write_list_state(info, sp.operator_state_lists(op, info.name)[1])
