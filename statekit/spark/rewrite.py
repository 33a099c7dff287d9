"""An existing operator's keyed state rewritten by Spark executors: a new max parallelism, new keys.

`SavepointWriter.with_max_parallelism` and `SavepointWriter.rekey` read the source operator's
keyed table and timers as DataFrames, hash the (new) keys into their key groups on the executors
and write the parts there (`statekit.spark.parts`); the driver only commits the manifest. Operator
state (small, not keyed) is carried over as `statekit.savepoint.transforms` carries it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from statekit.errors import DuplicateKeyError, InvalidArgumentError, InvalidMergeError, NullKeyError
from statekit.format.keyed import first_duplicate
from statekit.format.manifest import FileEntry, OperatorMetadata
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.evolve import add_evolved_operator
from statekit.savepoint.rekey import merge_collisions
from statekit.savepoint.transforms import write_operator_states
from statekit.spark import parts as P
from statekit.state.descriptors import StateInfo
from statekit.types import to_ddl

__all__ = ["evolve_with_spark", "rehash_with_spark", "rekey_with_spark"]

_OLD = "__statekit_old_key"
_ROWS, _FIRST, _HAD = "__statekit_rows", "__statekit_first_", "__statekit_had_"


def _writer(builder: SavepointBuilder, meta: OperatorMetadata, ident: OperatorIdentifier, *, key_type: str,
            max_parallelism: int, name: str | None) -> Any:  # fmt: skip
    from statekit.savepoint.transforms import require_hashed_key_groups

    require_hashed_key_groups(meta, "rewriting keyed state with Spark")
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


def evolve_with_spark(spark: SparkSession, builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata,
                      ident: OperatorIdentifier, keyed: DataFrame, infos: tuple[StateInfo, ...], *,
                      max_parallelism: int | None = None, name: str | None = None) -> None:  # fmt: skip
    """Write operator `meta` with the evolved keyed table `keyed` (key, [namespace], the states of `infos`).

    As `statekit.savepoint.evolve.write_evolved`, but executors write the parts: timers and
    operator state are carried over, rows left with no state set are dropped. A `keyed` with a
    ``key_group`` column is grouped by key group already (see `parts.write_grouped_parts`): it is
    written without a shuffle, and must keep the source's max parallelism.
    """
    from statekit.spark.reader import SavepointReader

    writer = add_evolved_operator(builder, meta, ident, infos, max_parallelism=max_parallelism, name=name)
    names = [s.name for s in infos]
    plan = _plan(spark, builder, writer)
    entries = []
    if names:  # a table of keys without state is no state at all
        grouped = "key_group" in keyed.columns
        keep = [*(["key_group"] if grouped else []), "key", *(["namespace"] if "namespace" in keyed.columns else []),
                *names]  # fmt: skip
        keyed = keyed.select(*[F.col(f"`{c}`") for c in keep])
        if grouped:
            assert writer.max_parallelism == meta.max_parallelism, "key groups of another max parallelism"
            from statekit.spark.jvm_parts import one_file_per_partition

            with one_file_per_partition(spark):  # a Parquet scan's partitions are whole files
                entries += P.write_grouped_parts(keyed, plan)
        else:
            entries += P.write_keyed_parts(keyed, "key", plan)
    if meta.files_of("timers"):
        entries += P.write_keyed_parts(SavepointReader(spark, source).read_timers(meta.identifier), "key", plan,
                                       timers=True)  # fmt: skip
    writer.add_files(entries)
    write_operator_states(writer, source, meta)


def _null_key_refusal(what: str) -> Callable[[pa.RecordBatch], None]:
    """Names the old key of a row whose new key is null (rows carry the old key in `_OLD`)."""
    def refuse(batch: pa.RecordBatch) -> None:
        old = batch.column(_OLD).filter(pc.is_null(batch.column("key"))) if _OLD in batch.schema.names else None
        named = f"key {old[0].as_py()!r} maps" if old is not None and len(old) else "a key maps"
        raise NullKeyError(f"{what}: {named} to a null key; keys are never null. Map it to a value.")

    return refuse


def _rekey_in_jvm(keyed: DataFrame, plan: P.PartPlan, what: str) -> list[FileEntry] | None:
    """Re-keyed rows written by Spark's Parquet writer (`jvm_parts`), or None when it cannot write them.

    A null new key or two old keys that became one fail the job; a query of the old keys then names them
    (as `_rekey_task` does), reading only what the error needs."""
    from statekit.spark.jvm_parts import write_keyed_parts_jvm

    def duplicate(new: Any) -> None:
        before = [r[0] for r in keyed.where(F.col("key") == F.lit(new)).select(_OLD).limit(2).collect()]
        if len(before) == 2:
            raise DuplicateKeyError(
                f"{what}: keys {before[0]!r} and {before[1]!r} both become {new!r}, and a key holds one "
                "row of state. Merge their state first (read_keyed_state, aggregate, bootstrap) or map them apart."
            )

    try:
        return write_keyed_parts_jvm(keyed.drop(_OLD), "key", plan, duplicate=duplicate)
    except NullKeyError:
        old = keyed.where(F.col("key").isNull()).select(_OLD).limit(1).collect()
        named = f"key {old[0][0]!r} maps" if old else "a key maps"
        raise NullKeyError(f"{what}: {named} to a null key; keys are never null. Map it to a value.") from None


def _rekey_task(namespaced: bool, what: str, states: list[str], merge: Any) -> P.TaskFunction:
    """A task's re-keyed rows as the keyed table: two old keys that became one are refused (named), or
    merged by `merge` (a Python function), or were merged by Spark (`_ROWS`/`_HAD` columns: checked here)."""
    def rows(batches: Iterable[pa.RecordBatch]) -> tuple[pa.Table | None, None]:
        table = P.task_table(batches)
        if table is None:
            return None, None
        if _ROWS in table.column_names:
            _check_sql_merge(table, states, what)
            return table.select(["key", *states]), None
        if callable(merge):
            return merge_collisions(table.select(["key", *states]), states, merge, what), None
        if not namespaced:  # a new key's rows share its key group, so they meet in this task
            index = first_duplicate(table, ["key"])
            if index is not None:
                after = table.column("key")[index].as_py()
                same = table.filter(pc.equal(table.column("key"), table.column("key")[index]))
                before = same.column(_OLD).to_pylist()[:2]
                raise DuplicateKeyError(
                    f"{what}: keys {before[0]!r} and {before[1]!r} both become {after!r}, and a key holds one "
                    "row of state. Merge their state first (read_keyed_state, aggregate, bootstrap) or map them apart."
                )
        return table.drop_columns([_OLD]), None

    return rows


def _check_sql_merge(table: pa.Table, states: list[str], what: str) -> None:
    """Refuse a SQL merge that gave null for a state some colliding key had set (as `merge_collisions` does)."""
    merged = pc.greater(table.column(_ROWS), 1)
    for n in states:
        bad = pc.and_(merged, pc.and_(pc.is_null(table.column(n)), table.column(_HAD + n)))
        if pc.any(bad).as_py():
            key = table.filter(bad).column("key")[0].as_py()
            raise InvalidMergeError(
                f"{what}: merging the old keys that become {key!r} gave null for state {n!r}, which they had "
                "set; a merge must keep every state (return its merged value). Nothing was written."
            )


def _sql_merged(keyed: DataFrame, states: list[Any], merge: str | dict[str, str]) -> DataFrame:
    """Spark's SQL aggregates per new key (``key`` and the states), applied where several old keys became one."""
    aggs = {st.name: merge[st.name] if isinstance(merge, dict) else f"{merge}(`{st.name}`)" for st in states}
    grouped = keyed.groupBy("key").agg(
        F.count(F.lit(1)).alias(_ROWS), F.first(_OLD).alias(_OLD),  # an old key, to name one mapping to null
        *[F.expr(aggs[st.name]).cast(st.type).alias(st.name) for st in states],
        *[F.first(F.col(f"`{st.name}`")).alias(_FIRST + st.name) for st in states],
        *[F.max(F.col(f"`{st.name}`").isNotNull()).alias(_HAD + st.name) for st in states],
    )
    return grouped.select(
        "key", _ROWS, _OLD,
        *[F.when(F.col(_ROWS) > 1, F.col(f"`{st.name}`")).otherwise(F.col(_FIRST + st.name)).alias(st.name)
          for st in states],
        *[F.col(_HAD + st.name) for st in states],
    )  # fmt: skip


def rekey_with_spark(spark: SparkSession, builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata,
                     ident: OperatorIdentifier, new_key: Column, *, key_type: str | None = None,
                     max_parallelism: int | None = None, name: str | None = None,
                     merge: str | dict[str, str] | Callable[[Any, list[dict]], dict] | None = None) -> None:  # fmt: skip
    """Write operator `meta` with every key replaced by `new_key` (a Spark `Column` over ``key``).

    The new key is computed per row of the keyed table and timers on the executors, which hash,
    check and write the parts. Errors as `statekit.savepoint.rekey.rekey_operator`: a null new key
    (`NullKeyError`, naming the old key), two keys with state that become one (`DuplicateKeyError`,
    named) unless `merge` merges them (a SQL aggregate name or one per state, evaluated by Spark; or
    a Python function, called in the task that holds the new key), a merge giving null for a state
    the colliding keys had (`InvalidMergeError`).
    """
    from pyspark.sql.pandas.types import to_arrow_type

    from statekit.spark.reader import SavepointReader

    what = f"rekeying operator {meta.display_name!r}"
    if meta.key_type is None:
        raise InvalidArgumentError(f"{what}: it has no keyed state, so it has no keys.")
    if merge is not None and meta.namespace_type is not None:
        raise InvalidArgumentError(f"{what}: merge= applies to keyed state outside windows; this is a window operator.")
    reader, op = SavepointReader(spark, source), meta.identifier
    keyed = reader.read_keyed_state(op)
    rest = [c for c in keyed.columns if c != "key"]
    keyed = keyed.select(new_key.alias("key"), F.col("key").alias(_OLD), *[F.col(f"`{c}`") for c in rest])
    new_type = key_type or to_ddl(to_arrow_type(keyed.schema["key"].dataType))
    writer = _writer(builder, meta, ident, key_type=new_type,
                     max_parallelism=max_parallelism or meta.max_parallelism, name=name)  # fmt: skip
    states = [st.name for st in meta.keyed_states]
    if merge is not None and not callable(merge):
        keyed = _sql_merged(keyed, list(meta.keyed_states), merge)
    timers = None
    if meta.files_of("timers"):
        t = reader.read_timers(op)
        trest = [c for c in t.columns if c != "key"]
        # timers of two keys that become one are kept once each, as a timer service holds a set
        timers = t.select(new_key.alias("key"), *[F.col(c) for c in trest]).distinct()
    plan = _plan(spark, builder, writer)
    task = _rekey_task(meta.namespace_type is not None, what, states, merge)
    refuse = _null_key_refusal(what)
    entries = None
    if merge is None and meta.namespace_type is None:  # Spark's own writer; errors named by a small query
        entries = _rekey_in_jvm(keyed, plan, what)
    if entries is None:
        entries = P.write_keyed_parts(keyed, "key", plan, task, null_keys=refuse)
    if timers is not None:
        entries += P.write_keyed_parts(timers, "key", plan, timers=True, null_keys=refuse)
    writer.add_files(entries)
    write_operator_states(writer, source, meta)
