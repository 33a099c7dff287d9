"""Built-in SQL aggregate functions: the accumulator fields each keeps in state, and its result from them.

Boundary: the planner's accumulator row (`AggregateInfoList.getAccTypes`, SQL-FORMAT.md §5.1) is
each aggregate call's buffer fields in call order, the hidden ``COUNT(*)`` the planner adds when
the input retracts and the query has none, then one MapView placeholder per DISTINCT argument
list. Buffers of the declarative functions (`flink-table-planner` ``functions/aggfunctions``):
``COUNT(*)`` count1; ``COUNT(x)`` count; ``SUM`` sum (with retraction: sum, count); ``SUM0`` sum;
``AVG`` sum, count (over DECIMAL: sum / count rounded half-up to the result's scale, as
``DecimalAvgAggFunction`` casts it); ``MIN``/``MAX`` min/max, over retractions one structured field
(``MinWithRetractAccumulator``: min, mapSize; its values live in the state ``agg<i>$map``);
``FIRST_VALUE``/``LAST_VALUE`` one structured field (firstValue|lastValue and its order; with
retraction also MapViews), the result its value; ``LISTAGG`` over append-only input delimiter,
concatenation (the result); over retractions one structured field (``ListAggWithRetractAccumulator``:
list, retractList, and with a separator argument delimiter) whose values live in the ListView state
``agg<i>$list``: the result is those values joined by the delimiter (``,`` by default), NULL when
none is left (`ListAggWithRetractAggFunction.getValue`). A user-defined aggregate keeps one
accumulator field: its logical column is that accumulator as stored (a RAW accumulator stays its
serialized bytes, named by the function), never an error. Other functions are refused by name; their
physical bytes stay readable.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass

import pyarrow as pa

from statekit.errors import UnsupportedFormatError

__all__ = ["Agg", "Layout", "layout", "result"]


@dataclass(frozen=True)
class Agg:
    """One aggregate call of a plan node (``hidden``: the planner's own ``COUNT(*)``)."""

    index: int
    func: str  # COUNT, SUM, SUM0, AVG, MIN, MAX, ...; a user-defined function: UDF:<its name>
    args: tuple[int, ...]
    distinct: bool
    retract: bool
    name: str  # the call's output name in the node's row (``EXPR$1``)
    type: str  # its result type as the plan writes it
    hidden: bool = False
    buffers: tuple[str, ...] | None = None  # None: not a function statekit knows the accumulator of
    first: int = 0  # index of its first accumulator field


@dataclass(frozen=True)
class Layout:
    """An aggregate node's accumulator row: its calls, field names (None if a call's layout is unknown) and DISTINCT groups."""

    aggs: tuple[Agg, ...]
    fields: tuple[str, ...] | None
    distinct: tuple[tuple[int, ...], ...]  # argument lists of the DISTINCT groups, in `distinctAcc_<i>` order


def _buffers(func: str, nargs: int, retract: bool) -> tuple[str, ...] | None:
    if func == "COUNT":
        return ("count1",) if nargs == 0 else ("count",)
    if func == "SUM":
        return ("sum", "count") if retract else ("sum",)
    if func == "SUM0":
        return ("sum",)
    if func == "AVG":
        return ("sum", "count")
    if func in ("MIN", "MAX"):  # over retractions: one structured field (min|max, mapSize; the values in agg<i>$map)
        return (func.lower(),)
    if func in ("FIRST_VALUE", "LAST_VALUE"):  # one structured field: (value, order[, MapViews])
        return (func.lower(),)
    if func == "LISTAGG" and not retract:  # ListAggFunction / ListAggWsWithRetract's append-only sibling
        return ("delimiter", "listagg")
    if func == "LISTAGG":  # ListAgg(Ws)WithRetractAccumulator: one structured field; the values in state agg<i>$list
        return ("listagg",)
    if func.startswith("UDF:"):  # a user-defined aggregate: its accumulator, one field
        return (func[4:],)
    return None


def layout(spec: dict, *, retracting: bool) -> Layout:
    """The accumulator layout of an aggregate ExecNode's JSON (`retracting`: the input retracts: a hidden COUNT(*))."""
    calls = spec.get("aggCalls") or []
    needs = spec.get("aggCallNeedRetractions") or [False] * len(calls)
    aggs: list[Agg] = []
    for i, c in enumerate(calls):
        func = str(c.get("internalName", "")).strip("$").split("$")[0].upper()
        if not func and (c.get("systemName") or c.get("catalogName")):  # a user-defined aggregate function
            func = "UDF:" + str(c.get("systemName") or c.get("catalogName")).split(".")[-1].strip("`")
        args = tuple(int(a) for a in c.get("argList", []))
        aggs.append(Agg(i, func, args, bool(c.get("distinct")), bool(needs[i]) if i < len(needs) else False,
                        str(c.get("name")), str(c.get("type", "")), buffers=_buffers(func, len(args), bool(needs[i]) if i < len(needs) else False)))
    if retracting and not any(a.func == "COUNT" and not a.args and not a.distinct for a in aggs):
        aggs.append(Agg(len(aggs), "COUNT", (), False, True, "_$count1$_", "BIGINT NOT NULL", hidden=True, buffers=("count1",)))
    distinct: list[tuple[int, ...]] = []
    for a in aggs:
        if a.distinct and a.args not in distinct:
            distinct.append(a.args)
    fields: list[str] | None = []
    placed = []
    for a in aggs:
        if a.buffers is None or fields is None:
            fields = None
            placed.append(a)
            continue
        placed.append(Agg(**{**a.__dict__, "first": len(fields)}))
        fields.extend(a.buffers)
    if fields is not None:
        fields.extend(f"distinct_{i}" for i in range(len(distinct)))
    return Layout(tuple(placed), _unique(fields) if fields is not None else None, tuple(distinct))


def _unique(names: list[str]) -> tuple[str, ...]:
    """Names made unique by a ``_<n>`` suffix on repeats (``sum``, ``sum_1``)."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 else f"{n}_{k}")
    return tuple(out)


def result(agg: Agg, acc: pa.StructArray, where: str, views: dict[str, pa.Array] | None = None) -> pa.Array:
    """The aggregate's result per accumulator row (its ``getValue``), from the accumulator struct column and, for
    the functions keeping their values in ListView/MapView states, those states' columns (`views`, by state name)."""
    import pyarrow.compute as pc  # here: the layouts are read when a plan is opened, results only for logical tables

    if agg.buffers is None:
        raise UnsupportedFormatError(
            f"{where}: aggregate {agg.func} ({agg.name}) keeps an accumulator statekit does not evaluate (COUNT, SUM, "
            "SUM0, AVG, MIN/MAX, FIRST_VALUE/LAST_VALUE and LISTAGG it does); its accumulator stays in the "
            "physical table."
        )
    f = [acc.field(agg.first + i) for i in range(len(agg.buffers))]
    if agg.func in ("MIN", "MAX") and pa.types.is_struct(f[0].type):  # Min/MaxWithRetractAccumulator
        name = agg.func.lower()
        return f[0].field(name) if f[0].type.get_field_index(name) >= 0 else f[0].field(0)
    if agg.func in ("FIRST_VALUE", "LAST_VALUE"):  # FirstValueAccumulator / its retracting sibling: the value
        name = "firstValue" if agg.func == "FIRST_VALUE" else "lastValue"
        return f[0].field(name) if pa.types.is_struct(f[0].type) and f[0].type.get_field_index(name) >= 0 else f[0]
    if agg.func == "LISTAGG" and agg.retract:
        return _listagg_retract(agg, f[0], (views or {}).get(f"agg{agg.index}$list"), where)
    if agg.func == "LISTAGG":
        return f[1]
    if agg.func.startswith("UDF:"):  # its accumulator as stored (RAW: the serialized bytes)
        return f[0]
    if agg.func == "SUM" and agg.retract:  # SumWithRetractAggFunction: no rows left -> NULL
        return pc.if_else(pc.equal(f[1], 0), pa.scalar(None, f[0].type), f[0])
    if agg.func == "AVG":
        total, count = f
        if pa.types.is_decimal(total.type):
            return _decimal_avg(total, count, agg.type)
        zero = pc.equal(count, 0)
        safe = pc.if_else(zero, pa.scalar(1, count.type), count)
        if pa.types.is_integer(total.type):  # Java integer division: truncates toward zero
            q = pc.divide(pc.abs(total), pc.abs(safe))
            q = pc.if_else(pc.less(pc.multiply(pc.sign(total), pc.sign(safe)), 0), pc.negate(q), q)
        else:
            q = pc.divide(total, pc.cast(safe, total.type))
        return pc.if_else(zero, pa.scalar(None, q.type), q)
    return f[0]


def _decimal_avg(total: pa.Array, count: pa.Array, result_type: str) -> pa.Array:
    """`DecimalAvgAggFunction`: NULL for no rows, else sum / count cast to the result DECIMAL(p, s) (half-up)."""
    import re

    m = re.match(r"DECIMAL\((\d+),\s*(\d+)\)", result_type.upper())
    p, sc = (int(m.group(1)), int(m.group(2))) if m else (38, max(6, total.type.scale))
    q = decimal.Decimal(1).scaleb(-sc)
    ctx = decimal.Context(prec=80)
    out = [None if t is None or not c else (t / decimal.Decimal(c)).quantize(q, decimal.ROUND_HALF_UP, ctx)
           for t, c in zip(total.to_pylist(), count.to_pylist())]
    return pa.array(out, pa.decimal128(p, sc))


def _listagg_retract(agg: Agg, acc: pa.Array, values: pa.Array | None, where: str) -> pa.Array:
    """`ListAgg(Ws)WithRetractAggFunction.getValue`: the ListView's strings joined by the delimiter; NULL if none."""
    import pyarrow.compute as pc

    if values is None:
        raise UnsupportedFormatError(
            f"{where}: aggregate LISTAGG ({agg.name}) keeps its values in the state agg{agg.index}$list, which this "
            "savepoint does not hold; its accumulator stays in the physical table.")
    if pa.types.is_struct(acc.type) and acc.type.get_field_index("delimiter") >= 0:
        sep = pc.fill_null(acc.field("delimiter"), ",")
    else:
        sep = pa.scalar(",")
    values = values.cast(pa.list_(pa.string()))
    joined = pc.binary_join(values, sep)
    empty = pc.fill_null(pc.equal(pc.list_value_length(values), 0), True)
    return pc.if_else(empty, pa.scalar(None, pa.string()), joined)
