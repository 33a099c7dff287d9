"""Keep a Delta history of keyed state across savepoints (`append_state_history`); `export` lives in
`statekit.spark.export`."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from statekit.errors import OutputExistsError
from statekit.identifiers import OperatorIdentifier
from statekit.spark.export import export
from statekit.spark.reader import SavepointReader
from statekit.table_names import database_name

__all__ = ["HISTORY_COLUMNS", "append_state_history", "export"]

#: Columns `append_state_history` adds in front of each keyed table.
HISTORY_COLUMNS = ("checkpoint_id", "savepoint")



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
