"""Export a savepoint's tables with Spark (Delta or Parquet), and keep a Delta history of keyed state across savepoints."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from statekit.errors import InvalidArgumentError, OutputExistsError
from statekit.identifiers import OperatorIdentifier
from statekit.query import database_name, tables
from statekit.spark.reader import SavepointReader

__all__ = ["HISTORY_COLUMNS", "append_state_history", "export"]

#: Columns `append_state_history` adds in front of each keyed table.
HISTORY_COLUMNS = ("checkpoint_id", "savepoint")


def _frame(reader: SavepointReader, meta: Any, kind: str, state: str | None) -> DataFrame:
    op = meta.identifier
    if kind == "keyed":
        return reader.read_keyed_state(op)
    if kind == "timers":
        return reader.read_timers(op)
    if state is None:
        raise InvalidArgumentError(f"a {kind} table needs the name of its operator state.")
    if kind == "broadcast":
        return reader.read_broadcast_state(op, state)
    if kind == "union":
        return reader.read_union_state(op, state)
    return reader.read_list_state(op, state)


def export(
    reader: SavepointReader,
    path: str | os.PathLike[str],
    *,
    format: Literal["delta", "parquet"] = "delta",
    op: OperatorIdentifier | str | None = None,
    prefix: str | None = None,
) -> dict[str, int]:
    """Write every table of the savepoint (or of operator `op`) under `path` with Spark.

    The layout is ``<path>/<database>/<table>`` with the names of `SavepointReader.register` and
    `statekit.sql` (uid ``tx-source`` -> ``tx_source/keyed``, ``tx_source/timers``, one per operator
    state), each a Delta table or a directory of Parquet files. Spark reads and writes in parallel,
    nothing passes through the driver. `path` must not exist; it appears when every table is
    written, under its final name (a staging directory is renamed). Returns ``{"db/table": rows}``.
    """
    if format not in ("delta", "parquet"):
        raise InvalidArgumentError(f"format must be 'delta' or 'parquet', not {format!r}.")
    target = Path(path)
    if target.exists() or target.is_symlink():
        raise OutputExistsError(f"{target} already exists; export writes a new directory. Choose a new path.")
    sp = reader.savepoint
    wanted = None if op is None else sp.operator(OperatorIdentifier.coerce(op)).uid_hash
    staging = target.parent / f".{target.name}.inprogress-{uuid.uuid4().hex[:12]}"
    written: dict[str, int] = {}
    try:
        staging.mkdir(parents=True)
        for db, names in tables(sp, prefix).items():
            for name, (meta, kind, state) in names.items():
                if wanted is not None and meta.uid_hash != wanted:
                    continue
                df = _frame(reader, meta, kind, state)
                out = str((staging / db / name).resolve())
                df.write.format(format).save(out)
                written[f"{db}/{name}"] = reader.spark.read.format(format).load(out).count()  # from file footers
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return written


def append_state_history(
    savepoint: SavepointReader | str | os.PathLike[str],
    delta_path: str | os.PathLike[str],
    *,
    spark: SparkSession | None = None,
    op: OperatorIdentifier | str | None = None,
) -> dict[str, int]:
    """Append each operator's keyed table to a Delta table under `delta_path`, tagged with the checkpoint id.

    One Delta table per operator, ``<delta_path>/<database>`` (the `register` database name), with
    columns ``checkpoint_id``, ``savepoint`` (its path), then the keyed table's. Each call adds one
    Delta version per operator, so savepoints can be compared with Delta time travel
    (``versionAsOf``) or simply by ``checkpoint_id``. States added later are merged into the
    schema (older rows read them as null). Appending the same checkpoint id twice is refused.
    Returns ``{database: rows appended}``.

    Examples
    --------
    >>> for sp in ["sp-1", "sp-2", "sp-3"]:                                   # doctest: +SKIP
    ...     append_state_history(sp, "/lake/state-history", spark=spark)
    >>> spark.read.format("delta").load("/lake/state-history/counter") \\
    ...     .groupBy("checkpoint_id").agg(F.sum("count")).show()               # doctest: +SKIP
    """
    if isinstance(savepoint, SavepointReader):
        reader = savepoint
    else:
        if spark is None:
            from statekit.spark.session import spark_session

            spark = spark_session()
        reader = SavepointReader.read(spark, savepoint)
    session = reader.spark
    sp = reader.savepoint
    checkpoint_id = sp.checkpoint_id
    wanted = None if op is None else sp.operator(OperatorIdentifier.coerce(op)).uid_hash
    targets = []
    for meta in sp.operators:
        if meta.key_type is None or (wanted is not None and meta.uid_hash != wanted):
            continue
        target = Path(delta_path) / database_name(meta, None)
        if (target / "_delta_log").is_dir():
            seen = session.read.format("delta").load(str(target.resolve())).where(F.col("checkpoint_id") == checkpoint_id)
            if seen.limit(1).count():
                raise OutputExistsError(
                    f"{target} already holds checkpoint {checkpoint_id} (savepoint {reader.path}); the history "
                    "keeps each checkpoint once. Append a different savepoint, or delete those rows first."
                )
        targets.append((meta, target))
    appended: dict[str, int] = {}
    for meta, target in targets:  # checked every operator first: a refusal appends nothing
        df = reader.read_keyed_state(meta.identifier)
        df = df.select(F.lit(checkpoint_id).cast("bigint").alias("checkpoint_id"),
                       F.lit(reader.path).alias("savepoint"), *df.columns)  # fmt: skip
        df.write.format("delta").mode("append").option("mergeSchema", "true").save(str(target.resolve()))
        rows = session.read.format("delta").load(str(target.resolve())).where(F.col("checkpoint_id") == checkpoint_id)
        appended[target.name] = rows.count()
    return appended
