"""The columnar bootstrap written into Flink's format inside Spark's JVM: fragments per input partition, one file per subtask, no row in Python.

Boundary: for ``key_by(col).columns(...)`` bootstraps whose key and values have simple Flink
serializers (Long, Integer, Short, Byte, Double, Float, Boolean, String; byte[] values) and whose
DataFrame columns have exactly those Spark types, `io.statekit.spark.FlinkKeyedWriter` (compiled
with statekit's other JVM classes, `statekit.spark.pruning`) writes the keyed files in Spark tasks:
each input partition a fragment sorted by key group, then each subtask its file from the fragments
(see the class), so no row crosses into Python and nothing is shuffled. The header of every
file (`KeyedLayoutOut.proxy`) and `_metadata` come from `statekit.format.flink`, as on every other
path; the tasks return only names, sizes and key-group offsets. Without a JDK (or on Spark Connect)
`jvm_writable` is False and the Python paths (`statekit.spark.flink_columnar`) write instead.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from statekit.errors import SavepointWriteError
from statekit.format.files import remove_tree, storage_errors
from statekit.format.flink.writer import KeyedLayoutOut, OperatorOut, SubtaskOut
from statekit.keygroups import key_group_range
from statekit.spark.errors import statekit_error_from

__all__ = ["WRITER_CLASS", "jvm_writable", "write_jvm"]

WRITER_CLASS = "io.statekit.spark.FlinkKeyedWriter"

#: Flink serializer kind -> the Spark type a column must have for the JVM writer (no cast is ever applied)
_SPARK: dict[str, type] = {"long": T.LongType, "int": T.IntegerType, "short": T.ShortType, "byte": T.ByteType,
                           "double": T.DoubleType, "float": T.FloatType, "boolean": T.BooleanType,
                           "string": T.StringType, "bytes": T.BinaryType}
_KEY_KINDS = set(_SPARK) - {"bytes"}


def jvm_layout(layout: KeyedLayoutOut) -> bool:
    """Whether `layout` is one the JVM writer encodes: a simple key, void namespace, no timers, one value per key and state.

    >>> from statekit.savepoint import OperatorMetadata
    >>> from statekit.savepoint.flink_out import keyed_layout
    >>> from statekit.identifiers import OperatorIdentifier
    >>> from statekit.state import ListStateDescriptor, ValueStateDescriptor
    >>> def layout(*states):
    ...     meta = OperatorMetadata(identifier=OperatorIdentifier.for_uid("op"), name="op", parallelism=1,
    ...                             max_parallelism=128, key_type="string", keyed_states=[d.info() for d in states])
    ...     return keyed_layout(meta, None, None, max_parallelism=128, has_timers=False)
    >>> jvm_layout(layout(ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("s", "string")))
    True
    >>> jvm_layout(layout(ListStateDescriptor("l", "bigint")))
    False
    """
    return (layout.key.kind in _KEY_KINDS and layout.namespace is None and not layout.timers
            and all(s.kind in ("value", "reducing", "aggregating") and s.value.kind in _SPARK for s in layout.states))


def _exact(df: DataFrame, column: str, kind: str) -> bool:
    return type(df.schema[column].dataType) is _SPARK[kind]


def jvm_writable(df: DataFrame, key_col: str, columns: list[tuple[str, str]], layout: KeyedLayoutOut) -> bool:
    """Whether `write_jvm` can write this bootstrap: a `jvm_layout`, columns of exactly the declared Spark types, and
    statekit's JVM classes loadable in the session (False, after one warning per session, without a JDK)."""
    if not jvm_layout(layout) or not _exact(df, key_col, layout.key.kind):
        return False
    by_name = {s.column: s for s in layout.states}
    if any(not _exact(df, c, by_name[name].value.kind) for c, name in columns):
        return False
    from statekit.spark.keygroup_column import jvm_classes_unavailable

    return jvm_classes_unavailable(df.sparkSession) is None  # loads and ships statekit's classes (the key-group UDF's jar)


def write_jvm(df: DataFrame, key_col: str, columns: list[tuple[str, str]], layout: KeyedLayoutOut,
              uid: str | None, uid_hash: str, parallelism: int, staging_dir: Path) -> OperatorOut:
    """Write one columnar bootstrap's keyed files into `staging_dir` from Spark tasks; the operator's `_metadata` entry."""
    from statekit.spark import pruning

    spark = df.sparkSession
    maxp = layout.max_parallelism
    by_name = {s.column: s for s in layout.states}
    order = {s.column: i for i, s in enumerate(layout.states)}
    cols = sorted(columns, key=lambda cn: order[cn[1]])  # the file's state ids are the layout's order
    frame = df.select(F.col(key_col), *[F.col(c) for c, _ in cols])
    gateway: Any = spark.sparkContext._gateway
    cls = pruning.statekit_class(spark, WRITER_CLASS)
    method = next(m for m in cls.getMethods() if m.getName() == "write")
    kinds = gateway.new_array(gateway.jvm.java.lang.String, len(cols))
    for i, (_, name) in enumerate(cols):
        kinds[i] = by_name[name].value.kind
    scratch = staging_dir.parent / f".{staging_dir.name}.fragments-{uuid.uuid4().hex[:8]}"
    with storage_errors(staging_dir):
        scratch.mkdir()
    try:
        args = gateway.new_array(gateway.jvm.java.lang.Object, 9)
        for i, a in enumerate([frame._jdf, maxp, parallelism, layout.key.kind, kinds, layout.proxy(),
                               os.path.abspath(staging_dir), os.path.abspath(scratch), f"operator {uid or uid_hash}"]):
            args[i] = a
        try:
            lines = [str(x) for x in method.invoke(None, args)]
        except Py4JJavaError as exc:  # a task's statekit error (duplicate or null key, full disk) by its type
            typed = statekit_error_from(exc)
            if typed is not None:
                raise typed from None
            raise
    finally:
        remove_tree(scratch)  # also what tasks of a failed stage write after the failure
    out = OperatorOut(uid, uid_hash, uid or uid_hash, parallelism, maxp, [SubtaskOut(s) for s in range(parallelism)])
    for line in lines:
        sub, name, size, offsets = line.split("\t")
        s = int(sub)
        with storage_errors(staging_dir):
            written = (staging_dir / name).stat().st_size
        if written != int(size):  # every task wrote its part of each file: all of them must be there
            raise SavepointWriteError(f"the keyed file of subtask {s} of {uid or uid_hash} has {written} bytes, "
                                      f"not {size}; nothing was published. Retry the write.")
        out.subtasks[s].keyed = (key_group_range(maxp, parallelism, s).start, [int(o) for o in offsets.split(",")],
                                 name, int(size))
    return out
