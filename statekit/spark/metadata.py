"""The savepoint's operators as one table: what `SavepointReader.metadata` and ``statekit-metadata`` return."""

from __future__ import annotations

import pyarrow as pa

from statekit.keygroups import key_group_range
from statekit.savepoint import OperatorMetadata, Savepoint

__all__ = ["METADATA_SCHEMA", "metadata_table", "subtask_state_count"]

_STATE = pa.struct([("name", pa.string()), ("kind", pa.string()), ("type", pa.string())])

METADATA_SCHEMA = pa.schema(
    [
        ("checkpoint_id", pa.int64()),
        ("operator_name", pa.string()),
        ("operator_uid", pa.string()),
        ("operator_uid_hash", pa.string()),
        ("parallelism", pa.int32()),
        ("max_parallelism", pa.int32()),
        ("subtask_state_count", pa.int32()),
        ("total_size_bytes", pa.int64()),
        ("file_count", pa.int32()),
        ("keyed_rows", pa.int64()),
        ("key_type", pa.string()),
        ("keyed_format", pa.string()),
        ("states", pa.list_(_STATE)),
    ]
)


def subtask_state_count(meta: OperatorMetadata) -> int:
    """How many subtasks hold some state (Flink's count of subtask state handles).

    A subtask holds keyed state when a keyed, timer or native file covers one of its key groups;
    any file of operator (list, union, broadcast) state means every subtask restores some.
    """
    if any(f.table in ("operator", "broadcast") for f in meta.files):
        return meta.parallelism
    count = 0
    for i in range(meta.parallelism):
        own = key_group_range(meta.max_parallelism, meta.parallelism, i)
        if any(f.overlaps(own.start, own.end) for f in meta.files):
            count += 1
    return count


def metadata_table(sp: Savepoint) -> pa.Table:
    """One row per operator of `sp`; ``states`` lists keyed states (kind value/list/map/reducing/
    aggregating) and operator states (kind split/union/broadcast) with their DDL types."""
    rows = []
    for op in sp.operators:
        states = [{"name": s.name, "kind": s.kind, "type": s.type} for s in op.keyed_states]
        for s in op.operator_states:
            t = f"map<{s.key_type},{s.type}>" if s.redistribution == "broadcast" else s.type
            states.append({"name": s.name, "kind": s.redistribution, "type": t})
        rows.append(
            {
                "checkpoint_id": sp.checkpoint_id,
                "operator_name": op.name,
                "operator_uid": op.uid,
                "operator_uid_hash": op.uid_hash,
                "parallelism": op.parallelism,
                "max_parallelism": op.max_parallelism,
                "subtask_state_count": subtask_state_count(op),
                "total_size_bytes": op.total_bytes,
                "file_count": len(op.files),
                "keyed_rows": sum(f.rows for f in op.files if f.table == "keyed"),
                "key_type": op.key_type,
                "keyed_format": op.keyed_format,
                "states": states,
            }
        )
    return pa.Table.from_pylist(rows, schema=METADATA_SCHEMA)
