"""`diff(a, b)`: what differs between two savepoints - operators, states, settings and keys."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.manifest import OperatorMetadata
from statekit.savepoint.reader import Savepoint


@dataclass
class OperatorDiff:
    """Differences of one operator present in both savepoints."""

    uid: str | None
    uid_hash: str
    settings: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # name -> (a, b)
    states_added: list[str] = field(default_factory=list)
    states_removed: list[str] = field(default_factory=list)
    states_changed: list[str] = field(default_factory=list)  # kind or type differs
    keys_added: int = 0
    keys_removed: int = 0
    keys_changed: int = 0
    examples: dict[str, list[Any]] = field(default_factory=lambda: {"added": [], "removed": [], "changed": []})

    @property
    def empty(self) -> bool:
        return not (self.settings or self.states_added or self.states_removed or self.states_changed
                    or self.keys_added or self.keys_removed or self.keys_changed)

    def to_json(self) -> dict[str, Any]:
        return {"uid": self.uid, "uid_hash": self.uid_hash,
                "settings": {k: list(v) for k, v in self.settings.items()},
                "states_added": self.states_added, "states_removed": self.states_removed,
                "states_changed": self.states_changed, "keys_added": self.keys_added,
                "keys_removed": self.keys_removed, "keys_changed": self.keys_changed,
                "examples": {kind: [list(k) if isinstance(k, tuple) else k for k in keys]
                             for kind, keys in self.examples.items()}}


@dataclass
class SavepointDiff:
    """Operators only in `a` (removed), only in `b` (added), and per-operator differences."""

    a: str
    b: str
    operators_added: list[str] = field(default_factory=list)
    operators_removed: list[str] = field(default_factory=list)
    operators: list[OperatorDiff] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not self.operators_added and not self.operators_removed and all(o.empty for o in self.operators)

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "same": self.same, "operators_added": self.operators_added,
                "operators_removed": self.operators_removed,
                "operators": [o.to_json() for o in self.operators if not o.empty]}


def diff(a: str | os.PathLike, b: str | os.PathLike, *, op: OperatorIdentifier | str | None = None,
         examples: int = 5) -> SavepointDiff:
    """Compare savepoint `b` with `a` (both opened with `Savepoint.open`; neither is modified).

    Operators are matched by uid hash. For operators in both, it lists changed settings
    (parallelism, max parallelism, key type), states added/removed/changed, and keys whose state
    was added, removed or changed (up to `examples` keys of each). Keyed files with the same
    checksum in both are not read. `op` limits the comparison to one operator.
    """
    sa, sb = Savepoint.open(a), Savepoint.open(b)
    out = SavepointDiff(str(a), str(b))
    ops_a = {m.uid_hash: m for m in sa.operators}
    ops_b = {m.uid_hash: m for m in sb.operators}
    if op is not None:
        wanted = OperatorIdentifier.coerce(op).uid_hash
        if wanted not in ops_a and wanted not in ops_b:
            sa.operator(op)  # raises UnknownOperatorError naming what exists
        ops_a = {h: m for h, m in ops_a.items() if h == wanted}
        ops_b = {h: m for h, m in ops_b.items() if h == wanted}
    out.operators_removed = [ops_a[h].display_name for h in ops_a if h not in ops_b]
    out.operators_added = [ops_b[h].display_name for h in ops_b if h not in ops_a]
    for h, ma in ops_a.items():
        if h in ops_b:
            out.operators.append(_operator_diff(sa, sb, ma, ops_b[h], examples))
    return out


def _operator_diff(sa: Savepoint, sb: Savepoint, ma: OperatorMetadata, mb: OperatorMetadata, n: int) -> OperatorDiff:
    d = OperatorDiff(mb.uid or ma.uid, ma.uid_hash)
    for name in ("parallelism", "max_parallelism", "key_type", "namespace_type"):
        va, vb = getattr(ma, name), getattr(mb, name)
        if va != vb:
            d.settings[name] = (va, vb)
    states_a = {s.name: s for s in [*ma.keyed_states, *ma.operator_states]}
    states_b = {s.name: s for s in [*mb.keyed_states, *mb.operator_states]}
    d.states_removed = [s for s in states_a if s not in states_b]
    d.states_added = [s for s in states_b if s not in states_a]
    d.states_changed = [s for s in states_a if s in states_b and states_a[s] != states_b[s]]
    if ma.key_type is None or mb.key_type is None or ma.key_type != mb.key_type:
        return d
    if [f.checksum for f in ma.files_of("keyed")] == [f.checksum for f in mb.files_of("keyed")] and \
            ma.keyed_states == mb.keyed_states and not ma.is_native and not mb.is_native:
        return d  # same files: same keys and values
    common = [s.name for s in ma.keyed_states if s.name in states_b and s.name not in d.states_changed]
    rows_a = _rows(sa.keyed_table(ma.identifier), common)
    rows_b = _rows(sb.keyed_table(mb.identifier), common)
    for key in rows_b.keys() - rows_a.keys():
        d.keys_added += 1
        if len(d.examples["added"]) < n:
            d.examples["added"].append(key)
    for key in rows_a.keys() - rows_b.keys():
        d.keys_removed += 1
        if len(d.examples["removed"]) < n:
            d.examples["removed"].append(key)
    for key in rows_a.keys() & rows_b.keys():
        if rows_a[key] != rows_b[key]:
            d.keys_changed += 1
            if len(d.examples["changed"]) < n:
                d.examples["changed"].append(key)
    for kind in d.examples:
        d.examples[kind] = sorted(d.examples[kind], key=repr)
    return d


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _rows(table, states: list[str]) -> dict[Any, tuple]:
    keys = table.column("key").to_pylist()
    if "namespace" in table.column_names:
        keys = list(zip(keys, table.column("namespace").to_pylist()))
    cols = [table.column(s).to_pylist() for s in states]
    out: dict[Any, tuple] = {}
    for i, k in enumerate(keys):
        out[_display_key(k)] = tuple(_hashable(c[i]) for c in cols)
    return out


def _display_key(key: Any) -> Any:
    if isinstance(key, dict):
        return tuple(key.values())
    if isinstance(key, tuple):
        return tuple(_display_key(k) for k in key)
    return key
