"""Offline repartitioning of a Spark streaming checkpoint on Spark's executors: each task reads or writes its partitions' files.

Stage 1 has one task per source store partition: it loads that partition's state files
(`SparkCheckpoint.load`, no JVM state store) and emits each entry keyed by its new partition
(Spark's Murmur3 placement) as one record per new partition (its keys, its values, and the source
partition's RocksDB column family metadata). Spark's shuffle brings the entries of one new partition together; stage 2 has one task
per new store partition, which writes its snapshot (HDFS) or checkpoint zip and SSTs (RocksDB) with
the ``.crc`` side files. The driver reads no state: it writes the operator metadata and the logs
after the job (`statekit.savepoint.spark_repartition.repartition` does, then renames the target
into place). Checkpoint and staging directory must be paths every executor reaches (the checkpoint
reader takes local paths: on a cluster, a shared mount).
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Any, Iterator

from statekit.format.spark.layout import OperatorInfo
from statekit.savepoint import spark_repartition as local
from statekit.savepoint.spark_checkpoint import SparkCheckpoint
from statekit.savepoint.spark_repartition import (
    RepartitionSummary,
    listed,
    placed_entries,
    same_families,
    write_partition,
)


def repartition(checkpoint: str | os.PathLike[str], target: str | os.PathLike[str], *, partitions: int,
                spark: Any) -> RepartitionSummary:
    """`statekit.savepoint.spark_repartition.repartition` with the state files read and written by Spark tasks
    on `spark`'s executors, one per source and one per new store partition, for state that does not fit one
    machine; the driver writes only the operator metadata and logs, last."""
    return local.repartition(checkpoint, target, partitions=partitions, rewrite=partial(rewrite_on_executors, spark))


def rewrite_on_executors(spark: Any, sp: SparkCheckpoint, stores: list[tuple[OperatorInfo, str]], stage: Path,
                         partitions: int) -> dict[str, list[int]]:
    """Write every store of `stores` in `partitions` new partitions under `stage`, in Spark tasks; entries per
    new partition, per ``"<op>/<store>"``."""
    path, batch, out = str(sp.path), sp.batch, str(stage)
    tasks = [(i, info.id, store, p) for i, (info, store) in enumerate(stores) for p in range(info.num_partitions)]
    if not tasks:
        return {}

    def place(task: tuple[int, int, str, int]) -> Iterator[tuple[int, tuple[list[bytes], list[bytes], bytes]]]:
        i, op, store, p = task
        cp = SparkCheckpoint.open(path, batch=batch)
        placed, meta = placed_entries(cp, cp.spark_operator(op), store, p, partitions)
        doc = json.dumps(meta).encode()
        # one record per new partition (even an empty one: it hears of the families)
        for q, (keys, values) in enumerate(placed.by_partition(partitions)):
            yield i * partitions + q, (listed([keys]), listed([values]), doc)

    def write(index: int, items: Iterator[tuple[int, tuple[list[bytes], list[bytes], bytes]]]) -> Iterator[tuple[int, int, int]]:
        i, q = divmod(index, partitions)
        _, op, store, _ = next(t for t in tasks if t[0] == i)
        cp = SparkCheckpoint.open(path, batch=batch)
        info = cp.spark_operator(op)
        keys: list[bytes] = []
        values: list[bytes] = []
        families: dict = {}
        for _, (ks, vs, doc) in items:  # (each key comes from one source partition only)
            families = same_families(families, json.loads(doc), cp, info)
            keys += ks
            values += vs
        write_partition(cp, info, store, Path(out), q, keys, values, families)
        yield i, q, len(keys)

    n = len(stores) * partitions
    counts = (spark.sparkContext.parallelize(tasks, len(tasks)).flatMap(place)
              .partitionBy(n, lambda x: x).mapPartitionsWithIndex(write).collect())
    result = {f"{info.id}/{store}": [0] * partitions for info, store in stores}
    for i, q, c in counts:
        info, store = stores[i]
        result[f"{info.id}/{store}"][q] = c
    return result
