"""Migrate a Flink SQL job's state across a query change: the old savepoint's state in the new job's layout.

Boundary: `migrate_sql` reads the old savepoint (named by its compiled plan when given, else by what its serializer
snapshots say) and a template of the new job (a savepoint the new job took, opened with the new job's compiled
plan: it gives the new operator ids and serializer snapshots), pairs old and new SQL operators by kind and key
columns, plans each state's carry (`OperatorMigration`) and writes the template with every keyed state replaced
(`flink_repair.write_operators`: serializer snapshots carried byte for byte, untouched operators hard-linked).
What cannot be carried (GROUP BY / PARTITION BY / join keys changed, a window definition changed, a DISTINCT
added) refuses the whole migration with `MigrationRefusedError`, one reason per operator; nothing is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import InvalidArgumentError, MigrationRefusedError

__all__ = ["Carry", "MigrationReport", "OperatorMigration", "migrate_sql"]

# the value a built-in aggregate's buffer starts from (its `initialValuesExpressions`); None: NULL
_INITIAL = {("COUNT", "count1"): 0, ("COUNT", "count"): 0, ("SUM", "sum"): None, ("SUM", "count"): 0,
            ("SUM0", "sum"): 0, ("AVG", "sum"): 0, ("AVG", "count"): 0, ("MIN", "min"): None, ("MAX", "max"): None}
_KEYS_WORD = {"group aggregate": "GROUP BY keys", "window TVF aggregate": "GROUP BY keys",
              "legacy group window aggregate": "GROUP BY keys", "deduplication": "PARTITION BY keys",
              "regular join": "join keys"}


@dataclass
class Carry:
    """How one state of a new operator is filled: from an old state (``source``), its row fields by name
    (``fields``: new field -> old field, None = starts empty with ``initial[field]``), or left empty."""

    state: str
    source: str | None
    fields: dict[str, str | None] | None = None
    initial: dict[str, Any] = field(default_factory=dict)


@dataclass
class OperatorMigration:
    """The plan for one new SQL operator: its counterpart in the old job, what each state gets, and why."""

    new: Any  # OperatorMetadata of the template
    kind: str
    old: Any = None  # OperatorMetadata of the old savepoint, None: starts empty
    carries: list[Carry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refused: str | None = None
    keys: int = 0
    rows: int = 0


@dataclass
class MigrationReport:
    """What `migrate_sql` did (or, in a dry run, would do), operator by operator."""

    source: str
    template: str
    target: str
    operators: list[OperatorMigration]
    dropped: list[str]
    written: bool = False
    #: source operators whose operator state (splits, offsets, enumerator) comes from the old job (`sql_sources`)
    sources: list[Any] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"migrate {self.source} -> {self.target} (the new job's layout from {self.template})"]
        for m in self.operators:
            new = m.new.display_name
            if m.old is None:
                lines.append(f"  {new} ({m.kind}): no counterpart in the old job: starts empty")
            else:
                moved = "" if m.old.uid_hash == m.new.uid_hash else \
                    f"; operator id {m.old.uid_hash} -> {m.new.uid_hash}"
                lines.append(f"  {new} ({m.kind}) <- {m.old.display_name}: {m.keys} keys, {m.rows} rows carried{moved}")
            lines.extend(f"    {n}" for n in m.notes)
        lines.extend(f"  {c}" for c in self.sources)
        lines.extend(f"  dropped: {d}" for d in self.dropped)
        lines.append("written" if self.written else "dry run: nothing written")
        return "\n".join(lines)


# -- what the plans say ------------------------------------------------------------------------------------------
@dataclass
class _Op:
    meta: Any
    kind: str  # the savepoint's operator kind (deduplication keep-last, ...)
    family: str  # group aggregate, deduplication, regular join, ...
    key_types: tuple[str, ...]
    names: Any  # OperatorNames, or None without a plan

    @property
    def key_names(self) -> tuple[str, ...] | None:
        return tuple(c.name for c in self.names.key) if self.names is not None else None

    def shown_key(self) -> str:
        names = self.key_names or tuple(f"k{i}" for i in range(len(self.key_types)))
        return "(" + ", ".join(f"{n} {t}" for n, t in zip(names, self.key_types)) + ")"


def _family(kind: str) -> str:
    return "deduplication" if kind.startswith("deduplication") else kind


def _sql_ops(sp: Any) -> list[_Op]:
    from statekit.savepoint.flink_out import carried_serializers
    from statekit.savepoint.flink_repair import is_sql

    out = []
    for m in sp.operators:
        if m.key_type is None or not is_sql(sp, m):
            continue
        stored = carried_serializers(sp, m)
        key = stored.key if stored is not None else None
        roots = tuple(str(t.ddl()).upper() for t in key.logical) if key is not None and key.form == "row" else (str(m.key_type).upper(),)
        kind = sp.operator_kind(m.identifier) or "other"
        out.append(_Op(m, kind, _family(kind), roots, sp.plan_names(m.identifier)))
    return out


def _sinks(names: Any) -> set[str]:
    """The sink tables a plan node feeds (what tells two operators of one kind and key apart)."""
    if names is None:
        return set()
    plan, seen, todo, out = names.plan, set(), [names.node.id], set()
    while todo:
        n = plan.nodes.get(todo.pop())
        if n is None or n.id in seen:
            continue
        seen.add(n.id)
        if n.stem == "sink":
            out.add(str(n.spec.get("dynamicTableSink", {}).get("table", {}).get("identifier")))
        todo.extend(n.outputs)
    return out


def _pair(new: _Op, olds: list[_Op], taken: set[str], *, exact: bool = False) -> tuple[_Op | None, str | None]:
    """The old operator `new` carries from (or None), and why none can be taken when one should (`exact`: only an
    unambiguous operator of the same kind and keys, no reasons: the first pass, so that an unchanged operator is
    paired before a changed one of its kind is judged)."""
    same = [o for o in olds if o.kind == new.kind and o.meta.uid_hash not in taken]
    keyed = [o for o in same if o.key_types == new.key_types
             and (o.key_names is None or new.key_names is None or o.key_names == new.key_names)]
    if len(keyed) > 1:
        by_sink = [o for o in keyed if _sinks(o.names) & _sinks(new.names)]
        keyed = by_sink if len(by_sink) == 1 else keyed
    if exact:
        return (keyed[0] if len(keyed) == 1 else None), None
    if len(keyed) > 1:
        return None, (f"{len(keyed)} operators of the old job are {new.kind}s keyed by {new.shown_key()} "
                      f"({', '.join(o.meta.display_name for o in keyed)}) and their sinks do not tell which one this "
                      "is; give --old-plan so they can be told apart by their sink tables")
    if keyed:
        return keyed[0], None
    if same:
        word = _KEYS_WORD.get(new.family, "keys")
        return None, (f"{word} changed: the old job's {new.kind} {same[0].meta.display_name} keys by "
                      f"{same[0].shown_key()}, the new one by {new.shown_key()}; state kept per old key cannot be "
                      "split or merged into the new keys (drop it with rm-state / remove-operator first, or "
                      "bootstrap the new operator from history)")
    return None, None


# -- accumulators ------------------------------------------------------------------------------------------------
def _agg_input(names: Any) -> list:
    """The columns an aggregate call's arguments index: a two-phase global aggregate's are the local phase's input."""
    from statekit.format.flink.sqlplan import row_columns

    local = names.node.spec.get("localAggInputRowType")
    return row_columns(local, f"{names.plan.source} node {names.node.id}") if local else names.plan.input(names.node, 0)


def _agg_sig(names: Any, agg: Any) -> tuple:
    cols = _agg_input(names)
    calls = names.node.spec.get("aggCalls") or []
    filt = int(calls[agg.index].get("filterArg", -1)) if agg.index < len(calls) and not agg.hidden else -1
    return (agg.func, tuple(cols[a].name for a in agg.args), agg.distinct, filt if filt < 0 else cols[filt].name,
            agg.buffers)


def _shown_agg(names: Any, agg: Any) -> str:
    cols = _agg_input(names)
    args = ", ".join(cols[a].name for a in agg.args) or "*"
    return f"{agg.name} {agg.func}({'DISTINCT ' if agg.distinct else ''}{args})"


def _window(names: Any) -> Any:
    spec = names.node.spec
    return spec.get("windowing", {}).get("window") if "windowing" in spec else spec.get("window")


def _plan_acc(m: OperatorMigration, old: _Op, new: _Op) -> None:
    """Carry an aggregate's accumulator row call by call (matched by function, argument columns, DISTINCT, filter)."""
    on, nn = old.names, new.names
    if new.family != "group aggregate" and json_norm(_window(on)) != json_norm(_window(nn)):
        m.refused = (f"window definition changed: {json_norm(_window(on))} in the old job, {json_norm(_window(nn))} in "
                     "the new one; pending windows of the old size have no place in the new windows")
        return
    olay, nlay = on.acc, nn.acc
    if olay.fields is None or nlay.fields is None:
        m.refused = "an aggregate call whose accumulator statekit does not know (its fields cannot be matched)"
        return
    state = nn.acc_state
    fields: dict[str, str | None] = {}
    initial: dict[str, Any] = {}
    used: set[int] = set()
    renamed: dict[str, str] = {}
    for a in nlay.aggs:
        sig = _agg_sig(nn, a)
        hit = next((b for b in olay.aggs if b.index not in used and _agg_sig(on, b) == sig), None)
        nf = nlay.fields[a.first:a.first + len(a.buffers or ())]
        if hit is not None:
            used.add(hit.index)
            of = olay.fields[hit.first:hit.first + len(hit.buffers or ())]
            fields.update(zip(nf, of))
            if hit.index != a.index:
                renamed[f"agg{hit.index}$"] = f"agg{a.index}$"
            continue
        if a.distinct:
            m.refused = (f"a DISTINCT added ({_shown_agg(nn, a)}): the distinct values seen so far are not in the old "
                         "state, so the new count would be wrong")
            return
        starts = {f: _INITIAL.get((a.func, b), KeyError) for f, b in zip(nf, a.buffers or ())}
        if a.hidden or any(v is KeyError for v in starts.values()) or a.retract:
            m.refused = (f"aggregate call {_shown_agg(nn, a)} was added, and its accumulator cannot start empty "
                         "(statekit starts only COUNT, SUM, SUM0, AVG, MIN and MAX over append-only input empty)")
            return
        fields.update(dict.fromkeys(nf))
        initial.update(starts)
        m.notes.append(f"added {_shown_agg(nn, a)}: its accumulator starts empty ("
                       + ", ".join(f"{f} = {'NULL' if v is None else v}" for f, v in starts.items())
                       + "); its result covers only what the new job reads")
    for b in olay.aggs:
        if b.index not in used and not b.hidden:
            m.notes.append(f"removed {_shown_agg(on, b)}: its accumulator is dropped")
    # DISTINCT groups: a group is carried with its map when the distinct calls on it are the same
    states = {s.name for s in m.new.keyed_states}
    carries = []
    for j, args in enumerate(nlay.distinct):
        names_j = tuple(_agg_input(nn)[x].name for x in args)
        calls_j = [_agg_sig(nn, a) for a in nlay.aggs if a.distinct and a.args == args]
        i = next((i for i, oargs in enumerate(olay.distinct)
                  if tuple(_agg_input(on)[x].name for x in oargs) == names_j
                  and [_agg_sig(on, b) for b in olay.aggs if b.distinct and b.args == oargs] == calls_j), None)
        if i is None:
            m.refused = f"the DISTINCT calls over ({', '.join(names_j)}) changed: their bit sets cannot be carried"
            return
        fields[nlay.fields[len(nlay.fields) - len(nlay.distinct) + j]] = olay.fields[len(olay.fields) - len(olay.distinct) + i]
        for suffix in ("", "_null_state"):
            if f"distinctAcc_{j}{suffix}" in states:
                carries.append(Carry(f"distinctAcc_{j}{suffix}", f"distinctAcc_{i}{suffix}"))
    named = nn.rows.get((state, "value")) or nlay.fields
    old_named = on.rows.get((on.acc_state, "value")) or olay.fields
    rename_new = dict(zip(nlay.fields, named))
    rename_old = dict(zip(olay.fields, old_named))
    fields = {rename_new[k]: (rename_old[v] if v is not None else None) for k, v in fields.items()}
    initial = {rename_new[k]: v for k, v in initial.items()}
    carries.insert(0, Carry(state, on.acc_state, fields, initial))
    old_states = {s.name for s in m.old.keyed_states}
    for s in states:  # a retracting MIN/MAX's map views (agg<i>$map) follow their call
        for o, n in renamed.items():
            if s.startswith(n) and s.replace(n, o, 1) in old_states:
                carries.append(Carry(s, s.replace(n, o, 1)))
        if s.startswith("agg") and "$" in s and not any(c.state == s for c in carries):
            src = s if s in old_states and not any(s.startswith(n) for n in renamed.values()) else None
            carries.append(Carry(s, src))
    m.carries = carries


def json_norm(v: Any) -> str:
    import json

    return json.dumps(v, sort_keys=True)


def _not_null(sp: Any, meta: Any, types: dict[str, pa.DataType]) -> dict[str, set[str]]:
    """Per row-valued state, its NOT NULL columns (from the serializer snapshot's logical types)."""
    from statekit.savepoint.flink_out import carried_serializers

    stored = carried_serializers(sp, meta)
    out: dict[str, set[str]] = {}
    for name, st in (stored.states.items() if stored is not None else ()):
        t = st.value_type
        t = t.children[1] if t.form == "ttl" else t
        t = t.children[0] if t.kind == "map" else t
        row = _row_type(types.get(name, pa.null()))
        if t.form == "row" and row is not None:
            cols = [f.name for f in row if f.name != "row_kind"]
            out[name] = {c for c, lt in zip(cols, t.logical) if not lt.nullable}
    return out


def _plan_rows(m: OperatorMigration, old: _Op, new: _Op, ntypes: dict[str, pa.DataType],
               otypes: dict[str, pa.DataType], not_null: dict[str, set[str]]) -> None:
    """Carry a deduplication's or join's stored rows column by column (by name; an added column NULL, refused where
    the new row declares it NOT NULL)."""
    for s in m.new.keyed_states:
        if s.name not in otypes:
            m.notes.append(f"state {s.name!r} is new: it starts empty")
            m.carries.append(Carry(s.name, None))
            continue
        nt, ot = _row_type(ntypes[s.name]), _row_type(otypes[s.name])
        if nt is None or ot is None:
            if _same_shape(ntypes[s.name], otypes[s.name]):
                m.carries.append(Carry(s.name, s.name))
            else:
                m.refused = f"state {s.name!r} changed from {otypes[s.name]} to {ntypes[s.name]}"
                return
            continue
        fields: dict[str, str | None] = {}
        for f in nt:
            if f.name == "row_kind":
                fields[f.name] = "row_kind" if ot.get_field_index("row_kind") >= 0 else None
                continue
            i = ot.get_field_index(f.name)
            if i < 0:
                fields[f.name] = None
                continue
            if not _same_shape(ot.field(i).type, f.type):
                m.refused = (f"column {f.name!r} of the rows in {s.name!r} changed type from {ot.field(i).type} to "
                             f"{f.type}")
                return
            fields[f.name] = f.name
        added = [f for f, v in fields.items() if v is None and f != "row_kind"]
        strict = [f for f in added if f in not_null.get(s.name, ())]
        if strict:
            m.refused = (f"column(s) {', '.join(strict)} added to the rows in {s.name!r} are NOT NULL: the carried rows "
                         "have no value for them")
            return
        gone = [f.name for f in ot if f.name not in fields]
        if added:
            m.notes.append(f"{s.name}: column(s) {', '.join(added)} added: NULL in the carried rows")
        if gone:
            m.notes.append(f"{s.name}: column(s) {', '.join(gone)} removed")
        m.carries.append(Carry(s.name, s.name, fields))


def _row_type(t: pa.DataType) -> pa.StructType | None:
    """The stored row of a state's type: the value itself, a TTL value's, or a map's row keys (a join's multiset)."""
    if pa.types.is_struct(t) and [f.name for f in t] == ["last_access", "value"]:
        return _row_type(t.field("value").type)
    if pa.types.is_map(t):
        return _row_type(t.key_type) if pa.types.is_struct(t.key_type) else None
    return t if pa.types.is_struct(t) and t.get_field_index("row_kind") >= 0 else None


def _strip_names(t: pa.DataType) -> Any:
    if pa.types.is_struct(t):
        return ("struct", tuple(_strip_names(f.type) for f in t))
    if pa.types.is_map(t):
        return ("map", _strip_names(t.key_type), _strip_names(t.item_type))
    if pa.types.is_list(t):
        return ("list", _strip_names(t.value_type))
    return str(t)


def _same_shape(a: pa.DataType, b: pa.DataType) -> bool:
    return _strip_names(a) == _strip_names(b)


# -- building the new tables -------------------------------------------------------------------------------------
def _remap_row(a: pa.Array, t: pa.StructType, fields: dict[str, str | None], initial: dict[str, Any]) -> pa.Array:
    from statekit.format.flink.sqlnames import rename_as

    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if pa.types.is_struct(t) and [f.name for f in t] == ["last_access", "value"] and a.type.get_field_index("value") >= 0:
        inner = _remap_row(a.field("value"), t.field("value").type, fields, initial)
        kids = [rename_as(a.field("last_access"), t.field("last_access").type), inner]
        return pa.StructArray.from_arrays(kids, fields=list(t), mask=pc.is_null(a) if a.null_count else None)
    n = len(a)
    kids = []
    for f in t:
        src = fields.get(f.name)
        if src is not None and a.type.get_field_index(src) >= 0:
            kids.append(rename_as(a.field(src), f.type))
        elif f.name == "row_kind":
            kids.append(pa.array(["+I"] * n, f.type))
        else:
            kids.append(pa.array([initial.get(f.name)] * n, f.type))
    return pa.StructArray.from_arrays(kids, fields=list(t), mask=pc.is_null(a) if a.null_count else None)


def _column(old: pa.Array, t: pa.DataType, c: Carry) -> pa.Array:
    from statekit.format.flink.sqlnames import rename_as

    if isinstance(old, pa.ChunkedArray):
        old = old.combine_chunks()
    if c.fields is None:
        return rename_as(old, t)
    if pa.types.is_map(t):  # a join's multiset: rows as map keys
        entries = old.values.flatten() if hasattr(old, "values") else old.flatten()
        keys = _remap_row(entries[0], t.key_type, c.fields, c.initial)
        items = rename_as(entries[1], t.item_type)
        return pa.MapArray.from_arrays(old.offsets, keys, items, type=t,
                                       mask=pc.is_null(old) if old.null_count else None)
    return _remap_row(old, t, c.fields, c.initial)


def _new_tables(old_sp: Any, tmpl: Any, m: OperatorMigration) -> tuple[pa.Table, pa.Table]:
    from statekit.format.flink.sqlnames import rename_as

    schema = tmpl.keyed_schema(m.new.identifier, with_key_group=True)
    empty = schema.empty_table()
    ttimers = tmpl.timers(m.new.identifier)
    if m.old is None:
        return empty, ttimers.slice(0, 0)
    keyed = old_sp.keyed_table(m.old.identifier, with_key_group=True)
    by = {c.state: c for c in m.carries}
    cols = []
    for f in schema:
        if f.name == "key_group":
            cols.append(keyed.column("key_group").cast(f.type))
        elif f.name in ("key", "namespace"):
            cols.append(rename_as(keyed.column(f.name), f.type))
        else:
            c = by.get(f.name)
            if c is None or c.source is None or c.source not in keyed.column_names:
                cols.append(pa.nulls(keyed.num_rows, f.type))
            else:
                cols.append(_column(keyed.column(c.source), f.type, c))
    table = pa.Table.from_arrays(cols, schema=schema)
    states = [f.name for f in schema if f.name not in ("key_group", "key", "namespace")]
    if states and table.num_rows:
        held = np.zeros(table.num_rows, bool)
        for s in states:
            held |= ~np.asarray(pc.is_null(table.column(s)).to_numpy(zero_copy_only=False), bool)
        table = table.filter(pa.array(held))
    timers = old_sp.timers(m.old.identifier)
    if timers.num_rows:
        tcols = [rename_as(timers.column(f.name), f.type) if f.name in ("key", "namespace")
                 else timers.column(f.name).cast(f.type) for f in ttimers.schema]
        timers = pa.Table.from_arrays(tcols, schema=ttimers.schema)
    else:
        timers = ttimers.slice(0, 0)
    if m.old.max_parallelism != m.new.max_parallelism:
        from statekit.format.flink.sqlwrite import key_groups
        from statekit.savepoint.flink_out import carried_serializers

        stored = carried_serializers(tmpl, m.new)
        key_t = stored.key if stored is not None else None
        if key_t is None:
            raise InvalidArgumentError(f"template operator {m.new.display_name} has no key serializer snapshot.")
        maxp = m.new.max_parallelism
        table = table.set_column(0, "key_group", pa.array(key_groups(table.column("key").combine_chunks(), key_t, maxp),
                                                          schema.field("key_group").type))
        if timers.num_rows:
            i = timers.column_names.index("key_group")
            timers = timers.set_column(i, "key_group", pa.array(
                key_groups(timers.column("key").combine_chunks(), key_t, maxp), ttimers.schema.field("key_group").type))
    return table, timers


def _distinct_keys(keyed: pa.Table) -> int:
    if not keyed.num_rows:
        return 0
    flat = pa.table({"key": keyed.column("key")}).flatten()
    return flat.group_by(flat.column_names).aggregate([]).num_rows


# -- the call ----------------------------------------------------------------------------------------------------
def _types(sp: Any, meta: Any) -> dict[str, pa.DataType]:
    schema = sp.keyed_schema(meta.identifier, with_key_group=False)
    return {f.name: f.type for f in schema if f.name not in ("key", "namespace")}


def migrate_sql(old: Any, target: str | os.PathLike[str] | Any, *, plan: Any, template: Any,
                old_plan: Any = None, dry_run: bool = False) -> MigrationReport:
    """Carry the state of the old SQL job's savepoint `old` into the layout of a changed query's job.

    Parameters
    ----------
    old : path or URI
        The old job's savepoint (read, never changed).
    target : path or URI
        Where the new savepoint goes; it appears whole or not at all.
    plan : path or dict
        The new job's compiled plan (``COMPILE PLAN``); the new job runs from it (``EXECUTE PLAN``).
    template : path or URI
        A savepoint the new job took (e.g. right after its first start): its operator ids and serializer
        snapshots are the new layout. Every keyed SQL state in it is replaced.
    old_plan : path or dict, optional
        The old job's compiled plan. With it, accumulators are carried call by call and rows column by column by
        name; without it, a state is carried only where its types are unchanged.
    dry_run : bool
        Plan and report only; nothing is written.

    Returns
    -------
    MigrationReport
        Per new operator: its old counterpart, keys and rows carried, aggregate calls starting empty or dropped,
        columns added (NULL) or removed; source operators whose operator state (splits, offsets) comes from the old
        job, matched by the table they scan; old operators whose state has no place in the new job.

    Raises
    ------
    MigrationRefusedError
        When an operator's state cannot be carried (keys, window definition or DISTINCT calls changed), with the
        reason per operator; nothing is written.
    """
    from statekit.savepoint.flink import FlinkSavepoint
    from statekit.savepoint.flink_repair import write_operators
    from statekit.savepoint.sql_sources import plan_sources

    if plan is None:
        raise InvalidArgumentError("migrate-sql needs the new job's compiled plan (--plan): it names the new "
                                   "operators' keys, accumulators and rows.")
    old_sp = FlinkSavepoint.open(old, plan=old_plan)
    tmpl = FlinkSavepoint.open(template, plan=plan)  # a template of another job: PlanMismatchError
    olds, news = _sql_ops(old_sp), _sql_ops(tmpl)
    if not olds:
        raise InvalidArgumentError(f"{old} holds no Flink SQL keyed state: nothing to migrate.")
    taken: set[str] = set()
    plans: list[OperatorMigration] = []
    first: dict[str, _Op] = {}
    for new in news:
        o, _ = _pair(new, olds, taken, exact=True)
        if o is not None:
            first[new.meta.uid_hash] = o
            taken.add(o.meta.uid_hash)
    for new in news:
        m = OperatorMigration(new.meta, new.kind)
        plans.append(m)
        o, why = (first[new.meta.uid_hash], None) if new.meta.uid_hash in first else _pair(new, olds, taken)
        if why is not None:
            m.refused = why
            continue
        if o is None:
            continue
        taken.add(o.meta.uid_hash)
        m.old = o.meta
        ntypes, otypes = _types(tmpl, new.meta), _types(old_sp, o.meta)
        if o.names is None:
            if set(ntypes) != set(otypes) or any(not _same_shape(ntypes[s], otypes[s]) for s in ntypes):
                m.refused = ("its states changed (" + "; ".join(
                    f"{s}: {otypes.get(s)} -> {ntypes.get(s)}" for s in sorted(set(ntypes) | set(otypes))
                    if s not in ntypes or s not in otypes or not _same_shape(ntypes[s], otypes[s]))
                    + "); without the old job's plan (--old-plan) statekit cannot tell which field is which")
                continue
            if new.family != "group aggregate" and "window" in new.kind:
                m.refused = ("a window operator is carried only with the old job's plan (--old-plan), which says "
                             "whether the window definition changed")
                continue
            m.carries = [Carry(s, s) for s in ntypes]
        elif new.names.acc is not None and o.names.acc is not None:
            _plan_acc(m, o, new)
            if m.refused is None:
                for s in ntypes:
                    if not any(c.state == s for c in m.carries):
                        m.carries.append(Carry(s, s if s in otypes and _same_shape(ntypes[s], otypes[s]) else None))
        else:
            _plan_rows(m, o, new, ntypes, otypes, _not_null(tmpl, new.meta, ntypes))
    refused = [m for m in plans if m.refused]
    if refused:
        raise MigrationRefusedError(
            f"cannot migrate {old} into the new job: " + "; ".join(
                f"operator {m.new.display_name} ({m.kind}): {m.refused}" for m in refused)
            + ". Nothing was written.")
    dropped = [f"{o.meta.display_name} ({o.kind}, keyed by {o.shown_key()}): not in the new job, its state is not "
               "carried" for o in olds if o.meta.uid_hash not in taken]
    keyed_sql = {o.meta.uid_hash for o in olds}
    dropped += [f"{m.display_name}: its operator state ({', '.join(s.name for s in m.operator_states)}) is not "
                "carried; the new job's comes from the template" for m in old_sp.operators
                if m.operator_states and m.uid_hash in keyed_sql]
    sources, not_carried = plan_sources(old_sp, tmpl, keyed_sql)
    dropped += not_carried
    edits = {}
    for m in plans:
        keyed, timers = _new_tables(old_sp, tmpl, m)
        m.rows = keyed.num_rows
        m.keys = _distinct_keys(keyed)
        edits[m.new.uid_hash] = (lambda k, t, _k=keyed, _t=timers: (_k, _t))
    report = MigrationReport(str(old), str(template), str(target), plans, dropped, sources=sources)
    if not dry_run:
        write_operators(tmpl, target, edits, replaced={c.new.uid_hash: (old_sp, c.old) for c in sources})
        report.written = True
    return report
