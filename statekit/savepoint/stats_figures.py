"""The figures of `statekit.savepoint.stats`: per state, subtask, key, operator and savepoint (the format modules fill them in)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from statekit.format.manifest import OperatorMetadata
from statekit.keygroups import key_group_range


@dataclass(frozen=True)
class StateStats:
    """One state's entries and stored bytes (keyed states, timers, operator and broadcast states)."""

    name: str
    kind: str  # keyed | timers | split | union | broadcast
    entries: int
    bytes: int


@dataclass(frozen=True)
class SubtaskStats:
    """What one subtask holds: its key-group range (keyed operators), stored bytes and entries."""

    index: int
    key_group_start: int | None
    key_group_end: int | None
    bytes: int
    entries: int


@dataclass(frozen=True)
class KeySize:
    """One of the largest keys: its key group, the stored bytes of all its entries, and their count."""

    key: Any
    key_group: int
    bytes: int
    entries: int


@dataclass
class OperatorStats:
    """An operator's figures; `key_group_bytes` / `key_group_entries` have one slot per key group (keyed operators)."""

    uid: str | None
    uid_hash: str
    name: str
    parallelism: int
    max_parallelism: int
    bytes: int
    entries: int
    states: list[StateStats] = field(default_factory=list)
    subtasks: list[SubtaskStats] = field(default_factory=list)
    key_group_bytes: np.ndarray | None = None
    key_group_entries: np.ndarray | None = None
    top_keys: list[KeySize] = field(default_factory=list)

    @property
    def display_name(self) -> str:
        return self.uid or self.uid_hash

    def subtask_bytes(self, parallelism: int | None = None) -> list[int]:
        """Keyed bytes each subtask would hold at `parallelism` (the current one by default), from the key groups."""
        p = parallelism or self.parallelism
        if self.key_group_bytes is None:
            return []
        if not 1 <= p <= self.max_parallelism:
            from statekit.errors import ParallelismError

            raise ParallelismError(f"parallelism {p} is outside 1..{self.max_parallelism} (the max parallelism of "
                                   f"operator {self.display_name!r}); choose one in that range.")
        cum = np.concatenate([[0], np.cumsum(self.key_group_bytes)])
        out = []
        for i in range(p):
            r = key_group_range(self.max_parallelism, p, i)
            out.append(int(cum[r.end + 1] - cum[r.start]))
        return out

    def hottest_key_groups(self, n: int = 10) -> list[tuple[int, int, int]]:
        """The `n` key groups with the most bytes: (key group, bytes, entries)."""
        if self.key_group_bytes is None or self.key_group_entries is None:
            return []
        order = np.argsort(-self.key_group_bytes, kind="stable")[:n]
        return [(int(k), int(self.key_group_bytes[k]), int(self.key_group_entries[k])) for k in order
                if self.key_group_bytes[k] or self.key_group_entries[k]]

    def to_json(self, parallelism: int | None = None, hottest: int = 10) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uid": self.uid, "uid_hash": self.uid_hash, "name": self.name, "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism, "bytes": self.bytes, "entries": self.entries,
            "states": [vars(s) for s in self.states], "subtasks": [vars(s) for s in self.subtasks],
        }
        if self.key_group_bytes is not None and self.key_group_entries is not None:
            out["key_groups"] = {"bytes": self.key_group_bytes.tolist(), "entries": self.key_group_entries.tolist()}
            out["skew"] = skew(self.subtask_bytes())
            out["subtask_bytes"] = {str(self.parallelism): self.subtask_bytes()}
            if parallelism is not None:
                out["subtask_bytes"][str(parallelism)] = self.subtask_bytes(parallelism)
                out["skew_at"] = {str(parallelism): skew(self.subtask_bytes(parallelism))}
            out["hottest_key_groups"] = [{"key_group": k, "bytes": b, "entries": e}
                                         for k, b, e in self.hottest_key_groups(hottest)]
            out["top_keys"] = [_json_key(k) for k in self.top_keys]
        return out


def _json_key(k: KeySize) -> dict[str, Any]:
    key = k.key if isinstance(k.key, (int, float, str, bool, dict, list, type(None))) else repr(k.key)
    return {"key": key, "key_group": k.key_group, "bytes": k.bytes, "entries": k.entries}


def skew(per_subtask: list[int]) -> float:
    """The largest subtask's bytes over the mean (1.0: even; 0 with no bytes)."""
    total = sum(per_subtask)
    return round(max(per_subtask) * len(per_subtask) / total, 3) if total else 0.0


@dataclass
class SavepointStats:
    """Every operator's figures."""

    path: str
    format: str
    operators: list[OperatorStats]

    @property
    def bytes(self) -> int:
        return sum(o.bytes for o in self.operators)

    def operator(self, name: str) -> OperatorStats:
        for o in self.operators:
            if name in (o.uid, o.uid_hash, o.name):
                return o
        raise KeyError(name)

    def to_json(self, parallelism: int | None = None) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "bytes": self.bytes,
                "operators": [o.to_json(parallelism) for o in self.operators]}


def new_operator_stats(meta: OperatorMetadata) -> OperatorStats:
    """Empty figures for `meta` (the format modules fill them in)."""
    return OperatorStats(meta.uid, meta.uid_hash, meta.name, meta.parallelism, meta.max_parallelism, 0, 0)
