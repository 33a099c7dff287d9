"""The savepoint format (v1): manifest, Parquet tables, the local reader/writer and `check`.

A savepoint is a directory::

    <savepoint>/
      _metadata.json                      the manifest, written last and atomically
      op-<uid_hash>/keyed/part-*.parquet  keyed table: key_group, key, [namespace], one column per state
      op-<uid_hash>/timers/part-*.parquet key_group, key, [namespace], timestamp, domain
      op-<uid_hash>/operator/<state>/...  operator list / union state: subtask, idx, value
      op-<uid_hash>/broadcast/<state>/... broadcast state: key, value
      op-<uid_hash>/rocksdb/subtask-N/... native RocksDB checkpoint files (checkpoints only)

The names below are imported on first use, so that ``from statekit.savepoint import Savepoint``
(e.g. ``statekit inspect``) does not load the writer, `check`, `diff` and the keyed-table layout.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from statekit.format.manifest import (
        FORMAT,
        FORMAT_VERSION,
        MANIFEST_NAME,
        SUPPORTED_FEATURES,
        SUPPORTED_VERSIONS,
        FileEntry,
        Manifest,
        OperatorMetadata,
    )
    from statekit.savepoint.check import CheckReport, Problem, check
    from statekit.savepoint.diff import OperatorDiff, SavepointDiff, diff
    from statekit.savepoint.reader import Savepoint
    from statekit.savepoint.redistribute import redistribute_list_state
    from statekit.savepoint.writer import OperatorWriter, SavepointBuilder

#: Where each public name lives.
_HOMES = {
    **dict.fromkeys(("FORMAT", "FORMAT_VERSION", "MANIFEST_NAME", "SUPPORTED_FEATURES", "SUPPORTED_VERSIONS",
                     "FileEntry", "Manifest", "OperatorMetadata"), "statekit.format.manifest"),
    **dict.fromkeys(("CheckReport", "Problem", "check"), "statekit.savepoint.check"),
    **dict.fromkeys(("OperatorDiff", "SavepointDiff", "diff"), "statekit.savepoint.diff"),
    "Savepoint": "statekit.savepoint.reader",
    "redistribute_list_state": "statekit.savepoint.redistribute",
    **dict.fromkeys(("OperatorWriter", "SavepointBuilder"), "statekit.savepoint.writer"),
}

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "SUPPORTED_FEATURES",
    "SUPPORTED_VERSIONS",
    "CheckReport",
    "FileEntry",
    "Manifest",
    "OperatorDiff",
    "OperatorMetadata",
    "OperatorWriter",
    "Problem",
    "Savepoint",
    "SavepointBuilder",
    "SavepointDiff",
    "check",
    "diff",
    "redistribute_list_state",
]
assert sorted(__all__) == sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'statekit.savepoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


def _register_kinds() -> None:
    """The kinds of savepoint `Savepoint.open` tells apart (`statekit.savepoint.kinds`), registered here, above the
    modules that define them: the base reader names none of its kinds, and each kind's module loads on first use."""
    from statekit.savepoint import kinds

    def statekit_manifest(path: "Path") -> bool:
        return (path / "_metadata.json").is_file()

    def open_statekit(path: "Path", **options: Any) -> Any:
        from statekit.savepoint.reader import Savepoint

        return Savepoint.open_manifest(path, **options)

    def open_spark(path: "Path", *, trust_pickled: bool = False, **options: Any) -> Any:
        from statekit.errors import InvalidArgumentError
        from statekit.savepoint.spark_checkpoint import SparkCheckpoint

        given = sorted(name for name, value in options.items() if value)
        if given:
            raise InvalidArgumentError(f"{path} is a Spark Structured Streaming checkpoint; {', '.join(given)} "
                                       "apply to Flink savepoints only.")
        return SparkCheckpoint.open(path)

    def open_flink(path: "Path", **options: Any) -> Any:
        from statekit.savepoint.flink import FlinkSavepoint

        return FlinkSavepoint.open(path, **options)

    # statekit's own first: it is also what opens a location no kind recognizes (its reader names what is missing).
    kinds.register(kinds.SavepointKind("statekit", statekit_manifest, open_statekit))
    kinds.register(kinds.SavepointKind("spark", kinds.holds_spark_checkpoint, open_spark))
    kinds.register(kinds.SavepointKind("flink", kinds.holds_flink_metadata, open_flink))


_register_kinds()


class _Package(types.ModuleType):
    """The functions `check` and `diff` share their names with their modules: importing the module
    ``statekit.savepoint.check`` must not make ``statekit.savepoint.check`` the module (as the eager
    imports of the past guaranteed, the package attribute stays the function)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("check", "diff") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
