"""`export(path, out)`: a savepoint's tables copied out as Parquet, CSV or Delta tables, atomically."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Literal

from statekit.errors import InvalidArgumentError, OutputExistsError

__all__ = ["export"]


def export(path: str | os.PathLike, out: str | os.PathLike, *, format: Literal["parquet", "csv", "delta"] = "parquet",
           op=None, prefix: str | None = None, plan=None) -> dict[str, int]:
    """Write every table of the savepoint at `path` (or of operator `op`) under `out`.

    The layout is ``<out>/<database>/<table>[.parquet|.csv]`` with the names `statekit.query` and
    Spark's `register()` use; Delta tables (one directory each) are written with Spark. `out` must
    not exist; it appears only when every table is written. ``plan``: a Flink SQL job's compiled
    plan (named columns, and each SQL operator's ``logical`` table). Returns ``{"db/table": rows}``.
    """
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from statekit.query import tables
    from statekit.savepoint import Savepoint

    if format not in ("parquet", "csv", "delta"):
        raise InvalidArgumentError(f"format must be 'parquet', 'csv' or 'delta', not {format!r}.")
    target = Path(out)
    if target.exists() or target.is_symlink():
        raise OutputExistsError(f"{target} already exists; export writes a new directory. Choose a new path.")
    sp = Savepoint.open(path, plan=plan)
    wanted = None if op is None else sp.operator(op).uid_hash
    staging = target.parent / f".{target.name}.inprogress-{uuid.uuid4().hex[:12]}"
    written: dict[str, int] = {}
    spark = None
    try:
        staging.mkdir(parents=True)
        for db, names in tables(sp, prefix).items():
            for name, (meta, kind, state) in names.items():
                if wanted is not None and meta.uid_hash != wanted:
                    continue
                table = _table(sp, meta, kind, state)
                (staging / db).mkdir(exist_ok=True)
                if format == "parquet":
                    pq.write_table(table, staging / db / f"{name}.parquet")
                elif format == "csv":
                    pcsv.write_csv(_csv_ready(table), staging / db / f"{name}.csv")
                else:
                    if spark is None:
                        from statekit.spark import spark_session

                        spark = spark_session()
                    # Spark reads the table from a Parquet file (every nested type survives), then writes Delta.
                    scratch = staging / ".scratch" / f"{db}.{name}.parquet"
                    scratch.parent.mkdir(exist_ok=True)
                    pq.write_table(table, scratch)
                    from statekit.spark.pruning import LITERAL_PATHS

                    spark.read.options(**LITERAL_PATHS).parquet(str(scratch.resolve())).write.format("delta").save(
                        str((staging / db / name).resolve()))
                    scratch.unlink()
                written[f"{db}/{name}"] = table.num_rows
        shutil.rmtree(staging / ".scratch", ignore_errors=True)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return written


def _table(sp, meta, kind: str, state: str | None):
    if kind == "keyed":
        return sp.keyed_table(meta.identifier)
    if kind == "timers":
        t = sp.timers(meta.identifier)
        return t.drop_columns(["key_group"]) if "key_group" in t.column_names else t
    if kind == "logical":
        return sp.logical_table(meta.identifier)
    if kind == "broadcast":
        return sp.broadcast_state(meta.identifier, state)
    if kind == "union":
        return sp.union_state(meta.identifier, state)
    return sp.list_state(meta.identifier, state)


def _csv_ready(table):
    """Nested columns (lists, maps, structs) as JSON text: CSV holds scalars only."""
    import json

    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_nested(field.type):
            text = [None if v is None else json.dumps(v, default=str, ensure_ascii=False)
                    for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(text, pa.string()))
    return table

