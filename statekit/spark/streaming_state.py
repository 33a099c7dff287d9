"""Spark Structured Streaming state through Spark: the ``statekit-streaming-state`` data source and `StreamingStateReader`.

``spark.read.format("statekit-streaming-state").option("operator", "0").option("store", "count").load(checkpoint)``
reads one table of a checkpoint (`statekit.savepoint.spark_checkpoint.SparkCheckpoint`) in Python
on the executors, one Spark partition per state partition, with no Spark state store involved
(nothing is loaded into, or reported to, a StateStoreCoordinator).

Options
-------
========  ======  ===========  ==============================================================
name      type    default      meaning
========  ======  ===========  ==============================================================
path      string  (required)   the checkpoint directory (the query's checkpointLocation)
operator  string  the only one operator id or name (``0``, ``stateStoreSave``)
store     string  ``default``  store (``left-keyToNumValues``...) or state variable; ``$timers``
batch     int     latest       committed batch whose state is read
========  ======  ===========  ==============================================================
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from statekit.errors import InvalidArgumentError
from statekit.savepoint.spark_checkpoint import SparkCheckpoint
from statekit.spark.scan import spark_ddl

NAME = "statekit-streaming-state"


def _open(options: dict[str, str]) -> tuple[SparkCheckpoint, int, str]:
    opts = {k.lower(): v for k, v in options.items()}
    if not opts.get("path"):
        raise InvalidArgumentError(f"format({NAME!r}) needs the checkpoint: .load(path) or .option('path', ...)")
    batch = int(opts["batch"]) if opts.get("batch") not in (None, "") else None
    sp = SparkCheckpoint.open(opts["path"], batch=batch)
    op = opts.get("operator")
    if op is None:
        if len(sp.spark_operators) != 1:
            raise InvalidArgumentError(f"{sp.path} has {len(sp.spark_operators)} stateful operators; name one with "
                                       ".option('operator', ID or NAME)")
        op = str(sp.spark_operators[0].id)
    return sp, sp.spark_operator(op).id, opts.get("store", "default")


class _Reader(DataSourceReader):
    def __init__(self, path: str, batch: int, op: int, store: str, partitions: int) -> None:
        self.path, self.batch, self.op, self.store, self.n = path, batch, op, store, partitions

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in range(self.n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        sp = SparkCheckpoint.open(self.path, batch=self.batch)
        yield from sp.keyed_table(self.op, store=self.store, partitions=[partition.value]).to_batches()


class StreamingStateDataSource(DataSource):
    """``format("statekit-streaming-state")``: one table of a Spark streaming checkpoint (options above)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        sp, op, store = _open(dict(self.options))
        return spark_ddl(sp.table_schema(op, store))

    def reader(self, schema: Any) -> DataSourceReader:
        sp, op, store = _open(dict(self.options))
        sp.table_schema(op, store)  # unknown stores are refused while planning
        return _Reader(str(sp.path.resolve()), sp.batch, op, store, sp.spark_operator(op).num_partitions)


class StreamingStateReader:
    """A Spark streaming checkpoint's tables as DataFrames (`SparkCheckpoint` names them)."""

    def __init__(self, spark: Any, checkpoint: SparkCheckpoint) -> None:
        self.spark = spark
        self.checkpoint = checkpoint

    @classmethod
    def read(cls, spark: Any, path: "str | os.PathLike[str]", *, batch: int | None = None) -> "StreamingStateReader":
        """Open the checkpoint at `path` (at committed `batch`, default the latest) for reading with `spark`."""
        spark.dataSource.register(StreamingStateDataSource)
        return cls(spark, SparkCheckpoint.open(path, batch=batch))

    def keyed_table(self, op: int | str, store: str = "default") -> Any:
        """One row per stored entry: ``partition_id``, the key's fields, the value's fields."""
        info = self.checkpoint.spark_operator(op)
        return (self.spark.read.format(NAME).option("operator", str(info.id)).option("store", store)
                .option("batch", str(self.checkpoint.batch)).load(str(self.checkpoint.path.resolve())))

    def register(self, prefix: str | None = None, *, format: str = "parquet") -> dict[str, list[str]]:
        """One Spark database per operator with a table per store or variable (the names `statekit query` uses).

        The tables are copies written into the session catalog's warehouse in `format` (Spark's
        catalog cannot hold tables backed by a Python data source); registering again replaces them.
        """
        out: dict[str, list[str]] = {}
        for db, tables in self.checkpoint.sql_tables(prefix).items():
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{db}`")
            for name, (meta, _, store) in tables.items():
                qualified = f"`{db}`.`{name}`"
                self.spark.sql(f"DROP TABLE IF EXISTS {qualified}")
                self.keyed_table(int(meta.uid), store or "default").write.format(format).saveAsTable(qualified)
                out.setdefault(db, []).append(name)
        return out
