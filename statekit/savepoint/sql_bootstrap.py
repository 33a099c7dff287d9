"""Flink SQL state bootstrapped from history: a group aggregate's accumulators (or a keep-first deduplication's flags) computed from a table and written into a template savepoint of the job.

Boundary: the job's compiled plan says what an operator computes (its grouping columns, aggregate
calls and their accumulator fields, `statekit.format.flink.sqlnames`); a *template*, a savepoint of
the same job taken once with no input, holds its operator ids and serializer snapshots. From the rows
the operator would have seen (its input row's columns, by name) this module computes, per key, the
accumulator row Flink's `GroupAggFunction` would hold after them (append-only input: ``COUNT``,
``COUNT(*)``, ``SUM``, ``SUM0``, ``MIN``/``MAX``, ``AVG``, their ``DISTINCT`` forms with the
``distinctAcc_<i>`` bit sets), or the "already seen" flag of a keep-first deduplication, and writes the
template with that state (`flink_repair.write_operators`: the other operators carried as they are).
Locally with pyarrow (`bootstrap_sql`); a Spark DataFrame is aggregated by Spark and each subtask's
state file written by an executor (`statekit.spark.bootstrap_sql`, the same call). Anything else is refused by name:
FILTER clauses, aggregates over retracting input, FIRST_VALUE/LAST_VALUE/LISTAGG and user-defined
(RAW) accumulators, keep-last deduplication.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import (
    InvalidArgumentError,
    PlanMismatchError,
    SavepointExistsError,
    StateTypeError,
    TemplateHasStateError,
    UnsupportedFormatError,
)
from statekit.format.manifest import OperatorMetadata
from statekit.format.storage import as_path
from statekit.savepoint.reader import Savepoint

__all__ = ["BootstrapSpec", "SqlBootstrapReport", "bootstrap_sql", "plan_bootstrap", "prepare"]

_SUPPORTED = ("COUNT", "SUM", "SUM0", "MIN", "MAX", "AVG")
#: the byte a DISTINCT group's MapView placeholder holds in the accumulator row (RAW with NullSerializer)
MAPVIEW_PLACEHOLDER = b"\x00"


@dataclass
class SqlBootstrapReport:
    """What `bootstrap_sql` wrote (or would write on a dry run): per operator its kind, keys and input rows."""

    template: Path
    target: Path
    operators: list[tuple[str, str, int, int]] = field(default_factory=list)  # (uid or name, kind, keys, rows)
    written: bool = False

    def __str__(self) -> str:
        lines = [f"bootstrap of {self.target} from template {self.template}:"]
        for op, kind, keys, rows in self.operators:
            lines.append(f"  {op} ({kind}): {keys:,} keys from {rows:,} input rows")
        return "\n".join(lines)


@dataclass(frozen=True)
class BootstrapSpec:
    """One operator to bootstrap, as the plan and the template describe it (what the engines compute)."""

    meta: OperatorMetadata
    label: str  # uid or name, for messages
    kind: str  # "group aggregate" | "keep-first"
    key_columns: tuple[str, ...]  # input columns of the key, in key order
    schema: pa.Schema  # the template's physical keyed table (key_group, key, states...)
    key_type: Any  # the key's FlinkType (RowDataSerializer), for key groups
    aggs: tuple[Any, ...] = ()  # sqlaggs.Agg with buffers, in accumulator order
    input_names: tuple[str, ...] = ()  # the operator's input row
    acc_state: str = ""  # accState for a group aggregate; the flag state for keep-first
    distinct: tuple[tuple[int, ...], ...] = ()

    def need(self) -> list[str]:
        """The input columns the computation reads."""
        cols = list(self.key_columns)
        for a in self.aggs:
            cols += [self.input_names[i] for i in a.args if self.input_names[i] not in cols]
        return cols


def _open(template: Any, plan: Any, sql: Any) -> Any:
    from statekit.savepoint.kinds import is_flink_source

    if isinstance(template, Savepoint):
        sp = template
    elif sql is not None:
        sp = Savepoint.open(as_path(template), sql=sql)
    elif plan is not None:
        sp = Savepoint.open(as_path(template), plan=plan)
    else:
        raise InvalidArgumentError("bootstrapping SQL state needs the job's compiled plan (plan=, --plan) or its "
                                   "SQL (sql=, --sql): it says what each operator computes.")
    if not is_flink_source(sp) or sp.plan is None:
        raise PlanMismatchError(f"{sp.path} is not a savepoint of the SQL job the plan describes (no operator of it "
                                "matches the plan); take the template from this job (see the README).")
    return sp


def _refuse(label: str, why: str) -> UnsupportedFormatError:
    return UnsupportedFormatError(f"operator {label}: statekit does not bootstrap {why}; start that operator "
                                  "empty (bootstrap the others) or let the job compute it from the history.")


def plan_bootstrap(sp: Any, operator: str) -> BootstrapSpec:
    """What bootstrapping `operator` of template `sp` (opened with its plan) computes; refusals are raised here."""
    from statekit.savepoint.flink_out import carried_serializers

    meta = sp.operator(operator)
    names = sp.plan_names(meta.identifier)
    label = meta.uid or meta.name or meta.uid_hash
    if names is None:
        raise PlanMismatchError(f"operator {label} of {sp.path} matches no stateful node of the plan; the template "
                                "must be a savepoint of the job the plan describes (same operator ids).")
    stored = carried_serializers(sp, meta)
    if stored is None or stored.key is None or stored.key.form != "row":
        raise PlanMismatchError(f"operator {label} of {sp.path} has no SQL key serializer; is it a template of this "
                                "SQL job?")
    schema = sp.keyed_schema(meta.identifier, with_key_group=True)
    spec = names.node.spec
    inp = tuple(c.name for c in names.plan.input(names.node, 0))
    keys = tuple(c.name for c in names.key)
    kind = sp.operator_kind(meta.identifier) or ""
    if kind == "group aggregate":
        acc = names.acc
        if spec.get("needRetraction") or any(spec.get("aggCallNeedRetractions") or []):
            raise _refuse(label, "an aggregate over a retracting input (its accumulators keep retraction counts "
                          "and maps the history cannot fill)")
        for call in spec.get("aggCalls") or []:
            if int(call.get("filterArg", -1)) >= 0:
                raise _refuse(label, f"aggregate {call.get('name')} with a FILTER clause")
        for a in acc.aggs:
            if a.func not in _SUPPORTED or a.buffers is None:
                what = a.func[4:] + " (a user-defined, RAW accumulator)" if a.func.startswith("UDF:") else a.func
                raise _refuse(label, f"aggregate {what} ({a.name}); it bootstraps COUNT, SUM, SUM0, MIN, MAX and AVG")
        for args in acc.distinct:
            if len(args) != 1:
                raise _refuse(label, "a DISTINCT aggregate over several columns")
        acc_t = schema.field(names.acc_state).type
        if pa.types.is_struct(acc_t) and [acc_t.field(i).name for i in range(acc_t.num_fields)][:2] == ["last_access", "value"]:
            raise _refuse(label, "state with a TTL (table.exec.state.ttl)")
        return BootstrapSpec(meta, label, "group aggregate", keys, schema, stored.key, acc.aggs, inp,
                             names.acc_state, acc.distinct)
    if kind.startswith("deduplication keep-first"):
        flag = "deduplicate-state" if "proctime" in kind else "already-emitted-state-boolean"
        if flag not in schema.names:
            raise PlanMismatchError(f"operator {label}: the template has no state {flag!r} a keep-first "
                                    "deduplication keeps; is it a template of this job?")
        if pa.types.is_struct(schema.field(flag).type):
            raise _refuse(label, "state with a TTL (table.exec.state.ttl)")
        return BootstrapSpec(meta, label, "keep-first", keys, schema, stored.key, (), inp, flag)
    raise _refuse(label, f"a {kind or 'non-aggregate'} operator (group aggregates and keep-first deduplications "
                  "it does)")


_FAMILIES: list[tuple[str, Callable[[pa.DataType], bool]]] = [
    ("integer", pa.types.is_integer), ("floating", pa.types.is_floating), ("decimal", pa.types.is_decimal),
    ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
    ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)),
    ("timestamp", pa.types.is_timestamp), ("date", pa.types.is_date), ("time", pa.types.is_time),
    ("boolean", pa.types.is_boolean), ("null", pa.types.is_null)]
#: a column of the first family may fill a field of the second (widening only)
_WIDENS = {("integer", "floating"), ("integer", "decimal"), ("decimal", "floating"), ("null", "*")}


def _family(t: pa.DataType) -> str:
    return next((name for name, test in _FAMILIES if test(t)), str(t))


def check_type(have_t: pa.DataType, want: pa.DataType, what: str) -> None:
    """Refuse (`StateTypeError`) a column of type `have_t` for state of type `want` unless only widening separates them."""
    have, need = _family(have_t), _family(want)
    if have != need and (have, need) not in _WIDENS and (have, "*") not in _WIDENS:
        raise StateTypeError(f"{what}: the column is {have_t}, the job's state holds {want}; give the column "
                             f"that type (cast it in the DataFrame).")


def fit(col: pa.Array, want: pa.DataType, what: str) -> pa.Array:
    """`col` as type `want`, refusing (`StateTypeError`) a column of another kind of type or a value that does not fit."""
    check_type(col.type, want, what)
    if col.type == want:
        return col
    try:
        return col.cast(want, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise StateTypeError(f"{what}: a value of the {col.type} column does not fit the state's {want} ({exc}).") from None


def _combine(a: Any) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):  # one chunk (the usual table): that array, not a copy of it
        return a.chunk(0) if a.num_chunks == 1 else a.combine_chunks()
    return a


def struct_of(fields: list[pa.Array], t: pa.StructType) -> pa.StructArray:
    return pa.StructArray.from_arrays(fields, fields=[t.field(i) for i in range(t.num_fields)])


def key_column(spec: BootstrapSpec, columns: dict[str, pa.Array]) -> pa.StructArray:
    """The key struct column from the grouped key columns, in the template's key types."""
    kt = spec.schema.field("key").type
    return struct_of([fit(_combine(columns[c]), kt.field(i).type, f"key column {c!r}")
                    for i, c in enumerate(spec.key_columns)], kt)


def _map(keys: pa.Array, parent: np.ndarray, n: int, bits: int, t: pa.MapType) -> pa.Array:
    """A map column of `n` rows: row r holds ``{keys[j]: bits}`` for every j with ``parent[j] == r`` (NULL when none)."""
    order = np.argsort(parent, kind="stable")
    counts = np.bincount(parent, minlength=n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    k = keys.take(pa.array(order)) if len(keys) else keys
    items = pa.array(np.full(len(k), bits, np.int64), t.item_type)
    mask = pa.array(counts == 0)
    return pa.MapArray.from_arrays(pa.array(offsets), k.cast(t.key_type), items, type=t, mask=mask)


def accumulators(spec: BootstrapSpec, table: pa.Table) -> tuple[pa.Table, int, np.ndarray]:
    """The template's physical keyed table (without key groups) holding `table`'s accumulators per key, its input
    rows and the key group of each of its rows (which it is sorted by).

    One pyarrow ``group_by`` computes every buffer (unless each key occurs once: `distinct_keys`, `per_row`);
    DISTINCT aggregates run over each key's distinct values.
    """
    rows = table.num_rows
    acc_t = spec.schema.field(spec.acc_state).type
    missing = [c for c in spec.need() if c not in table.column_names]
    if missing:
        raise InvalidArgumentError(f"operator {spec.label}: the input has no column(s) {missing}; it needs the "
                                   f"operator's input row {list(spec.input_names)} (by name), got {table.column_names}.")
    keys = list(spec.key_columns)
    work = {f"_k{i}": _combine(table.column(c)) for i, c in enumerate(keys)}
    work["_one"] = pa.array(np.ones(rows, np.int8)) if rows else pa.array([], pa.int8())
    aggs: list[tuple[str, str, Any]] = []
    rules: list[tuple[str, str, str]] = []  # the same aggregates for `per_row`: (column, function, NULL rule)
    plan: list[tuple[Any, list[str]]] = []  # per call: the output column of each buffer
    for a in spec.aggs:
        if a.distinct:
            plan.append((a, []))
            continue
        if not a.args:  # COUNT(*)
            aggs.append(("_one", "count", pc.CountOptions("all")))
            rules.append(("_one", "count", "all"))
            plan.append((a, ["_one_count"]))
            continue
        j = len(work)
        work[f"_a{j}"] = _combine(table.column(spec.input_names[a.args[0]]))
        c = f"_a{j}"
        outs = []
        for k, b in enumerate(a.buffers):  # checked before pyarrow aggregates: a string SUM fails there, unnamed
            if b not in ("count", "count1"):
                check_type(work[c].type, acc_t.field(a.first + k).type, _what(spec, a))
            if b in ("count", "count1"):
                aggs.append((c, "count", pc.CountOptions("only_valid")))
                rules.append((c, "count", "only_valid"))
                outs.append(f"{c}_count")
            elif b.startswith("sum"):
                zero = a.func in ("SUM0", "AVG")  # SUM0 and AVG's sum start at 0; SUM is NULL until a value
                aggs.append((c, "sum", pc.ScalarAggregateOptions(min_count=0 if zero else 1)))
                rules.append((c, "sum", "zero" if zero else "null"))
                outs.append(f"{c}_sum")
            else:  # min / max
                aggs.append((c, b, pc.ScalarAggregateOptions(min_count=1)))
                rules.append((c, b, "null"))
                outs.append(f"{c}_{b}")
        plan.append((a, outs))
    dcols = {}
    for i, args in enumerate(spec.distinct):
        c = f"_d{i}"
        work[c] = _combine(table.column(spec.input_names[args[0]]))
        check_type(work[c].type, spec.schema.field(f"distinctAcc_{i}").type.key_type,
                   f"DISTINCT column {spec.input_names[args[0]]!r} of {spec.label}")
        aggs += [(c, "distinct", pc.CountOptions("only_valid")), (c, "count", pc.CountOptions("only_null"))]
        dcols[args] = i
    for i, c in enumerate(keys):
        check_type(work[f"_k{i}"].type, spec.schema.field("key").type.field(i).type, f"key column {c!r}")
    groups = None if spec.distinct else key_order([work[f"_k{i}"] for i in range(len(keys))])
    if groups is not None and len(groups[1]) == rows:
        # one row per key already: each row is its key's group (its input columns ordered, each once)
        ordered, kg = by_key_group(spec, pa.table({c: a for c, a in work.items() if c != "_one"}))
        grouped = per_row({**{c: _combine(ordered.column(c)) for c in ordered.column_names}, "_one": work["_one"]},
                          rules)
    elif groups is not None and all(_sortable(work[c], f) for c, f, _ in rules if c != "_one"):
        grouped, kg = by_key_group(spec, sorted_groups(work, rules, *groups))
    else:
        grouped = pa.table(work).group_by([f"_k{i}" for i in range(len(keys))], use_threads=False).aggregate(aggs)
        grouped, kg = by_key_group(spec, grouped)
    n = grouped.num_rows
    fields: list[pa.Array | None] = [None] * acc_t.num_fields
    distinct_values: dict[int, tuple[pa.Array, np.ndarray]] = {}
    for i, args in enumerate(spec.distinct):
        lists = _combine(grouped.column(f"_d{i}_distinct"))
        distinct_values[i] = (lists.flatten(), pc.list_parent_indices(lists).to_numpy(zero_copy_only=False))
    for a, outs in plan:
        for j, b in enumerate(a.buffers):
            pos = a.first + j
            want = acc_t.field(pos).type
            what = _what(spec, a)
            if not a.distinct:
                fields[pos] = fit(_combine(grouped.column(outs[j])), want, what)
                continue
            values, parent = distinct_values[dcols[a.args]]
            fields[pos] = fit(_per_parent(values, parent, n, b, a.func), want, what)
    for i, args in enumerate(spec.distinct):
        pos = sum(len(a.buffers) for a in spec.aggs) + i
        fields[pos] = pa.array([MAPVIEW_PLACEHOLDER] * n, acc_t.field(pos).type)
    names = [acc_t.field(i).name for i in range(acc_t.num_fields)]
    if "row_kind" in names:
        from statekit.format.flink.rowdata import row_kinds

        fields[names.index("row_kind")] = row_kinds(np.zeros(n, np.uint8)).cast(acc_t.field(names.index("row_kind")).type)
    if any(f is None for f in fields):
        raise PlanMismatchError(f"operator {spec.label}: the template's accumulator row {names} does not match the "
                                "plan's aggregate calls; is the template a savepoint of this job?")
    cols: dict[str, pa.Array] = {"key": key_column(spec, {c: grouped.column(f"_k{i}") for i, c in enumerate(keys)}),
                                 spec.acc_state: struct_of(fields, acc_t)}  # type: ignore[arg-type]
    for i, args in enumerate(spec.distinct):
        shared = [a for a in spec.aggs if a.distinct and a.args == args]
        bits = (1 << len(shared)) - 1  # append-only: bit k = the k-th aggregate over these arguments saw the value
        mt = spec.schema.field(f"distinctAcc_{i}").type
        values, parent = distinct_values[i]
        cols[f"distinctAcc_{i}"] = _map(fit(values, mt.key_type, f"DISTINCT column {spec.input_names[args[0]]!r}"),
                                        parent, n, bits, mt)
        nulls = _combine(grouped.column(f"_d{i}_count")).to_numpy(zero_copy_only=False)
        name = f"distinctAcc_{i}_null_state"
        if name in spec.schema.names:
            cols[name] = pa.array(np.where(nulls > 0, bits, 0), spec.schema.field(name).type,
                                  mask=nulls == 0)
    return physical_table(spec, cols, n), rows, kg


def by_key_group(spec: BootstrapSpec, grouped: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """`grouped` (its key columns ``_k0``... and the buffers) in key-group order (stable) and the key groups: sorted
    here, where the columns are few and plain, the writer takes no rows, and what is built after (the row kinds,
    the struct columns) is built in order."""
    kg = key_groups(spec, {c: grouped.column(f"_k{i}") for i, c in enumerate(spec.key_columns)})
    if len(kg) > 1 and (kg[1:] < kg[:-1]).any():
        order = np.argsort(kg.astype(np.int16), kind="stable")  # key groups < 32768: numpy's radix sort
        grouped, kg = grouped.take(pa.array(order)), kg[order]
    return grouped, kg


def key_groups(spec: BootstrapSpec, columns: dict[str, Any]) -> np.ndarray:
    """The key group (int32) of every key given as its columns (by input column name)."""
    from statekit.format.flink.sqlwrite import key_groups as sql_key_groups

    return sql_key_groups(key_column(spec, columns), spec.key_type, spec.meta.max_parallelism)


def _ints(col: pa.Array) -> np.ndarray | None:
    """The values of an integer or temporal column as numpy integers (zero-copy; slots under NULLs undefined)."""
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_date(t)):
        return None
    width = t.bit_width // 8
    kind = "u" if pa.types.is_unsigned_integer(t) else "i"
    return np.frombuffer(col.buffers()[1], f"<{kind}{width}", len(col), col.offset * width)


def key_order(columns: list[pa.Array]) -> tuple[np.ndarray, np.ndarray] | None:
    """For one integer or temporal key column without NULLs: the rows in key order (numpy's stable radix sort, a
    fraction of a hash aggregation's cost) and where each key's rows start in it. None for other keys (strings,
    several columns, NULLs): the hash aggregation groups those."""
    if len(columns) != 1 or columns[0].null_count:
        return None
    values = _ints(columns[0])
    if values is None:
        return None
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])) if len(ordered) else \
        np.zeros(0, np.int64)
    return order, starts


def distinct_keys(columns: list[pa.Array]) -> bool:
    """Whether one integer or temporal key column without NULLs holds every key once (a history aggregated
    already, or the keys of a snapshot): then each row is its key's group (`per_row`)."""
    groups = key_order(columns)
    return groups is not None and len(groups[1]) == len(columns[0])


def _sortable(col: pa.Array, func: str) -> bool:
    """Whether `sorted_groups` computes `func` over `col` (integers; MIN/MAX of dates and timestamps too)."""
    if func == "count":
        return True
    t = col.type
    return pa.types.is_integer(t) or (func in ("min", "max") and (pa.types.is_timestamp(t) or pa.types.is_date(t)))


def sorted_groups(work: dict[str, pa.Array], rules: list[tuple[str, str, str]], order: np.ndarray,
                  starts: np.ndarray) -> pa.Table:
    """What the grouping's ``aggregate`` returns for `rules` (as `per_row`), computed over the rows in key order
    (`key_order`) with numpy's ``reduceat`` per key: integer sums (wrapping as Java's), counts, MIN/MAX ignoring
    NULLs; a key with no value has a NULL SUM/MIN/MAX (0 for SUM0/AVG's sum). Keys come in key order, so the bytes
    written are the same whatever order the rows arrive in."""
    out: dict[str, pa.Array] = {}
    counts = np.diff(np.append(starts, len(order)))
    present_of: dict[str, np.ndarray] = {}
    valid_of: dict[str, np.ndarray | None] = {}

    def present(c: str) -> np.ndarray:  # per row in key order: whether it holds a value (columns with NULLs)
        if c not in present_of:
            present_of[c] = work[c].is_valid().to_numpy(zero_copy_only=False)[order]
        return present_of[c]

    def valid(c: str) -> np.ndarray | None:  # per key: how many of its rows hold a value (None: all of them)
        if c not in valid_of:
            valid_of[c] = np.add.reduceat(present(c).astype(np.int64), starts) \
                if work[c].null_count and len(starts) else None
        return valid_of[c]

    for c, func, rule in rules:
        col = work[c]
        n_valid = valid(c)
        if func == "count":
            out[f"{c}_count"] = pa.array(counts if rule == "all" or n_valid is None else n_valid, pa.int64())
            continue
        values = _ints(col)
        assert values is not None
        ordered = values[order]
        if col.null_count:
            if func == "sum":
                fill = 0
            else:
                info = np.iinfo(ordered.dtype)
                fill = info.max if func == "min" else info.min
            ordered = np.where(present(c), ordered, ordered.dtype.type(fill))
        mask = None if n_valid is None or (func == "sum" and rule == "zero") else n_valid == 0
        if func == "sum":
            got = np.add.reduceat(ordered.astype(np.int64), starts) if len(starts) else np.zeros(0, np.int64)
            out[f"{c}_sum"] = pa.array(got, pa.int64(), mask=mask)
            continue
        reduce = np.minimum if func == "min" else np.maximum
        got = reduce.reduceat(ordered, starts) if len(starts) else ordered[:0]
        storage = pa.int64() if got.dtype.itemsize == 8 and not pa.types.is_integer(col.type) else \
            pa.int32() if not pa.types.is_integer(col.type) else col.type
        out[f"{c}_{func}"] = pa.array(got, storage, mask=mask).view(col.type)
    keys = {c: work[c].take(pa.array(order[starts])) for c in work if c.startswith("_k")}
    return pa.table({**out, **keys})


def per_row(work: dict[str, pa.Array], rules: list[tuple[str, str, str]]) -> pa.Table:
    """What the grouping's ``aggregate`` returns when every key occurs once, for `rules` ((column, count | sum |
    min | max, "all" / "only_valid" for a count, "zero" / "null" for a sum)): each buffer over its one row (a
    count of 1 or 0, the value itself, 0 or NULL for a NULL), in the input's order (as the grouping keeps it)."""
    out: dict[str, pa.Array] = {}
    for col, func, rule in rules:
        arr = work[col]
        if func == "count":
            valid = np.ones(len(arr), np.int64) if rule == "all" or not arr.null_count else \
                arr.is_valid().to_numpy(zero_copy_only=False).astype(np.int64)
            out[f"{col}_count"] = pa.array(valid)
        elif func == "sum" and rule == "zero" and arr.null_count:
            out[f"{col}_sum"] = arr.fill_null(pa.scalar(0, arr.type))
        else:  # sum (min_count 1), min, max of one value: the value, NULL stays NULL
            out[f"{col}_{func}"] = arr
    return pa.table({**out, **{c: work[c] for c in work if c.startswith("_k")}})


def _what(spec: BootstrapSpec, a: Any) -> str:
    return f"aggregate {a.func}({', '.join(spec.input_names[x] for x in a.args) or '*'}) of {spec.label}"


def _per_parent(values: pa.Array, parent: np.ndarray, n: int, buffer: str, func: str) -> pa.Array:
    """One buffer of a DISTINCT aggregate per group, over that group's distinct non-NULL values."""
    counts = np.bincount(parent, minlength=n)
    if buffer in ("count", "count1"):
        return pa.array(counts.astype(np.int64))
    t = pa.table({"p": pa.array(parent, pa.int64()), "v": values})
    op = "sum" if buffer.startswith("sum") else buffer
    g = t.group_by("p", use_threads=False).aggregate([("v", op)])
    out = pa.nulls(n, g.column(f"v_{op}").type) if n else pa.array([], g.column(f"v_{op}").type)
    idx = g.column("p").to_numpy()
    full = pc.take(_combine(g.column(f"v_{op}")), pa.array(np.searchsorted(idx, np.arange(n)).clip(0, max(len(idx) - 1, 0)))) \
        if len(idx) else out
    has = np.isin(np.arange(n), idx)
    if buffer.startswith("sum") and func in ("SUM0", "AVG"):
        return pc.if_else(pa.array(has), full, pa.scalar(0, full.type))
    return pc.if_else(pa.array(has), full, pa.scalar(None, full.type))


def physical_table(spec: BootstrapSpec, cols: dict[str, pa.Array], n: int) -> pa.Table:
    """`cols` in the template's keyed table layout (other states NULL: no entry), without key groups yet."""
    out = {}
    for f in spec.schema:
        if f.name == "key_group":
            continue
        out[f.name] = cols[f.name] if f.name in cols else pa.nulls(n, f.type)
    return pa.table(out)


def first_keys(spec: BootstrapSpec, table: pa.Table) -> tuple[pa.Table, int, np.ndarray]:
    """A keep-first deduplication's state: every key of `table` seen (its first row was emitted), the input rows
    and the key groups (as `accumulators`)."""
    missing = [c for c in spec.key_columns if c not in table.column_names]
    if missing:
        raise InvalidArgumentError(f"operator {spec.label}: the input has no column(s) {missing}; it needs the "
                                   f"operator's partition key {list(spec.key_columns)} (by name).")
    work = pa.table({f"_k{i}": _combine(table.column(c)) for i, c in enumerate(spec.key_columns)})
    grouped = work.group_by(list(work.column_names), use_threads=False).aggregate([])
    grouped, kg = by_key_group(spec, grouped)
    n = grouped.num_rows
    cols = {"key": key_column(spec, {c: grouped.column(f"_k{i}") for i, c in enumerate(spec.key_columns)}),
            spec.acc_state: pa.array(np.ones(n, bool), spec.schema.field(spec.acc_state).type)}
    return physical_table(spec, cols, n), table.num_rows, kg


def with_key_groups(spec: BootstrapSpec, keyed: pa.Table, kg: np.ndarray | None = None) -> pa.Table:
    """`keyed` with its ``key_group`` column (Flink's hash of each key's BinaryRowData, unless given), first."""
    from statekit.format.flink.sqlwrite import key_groups

    if kg is None:
        kg = key_groups(_combine(keyed.column("key")), spec.key_type, spec.meta.max_parallelism)
    return keyed.add_column(0, spec.schema.field("key_group"), pa.array(kg, pa.int32()))


def _as_table(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, (str, os.PathLike)):
        from statekit.format.tables import read_table

        return read_table(data)
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if type(data).__module__.startswith("duckdb"):
        got = data.arrow()
        return got.read_all() if isinstance(got, pa.RecordBatchReader) else got
    raise InvalidArgumentError(f"bootstrap data of type {type(data).__name__}: give a pyarrow Table, a pandas or "
                               "Spark DataFrame, a DuckDB relation, or a Parquet/CSV/JSON-lines file or Delta table.")


def _is_spark(data: Any) -> bool:
    return type(data).__module__.startswith("pyspark")


def check_empty(sp: Any, spec: BootstrapSpec, replace: bool) -> None:
    """Refuse (`TemplateHasStateError`) a template whose operator already holds state, unless `replace`."""
    if replace:
        return
    batches = sp.keyed_batches(spec.meta.identifier) or [sp.keyed_table(spec.meta.identifier)]
    for batch in batches:  # the first batch that holds a key decides: a template is read no further
        if batch.num_rows:
            raise TemplateHasStateError(
                f"operator {spec.label} of template {sp.path} already holds state (keys such as "
                f"{batch.column('key')[0].as_py()!r}); bootstrapping would drop it. Take the template with no input, "
                "or pass replace=True (--replace) to replace that operator's state.")
    if sp.timers(spec.meta.identifier) is not None and sp.timers(spec.meta.identifier).num_rows:
        raise TemplateHasStateError(f"operator {spec.label} of template {sp.path} holds timers; take the template "
                                    "with no input, or pass replace=True (--replace).")


def prepare(template: Any, target: Any, *, operator: str, plan: Any = None, sql: Any = None,
            replace: bool = False) -> tuple[Any, BootstrapSpec, SqlBootstrapReport]:
    """The checks before any row is read (`target` free, template and plan of one job, the operator supported, no
    state in the way): the template opened, what to compute, and the report to fill. Raises as `bootstrap_sql`."""
    out = cast(Path, as_path(target))  # a URI: a StoragePath, which offers the Path operations used here
    if out.exists():
        raise SavepointExistsError(f"{target} already exists; savepoints are never overwritten. Choose a new path.")
    sp = _open(template, plan, sql)
    spec = plan_bootstrap(sp, operator)
    check_empty(sp, spec, replace)
    return sp, spec, SqlBootstrapReport(Path(str(sp.path)), out)


def bootstrap_sql(data: Any, template: str | os.PathLike[str] | Savepoint, target: str | os.PathLike[str], *,
                  operator: str, plan: Any = None, sql: Any = None, replace: bool = False,
                  dry_run: bool = False) -> SqlBootstrapReport:
    """Write `template` with `operator`'s state computed from `data` as a new savepoint at `target`.

    Parameters
    ----------
    data
        The rows the operator would have seen, with its input row's columns by name (for ``SELECT user_name,
        COUNT(*), SUM(amount) ... GROUP BY user_name``: ``user_name`` and ``amount``; a WHERE before the
        operator is the caller's to apply): a pyarrow Table, a pandas DataFrame, a DuckDB relation, a
        Parquet/CSV/JSON-lines file or Delta table. A Spark DataFrame goes to `statekit.spark.bootstrap_sql`
        (the same call: Spark aggregates, each subtask's file is written on an executor).
    template
        A savepoint of the same job taken with no input (its operator ids and serializer snapshots).
    target
        Where the new savepoint goes; must not exist. Written atomically.
    operator
        The operator's uid (``6_group-aggregate``), uid hash or name.
    plan, sql
        The job's compiled plan (``plan.json``) or its SQL (compiled by Flink's planner).
    replace
        Allow a template whose operator holds state already (it is replaced).
    dry_run
        Compute and report, write nothing.

    Raises
    ------
    PlanMismatchError
        The template is not a savepoint of the job the plan describes.
    UnsupportedFormatError
        An aggregate or operator statekit does not bootstrap (named).
    StateTypeError
        A column whose type does not fit the state.
    TemplateHasStateError
        The operator holds state in the template and `replace` is not set.
    """
    if _is_spark(data):
        raise InvalidArgumentError("a Spark DataFrame is aggregated by Spark: call statekit.spark.bootstrap_sql "
                                   "(the same arguments).")
    sp, spec, report = prepare(template, target, operator=operator, plan=plan, sql=sql, replace=replace)
    out = report.target
    table = _as_table(data)
    keyed, rows, kg = accumulators(spec, table) if spec.kind == "group aggregate" else first_keys(spec, table)
    report.operators.append((spec.label, spec.kind, keyed.num_rows, rows))
    if dry_run:
        return report
    keyed = with_key_groups(spec, keyed, kg)
    from statekit.savepoint.flink_repair import write_operators

    write_operators(sp, out, {spec.meta.uid_hash: lambda _keyed, timers: (keyed, timers.slice(0, 0))})
    report.written = True
    return report
