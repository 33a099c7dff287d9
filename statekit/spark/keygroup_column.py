"""Key groups as a JVM column: Flink's key-group hash as a Spark Java UDF, so executors hash keys without Python.

`key_group_column` gives ``key_group(key)`` as a Spark `Column` computed by
`io.statekit.spark.KeyGroupUdf` (compiled with statekit's other JVM classes, see
`statekit.spark.pruning`, and shipped to the executors as a jar). Spark can then partition and
sort rows by key group itself, and statekit's writers need a single Python pass (the file write).
It is the JVM twin of `statekit.keygroups`, which stays the reference: the UDF is used only for
key columns whose Spark type is exactly the declared key type (no cast whose rounding or overflow
rules could differ), and ``tests/spark/test_keygroup_column.py`` pins it to the Python hash on edge
keys of every key type.

Without a JDK, or on Spark Connect, `key_group_column` returns None (with one warning per
session) and the writers hash in Python (`statekit.spark.parts`).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import DataType

from statekit.types import parse_ddl

__all__ = ["UDF_CLASS", "jvm_classes_unavailable", "jvm_hashable", "key_group_column"]

UDF_CLASS = "io.statekit.spark.KeyGroupUdf"
UDF_NAME = "statekit_key_group"

_lock = threading.Lock()
# id(java session) -> (session, None when the UDF is usable, else why not). The session is kept so
# its id cannot be reused by a later session.
_sessions: dict[int, tuple[Any, str | None]] = {}


def jvm_hashable(df: DataFrame, key_col: str, key_type: str) -> bool:
    """True when `df`'s column `key_col` has exactly the Spark type of DDL `key_type` (so no cast is needed)."""
    from pyspark.sql.pandas.types import from_arrow_type

    try:
        declared: DataType = from_arrow_type(parse_ddl(key_type))
    except Exception:  # noqa: BLE001 - a type Spark cannot express: the Python hash handles (or refuses) it
        return False
    actual = df.schema[key_col].dataType
    return _same(actual, declared)


def _same(a: DataType, b: DataType) -> bool:
    from pyspark.sql.types import StructType

    if isinstance(a, StructType) and isinstance(b, StructType):
        return len(a.fields) == len(b.fields) and all(
            x.name == y.name and _same(x.dataType, y.dataType) for x, y in zip(a.fields, b.fields)
        )
    return type(a) is type(b)


def jvm_classes_unavailable(spark: SparkSession) -> str | None:
    """None when statekit's JVM classes are loaded and shipped in `spark`'s session, else why not (warned once)."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return "Spark Connect sessions cannot load statekit's JVM classes from the client"
    with _lock:
        known = _sessions.get(id(jsession))
        if known is not None:
            return known[1]
        from statekit.spark import pruning

        try:
            pruning.statekit_class(spark, UDF_CLASS)
            pruning.ship_classes(spark)
            reason = None
        except Exception as exc:  # noqa: BLE001 - any failure means "hash in Python", and is reported
            reason = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"statekit could not load its key-group UDF ({reason}); Spark writes hash keys in Python "
                "instead (an extra Python pass over the state).",
                RuntimeWarning,
                stacklevel=4,
            )
        _sessions[id(jsession)] = (jsession, reason)
        return reason


def key_group_column(spark: SparkSession, key: Column, max_parallelism: int) -> Column | None:
    """``key_group(key)`` for `max_parallelism` as a JVM `Column` (null for a null key), or None if unavailable.

    `key` must already have the Spark type of its declared key type (see `jvm_hashable`).
    """
    if jvm_classes_unavailable(spark) is not None:
        return None
    from pyspark.sql.classic.column import Column as ClassicColumn
    from pyspark.sql.classic.column import _to_seq

    from statekit.spark import pruning

    gateway: Any = spark.sparkContext._gateway
    jvm: Any = spark._jvm
    cls = pruning.statekit_class(spark, UDF_CLASS)
    types = gateway.new_array(jvm.java.lang.Class, 1)
    types[0] = jvm.java.lang.Integer.TYPE
    args = gateway.new_array(jvm.java.lang.Object, 1)
    args[0] = int(max_parallelism)
    judf = cls.getMethod("function", types).invoke(None, args)  # KeyGroupUdf.function(maxParallelism)
    java_key: Any = key
    return ClassicColumn(judf.apply(_to_seq(spark.sparkContext, [java_key], lambda c: c._jc)))  # type: ignore[union-attr]
