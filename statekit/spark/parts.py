"""Savepoint parts written by Spark executors: only the files' descriptions reach the driver.

How a keyed operator is written (`write_keyed_parts`):

1. On the executors, each input row gets its key group (Flink's hash of the key) and a *write
   bucket*: bucket ``b`` of ``B`` owns the contiguous key groups ``[ceil(b*m/B), ...]``, the same
   rule that gives a Flink subtask its key-group range (``kg * B // m``).
2. Spark shuffles the rows by bucket, one bucket per task (`partition_values` picks the column
   values whose Spark hash lands bucket ``b`` in partition ``b``; a collision would only cost
   balance, never correctness, as the tasks split their rows by bucket themselves).
3. Each task turns its rows into the bucket's keyed table (and timers) with a per-task function
   (the identity for columnar input, a `KeyedStateBootstrapFunction` run on a heap backend, window
   assignment, ...), then sorts them by key group, checks keys are unique, splits the rows at
   key-group boundaries into files of at most ``rows_per_file`` rows and writes them (Parquet,
   checksummed, fsynced) into the savepoint's staging directory.
4. Each task returns one small row per file (`PART_SCHEMA`: path, rows, bytes, checksum, key-group
   range); the driver turns them into `FileEntry` values for `OperatorWriter.add_files` and
   commits the manifest. Nothing proportional to the state passes through the driver.

Atomicity is the `SavepointBuilder`'s: files land in its hidden staging directory, which a failed
job's builder removes; file names are deterministic per bucket, so a retried task rewrites the same
files. In a cluster a local savepoint path must be on a filesystem every executor and the driver
see (as for reading it with Spark). For a URI target (``s3://...``) each task opens the store itself
(`PartPlan.store`, with the storage options the target was located with) and streams its files
straight under the new savepoint's prefix: nothing passes through the driver's disk; the driver
writes the manifest last, and a failed job's builder deletes what is under the prefix.

When nothing but the layout happens to the rows (no task function) and Spark's Parquet writer stores
every column as declared, `statekit.spark.jvm_parts` writes the parts instead, with no Python pass
over the rows (same layout and guarantees; this module is its fallback).

To reuse it for another operator layout (e.g. a Flink-format writer), give `write_keyed_parts` a
`PartPlan` and a task function; `write_table_files` is the per-bucket file writer.

When the states are known only once user code runs (a bootstrap function's ``open``, a window
trigger's state), `write_discovered_parts` lets each task report the states it registered beside its
files; the driver merges the reports (`merge_states`) and declares them, so user code runs only in
the tasks, as in Flink.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Literal

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from statekit.errors import InvalidArgumentError, NullKeyError, StateTypeError
from statekit.format import keyed as K
from statekit.format.files import storage_errors, write_parquet
from statekit.format.manifest import FileEntry
from statekit.savepoint.writer import OperatorWriter, SavepointBuilder
from statekit.spark.buckets import KEY_GROUP, PartPlan, bucket_column, partition_values, write_buckets
from statekit.state.descriptors import StateInfo

__all__ = [
    "KEY_GROUP",
    "PART_SCHEMA",
    "PartPlan",
    "TaskFunction",
    "bucket_column",
    "entries_from",
    "merge_states",
    "partition_values",
    "plan_for",
    "task_table",
    "write_buckets",
    "write_discovered_parts",
    "write_grouped_parts",
    "write_keyed_parts",
    "write_table_files",
]

#: The shuffle value of the write bucket, added on the executors.
_PART = "__statekit_part"

#: One row per written file, as executors return them; a task that reports its states adds one row
#: with table `STATES` (``states``: the states as JSON, ``rows``: how many keyed files it wrote,
#: ``key_group_start``: its partition).
PART_SCHEMA = StructType([
    StructField("path", StringType(), False), StructField("table", StringType(), False),
    StructField("rows", LongType(), False), StructField("bytes", LongType(), False),
    StructField("checksum", StringType(), False), StructField("key_group_start", IntegerType(), False),
    StructField("key_group_end", IntegerType(), False), StructField("states", StringType(), True),
])  # fmt: skip
STATES = "__states"

#: A task's function: the batches of one task's rows (with `KEY_GROUP`) -> (keyed table, timers table),
#: or (keyed, timers, states) when the task reports the `StateInfo`s it registered (`write_discovered_parts`).
#: Either table may be None. Tables hold ``key`` (and ``namespace``) and state columns, resp. timer columns;
#: a ``key_group`` column, when present, must hold the keys' key groups (else they are computed).
TaskFunction = Callable[[Iterable[pa.RecordBatch]], "tuple[pa.Table | None, pa.Table | None]"]



def _with_buckets(df: DataFrame, key_col: str, plan: PartPlan) -> DataFrame:
    """`df` with `KEY_GROUP`, shuffled so that each bucket is one task.

    The key group is a JVM column (`statekit.spark.keygroup_column`) when the key column has its
    declared type and statekit's JVM classes load: then Spark hashes and shuffles without Python.
    Otherwise a Python pass computes it (and the bucket) before the shuffle. Rows are not sorted
    in the JVM: the writer's radix sort of key groups costs less than Spark's sort (measured).
    """
    from statekit.spark.keygroup_column import jvm_hashable, key_group_column

    lookup = np.asarray(partition_values(plan.buckets), dtype=np.int32)
    kg_col = None
    if jvm_hashable(df, key_col, plan.key_type):
        kg_col = key_group_column(df.sparkSession, F.col(f"`{key_col}`"), plan.max_parallelism)
    if kg_col is not None:
        return df.withColumn(KEY_GROUP, kg_col).repartition(plan.buckets, bucket_column(plan))
    key_type, max_parallelism = plan.key_type, plan.max_parallelism

    def add(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            keys = batch.column(key_col)
            valid = None if not keys.null_count else np.asarray(keys.is_valid().to_numpy(zero_copy_only=False))
            kg = np.zeros(len(keys), np.int32)
            if valid is None:
                kg = K.compute_key_groups(keys, max_parallelism, key_type)
            else:  # null keys keep a null key group, refused by name after the shuffle (as on the JVM path)
                kg[valid] = K.compute_key_groups(keys.filter(pa.array(valid)), max_parallelism, key_type)
            yield pa.RecordBatch.from_arrays(
                list(batch.columns) + [pa.array(kg, pa.int32(), mask=None if valid is None else ~valid),
                                       pa.array(lookup[plan.bucket_of(kg)], pa.int32())],
                names=batch.schema.names + [KEY_GROUP, _PART],
            )  # fmt: skip

    schema = StructType(df.schema.fields + [StructField(KEY_GROUP, IntegerType(), True),
                                            StructField(_PART, IntegerType(), False)])  # fmt: skip
    return df.mapInArrow(add, schema).repartition(plan.buckets, F.col(_PART)).drop(_PART)


def _refuse_null_keys(batches: Iterable[pa.RecordBatch],
                      refuse: Callable[[pa.RecordBatch], None] | None) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The batches, refusing null keys (the key group is null exactly for them) with `refuse` or by count."""
    for batch in batches:
        kg = batch.column(KEY_GROUP)
        if kg.null_count:
            if refuse is not None:
                refuse(batch)
            raise NullKeyError(
                f"the key column holds {kg.null_count} null key(s); Flink forbids null keys. Drop or fill them."
            )
        yield batch


def write_table_files(table: pa.Table, kg: np.ndarray, plan: PartPlan, *, table_name: Literal["keyed", "timers"], name: str,
                      check_unique: Callable[[pa.Table], None] | None = None) -> list[FileEntry]:  # fmt: skip
    """Write one bucket's rows (any order) as files split at key-group boundaries; return their entries.

    `name` makes file names unique within the operator (e.g. ``b00003``); `check_unique` runs on
    each file's rows (a key's rows share its key group, hence its file).
    """
    order = K.key_group_order(kg)
    entries = []
    splits = K.split_by_key_group(kg, plan.rows_per_file) if table_name == "keyed" else \
        [K.KeyGroupSplit(int(kg.min()), int(kg.max()), 0, len(kg))] if len(kg) else []  # fmt: skip
    for i, split in enumerate(splits):
        if order is None:
            chunk, chunk_kg = table.slice(split.row_start, split.rows), kg[split.row_start : split.row_end]
        else:
            rows = order[split.row_start : split.row_end]
            chunk, chunk_kg = K.take_rows(table, rows), kg[rows]
        if check_unique is not None:
            check_unique(chunk)
        rel = f"{plan.op_dir}/{table_name}/part-{name}-{i:05d}-kg{split.kg_start:05d}-{split.kg_end:05d}.parquet"
        chunk = K.with_key_group_column(chunk, chunk_kg)
        if plan.store is not None:  # streamed under the target's prefix by this task
            nbytes, digest = write_parquet(chunk, plan.target(rel))
        else:
            with storage_errors(Path(plan.root)):  # an executor's full disk: a typed error on the driver
                nbytes, digest = write_parquet(chunk, Path(plan.root) / rel, root=Path(plan.root))
        entries.append(FileEntry(rel, table_name, chunk.num_rows, nbytes, digest, None, split.kg_start, split.kg_end))
    return entries


def _key_groups(table: pa.Table, plan: PartPlan) -> tuple[pa.Table, np.ndarray]:
    if "key_group" in table.column_names:
        kg = np.asarray(table.column("key_group").to_numpy(), dtype=np.int32)
        return table.drop_columns(["key_group"]), kg
    return table, K.compute_key_groups(table.column("key"), plan.max_parallelism, plan.key_type)


def _by_bucket(table: pa.Table, kg: np.ndarray, plan: PartPlan) -> Iterator[tuple[int, pa.Table, np.ndarray]]:
    buckets = plan.bucket_of(kg)
    present = np.unique(buckets)
    if len(present) == 1:
        yield int(present[0]), table, kg
        return
    for b in present:  # several buckets in one task (a hash collision): each keeps its own files
        mask = buckets == b
        yield int(b), table.filter(pa.array(mask)), kg[mask]


def _entries_batch(entries: list[FileEntry]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "path": pa.array([e.path for e in entries], pa.string()),
            "table": pa.array([e.table for e in entries], pa.string()),
            "rows": pa.array([e.rows for e in entries], pa.int64()),
            "bytes": pa.array([e.bytes for e in entries], pa.int64()),
            "checksum": pa.array([e.checksum for e in entries], pa.string()),
            "key_group_start": pa.array([e.key_group_start for e in entries], pa.int32()),
            "key_group_end": pa.array([e.key_group_end for e in entries], pa.int32()),
            "states": pa.nulls(len(entries), pa.string()),
        }
    )


def _states_batch(infos: tuple[StateInfo, ...], keyed_files: int) -> pa.RecordBatch:
    from pyspark import TaskContext

    task = TaskContext.get()
    return pa.RecordBatch.from_pydict({
        "path": [""], "table": [STATES], "rows": pa.array([keyed_files], pa.int64()), "bytes": pa.array([0], pa.int64()),
        "checksum": [""], "key_group_start": pa.array([task.partitionId() if task else 0], pa.int32()),
        "key_group_end": pa.array([0], pa.int32()), "states": [json.dumps([i.to_json() for i in infos])],
    })  # fmt: skip


def write_task_output(keyed: pa.Table | None, timers: pa.Table | None, plan: PartPlan,
                      check_unique: Callable[[pa.Table], None] | None = None) -> list[FileEntry]:  # fmt: skip
    """Executor side: conform one task's keyed table and timers to the layout and write their files."""
    entries: list[FileEntry] = []
    if keyed is not None and keyed.num_rows:
        schema = plan.keyed_schema
        if schema is None:  # a task function of `write_discovered_parts` returned no states
            raise InvalidArgumentError(f"{plan.what}: the task wrote keyed rows without reporting their states.")
        keyed, kg = _key_groups(keyed, plan)
        keyed = K.conform(keyed, schema, what=plan.what)
        names = [f.name for f in schema if f.name not in ("key", "namespace")]
        keyed, kg = K.drop_unset_rows(keyed, kg, names)
        has_ns = plan.namespace_type is not None
        unique = check_unique or (lambda t: K.check_unique_keys(t, has_namespace=has_ns, what=plan.what))
        for b, table, bkg in _by_bucket(keyed, kg, plan):
            entries += write_table_files(table, bkg, plan, table_name="keyed", name=f"b{b:05d}", check_unique=unique)
    if timers is not None and timers.num_rows:
        timers, kg = _key_groups(timers, plan)
        schema = K.timers_schema(plan.key_type, namespace_type=plan.namespace_type).remove(0)
        timers = K.conform(timers, schema, what=f"timers of {plan.what}")
        for b, table, bkg in _by_bucket(timers, kg, plan):
            entries += write_table_files(table, bkg, plan, table_name="timers", name=f"b{b:05d}")
    return entries


def task_table(batches: Iterable[pa.RecordBatch], key_col: str = "key") -> pa.Table | None:
    """A task's rows as one table with ``key`` and ``key_group`` named as the layout names them, or None."""
    got = list(batches)
    if not got or not any(b.num_rows for b in got):
        return None
    table = pa.Table.from_batches(got)
    return table.rename_columns(["key" if n == key_col else "key_group" if n == KEY_GROUP else n
                                 for n in table.column_names])  # fmt: skip


def _identity(key_col: str, *, timers: bool = False) -> TaskFunction:
    def rows(batches: Iterable[pa.RecordBatch]) -> tuple[pa.Table | None, pa.Table | None]:
        table = task_table(batches, key_col)
        return (None, table) if timers else (table, None)

    return rows


def write_keyed_parts(df: DataFrame, key_col: str, plan: PartPlan, task: TaskFunction | None = None, *,
                      timers: bool = False, check_unique: Callable[[pa.Table], None] | None = None,
                      null_keys: Callable[[pa.RecordBatch], None] | None = None) -> list[FileEntry]:  # fmt: skip
    """Write an operator's keyed table (and timers) from `df` on the executors; return the files' entries.

    `df` holds the key in column `key_col`. Without `task`, its other columns are the keyed
    table's (``namespace`` and state columns, as `plan.keyed_schema` declares them), or with
    ``timers=True`` the timers table's; with `task`, each Spark task hands its rows (batches with
    `KEY_GROUP`) to ``task`` and writes what it returns. A null key raises `NullKeyError`
    (`null_keys`, given a batch holding one, may raise a better one).
    """
    if task is None and not timers and check_unique is None:  # nothing but the layout: Spark's own writer
        from statekit.spark.jvm_parts import write_keyed_parts_jvm

        written = write_keyed_parts_jvm(df, key_col, plan)
        if written is not None:
            return written
    return _run(df, key_col, plan, task or _identity(key_col, timers=timers), check_unique, null_keys)[0]


def write_discovered_parts(df: DataFrame, key_col: str, plan: PartPlan, task: TaskFunction, *,
                           check_unique: Callable[[pa.Table], None] | None = None,
                           ) -> tuple[list[FileEntry], tuple[StateInfo, ...]]:  # fmt: skip
    """As `write_keyed_parts` for a task function that returns ``(keyed, timers, states)``: each task
    writes its files with the states it registered, and the driver merges the tasks' reports
    (`merge_states`). Returns the files' entries and the operator's states, to declare on its writer."""
    entries, reports = _run(df, key_col, replace(plan, keyed_schema=None), task, check_unique)
    return entries, merge_states(reports, plan.what)


def _run(df: DataFrame, key_col: str, plan: PartPlan, fn: TaskFunction,
         check_unique: Callable[[pa.Table], None] | None,
         null_keys: Callable[[pa.RecordBatch], None] | None = None) -> tuple[list[FileEntry], list]:  # fmt: skip
    bucketed = _with_buckets(df, key_col, plan)

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = fn(_refuse_null_keys(batches, null_keys))
        task_plan = plan
        if len(out) == 3:  # the task's own states give its files' columns
            infos = tuple(out[2])
            task_plan = replace(plan, keyed_schema=K.keyed_schema(plan.key_type, infos, with_key_group=False,
                                                                  namespace_type=plan.namespace_type))  # fmt: skip
        entries = write_task_output(out[0], out[1], task_plan, check_unique)
        if len(out) == 3:
            yield _states_batch(infos, sum(e.table == "keyed" for e in entries))
        if entries:
            yield _entries_batch(entries)

    return _collect_parts(bucketed.mapInArrow(write, PART_SCHEMA))


def _collect_parts(parts: DataFrame) -> tuple[list[FileEntry], list]:
    from statekit.spark.jvm_parts import run_write_job

    # after a failure, no task of the job still writes when the builder removes what the tasks wrote
    out = run_write_job(parts.sparkSession, parts.toArrow, "the savepoint's parts")
    cols = {c: out.column(c).to_pylist() for c in out.column_names}
    entries, reports = [], []
    for p, t, r, b, c, s, e, st in zip(cols["path"], cols["table"], cols["rows"], cols["bytes"], cols["checksum"],
                                       cols["key_group_start"], cols["key_group_end"], cols["states"]):  # fmt: skip
        if t == STATES:
            reports.append((s, r, tuple(StateInfo.from_json(d) for d in json.loads(st))))
        else:
            entries.append(FileEntry(p, t, r, b, c, None, s, e))
    return sorted(entries, key=lambda e: e.path), sorted(reports, key=lambda rep: rep[0])


def write_grouped_parts(df: DataFrame, plan: PartPlan) -> list[FileEntry]:
    """Write a keyed table whose Spark partitions already hold disjoint key-group ranges; no shuffle.

    `df` has ``key``, ``key_group`` (of `plan`'s max parallelism), [``namespace``] and the state
    columns, and each partition holds whole key groups that no other partition holds: a
    savepoint's keyed table as statekit's data source reads it (one task per group of files),
    transformed row by row. File names carry their key-group range, so tasks never collide.
    """
    from statekit.spark.jvm_parts import write_grouped_parts_jvm

    written = write_grouped_parts_jvm(df, plan)
    if written is not None:
        return written

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        entries = write_task_output(task_table(batches), None, plan)
        if entries:
            yield _entries_batch(entries)

    return entries_from(df.mapInArrow(write, PART_SCHEMA))


def entries_from(parts: DataFrame) -> list[FileEntry]:
    """Run the writing job and return the `FileEntry` of every file it wrote (small rows, one per file)."""
    return _collect_parts(parts)[0]


def merge_states(reports: list[tuple[int, int, tuple[StateInfo, ...]]], what: str) -> tuple[StateInfo, ...]:
    """One operator's states from its tasks' reports ``(task, keyed files written, states)``.

    The union, in the order the first tasks registered them. A state registered differently by two
    tasks raises `StateTypeError`; so do two tasks that wrote keyed files with different states
    (every file must hold the columns the manifest declares).

    >>> a, b = StateInfo("n", "value", "bigint"), StateInfo("s", "list", "string")
    >>> [i.name for i in merge_states([(0, 1, (a, b)), (1, 0, ()), (2, 2, (a, b))], "op")]
    ['n', 's']
    >>> merge_states([(0, 1, (a,)), (1, 1, (StateInfo("n", "value", "int"),))], "op")
    Traceback (most recent call last):
    ...
    statekit.errors.StateTypeError: op: state 'n' was registered as value<bigint> in one task and as value<int> in another; register each state with one descriptor.
    """
    merged: dict[str, StateInfo] = {}
    for _, _, infos in reports:
        for info in infos:
            known = merged.setdefault(info.name, info)
            if known != info:
                raise StateTypeError(
                    f"{what}: state {info.name!r} was registered as {_shown(known)} in one task and as "
                    f"{_shown(info)} in another; register each state with one descriptor."
                )
    names = list(merged)
    for _, files, infos in reports:
        if files and [i.name for i in infos] != names:
            raise StateTypeError(
                f"{what}: a task registered states {[i.name for i in infos]} where others registered {names}; "
                "register the same states, in the same order, in every task (a function's open(ctx))."
            )
    return tuple(merged.values())


def _shown(info: StateInfo) -> str:
    extra = (", pickled" if info.pickled else "") + (f", ttl {info.ttl_ms} ms" if info.ttl_ms is not None else "")
    return f"{info.kind}<{info.type}{extra}>"


def plan_for(writer: OperatorWriter, builder: SavepointBuilder, *, buckets: int) -> PartPlan:
    """The `PartPlan` of `builder`'s operator `writer`: staging directory, layout, key groups, buckets."""
    key_type = writer.key_type
    if key_type is None:
        raise InvalidArgumentError(f"operator {writer.identifier}: keyed parts need a keyed operator (key_type=).")
    schema = K.keyed_schema(key_type, writer.keyed_states, namespace_type=writer.namespace_type, with_key_group=False)
    remote = builder.remote
    return PartPlan(
        # absolute: executors' Python workers do not share the driver's working directory, so a
        # relative savepoint path would send the parts elsewhere while the manifest lists them here
        root="" if remote is not None else os.path.abspath(builder.staging),
        store=None if remote is None else str(remote),
        storage=() if remote is None else remote.options,
        op_dir=writer.dir,
        key_type=key_type,
        max_parallelism=writer.max_parallelism,
        buckets=buckets,
        keyed_schema=schema,
        namespace_type=writer.namespace_type,
        rows_per_file=builder.rows_per_file,
        what=f"keyed table of operator {writer.identifier}",
    )
