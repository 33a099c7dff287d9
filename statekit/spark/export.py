"""Export a savepoint's tables with Spark, each a Delta table or a directory of Parquet files (`export`)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import DataFrame

from statekit.errors import InvalidArgumentError, OutputExistsError
from statekit.identifiers import OperatorIdentifier
from statekit.query import tables

if TYPE_CHECKING:
    from statekit.spark.reader import SavepointReader

__all__ = ["export"]


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
