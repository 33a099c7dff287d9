"""Write buckets: how Spark cuts an operator's rows into tasks, each a contiguous key-group range (`PartPlan`).

Shared by the two writers of keyed parts, `statekit.spark.parts` (rows through Python) and
`statekit.spark.jvm_parts` (Spark's own Parquet writer).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from statekit.format.storage import StoragePath, locate

__all__ = ["KEY_GROUP", "PartPlan", "bucket_column", "partition_values", "write_buckets"]

#: The helper column added on the executors: the key group.
KEY_GROUP = "__statekit_kg"


@dataclass(frozen=True)
class PartPlan:
    """What executors need to write one operator's parts (small and picklable: it ships with every task)."""

    root: str  #: the builder's staging directory
    op_dir: str  #: the operator's directory under it (``op-<uid hash>``)
    key_type: str
    max_parallelism: int
    buckets: int
    keyed_schema: pa.Schema | None  #: without ``key_group`` (`K.keyed_schema(..., with_key_group=False)`); None: the task's
    namespace_type: str | None
    rows_per_file: int
    what: str  #: how errors name the operator
    #: a URI target's URI (then `root` is unused): tasks write under it; its storage options (credentials) beside
    store: str | None = None
    storage: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def target(self, rel: str) -> "Path | StoragePath":
        """Where the file `rel` of the new savepoint is written: in the staging directory, or under the URI."""
        if self.store is None:
            return Path(self.root) / rel
        where = locate(self.store, storage_options=dict(self.storage) or None)
        assert isinstance(where, StoragePath)
        return where / rel

    def bucket_of(self, kg: np.ndarray) -> np.ndarray:
        """The write bucket of each key group (contiguous key-group ranges, as Flink's subtasks)."""
        return (kg.astype(np.int64) * self.buckets // self.max_parallelism).astype(np.int32)


def write_buckets(spark_parallelism: int, parallelism: int, max_parallelism: int) -> int:
    """How many tasks write an operator: at least its parallelism and two per core, at most one per key group.

    More buckets than the operator's parallelism keep each task's share of the state small.
    """
    return max(1, min(max_parallelism, max(parallelism, 2 * spark_parallelism)))


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (the hash behind ``repartition(n, col)`` of an int column)."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k = rotl(k, 15) * 0x1B873593 & 0xFFFFFFFF
    h = rotl(seed ^ k, 13)
    h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4
    h ^= h >> 16
    h = h * 0x85EBCA6B & 0xFFFFFFFF
    h ^= h >> 13
    h = h * 0xC2B2AE35 & 0xFFFFFFFF
    h ^= h >> 16
    return struct.unpack("<i", struct.pack("<I", h))[0]


def partition_values(n: int) -> list[int]:
    """``values[b]``: an int that ``repartition(n, col)`` sends to partition ``b`` (``pmod(hash(v), n) == b``).

    >>> vs = partition_values(8); [_murmur3_int(v) % 8 for v in vs]
    [0, 1, 2, 3, 4, 5, 6, 7]
    """
    values: list[int | None] = [None] * n
    missing, v = n, 0
    while missing:
        p = _murmur3_int(v) % n
        if values[p] is None:
            values[p] = v
            missing -= 1
        v += 1
    return [int(x) for x in values if x is not None]


def bucket_column(plan: PartPlan, kg: str = KEY_GROUP) -> Column:
    """The value to ``repartition(plan.buckets, ...)`` by that sends key group column `kg`'s bucket ``b`` to partition ``b``."""
    lookup = partition_values(plan.buckets)
    bucket = F.expr(f"(`{kg}` * {plan.buckets}) div {plan.max_parallelism}").cast("int")
    return F.element_at(F.array(*[F.lit(int(v)) for v in lookup]), bucket + 1)
