"""Spark writes a statekit savepoint's state as a canonical Flink savepoint: state files on the executors, `_metadata` on the driver.

Boundary: plans one Spark task per (operator, subtask) - a keyed file for the subtask's key-group
range, an operator-state file - each reading only its key groups' Parquet files of the (staged)
statekit savepoint and writing its Flink file into the Flink staging directory, or for a URI target
straight under the target's prefix (each task opens the store itself); the driver gets back names,
sizes and offsets (O(max parallelism) per file) and writes `_metadata` last. Which
serializers each operator gets is decided by `statekit.savepoint.flink_out` (carried from a Flink
source, or mapped from DDL); the bytes by `statekit.format.flink.writer`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
from pyspark.sql import SparkSession

from statekit.format.files import storage_errors
from statekit.format.flink.utf import check_metadata_texts
from statekit.format.flink.versions import FlinkVersion, check_serializers
from statekit.format.flink.writer import (
    FlinkStaging,
    KeyedLayoutOut,
    OperatorOut,
    OperatorStateOut,
    SubtaskOut,
    metadata_bytes,
    serializers_of,
    write_keyed_file,
    write_operator_file,
)
from statekit.format.storage import StoragePath, locate
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import key_group_range
from statekit.savepoint.flink_out import (
    Carried,
    TypeHints,
    carried_serializers,
    keyed_layout,
    operator_state_layouts,
    target_version,
    with_operator_data,
)
from statekit.savepoint.reader import Savepoint


@dataclass(frozen=True)
class _Plan:
    """One operator as the tasks need it: identity, placement and serializers (no data)."""

    uid_hash: str
    parallelism: int
    max_parallelism: int
    layout: KeyedLayoutOut | None
    operator_states: tuple[OperatorStateOut, ...]


#: where a task reads or writes: a local path, or a URI and the storage options it was located with
TaskWhere = tuple[str, tuple[tuple[str, str], ...]]


def task_where(path: "Path | StoragePath") -> TaskWhere:
    """`path` as a Spark task receives it (picklable, the storage options kept with the URI)."""
    return (str(path), path.options) if isinstance(path, StoragePath) else (str(Path(path).resolve()), ())


def task_opened(where: TaskWhere) -> "Path | StoragePath":
    """In a task: the path or `StoragePath` of `task_where`'s answer, the filesystem opened there."""
    text, options = where
    return locate(text, storage_options=dict(options) or None) if options else locate(text)


def _task(source: TaskWhere, staging: TaskWhere, plans: list[_Plan], task: tuple[int, int, str]) -> tuple:
    """Write one Flink state file on an executor; returns (operator, subtask, kind, name, size, offsets or handle)."""
    import uuid

    i, sub, kind = task
    plan = plans[i]
    sp = Savepoint.open(task_opened(source))
    ident = OperatorIdentifier.for_uid_hash(plan.uid_hash)
    name = str(uuid.uuid4())
    root = task_opened(staging)
    path: Any = root / name
    if kind == "keyed":
        assert plan.layout is not None
        rng = key_group_range(plan.max_parallelism, plan.parallelism, sub)
        keyed = sp.keyed_table(ident, with_key_group=True, key_groups=rng)
        timers = sp.timers(ident)
        if timers is not None and timers.num_rows:
            kg = timers.column("key_group").to_numpy()
            timers = timers.filter(pa.array((kg >= rng.start) & (kg <= rng.end)))
        with storage_errors(root):  # an executor's full disk: a typed error on the driver
            offsets, size = write_keyed_file(path, plan.layout, keyed, timers, rng.start, rng.end)
        return i, sub, kind, name, size, offsets
    meta = sp.operator(ident)
    states = with_operator_data(sp, meta, list(plan.operator_states))
    with storage_errors(root):
        handle, size = write_operator_file(path, states, sub)
    return i, sub, kind, name, size, handle


def write_flink_spark(spark: SparkSession, source: "str | os.PathLike[str] | StoragePath", target: "str | os.PathLike[str] | StoragePath", *,
                      types: TypeHints | None = None, carried: Mapping[str, Carried | None] | None = None,
                      names: Mapping[str, str] | None = None,
                      flink_version: str | FlinkVersion | None = None,
                      coordinators: Mapping[str, bytes] | None = None) -> "Path | StoragePath":
    """Write statekit savepoint `source` as a Flink savepoint at `target` with one Spark task per state file.

    `carried` maps an operator's uid hash to the serializers it had in a Flink savepoint (reused
    byte for byte; by default those its manifest carries); other state gets DDL-mapped serializers (`types` hints structs).
    `coordinators`: operator coordinators' states to write (a source's split enumerator) by uid hash in `source`.
    `flink_version`: the Flink the savepoint is for (default: the one the state came from, else the newest). Atomic:
    nothing is at `target` unless every task and the `_metadata` write succeeded.
    """
    sp = Savepoint.open(source)
    version = target_version(sp, flink_version)
    carried = carried or {}
    plans: list[_Plan] = []
    tasks: list[tuple[int, int, str]] = []
    outs: list[OperatorOut] = []
    for i, meta in enumerate(sp.operators):
        c = carried[meta.uid_hash] if meta.uid_hash in carried else carried_serializers(sp, meta)
        layout = None
        if meta.key_type is not None:
            has_timers = bool(meta.files_of("timers"))
            layout = keyed_layout(meta, c, types, max_parallelism=meta.max_parallelism, has_timers=has_timers)
        op_states = tuple(operator_state_layouts(meta, c, types))
        plans.append(_Plan(meta.uid_hash, meta.parallelism, meta.max_parallelism, layout, op_states))
        name = (names or {}).get(meta.uid_hash) or meta.name or meta.uid or meta.uid_hash
        outs.append(OperatorOut(meta.uid, meta.uid_hash, name, meta.parallelism, meta.max_parallelism,
                                coordinator=(coordinators or {}).get(meta.uid_hash)))
        if layout is not None or op_states:
            outs[-1].subtasks = [SubtaskOut(s) for s in range(meta.parallelism)]
        for s in range(meta.parallelism):
            if layout is not None:
                tasks.append((i, s, "keyed"))
            if op_states:
                tasks.append((i, s, "operator"))
    check_metadata_texts(t for o in outs for t in (("operator uid", o.uid), ("operator name", o.name)))
    check_serializers(version, (p for meta, plan in zip(sp.operators, plans)
                                for p in serializers_of(meta.uid or meta.uid_hash, plan.layout, plan.operator_states)))
    with FlinkStaging(target) as staging:  # a URI target: the tasks write under its prefix
        src, stage = task_where(sp.path), task_where(staging.dir)
        results: list[Any] = []
        if tasks:
            from statekit.spark.jvm_parts import run_write_job

            rdd = spark.sparkContext.parallelize(tasks, len(tasks)).map(lambda t: _task(src, stage, plans, t))
            results = run_write_job(spark, rdd.collect, staging.target)  # a failure: its tasks end before the clean-up
        for i, sub, kind, name, size, detail in results:
            st = outs[i].subtasks[sub]
            if kind == "keyed":
                st.keyed = (key_group_range(plans[i].max_parallelism, plans[i].parallelism, sub).start, detail, name, size)
            else:
                st.operator = (detail, name, size)
        return staging.commit(metadata_bytes(sp.checkpoint_id, outs, flink_version=version))


__all__ = ["write_flink_spark"]
