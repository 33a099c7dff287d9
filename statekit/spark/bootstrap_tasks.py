"""What every keyed bootstrap shares (`statekit.spark.bootstrap` and its window bootstrap,
`statekit.spark.window_bootstrap`): the finished `BootstrapTransformation`, the key column, each task's backend and
rows, and the write of the executors' parts."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, Row
from pyspark.sql.types import StructField, StructType

from statekit.backends.heap import HeapKeyedStateBackend
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import KeyGroupRange, check_max_parallelism
from statekit.savepoint import SavepointBuilder
from statekit.spark import parts as P
from statekit.types import parse_ddl, to_arrow_array

if TYPE_CHECKING:
    from statekit.spark.bootstrap import OneInputOperatorTransformation

__all__ = ["KEY_COLUMN", "BootstrapTransformation", "keyed_frame", "parallelism_of", "part_plan", "rows_of",
           "task_backend", "write_discovered"]

#: The column a key computed by a function of the row is added as (`keyed_frame`).
KEY_COLUMN = "__statekit_key"


class BootstrapTransformation:
    """A finished transformation; pass it to `SavepointWriter.with_operator`."""

    def __init__(self, write: Callable[[SavepointBuilder, OperatorIdentifier, int], None], infos: Any) -> None:
        self._write = write
        self.keyed_states = infos
        self.columnar: tuple[Any, list] | None = None

    def write_into(self, builder: SavepointBuilder, ident: OperatorIdentifier, max_parallelism: int) -> None:
        """Run the Spark job(s) and add the operator to `builder` (used by `SavepointWriter.write`)."""
        check_max_parallelism(max_parallelism)
        self._write(builder, ident, max_parallelism)


def task_backend(key_type: str, max_parallelism: int) -> HeapKeyedStateBackend:
    """The heap backend a bootstrap task builds its keys' state in (every key group: the task's rows decide)."""
    return HeapKeyedStateBackend(key_type=parse_ddl(key_type), max_parallelism=max_parallelism,
                                 key_group_range=KeyGroupRange(0, max_parallelism - 1), clock=lambda: 0)


def parallelism_of(t: OneInputOperatorTransformation, cap: int | None = None) -> int:
    """The parallelism recorded for the operator: the transformation's, else its DataFrame's partitions (at most `cap`)."""
    p = t.parallelism or t.df.rdd.getNumPartitions() or 1
    return min(p, cap) if cap else p


@functools.lru_cache(maxsize=64)
def _row_class(names: tuple[str, ...]) -> type:
    # A Row subclass with the field names on the class: rows are then built with one tuple.__new__
    # (about 7x faster than Row(**fields)); they behave, compare and pickle as plain Rows.
    return type("Row", (Row,), {"__fields__": list(names)})


def rows_of(batch: pa.RecordBatch, drop: Iterable[str] = ()) -> Iterator[Row]:
    """The rows of `batch` as Spark `Row`s (the columns in `drop` left out), as bootstrap functions receive them."""
    names = tuple(n for n in batch.schema.names if n not in drop)
    cls, new = _row_class(names), tuple.__new__
    return (new(cls, values) for values in zip(*(batch.column(n).to_pylist() for n in names)))


def keyed_frame(df: DataFrame, key: str | Callable[[Any], Any], key_type: str) -> tuple[DataFrame, str]:
    """`df` and the name of its key column; a key computed by a function of the row is added as a column.

    Each key's rows must meet in one task: callers repartition by that column (Spark's own hash
    partitioning, no Python pass; each task's backend covers every key group and the builder
    orders the tables by key group on the driver).
    """
    if isinstance(key, str):
        return df, key
    from pyspark.sql.pandas.types import from_arrow_type

    arrow_key = parse_ddl(key_type)

    def add_keys(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            keys = to_arrow_array([key(r) for r in rows_of(batch)], arrow_key, what="key")
            yield pa.RecordBatch.from_arrays(list(batch.columns) + [keys], names=batch.schema.names + [KEY_COLUMN])

    keyed_schema = StructType(df.schema.fields + [StructField(KEY_COLUMN, from_arrow_type(arrow_key), False)])
    return df.mapInArrow(add_keys, keyed_schema), KEY_COLUMN


def part_plan(df: DataFrame, builder: SavepointBuilder, writer: Any) -> P.PartPlan:
    """How the executors write `writer`'s operator (buckets: see `parts.write_buckets`)."""
    spark_parallelism = df.sparkSession.sparkContext.defaultParallelism
    return P.plan_for(writer, builder, buckets=P.write_buckets(spark_parallelism, writer.parallelism,
                                                                writer.max_parallelism))  # fmt: skip


def write_discovered(df: DataFrame, key_col: str, builder: SavepointBuilder, writer: Any, task: Any) -> None:
    """Write `writer`'s keyed parts with a task function reporting its states; declare the merged states."""
    entries, infos = P.write_discovered_parts(df, key_col, part_plan(df, builder, writer), task)
    writer.declare_keyed_states(infos)
    writer.add_files(entries)
