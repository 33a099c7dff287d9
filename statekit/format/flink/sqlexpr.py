"""The few RexNode expressions of a compiled plan that statekit evaluates over Arrow columns, as Flink SQL defines them.

Boundary: the projections the planner puts between an aggregate and its sink when it rewrites
aggregates (``AVG(x)`` -> ``CASE(COUNT(x) = 0, NULL, SUM0(x)) / COUNT(x)``, ``SUM(x)`` ->
``CASE(COUNT(x) = 0, NULL, SUM0(x))``) and the casts it adds: references, literals, ``CAST``,
``CASE``, ``=``, ``<>``, ``+ - * /`` (integer division truncates toward zero, as Java's),
``IS [NOT] NULL``; NULL in, NULL out. `statekit.format.flink.sqlplan.EVALUATED` lists them, and
`Plan.sink_columns` stops before anything else.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import UnsupportedFormatError
from statekit.format.flink.sqlplan import type_root

__all__ = ["arrow_type", "evaluate"]

_ARROW = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "SMALLINT": pa.int16(), "TINYINT": pa.int8(),
          "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "VARCHAR": pa.string(), "CHAR": pa.string(),
          "BOOLEAN": pa.bool_()}


def arrow_type(plan_type: Any) -> pa.DataType | None:
    """The Arrow type of a plan type statekit casts to (numbers, strings, booleans); None for others."""
    t = json.loads(plan_type) if isinstance(plan_type, str) and plan_type.startswith("{") else plan_type
    return _ARROW.get(type_root(t)[0])


def _array(v: Any, n: int) -> pa.Array:
    return pa.repeat(v, n) if isinstance(v, pa.Scalar) else v


def _divide(a: pa.Array, b: pa.Array) -> pa.Array:
    if pa.types.is_integer(a.type) and pa.types.is_integer(b.type):
        valid = pc.and_kleene(pc.is_valid(a), pc.and_kleene(pc.is_valid(b), pc.not_equal(pc.fill_null(b, 0), 0)))
        x = pc.fill_null(a, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        y = pc.fill_null(b, 1).to_numpy(zero_copy_only=False).astype(np.int64)
        y = np.where(y == 0, 1, y)
        q = np.abs(x) // np.abs(y) * np.sign(x) * np.sign(y)
        return pa.array(q, pa.int64(), mask=~pc.fill_null(valid, False).to_numpy(zero_copy_only=False))
    if pa.types.is_floating(a.type) or pa.types.is_floating(b.type):
        return pc.divide(pc.cast(a, pa.float64()), pc.cast(b, pa.float64()))
    raise UnsupportedFormatError(f"statekit does not divide {a.type} by {b.type} as Flink SQL does (DECIMAL); "
                                 "the aggregate's own columns are in the physical table")


def evaluate(e: dict, columns: dict[int, Any], n: int, cast) -> pa.Array:
    """`e` over `columns` (output index -> Arrow array of `n` rows); `cast(array, plan type)` converts types."""
    kind = e.get("kind")
    if kind == "INPUT_REF":
        if int(e["inputIndex"]) not in columns:
            raise UnsupportedFormatError(f"the plan's projection reads column {e['inputIndex']} of the operator's "
                                         "output, which statekit does not compute from its state")
        return columns[int(e["inputIndex"])]
    if kind == "LITERAL":
        t = arrow_type(e.get("type"))
        return pa.nulls(n, t or pa.null()) if e.get("value") is None else _array(pa.scalar(e["value"], t), n)
    name = e.get("internalName")
    ops = [evaluate(o, columns, n, cast) for o in e.get("operands", [])]
    if name == "$CAST$1":
        return cast(ops[0], e.get("type") if isinstance(e.get("type"), str) else json.dumps(e.get("type")))
    if name == "$CASE$1":  # CASE(c1, v1, c2, v2, ..., else)
        out = ops[-1]
        for c, v in reversed(list(zip(ops[0:-1:2], ops[1:-1:2]))):
            t = v.type if not pa.types.is_null(v.type) else out.type
            out = pc.if_else(pc.fill_null(c, False), v.cast(t), out.cast(t))
        return out
    if name in ("$=$1", "$<>$1"):
        a, b = ops
        if a.type != b.type and pa.types.is_integer(a.type) and pa.types.is_integer(b.type):
            a, b = a.cast(pa.int64()), b.cast(pa.int64())
        return pc.equal(a, b) if name == "$=$1" else pc.not_equal(a, b)
    if name == "$/$1":
        return _divide(*ops)
    if name in ("$+$1", "$-$1", "$*$1"):
        fn = {"$+$1": pc.add, "$-$1": pc.subtract, "$*$1": pc.multiply}[name]
        return fn(*ops)
    if name == "$IS NULL$1":
        return pc.is_null(ops[0])
    if name == "$IS NOT NULL$1":
        return pc.is_valid(ops[0])
    raise UnsupportedFormatError(f"statekit does not evaluate {name} of the plan's projections")
