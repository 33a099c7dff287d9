"""Diff two savepoints with Spark: keyed rows, timers or operator state rows added, removed or changed (a DataFrame), operators and states added or removed."""

from __future__ import annotations

import os
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from statekit.errors import InvalidArgumentError
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.diff import check_same_keys
from statekit.savepoint.diff import diff as local_diff
from statekit.spark.reader import SavepointReader

__all__ = ["diff", "diff_operators"]

Side = SavepointReader | str | os.PathLike[str]


def _reader(side: Side, spark: SparkSession | None) -> SavepointReader:
    if isinstance(side, SavepointReader):
        return side
    if spark is None:
        from statekit.spark.session import spark_session

        spark = spark_session()
    return SavepointReader.read(spark, side)


def _comparable(c: Column, data_type: Any) -> Column:
    # Spark cannot compare maps; their entries, sorted, compare as the maps' contents.
    return F.array_sort(F.map_entries(c)) if isinstance(data_type, MapType) else c


def diff(a: Side, b: Side, op: OperatorIdentifier | str, *, table: str = "keyed",
         spark: SparkSession | None = None) -> DataFrame:  # fmt: skip
    """What differs in one table of operator `op` between savepoints `a` (old) and `b` (new), as a DataFrame.

    The rows are those `statekit.savepoint.diff` gives for the table:

    - ``table="keyed"`` (the default): ``key``, [``namespace``], ``change`` (``added`` |
      ``removed`` | ``changed``), ``old`` (a struct of the row's states in `a`, null when added)
      and ``new`` (in `b`, null when removed). Rows are matched by key and namespace with a full
      outer join; only states of both sides decide ``changed`` (maps compare by content).
    - ``table="timers"``: the timers (``key``, [``namespace``], ``timestamp``, ``domain``) only in
      `b` (``change`` ``added``) or only in `a` (``removed``).
    - ``table=<operator state name>``: list and union state compare as multisets of elements
      (``value``, ``change`` ``added`` | ``removed``, one row per element more on one side);
      broadcast state by key (``key``, ``change``, ``old``, ``new``).

    Unchanged rows are left out. `a` and `b` are `SavepointReader`\\ s or paths (opened with
    `spark`, or the active session). Operators and states added or removed: `diff_operators`.

    Raises
    ------
    KeyTypeMismatchError
        `op` is keyed by different types in `a` and `b` (keyed table and timers).
    UnknownOperatorError
        `op` is missing from `a` or `b`.
    UnknownStateError
        `table` names no operator state of `op` on one side.
    """
    ra = _reader(a, spark)
    rb = _reader(b, spark if spark is not None else ra.spark)
    ident = OperatorIdentifier.coerce(op)
    ma, mb = ra._operator(ident), rb._operator(ident)
    if table not in ("keyed", "timers"):
        return _state_rows(ra, rb, ident, table)
    check_same_keys(ma, mb)
    if table == "timers":
        return _timers(ra, rb, ident)
    da, db = ra.read_keyed_state(ident), rb.read_keyed_state(ident)
    states_a = [s.name for s in ma.keyed_states]
    states_b = [s.name for s in mb.keyed_states]
    common = [s for s in states_b if s in states_a]
    windowed = mb.namespace_type is not None
    key_cols = ["key", "namespace"] if windowed else ["key"]

    def side(df: DataFrame, tag: str, states: list[str]) -> DataFrame:
        cols = [F.col(c).alias(f"__{c}_{tag}") for c in key_cols]
        row = F.struct(*[F.col(s) for s in states]) if states else F.lit(None)
        cols.append(row.alias(f"__row_{tag}"))
        cols += [_comparable(F.col(s), df.schema[s].dataType).alias(f"__s_{s}_{tag}") for s in common]
        return df.select(*cols)

    left, right = side(da, "a", states_a), side(db, "b", states_b)
    cond = F.col("__key_a") == F.col("__key_b")
    if windowed:
        cond = cond & F.col("__namespace_a").eqNullSafe(F.col("__namespace_b"))
    joined = left.join(right, cond, "full_outer")
    differs = F.lit(False)
    for s in common:
        differs = differs | ~F.col(f"__s_{s}_a").eqNullSafe(F.col(f"__s_{s}_b"))
    change = (
        F.when(F.col("__key_a").isNull(), "added")
        .when(F.col("__key_b").isNull(), "removed")
        .when(differs, "changed")
    )
    out = [F.coalesce(F.col(f"__{c}_b"), F.col(f"__{c}_a")).alias(c) for c in key_cols]
    out += [
        change.alias("change"),
        F.when(F.col("__key_a").isNotNull(), F.col("__row_a")).alias("old"),
        F.when(F.col("__key_b").isNotNull(), F.col("__row_b")).alias("new"),
    ]
    return joined.select(*out).where(F.col("change").isNotNull())


def _timers(ra: SavepointReader, rb: SavepointReader, ident: OperatorIdentifier) -> DataFrame:
    ta, tb = ra.read_timers(ident), rb.read_timers(ident)
    # a timer is the whole row: the set differences both ways (timers are unique, so exceptAll is exact)
    return tb.exceptAll(ta).withColumn("change", F.lit("added")).unionByName(
        ta.exceptAll(tb).withColumn("change", F.lit("removed")))


def _state_rows(ra: SavepointReader, rb: SavepointReader, ident: OperatorIdentifier, name: str) -> DataFrame:
    info = ra._operator(ident).operator_state(name)
    other = rb._operator(ident).operator_state(name)
    if other.redistribution != info.redistribution:
        raise InvalidArgumentError(
            f"state {name!r} of operator {ident} is {info.redistribution} state in the first savepoint and "
            f"{other.redistribution} in the second; their rows cannot be matched. Compare the tables yourself."
        )
    if info.redistribution == "broadcast":
        da, db = ra.read_broadcast_state(ident, name), rb.read_broadcast_state(ident, name)
        left = da.select(F.col("key").alias("__key_a"), F.col("value").alias("__old"),
                         _comparable(F.col("value"), da.schema["value"].dataType).alias("__va"))  # fmt: skip
        right = db.select(F.col("key").alias("__key_b"), F.col("value").alias("__new"),
                          _comparable(F.col("value"), db.schema["value"].dataType).alias("__vb"))  # fmt: skip
        joined = left.join(right, F.col("__key_a") == F.col("__key_b"), "full_outer")
        change = (F.when(F.col("__key_a").isNull(), "added").when(F.col("__key_b").isNull(), "removed")
                  .when(~F.col("__va").eqNullSafe(F.col("__vb")), "changed"))  # fmt: skip
        return joined.select(F.coalesce(F.col("__key_b"), F.col("__key_a")).alias("key"), change.alias("change"),
                             F.col("__old").alias("old"), F.col("__new").alias("new")).where(F.col("change").isNotNull())
    read = rb.read_union_state if info.redistribution == "union" else rb.read_list_state
    va = (ra.read_union_state if info.redistribution == "union" else ra.read_list_state)(ident, name).select("value")
    vb = read(ident, name).select("value")
    is_map = isinstance(vb.schema["value"].dataType, MapType)
    if is_map:  # maps cannot be compared: compare their sorted entries, then make them maps again
        va, vb = (df.select(_comparable(F.col("value"), df.schema["value"].dataType).alias("value")) for df in (va, vb))
    # multisets of elements: exceptAll keeps each element as many times as it is in excess
    out = vb.exceptAll(va).withColumn("change", F.lit("added")).unionByName(
        va.exceptAll(vb).withColumn("change", F.lit("removed")))
    return out.select(F.map_from_entries("value").alias("value"), "change") if is_map else out


def diff_operators(a: Side, b: Side, *, spark: SparkSession | None = None) -> DataFrame:
    """What changed in the savepoints' manifests: one row per operator or state added or removed and
    per changed property, columns ``operator``, ``item`` (``operator``, ``state:<name>`` or a property
    such as ``max_parallelism``), ``change`` (``added`` | ``removed`` | ``changed``), ``old``, ``new``
    (as strings). Reads only the two manifests (`statekit.savepoint.diff` with ``rows=False``)."""
    ra = _reader(a, spark)
    rb = _reader(b, spark if spark is not None else ra.spark)
    d = local_diff(ra.savepoint, rb.savepoint, rows=False)
    rows: list[tuple] = [(o, "operator", "added", None, None) for o in d.operators_added]
    rows += [(o, "operator", "removed", None, None) for o in d.operators_removed]
    for od in d.operators:
        rows += [(od.name, f"state:{s}", "added", None, None) for s in od.states_added]
        rows += [(od.name, f"state:{s}", "removed", None, None) for s in od.states_removed]
        rows += [(od.name, f"state:{s}", "changed", None, None) for s in od.states_changed]
        rows += [(od.name, p, "changed", str(old), str(new)) for p, (old, new) in od.settings.items()]
    schema = "operator string, item string, change string, old string, new string"
    return ra.spark.createDataFrame(rows, schema)
