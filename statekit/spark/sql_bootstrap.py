"""Spark bootstraps a Flink SQL operator's state from a DataFrame: Spark aggregates, executors write each subtask's state file.

Boundary: what to compute comes from `statekit.savepoint.sql_bootstrap.plan_bootstrap` (the plan and
the template); here Spark computes every accumulator buffer per key with its own aggregate functions
(``count``, ``sum``, ``min``/``max``, ``count_distinct``/``sum_distinct`` and ``collect_set`` for a
DISTINCT group's values), an executor pass adds each key's Flink key group (BinaryRowData's hash,
`sqlwrite.key_groups`), and one task per Flink subtask encodes its key-group range and writes the
state file into the savepoint's staging directory (`format.flink.writer.write_keyed_file`), as
`statekit.spark.flink_writer` writes keyed state. The driver gets back names, sizes and key-group
offsets only, and writes `_metadata` (the template's other operators carried as they are).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from statekit.errors import InvalidArgumentError
from statekit.keygroups import key_group_range

__all__ = ["bootstrap_spark", "bootstrap_sql"]


def _arrow_type(df: DataFrame, column: str) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(df.schema[column].dataType)


def aggregated(df: DataFrame, spec: Any) -> tuple[DataFrame, dict]:
    """`df` grouped by the key columns with one column per accumulator buffer (``_b<pos>``), DISTINCT groups'
    value sets (``_dv<i>``) and NULL-seen flags (``_dn<i>``); and how the columns map to the state."""
    from statekit.savepoint.sql_bootstrap import check_type

    need = spec.need()
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise InvalidArgumentError(f"operator {spec.label}: the DataFrame has no column(s) {missing}; it needs the "
                                   f"operator's input row {list(spec.input_names)} (by name), got {df.columns}.")
    kt = spec.schema.field("key").type
    for i, c in enumerate(spec.key_columns):
        check_type(_arrow_type(df, c), kt.field(i).type, f"key column {c!r}")
    keys = [F.col(f"`{c}`").alias(f"_k{i}") for i, c in enumerate(spec.key_columns)]
    aggs = []
    if spec.kind == "keep-first":
        return df.groupBy(*keys).agg(F.count(F.lit(1)).alias("_rows")), {}
    acc_t = spec.schema.field(spec.acc_state).type
    for a in spec.aggs:
        arg = F.col(f"`{spec.input_names[a.args[0]]}`") if a.args else None
        for j, b in enumerate(a.buffers):
            pos = a.first + j
            if arg is not None and b not in ("count", "count1"):
                check_type(_arrow_type(df, spec.input_names[a.args[0]]), acc_t.field(pos).type,
                           f"aggregate {a.func}({spec.input_names[a.args[0]]}) of {spec.label}")
            if b in ("count", "count1"):
                e = F.count(F.lit(1)) if arg is None else (F.count_distinct(arg) if a.distinct else F.count(arg))
            elif b.startswith("sum"):
                assert arg is not None  # SUM/AVG take an argument
                e = F.sum_distinct(arg) if a.distinct else F.sum(arg)
                if a.func in ("SUM0", "AVG"):
                    e = F.coalesce(e, F.lit(0).cast(df.schema[spec.input_names[a.args[0]]].dataType))
            else:
                assert arg is not None
                e = F.min(arg) if b == "min" else F.max(arg)
            aggs.append(e.alias(f"_b{pos}"))
    for i, args in enumerate(spec.distinct):
        col = spec.input_names[args[0]]
        check_type(_arrow_type(df, col), spec.schema.field(f"distinctAcc_{i}").type.key_type,
                   f"DISTINCT column {col!r} of {spec.label}")
        aggs += [F.collect_set(F.col(f"`{col}`")).alias(f"_dv{i}"),
                 F.max(F.col(f"`{col}`").isNull().cast("int")).alias(f"_dn{i}")]
    aggs.append(F.count(F.lit(1)).alias("_rows"))
    return df.groupBy(*keys).agg(*aggs), {}


def physical(spec: Any, batch: pa.Table) -> pa.Table:
    """An aggregated batch as the template's keyed table (``key_group`` first), encoded types fitted."""
    from statekit.savepoint.sql_bootstrap import (
        MAPVIEW_PLACEHOLDER,
        fit,
        key_column,
        physical_table,
        struct_of,
        with_key_groups,
    )

    n = batch.num_rows
    cols: dict[str, pa.Array] = {"key": key_column(spec, {c: batch.column(f"_k{i}")
                                                         for i, c in enumerate(spec.key_columns)})}
    if spec.kind == "keep-first":
        cols[spec.acc_state] = pa.array(np.ones(n, bool), spec.schema.field(spec.acc_state).type)
        return with_key_groups(spec, physical_table(spec, cols, n))
    acc_t = spec.schema.field(spec.acc_state).type
    fields: list[Any] = [None] * acc_t.num_fields
    for a in spec.aggs:
        for j, _b in enumerate(a.buffers):
            pos = a.first + j
            fields[pos] = fit(batch.column(f"_b{pos}").combine_chunks(), acc_t.field(pos).type,
                              f"aggregate {a.func} of {spec.label}")
    width = sum(len(a.buffers) for a in spec.aggs)
    names = [acc_t.field(i).name for i in range(acc_t.num_fields)]
    for i, args in enumerate(spec.distinct):
        fields[width + i] = pa.array([MAPVIEW_PLACEHOLDER] * n, acc_t.field(width + i).type)
        shared = [a for a in spec.aggs if a.distinct and a.args == args]
        bits = (1 << len(shared)) - 1
        mt = spec.schema.field(f"distinctAcc_{i}").type
        lists = batch.column(f"_dv{i}").combine_chunks()
        lengths = np.diff(lists.offsets.to_numpy())
        items = pa.array(np.full(len(lists.values), bits, np.int64), mt.item_type)
        cols[f"distinctAcc_{i}"] = pa.MapArray.from_arrays(lists.offsets, fit(lists.values, mt.key_type,
                                                                              f"DISTINCT column of {spec.label}"),
                                                           items, type=mt, mask=pa.array(lengths == 0))
        seen = batch.column(f"_dn{i}").combine_chunks().to_numpy(zero_copy_only=False)
        name = f"distinctAcc_{i}_null_state"
        if name in spec.schema.names:
            cols[name] = pa.array(np.full(n, bits, np.int64), spec.schema.field(name).type, mask=seen != 1)
    if "row_kind" in names:
        fields[names.index("row_kind")] = pa.array(["+I"] * n, acc_t.field(names.index("row_kind")).type)
    cols[spec.acc_state] = struct_of(fields, acc_t)
    return with_key_groups(spec, physical_table(spec, cols, n))


def bootstrap_spark(df: DataFrame, sp: Any, spec: Any, target: Path, *, dry_run: bool = False) -> tuple[int, int]:
    """Write template `sp` with `spec`'s operator state computed from `df` by Spark at `target`; (keys, input rows)."""
    from statekit.format.flink.writer import OperatorData, SubtaskOut, write_flink_savepoint
    from statekit.savepoint.flink_out import (
        carried_serializers,
        coordinator_states,
        keyed_layout,
        operator_data,
        target_version,
    )
    from statekit.savepoint.flink_repair import carried

    grouped, _ = aggregated(df, spec)
    meta = spec.meta
    maxp, par = meta.max_parallelism, meta.parallelism
    stored = carried_serializers(sp, meta)
    assert stored is not None  # plan_bootstrap checked it
    layout = keyed_layout(meta, stored, None, max_parallelism=maxp, has_timers=bool(stored.timers))
    from pyspark.sql.types import IntegerType, StructField, StructType

    out_schema = StructType([*grouped.schema.fields, StructField("_subtask", IntegerType())])

    def place(batches: Any) -> Any:  # executors: each aggregated key's subtask (BinaryRowData hash)
        from statekit.format.flink.sqlwrite import key_groups
        from statekit.savepoint.sql_bootstrap import key_column

        for b in batches:
            t = pa.Table.from_batches([b])
            kg = key_groups(key_column(spec, {c: t.column(f"_k{i}") for i, c in enumerate(spec.key_columns)}),
                            spec.key_type, maxp)
            yield b.append_column("_subtask", pa.array((kg.astype(np.int64) * par // maxp).astype(np.int32)))

    with_sub = grouped.mapInArrow(place, out_schema)
    if dry_run:
        row = grouped.agg(F.count(F.lit(1)).alias("k"), F.sum("_rows").alias("r")).collect()[0]
        return int(row["k"]), int(row["r"] or 0)

    counts: dict[str, int] = {}

    def carry(staging: Any) -> list:
        from statekit.spark.flink_writer import task_where

        stage = task_where(staging.dir)  # on a store each task writes its file under the target's prefix itself

        def write(table: pa.Table) -> pa.Table:  # one task per Flink subtask: its key-group range, one file
            from statekit.format.flink.writer import write_keyed_file
            from statekit.spark.flink_writer import task_opened

            sub = int(table.column("_subtask")[0].as_py())
            rng = key_group_range(maxp, par, sub)
            keyed = physical(spec, table)
            name = str(uuid.uuid4())
            offsets, size = write_keyed_file(cast(Path, task_opened(stage) / name), layout, keyed, None, rng.start, rng.end)
            return pa.table({"subtask": pa.array([sub], pa.int32()), "name": [name], "size": [size],
                             "offsets": pa.array([list(offsets)], pa.list_(pa.int64())), "keys": [table.num_rows],
                             "rows": [int(np.asarray(table.column("_rows")).sum())]})

        schema = "subtask int, name string, size long, offsets array<long>, keys long, rows long"
        results = with_sub.groupBy("_subtask").applyInArrow(write, schema).collect()
        subs = [SubtaskOut(s) for s in range(par)]
        for r in results:
            subs[r["subtask"]].keyed = (key_group_range(maxp, par, r["subtask"]).start, list(r["offsets"]),
                                        r["name"], int(r["size"]))
        counts["keys"] = sum(int(r["keys"]) for r in results)
        counts["rows"] = sum(int(r["rows"]) for r in results)
        for s in subs:  # a subtask no key went to: its file holds the layout and empty key groups
            if s.keyed is None:
                rng = key_group_range(maxp, par, s.index)
                name, path = staging.new_file()
                from statekit.format.flink.writer import write_keyed_file

                offsets, size = write_keyed_file(path, layout, None, None, rng.start, rng.end)
                s.keyed = (rng.start, list(offsets), name, size)
        return subs

    mine = OperatorData(meta.uid, meta.uid_hash, meta.name or meta.uid or meta.uid_hash, par, maxp, carry=carry)
    coordinators = coordinator_states(sp)
    ops = [mine if m.uid_hash == meta.uid_hash else (carried(sp, m) or operator_data(sp, m)) for m in sp.operators]
    for m, op in zip(sp.operators, ops):
        op.coordinator = coordinators.get(m.uid_hash)  # a source's split enumerator (else the job re-reads)
    write_flink_savepoint(target, ops, checkpoint_id=sp.checkpoint_id, flink_version=target_version(sp, None))
    return counts.get("keys", 0), counts.get("rows", 0)


def bootstrap_sql(df: DataFrame, template: Any, target: Any, *, operator: str, plan: Any = None, sql: Any = None,
                  replace: bool = False, dry_run: bool = False) -> Any:
    """`statekit.savepoint.sql_bootstrap.bootstrap_sql` for a Spark DataFrame: the same arguments, checks and report;
    Spark computes the state and its executors write the state files (one task per Flink subtask)."""
    from statekit.savepoint.sql_bootstrap import prepare

    sp, spec, report = prepare(template, target, operator=operator, plan=plan, sql=sql, replace=replace)
    keys, rows = bootstrap_spark(df, sp, spec, report.target, dry_run=dry_run)
    report.operators.append((spec.label, spec.kind, keys, rows))
    report.written = not dry_run
    return report
