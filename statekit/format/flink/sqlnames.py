"""A compiled plan matched to a SQL job's savepoint: each stateful ExecNode's operator, its key and row column names.

Boundary: `match` pairs every stateful node of a `statekit.format.flink.sqlplan.Plan` with the
savepoint operator of its uid (``<id>_<transformation>``) and checks that they agree (operator
kind, key column types, row arities), refusing the first mismatch by name (`PlanMismatchError`);
`NamedSqlKind` is the SQL job kind with those names: key columns ``user_name`` instead of ``k0``,
accumulator fields ``count1, sum, ...``, stored rows by their input columns. The logical tables
built on them are `statekit.format.flink.sqllogical`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from statekit.errors import PlanMismatchError
from statekit.format.flink.keyed import KeyedLayout, KeyedResult, state_ddl
from statekit.format.flink.metadata import OperatorState
from statekit.format.flink.proxy import StateMeta
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.sql import SqlKind, is_sql, operator_kind
from statekit.format.flink.sqlaggs import Layout, layout
from statekit.format.flink.sqlplan import Column, Plan, PlanNode
from statekit.identifiers import OperatorIdentifier
from statekit.types import parse_ddl

__all__ = ["NamedSqlKind", "OperatorNames", "match", "rename_as"]

_ACC_STATE = {"group aggregate": "accState", "window TVF aggregate": "window-aggs",
              "legacy group window aggregate": "window-aggs"}


@dataclass
class OperatorNames:
    """What the plan says about one operator: its node, key columns, and names of the rows its states hold.

    ``rows`` maps (state name, ``value`` | ``key``) to the field names of the row stored there
    (``key``: a map state's user key row); ``acc`` is an aggregate's accumulator layout.
    """

    plan: Plan
    node: PlanNode
    key: tuple[Column, ...]
    rows: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    acc: Layout | None = None
    acc_state: str | None = None

    @property
    def kind(self) -> str:
        return self.node.kind or "other"


def _fail(plan: Plan, node: PlanNode, why: str) -> PlanMismatchError:
    return PlanMismatchError(
        f"plan {plan.source} does not match the savepoint: ExecNode {node.id} ({node.stem}, uid {node.uid!r}) {why}. "
        "Pass the compiled plan this savepoint's job ran from (the JSON of COMPILE PLAN that EXECUTE PLAN "
        "started); without one, read the savepoint without a plan (key columns k0.., fields f0..)."
    )


def _names(cols: list[Column], idx: list[int], plan: Plan, node: PlanNode, what: str) -> tuple[Column, ...]:
    if any(not 0 <= i < len(cols) for i in idx):
        raise _fail(plan, node, f"names {what} columns {idx} its input row of {len(cols)} fields does not have")
    return tuple(cols[i] for i in idx)


def _node_names(plan: Plan, node: PlanNode) -> OperatorNames:
    """Key columns, accumulator layout and stored-row names of a stateful node, from the plan alone."""
    spec, kind = node.spec, node.kind
    inp = plan.input(node, 0)
    if kind in _ACC_STATE:
        key = _names(inp, [int(i) for i in spec.get("grouping", [])], plan, node, "grouping")
        acc = layout(spec, retracting=bool(spec.get("needRetraction")))
        out = OperatorNames(plan, node, key, acc=acc, acc_state=_ACC_STATE[kind])
        if acc.fields is not None:
            fields = list(acc.fields)
            for i, args in enumerate(acc.distinct):
                fields[fields.index(f"distinct_{i}")] = "distinct_" + "_".join(inp[a].name for a in args)
            out.rows[(_ACC_STATE[kind], "value")] = tuple(fields)
        for i, args in enumerate(acc.distinct):
            if len(args) > 1:
                out.rows[(f"distinctAcc_{i}", "key")] = tuple(inp[a].name for a in args)
        return out
    if kind == "deduplication":
        key = _names(inp, [int(i) for i in spec.get("uniqueKeys", [])], plan, node, "partition key")
        out = OperatorNames(plan, node, key)
        for s in ("deduplicate-state", "waiting-to-emit-on-timer"):
            out.rows[(s, "value")] = tuple(c.name for c in inp)
        return out
    if kind == "regular join":
        js = spec.get("joinSpec", {})
        key = _names(inp, [int(i) for i in js.get("leftKeys", [])], plan, node, "join key")
        out = OperatorNames(plan, node, key)
        for side, i in (("left-records", 0), ("right-records", 1)):
            names = tuple(c.name for c in plan.input(node, i))
            out.rows[(side, "key")] = names
            out.rows[(side, "value")] = names
        return out
    return OperatorNames(plan, node, ())


def _row_names(t: FlinkType, names: tuple[str, ...]) -> FlinkType | None:
    """`t` with its SQL row's fields named (through a TTL wrapper); None where `t` holds no row of that arity."""
    if t.form == "ttl":
        inner = _row_names(t.children[1], names)
        return None if inner is None else replace(t, children=(t.children[0], inner))
    if t.form == "row" and len(t.logical) == len(names):
        return replace(t, field_names=names)
    if t.kind == "tuple" and len(t.children) == 2 and t.children[0].form == "row":  # an outer join's (row, associations)
        inner = _row_names(t.children[0], names)
        return None if inner is None else replace(t, children=(inner, t.children[1]))
    return None


def _counts(t: FlinkType) -> bool:
    """Whether a map state's values are counts (an Integer, or an outer join's Tuple2 of counts): its keys are rows."""
    t = t.children[1] if t.form == "ttl" else t
    return t.kind == "int" or (t.kind == "tuple" and all(c.kind == "int" for c in t.children))


def _named_state(s: StateMeta, names: OperatorNames, strict: bool) -> StateMeta:
    t = s.value_type
    for role in ("value", "key"):
        want = names.rows.get((s.name, role))
        if want is None:
            continue
        if t.kind == "map" and s.keyed_kind == "map":
            if role == "key" and names.kind == "regular join" and not _counts(t.children[1]):
                continue  # a unique key -> row map: its keys are the unique key's columns, which the plan does not list
            i = 0 if role == "key" else 1
            child = _row_names(t.children[i], want)
            if child is not None:
                t = replace(t, children=tuple(child if j == i else c for j, c in enumerate(t.children)))
            continue
        if role == "key":
            continue
        row = _row_names(t, want)
        if row is not None:
            t = row
        elif strict and (t.form == "row" or (t.form == "ttl" and t.children[1].form == "row")):
            inner = t.children[1] if t.form == "ttl" else t
            raise _fail(names.plan, names.node, f"stores rows of {len(want)} fields ({', '.join(want)}) in state "
                        f"{s.name!r}, where the savepoint holds rows of {len(inner.logical)} fields")
    return replace(s, serializers={**s.serializers, "VALUE_SERIALIZER": t})


def named_layout(lay: KeyedLayout, names: OperatorNames, *, strict: bool = False) -> KeyedLayout:
    """`lay` with the plan's key column names and stored-row field names."""
    key = replace(lay.key_type, field_names=tuple(c.name for c in names.key)) \
        if lay.key_type.form == "row" and len(lay.key_type.logical) == len(names.key) else lay.key_type
    return replace(lay, key_type=key, states=tuple(_named_state(s, names, strict) for s in lay.states))


def _check(names: OperatorNames, op: OperatorState, lay: KeyedLayout | None) -> None:
    plan, node = names.plan, names.node
    if lay is None or not is_sql(lay):
        raise _fail(plan, node, f"is operator {op.name!r} in the savepoint, which keeps no SQL keyed state")
    have = operator_kind(op.name, lay) or "other"
    if not have.startswith(names.kind):
        raise _fail(plan, node, f"is a {names.kind}, but the savepoint's operator {op.name!r} of that uid is a {have}")
    if lay.key_type.form == "row":
        got = [t.root for t in lay.key_type.logical]
        want = [c.root for c in names.key]
        if got != want:
            raise _fail(plan, node, f"keys by ({', '.join(f'{c.name} {c.root}' for c in names.key)}), but the "
                        f"savepoint's operator {op.name!r} keys by ({', '.join(got)})")
    acc = names.rows.get((names.acc_state or "", "value"))
    state = {s.name: s for s in lay.states}.get(names.acc_state or "")
    if acc is not None and state is not None:
        t = state.value_type.children[1] if state.value_type.form == "ttl" else state.value_type
        if t.form == "row" and len(t.logical) != len(acc):
            raise _fail(plan, node, f"keeps {len(acc)} accumulator fields ({', '.join(acc)}), but state "
                        f"{state.name!r} of operator {op.name!r} holds {len(t.logical)}")
    named_layout(lay, names, strict=True)


def match(plan: Plan, ops: list[tuple[OperatorState, KeyedLayout | None]]) -> dict[str, OperatorNames]:
    """Per operator id, the plan's names for it; the first disagreement between plan and savepoint refused by name."""
    by_id = {op.operator_id: (op, lay) for op, lay in ops}
    out: dict[str, OperatorNames] = {}
    nodes = plan.stateful
    if not nodes:
        raise PlanMismatchError(f"plan {plan.source} has no stateful ExecNode (aggregate, window, deduplication, join); "
                                "it cannot name a savepoint's state. Pass the compiled plan of the job that wrote it.")
    for node in nodes:
        h = OperatorIdentifier.for_uid(node.uid).uid_hash
        if h not in by_id:
            uids = [op.verified_uid for op, lay in ops if lay is not None and is_sql(lay)]
            hint = "the savepoint's SQL operators have no uids (the job did not run from a compiled plan)" \
                if not any(uids) else f"its SQL operators' uids are {sorted(u for u in uids if u)}"
            raise _fail(plan, node, f"has no operator in the savepoint (operator id {h}; {hint})")
        op, lay = by_id[h]
        names = _node_names(plan, node)
        _check(names, op, lay)
        out[h] = names
    planned = {n.uid for n in nodes}
    for op, lay in ops:
        uid = op.verified_uid
        if lay is not None and is_sql(lay) and op.operator_id not in out:
            raise PlanMismatchError(
                f"plan {plan.source} does not match the savepoint: operator {op.name!r} (uid {uid!r}, id "
                f"{op.operator_id}) keeps SQL state but the plan has no ExecNode for it (the plan's stateful nodes: "
                f"{sorted(planned)}). Pass the compiled plan this savepoint's job ran from."
            )
    return out


def rename_as(a: Any, t: pa.DataType) -> Any:
    """Array `a` as type `t` whose struct fields are `a`'s renamed by position (Arrow's cast matches fields by name)."""
    if isinstance(a, pa.ChunkedArray):
        return pa.chunked_array([rename_as(c, t) for c in a.chunks], t)
    if a.type == t:
        return a
    import pyarrow.compute as pc  # here: opening with a plan needs no compute functions (their import is slow)

    mask = pc.is_null(a) if a.null_count else None
    if pa.types.is_struct(t):
        kids = [rename_as(c, t.field(i).type) for i, c in enumerate(a.flatten())]
        return pa.StructArray.from_arrays(kids, fields=list(t), mask=mask)
    if pa.types.is_map(t):
        entries = a.values.flatten()
        return pa.MapArray.from_arrays(a.offsets, rename_as(entries[0], t.key_type), rename_as(entries[1], t.item_type),
                                       type=t, mask=mask)
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(a.offsets, rename_as(a.values, t.value_type), type=t, mask=mask)
    return a.cast(t)


class NamedSqlKind(SqlKind):
    """The SQL job kind with a compiled plan's names for one operator (see the module docstring)."""

    def __init__(self, names: OperatorNames) -> None:
        self.names = names
        self._last: tuple[KeyedLayout, KeyedLayout] | None = None

    def lay(self, lay: KeyedLayout) -> KeyedLayout:
        """`lay` named by the plan (the last one kept: an operator has one layout)."""
        if self._last is None or not (self._last[0] is lay or self._last[0] == lay):
            self._last = (lay, named_layout(lay, self.names))
        return self._last[1]

    def key_ddl(self, lay: KeyedLayout) -> str:
        return super().key_ddl(self.lay(lay))

    def states(self, lay: KeyedLayout, declared: dict[str, str]):
        return super().states(self.lay(lay), declared)

    def decode(self, result: KeyedResult, lay: KeyedLayout, declared: dict[str, str], where: str) -> KeyedResult:
        named = self.lay(lay)
        key_t = parse_ddl(named.key_type.ddl())
        types = {s.name: parse_ddl(state_ddl(s)) for s in named.states}

        def rename(table: pa.Table, cols: dict[str, pa.DataType]) -> pa.Table:
            for name, t in cols.items():
                if name in table.column_names:
                    i = table.column_names.index(name)
                    table = table.set_column(i, pa.field(name, t, table.schema.field(i).nullable),
                                             rename_as(table.column(i), t))
            return table

        return KeyedResult(rename(result.table, {"key": key_t, **types}), rename(result.timers, {"key": key_t}))

    def key_value(self, key: Any, lay: KeyedLayout) -> Any:
        return super().key_value(key, self.lay(lay))

    def key_group(self, key: Any, lay: KeyedLayout, max_parallelism: int) -> int | None:
        return super().key_group(key, self.lay(lay), max_parallelism)

    def key_bytes(self, key: Any, lay: KeyedLayout) -> bytes | None:
        return super().key_bytes(key, self.lay(lay))

    def operator_kind(self, name: str, lay: KeyedLayout | None) -> str | None:
        """As without a plan, but a semi or anti join (`StreamingSemiAntiJoinOperator`: its state is a left outer
        join's) named by the plan's join type."""
        kind = super().operator_kind(name, lay)
        join = str(self.names.node.spec.get("joinSpec", {}).get("joinType", "")).upper()
        return {"SEMI": "semi join", "ANTI": "anti join"}.get(join, kind) if kind == "regular join" else kind

    def named_layout(self, lay: KeyedLayout) -> KeyedLayout:
        """`lay` with the plan's names (its row types decode the one-key path's values by those names)."""
        return self.lay(lay)

    def key_groups(self, keys: list[Any], lay: KeyedLayout, max_parallelism: int) -> list[int] | None:
        return super().key_groups(keys, self.lay(lay), max_parallelism)
