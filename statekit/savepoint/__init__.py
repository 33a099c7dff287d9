"""The savepoint format (v1): manifest, Parquet tables, the local reader/writer and `check`.

A savepoint is a directory::

    <savepoint>/
      _metadata.json                      the manifest, written last and atomically
      op-<uid_hash>/keyed/part-*.parquet  keyed table: key_group, key, [namespace], one column per state
      op-<uid_hash>/timers/part-*.parquet key_group, key, [namespace], timestamp, domain
      op-<uid_hash>/operator/<state>/...  operator list / union state: subtask, idx, value
      op-<uid_hash>/broadcast/<state>/... broadcast state: key, value
      op-<uid_hash>/rocksdb/subtask-N/... native RocksDB checkpoint files (checkpoints only)
"""

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
