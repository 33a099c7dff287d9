"""`stats`: where a savepoint's bytes are - entries and bytes per operator, state, subtask and key group, the largest
keys, and the skew at the current and a proposed parallelism - for statekit and Flink savepoints.

Boundary: figures come from what the format stores about itself wherever it can: a Flink savepoint's
key-group offsets and entry lengths (`statekit.format.flink.sizes`, no value decoded), a statekit
savepoint's manifest and Parquet footers (row counts, null counts, column-chunk sizes) plus its
``key_group`` column. Only the largest-keys list (``top > 0``) decodes keys (Flink) or reads rows (statekit).

Entries are what each format stores one of: a Flink KV pair (a value, a whole list, one map entry, a
timer); a statekit row (one per key and namespace) or timer row. Bytes are stored bytes: a Flink key
group's span (compressed when Snappy is on), a statekit file's Parquet bytes spread over its key groups
by their rows.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from statekit.savepoint.kinds import is_flink_source, opened
from statekit.savepoint.stats_figures import (
    KeySize,
    OperatorStats,
    SavepointStats,
    StateStats,
    SubtaskStats,
    new_operator_stats,
    skew,
)

if TYPE_CHECKING:
    from statekit.savepoint.reader import Savepoint

__all__ = ["KeySize", "OperatorStats", "SavepointStats", "StateStats", "SubtaskStats", "new_operator_stats", "savepoint_stats",
           "skew"]


def savepoint_stats(source: "str | os.PathLike[str] | Savepoint", *, top: int = 10) -> SavepointStats:
    """The figures of every operator of `source` (see the module docstring); `top`: how many largest keys to list."""
    sp = opened(source)
    if is_flink_source(sp):
        from statekit.savepoint.stats_flink import flink_operator_stats

        return SavepointStats(str(sp.path), "flink", [flink_operator_stats(sp, m, top=top) for m in sp.operators])
    from statekit.savepoint.stats_statekit import statekit_operator_stats

    return SavepointStats(str(sp.path), "statekit", [statekit_operator_stats(sp, m, top=top) for m in sp.operators])
