"""Apache Flink savepoints and checkpoints (binary `_metadata`, canonical keyed/operator state streams), read in bulk.

Modules, bottom up: `binary` (Java DataInput), `metadata` (`_metadata` V3-V6, every handle type),
`serializers` (serializer snapshots -> `FlinkType` with DDL and raw bytes), `proxy` (backend
proxies: state meta infos), `files` (handles -> bytes, kept inside the savepoint), `values`
(value encodings, numpy bulk and per-record), `locate` (entries found in bulk: strided runs, a
proven candidate scan, a chained walk), `columns` (keys/values decoded, bulk or per record),
`keyed` (key groups -> keyed and timers tables),
`native` (RocksDB files of native savepoints and incremental checkpoints, via a read-only copy),
`checkpoints` (HashMap checkpoint streams), both re-laid as canonical entries for `keyed`,
`reader` (`FlinkStateReader`: one savepoint's operators), `pyflink` (PyFlink's Row keys and coder
bytes, decoded by declared types). The `Savepoint` API over it lives in
`statekit.savepoint.flink`; the format is `../shared/flink/FORMAT.md`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statekit.format.flink.metadata import CheckpointMetadata, is_flink_metadata, read_metadata
    from statekit.format.flink.reader import FlinkStateReader
    from statekit.format.flink.serializers import FlinkType

# Imported on first use: the writer's modules (`statekit convert --to flink` of a statekit savepoint) do
# without the reader's (keyed, locate, values, native: ~0.1 s of a fresh process).
_HOMES = {"CheckpointMetadata": "metadata", "is_flink_metadata": "metadata", "read_metadata": "metadata",
          "FlinkStateReader": "reader", "FlinkType": "serializers"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CheckpointMetadata", "FlinkStateReader", "FlinkType", "is_flink_metadata", "read_metadata"]
