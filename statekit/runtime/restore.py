"""Restoring a job from a savepoint or checkpoint: match operators by uid hash, split state for the new parallelism."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from statekit.errors import RestoreError
from statekit.format.keyed import timer_rows_from_table
from statekit.keygroups import key_group_range
from statekit.types import parse_ddl


@dataclass
class SubtaskRestore:
    """One subtask's share of a restored operator."""

    key_type: pa.DataType | None = None
    keyed_tables: list[pa.Table] = field(default_factory=list)
    keyed_infos: list[Any] = field(default_factory=list)
    timers: list[tuple] = field(default_factory=list)
    operator_states: dict[str, tuple[Any, pa.Table]] = field(default_factory=dict)


class RestorePlan:
    """A savepoint opened for restoring, with its operators matched to the job's transformations."""

    def __init__(self, path: str | Path, transformations: list[Any], *, allow_non_restored_state: bool, trust_pickled: bool) -> None:
        from statekit.savepoint import Savepoint

        self.path = Path(path)
        self.savepoint = Savepoint.open(self.path, trust_pickled=trust_pickled)
        by_id = {t.identifier: t for t in transformations}
        self.matched: dict[int, Any] = {}  # transformation id -> OperatorMetadata
        unmatched = []
        for op in self.savepoint.operators:
            t = by_id.get(op.identifier)
            if t is None:
                unmatched.append(op)
            else:
                self.matched[t.id] = op
        if unmatched and not allow_non_restored_state:
            names = ", ".join(f"{op.uid or op.uid_hash} ({op.name})" for op in unmatched)
            raise RestoreError(
                f"savepoint {self.path} has state for operators that are not in this job: {names}. "
                "Give the job's operators the same uid(...) as when the savepoint was taken, or pass "
                "allow_non_restored_state=True to drop that state."
            )
        self.checkpoint_id = self.savepoint.checkpoint_id

    def max_parallelism_for(self, t: Any) -> int | None:
        """The max parallelism the restored operator needs (key groups cannot be re-cut)."""
        op = self.matched.get(t.id)
        return None if op is None else op.max_parallelism

    def for_operator(self, t: Any, parallelism: int, max_parallelism: int) -> list[SubtaskRestore] | None:
        """Split the operator's state for `parallelism` subtasks; None when it has no state here."""
        op = self.matched.get(t.id)
        if op is None:
            return None
        if op.max_parallelism != max_parallelism and op.key_type is not None:
            raise RestoreError(
                f"operator {op.uid or op.uid_hash} was saved with max parallelism {op.max_parallelism} but the job "
                f"uses {max_parallelism}; key groups cannot be re-cut. Set the operator's max parallelism to "
                f"{op.max_parallelism} (or rescale the savepoint offline with statekit's change of max parallelism)."
            )
        if parallelism > op.max_parallelism:
            raise RestoreError(
                f"parallelism {parallelism} of {t.name!r} exceeds the savepoint's max parallelism {op.max_parallelism}"
            )
        sp = self.savepoint
        key_type = None if op.key_type is None else parse_ddl(op.key_type)
        out = [SubtaskRestore(key_type=key_type) for _ in range(parallelism)]
        if key_type is not None:
            has_keyed = bool(op.keyed_states) and bool(sp.keyed_files(op.identifier))
            timers = _timers(sp, op)
            for i, share in enumerate(out):
                kgr = key_group_range(max_parallelism, parallelism, i)
                share.keyed_infos = list(op.keyed_states)
                if has_keyed:
                    share.keyed_tables = [sp.keyed_table(op.identifier, with_key_group=True, key_groups=kgr)]
                share.timers = [r for r in timers if kgr.start <= r[0] <= kgr.end]
        for info in op.operator_states:
            _split_operator_state(sp, op, info, out)
        return out


def _timers(sp: Any, op: Any) -> list[tuple]:
    if not op.files_of("timers"):
        return []
    return timer_rows_from_table(sp.timers(op.identifier))


def _split_operator_state(sp: Any, op: Any, info: Any, out: list[SubtaskRestore]) -> None:
    from statekit.savepoint import redistribute_list_state

    p = len(out)
    if info.redistribution == "broadcast":
        table = sp.broadcast_state(op.identifier, info.name)
        for share in out:
            share.operator_states[info.name] = (info, table)
        return
    if info.redistribution == "union":
        values = sp.union_state(op.identifier, info.name).column("value").combine_chunks()
        for share in out:
            share.operator_states[info.name] = (info, _list_table(values))
        return
    table = sp.list_state(op.identifier, info.name)
    subtasks = table.column("subtask").to_pylist()
    # Redistribute row positions (not values) so values keep their Arrow type, pickled or not.
    per_old: dict[int, list[int]] = {}
    for row, s in enumerate(subtasks):
        per_old.setdefault(s, []).append(row)
    old = [per_old.get(s, []) for s in range(max(per_old, default=-1) + 1)]
    values = table.column("value").combine_chunks()
    for share, rows in zip(out, redistribute_list_state(old, p, mode="split")):
        share.operator_states[info.name] = (info, _list_table(values.take(pa.array(rows, pa.int64()))))


def _list_table(values: pa.Array) -> pa.Table:
    return pa.table({"idx": pa.array(range(len(values)), pa.int64()), "value": values})
