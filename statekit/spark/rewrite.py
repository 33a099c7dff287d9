"""An existing operator's keyed state rewritten by Spark executors: a new max parallelism, new keys.

`SavepointWriter.with_max_parallelism` and `SavepointWriter.rekey` read the source operator's
keyed table and timers as DataFrames, hash the (new) keys into their key groups on the executors
and write the parts there (`statekit.spark.parts`); the driver only commits the manifest. Operator
state (small, not keyed) is carried over as `statekit.savepoint.transforms` carries it.
"""

from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from statekit.errors import DuplicateKeyError, InvalidArgumentError, NullKeyError
from statekit.format.keyed import first_duplicate
from statekit.format.manifest import FileEntry, OperatorMetadata
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.transforms import write_operator_states
from statekit.spark import parts as P
from statekit.types import to_ddl

__all__ = ["rehash_with_spark", "rekey_with_spark"]

_OLD = "__statekit_old_key"


def _writer(builder: SavepointBuilder, meta: OperatorMetadata, ident: OperatorIdentifier, *, key_type: str,
            max_parallelism: int, name: str | None) -> Any:  # fmt: skip
    return builder.add_operator(
        ident, name=name or meta.name, parallelism=min(meta.parallelism, max_parallelism),
        max_parallelism=max_parallelism, key_type=key_type, keyed_states=meta.keyed_states,
        namespace_type=meta.namespace_type,
    )  # fmt: skip


def _plan(spark: SparkSession, builder: SavepointBuilder, writer: Any) -> P.PartPlan:
    buckets = P.write_buckets(spark.sparkContext.defaultParallelism, writer.parallelism, writer.max_parallelism)
    return P.plan_for(writer, builder, buckets=buckets)


def _write(spark: SparkSession, builder: SavepointBuilder, writer: Any, keyed: DataFrame, timers: DataFrame | None,
           keyed_task: P.TaskFunction | None = None) -> list[FileEntry]:  # fmt: skip
    plan = _plan(spark, builder, writer)
    entries = P.write_keyed_parts(keyed, "key", plan, keyed_task)
    if timers is not None:
        entries += P.write_keyed_parts(timers, "key", plan, timers=True)
    return entries


def rehash_with_spark(spark: SparkSession, builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata,
                      ident: OperatorIdentifier, max_parallelism: int, *, name: str | None = None) -> None:  # fmt: skip
    """Write operator `meta` of `source` with `max_parallelism` key groups; executors re-hash and write."""
    from statekit.spark.reader import SavepointReader

    if meta.key_type is None:
        raise InvalidArgumentError(
            f"operator {meta.display_name} has no keyed state; max parallelism only matters for keyed state."
        )
    writer = _writer(builder, meta, ident, key_type=meta.key_type, max_parallelism=max_parallelism, name=name)
    reader, op = SavepointReader(spark, source), meta.identifier
    timers = reader.read_timers(op) if meta.files_of("timers") else None
    writer.add_files(_write(spark, builder, writer, reader.read_keyed_state(op), timers))
    write_operator_states(writer, source, meta)


def _collision_task(namespaced: bool, what: str) -> P.TaskFunction:
    """A task's re-keyed rows as the keyed table, refusing two old keys that became one (named)."""
    def rows(batches: Iterable[pa.RecordBatch]) -> tuple[pa.Table | None, None]:
        table = P.task_table(batches)
        if table is None:
            return None, None
        if not namespaced:  # a new key's rows share its key group, so they meet in this task
            index = first_duplicate(table, ["key"])
            if index is not None:
                after = table.column("key")[index].as_py()
                same = table.filter(pa.compute.equal(table.column("key"), table.column("key")[index]))
                before = same.column(_OLD).to_pylist()[:2]
                raise DuplicateKeyError(
                    f"{what}: keys {before[0]!r} and {before[1]!r} both become {after!r}, and a key holds one "
                    "row of state. Merge their state first (read_keyed_state, aggregate, bootstrap) or map them apart."
                )
        return table.drop_columns([_OLD]), None

    return rows


def rekey_with_spark(spark: SparkSession, builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata,
                     ident: OperatorIdentifier, mapping: DataFrame, *, key_type: str | None = None,
                     max_parallelism: int | None = None, name: str | None = None) -> None:  # fmt: skip
    """Write operator `meta` with every key replaced through `mapping` (``key``, ``new_key``: a DataFrame).

    The mapping stays in Spark: it is joined with the keyed table and timers on the executors.
    Errors as `statekit.savepoint.rekey.rekey_operator`: a null new key (`NullKeyError`), two keys
    with state that become one (`DuplicateKeyError`, named).
    """
    from pyspark.sql.pandas.types import to_arrow_type

    from statekit.spark.reader import SavepointReader

    what = f"rekeying operator {meta.display_name!r}"
    if meta.key_type is None:
        raise InvalidArgumentError(f"{what}: it has no keyed state, so it has no keys.")
    null = mapping.filter(F.col("new_key").isNull()).select("key").limit(1).collect()
    if null:
        raise NullKeyError(f"{what}: key {null[0]['key']!r} maps to a null key; keys are never null. Map it to a value.")
    new_type = key_type or to_ddl(to_arrow_type(mapping.schema["new_key"].dataType))
    writer = _writer(builder, meta, ident, key_type=new_type,
                     max_parallelism=max_parallelism or meta.max_parallelism, name=name)  # fmt: skip
    reader, op = SavepointReader(spark, source), meta.identifier
    pairs = mapping.select(F.col("key").alias(_OLD), F.col("new_key"))
    keyed = reader.read_keyed_state(op)
    rest = [c for c in keyed.columns if c != "key"]
    keyed = keyed.join(pairs, keyed["key"].eqNullSafe(pairs[_OLD])).select(
        F.col("new_key").alias("key"), F.col(_OLD), *[F.col(c) for c in rest])  # fmt: skip
    timers = None
    if meta.files_of("timers"):
        t = reader.read_timers(op)
        trest = [c for c in t.columns if c != "key"]
        # timers of two keys that become one are kept once each, as a timer service holds a set
        timers = t.join(pairs, t["key"].eqNullSafe(pairs[_OLD])).select(
            F.col("new_key").alias("key"), *[F.col(c) for c in trest]).distinct()  # fmt: skip
    task = _collision_task(meta.namespace_type is not None, what)
    writer.add_files(_write(spark, builder, writer, keyed, timers, task))
    write_operator_states(writer, source, meta)
