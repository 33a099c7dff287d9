"""`diff(a, b)`: what differs between two savepoints - operators, states, settings, keyed rows, timers and operator state rows.

The keyed rows are compared with an Arrow hash join (`keyed_changes`), timers as sets
(`timer_changes`), list and union state as multisets of elements and broadcast state by key
(`state_row_changes`); `statekit.spark.diff` gives the same rows with Spark, and the ``statekit
diff`` command prints this module's result.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import KeyTypeMismatchError
from statekit.format.keyed import same_type
from statekit.format.manifest import OperatorMetadata
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.reader import Savepoint
from statekit.state.descriptors import OperatorStateInfo, StateInfo
from statekit.types import parse_ddl

__all__ = ["CHANGES", "OperatorDiff", "SavepointDiff", "check_same_keys", "diff", "keyed_changes", "state_row_changes",
           "timer_changes"]

#: Values of the ``change`` column of a keyed diff.
CHANGES = ("added", "removed", "changed")
SETTINGS = ("parallelism", "max_parallelism", "key_type", "namespace_type")


@dataclass
class OperatorDiff:
    """Differences of one operator present in both savepoints.

    ``keyed`` is the keyed diff (`keyed_changes`: ``key``, [``namespace``], ``change``, ``old``,
    ``new``), or None when no rows were compared (no keyed state, ``rows=False``, or the keyed
    files are byte-identical); ``keys_*`` count its rows and ``examples`` list a few keys of each.
    """

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
    keyed: pa.Table | None = field(default=None, repr=False)
    #: timers added or removed (`timer_changes`), None when not compared
    timers: pa.Table | None = field(default=None, repr=False)
    timers_added: int = 0
    timers_removed: int = 0
    #: per operator state (list, union, broadcast) of both sides: its rows added, removed or changed
    #: (`state_row_changes`); only states with differences
    state_rows: dict[str, pa.Table] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.uid or self.uid_hash

    @property
    def empty(self) -> bool:
        return not (self.settings or self.states_added or self.states_removed or self.states_changed
                    or self.keys_added or self.keys_removed or self.keys_changed
                    or self.timers_added or self.timers_removed or self.state_rows)  # fmt: skip

    def state_row_counts(self) -> dict[str, dict[str, int]]:
        """``{state: {"added": n, "removed": n, "changed": n}}`` for the operator states that differ."""
        return {name: {kind: int(pc.sum(pc.equal(t.column("change"), kind)).as_py() or 0) for kind in CHANGES}
                for name, t in self.state_rows.items()}  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"uid": self.uid, "uid_hash": self.uid_hash,
                "settings": {k: list(v) for k, v in self.settings.items()},
                "states_added": self.states_added, "states_removed": self.states_removed,
                "states_changed": self.states_changed, "keys_added": self.keys_added,
                "keys_removed": self.keys_removed, "keys_changed": self.keys_changed,
                "timers_added": self.timers_added, "timers_removed": self.timers_removed,
                "state_rows": self.state_row_counts(),
                "examples": {kind: [list(k) if isinstance(k, tuple) else k for k in keys]
                             for kind, keys in self.examples.items()}}  # fmt: skip


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

    def operator(self, name: str) -> OperatorDiff:
        """The differences of the operator with uid (or uid hash) `name`."""
        for o in self.operators:
            if name in (o.uid, o.uid_hash):
                return o
        raise KeyError(f"{name!r} is not an operator of both savepoints; compared: {[o.name for o in self.operators]}")

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "same": self.same, "operators_added": self.operators_added,
                "operators_removed": self.operators_removed,
                "operators": [o.to_json() for o in self.operators if not o.empty]}  # fmt: skip


def check_same_keys(a: OperatorMetadata, b: OperatorMetadata) -> None:
    """Refuse to compare rows of operators keyed by different types (or one windowed, one not)."""
    if (a.key_type is None) != (b.key_type is None) or (
        a.key_type is not None and not same_type(parse_ddl(a.key_type), parse_ddl(b.key_type))  # type: ignore[arg-type]
    ):
        raise KeyTypeMismatchError(
            f"operator {b.display_name!r} is keyed by {a.key_type} in the first savepoint and by {b.key_type} in the "
            "second; keys of different types cannot be matched. Re-key one side first (SavepointWriter.rekey), "
            "or compare the operators' tables yourself."
        )
    if a.namespace_type != b.namespace_type:
        raise KeyTypeMismatchError(
            f"operator {b.display_name!r} has window namespaces on one side only ({a.namespace_type} vs "
            f"{b.namespace_type}); rows of a window operator and a plain keyed operator cannot be matched."
        )


def _match_columns(t: pa.Table, prefix: str) -> tuple[pa.Table, list[str]]:
    """The columns rows are matched on (the key's fields, the namespace's bounds and whether it is void),
    flattened to primitives because hash joins take no nested keys, plus the row number."""
    cols: dict[str, pa.Array] = {}

    def add(name: str, arr: Any) -> None:
        if pa.types.is_struct(arr.type):
            for i, f in enumerate(arr.type):
                add(f"{name}.{f.name}", pc.struct_field(arr, [i]))
        elif name.startswith("k."):  # a key field may be NULL (SQL keys), and hash joins never match nulls
            cols[f"{name}.null"] = pc.is_null(arr)
            cols[name] = _nulls_filled(arr)
        else:
            cols[name] = arr

    add("k", t.column("key"))
    if "namespace" in t.column_names:
        ns = t.column("namespace")
        cols["ns_void"] = pc.is_null(ns)
        if pa.types.is_struct(ns.type):  # a window's bounds
            for i, f in enumerate(ns.type):
                cols[f"ns.{f.name}"] = pc.fill_null(pc.struct_field(ns, [i]), 0)  # void namespace matches void
        else:  # a SQL window's slice end (bigint)
            cols["ns"] = pc.fill_null(ns, 0)
    names = list(cols)
    cols[prefix] = pa.array(range(t.num_rows), pa.int64())
    return pa.table(cols), names


def _nulls_filled(arr: Any) -> Any:
    """`arr` with NULLs replaced by its type's zero (the caller keeps which were NULL in a column of its own)."""
    import decimal

    t = arr.type
    zero: Any = "" if pa.types.is_string(t) or pa.types.is_large_string(t) else \
        b"" if pa.types.is_binary(t) or pa.types.is_large_binary(t) else \
        decimal.Decimal(0) if pa.types.is_decimal(t) else False if pa.types.is_boolean(t) else 0
    try:
        return pc.fill_null(arr, pa.scalar(zero, t))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        return arr


def _map_value(v: Any) -> Any:
    """A map's entries, comparable whatever their order: a dict, or (struct keys, as a SQL join's rows) sorted items."""
    if v is None:
        return None
    try:
        return dict(v)
    except TypeError:  # unhashable keys
        return sorted(map(repr, v))


def _equal(x: pa.ChunkedArray, y: pa.ChunkedArray) -> pa.Array:
    """Null-safe row-wise equality; nested values (lists, maps, structs) compared as Python values, maps as dicts."""
    if not same_type(x.type, y.type):
        try:
            x = x.cast(y.type)  # a type change (int -> bigint): compare the values
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return pa.array([False] * len(x))
    if pa.types.is_nested(y.type):
        is_map = pa.types.is_map(y.type)
        norm = _map_value if is_map else (lambda v: v)
        return pa.array([norm(u) == norm(v) for u, v in zip(x.to_pylist(), y.to_pylist())], pa.bool_())
    both_null = pc.and_(pc.is_null(x), pc.is_null(y))
    return pc.fill_null(pc.or_kleene(both_null, pc.equal(x, y)), False)


def _struct(table: pa.Table, names: list[str], idx: pa.Array) -> pa.Array:
    """Rows `idx` of `table`'s columns `names` as one struct column (null where `idx` is null)."""
    n = len(idx)
    if not names:
        return pa.nulls(n, pa.struct([]))
    cols = [pc.take(table.column(c), idx).combine_chunks() for c in names]
    return pa.StructArray.from_arrays(cols, names=names, mask=pc.is_null(idx))


def keyed_changes(a: pa.Table, b: pa.Table, states_a: list[str], states_b: list[str]) -> pa.Table:
    """The keyed diff of two keyed tables (``key``, [``namespace``], one column per state).

    Rows are matched by key (and namespace). Returns ``key``, [``namespace``], ``change`` (``added``:
    only in `b`; ``removed``: only in `a`; ``changed``: a state of both differs), ``old`` (the row's
    states in `a`, a struct) and ``new`` (in `b`). Unchanged rows are left out. Only the states of
    both sides decide ``changed``; a state of one side only shows in ``old`` or ``new``.
    """
    ma, names = _match_columns(a, "__ra")
    mb, _ = _match_columns(b, "__rb")
    joined = ma.join(mb, keys=names, join_type="full outer", use_threads=True)
    ra, rb = joined.column("__ra"), joined.column("__rb")
    removed = pc.is_null(rb)
    added = pc.is_null(ra)
    both = joined.filter(pc.and_(pc.is_valid(ra), pc.is_valid(rb)))
    bra, brb = both.column("__ra").combine_chunks(), both.column("__rb").combine_chunks()
    differs = pa.array([False] * both.num_rows, pa.bool_())
    for s in (s for s in states_b if s in states_a):
        same = _equal(pc.take(a.column(s), bra), pc.take(b.column(s), brb))
        differs = pc.or_(differs, pc.invert(same))
    changed = both.filter(differs)
    parts = []
    null = pa.nulls  # rows missing on one side take null indices
    for kind, rows, from_b in (
        ("removed", joined.filter(removed), False),
        ("added", joined.filter(added), True),
        ("changed", changed, True),
    ):
        ia = rows.column("__ra").combine_chunks() if kind != "added" else null(rows.num_rows, pa.int64())
        ib = rows.column("__rb").combine_chunks() if kind != "removed" else null(rows.num_rows, pa.int64())
        src, idx = (b, ib) if from_b else (a, ia)
        cols = {"key": pc.take(src.column("key"), idx)}
        if "namespace" in src.column_names:
            cols["namespace"] = pc.take(src.column("namespace"), idx)
        cols["change"] = pa.array([kind] * rows.num_rows, pa.string())
        cols["old"] = _struct(a, states_a, ia)
        cols["new"] = _struct(b, states_b, ib)
        parts.append(pa.table(cols))
    return pa.concat_tables(parts)


def timer_changes(a: pa.Table, b: pa.Table) -> pa.Table:
    """Timers in `b` and not in `a` (``added``) or in `a` and not in `b` (``removed``).

    Both tables hold ``key``, [``namespace``], ``timestamp``, ``domain`` (a savepoint's timers
    table); a timer is the whole row, so the result holds those columns and ``change``.
    """
    ma, names = _match_columns(a, "__ra")
    mb, _ = _match_columns(b, "__rb")
    # a timer is its key and namespace (the match columns) plus its time and domain
    ma = ma.append_column("__ts", a.column("timestamp")).append_column("__domain", a.column("domain"))
    mb = mb.append_column("__ts", b.column("timestamp")).append_column("__domain", b.column("domain"))
    keys = [*names, "__ts", "__domain"]
    joined = ma.join(mb, keys=keys, join_type="full outer", use_threads=True)
    parts = []
    for kind, src, col in (("removed", a, "__rb"), ("added", b, "__ra")):
        rows = joined.filter(pc.is_null(joined.column(col)))
        idx = rows.column("__ra" if kind == "removed" else "__rb").combine_chunks()
        cols = {c: pc.take(src.column(c), idx) for c in src.column_names if c != "key_group"}
        cols["change"] = pa.array([kind] * rows.num_rows, pa.string())
        parts.append(pa.table(cols))
    return pa.concat_tables(parts)


def _frozen(value: Any) -> Any:
    """A hashable form of an Arrow value as `to_pylist` gives it (structs as dicts, lists, maps as pairs)."""
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def state_row_changes(a: pa.Table, b: pa.Table, *, broadcast: bool) -> pa.Table:
    """The rows of one operator state that differ between `a` and `b` (the savepoints' tables of it).

    List and union state (``value``) compare as multisets of elements - their order and subtasks
    change with any rescale - giving ``value`` and ``change`` (``added`` | ``removed``), one row per
    element more on one side. Broadcast state (``key``, ``value``) compares by key, giving ``key``,
    ``change`` (``added`` | ``removed`` | ``changed``), ``old`` and ``new``.
    """
    if broadcast:
        def entries(t: pa.Table) -> dict[Any, tuple[Any, Any]]:
            keys, values = t.column("key").to_pylist(), t.column("value").to_pylist()
            return {_frozen(k): (k, v) for k, v in zip(keys, values)}

        old, new = entries(a), entries(b)
        rows = [(old[k][0], "removed", old[k][1], None) for k in old if k not in new]
        rows += [(new[k][0], "added", None, new[k][1]) for k in new if k not in old]
        rows += [(new[k][0], "changed", old[k][1], new[k][1]) for k in new
                 if k in old and _frozen(old[k][1]) != _frozen(new[k][1])]  # fmt: skip
        key, change, before, after = (list(c) for c in zip(*rows)) if rows else ([], [], [], [])
        return pa.table({"key": pa.array(key, b.schema.field("key").type), "change": pa.array(change, pa.string()),
                         "old": pa.array(before, a.schema.field("value").type),
                         "new": pa.array(after, b.schema.field("value").type)})  # fmt: skip
    va, vb = a.column("value").to_pylist(), b.column("value").to_pylist()
    ca, cb = Counter(map(_frozen, va)), Counter(map(_frozen, vb))
    values, changes = [], []
    for kind, side, mine, other in (("removed", va, ca, cb), ("added", vb, cb, ca)):
        extra = mine - other
        for v in side:  # in the side's order, each element as many times as it is in excess
            f = _frozen(v)
            if extra[f] > 0:
                extra[f] -= 1
                values.append(v)
                changes.append(kind)
    return pa.table({"value": pa.array(values, b.schema.field("value").type),
                     "change": pa.array(changes, pa.string())})  # fmt: skip


def diff(
    a: Savepoint | str | os.PathLike[str],
    b: Savepoint | str | os.PathLike[str],
    *,
    op: OperatorIdentifier | str | None = None,
    examples: int = 5,
    rows: bool = True,
    plan=None,
) -> SavepointDiff:
    """Compare savepoint `b` (after) with `a` (before); neither is modified.

    Parameters
    ----------
    a, b
        Savepoints (statekit or Flink), as paths or opened `Savepoint`\\ s.
    op
        Compare only this operator (a uid, or an `OperatorIdentifier`); it must be in `a` or `b`.
    examples
        How many keys of each change to list in ``OperatorDiff.examples``.
    rows
        Compare keyed rows too (``OperatorDiff.keyed``); ``rows=False`` reads only the manifests.
    plan
        The compiled plan of the Flink SQL job both savepoints (given as paths) come from: named columns.

    Returns
    -------
    SavepointDiff
        Operators are matched by uid hash. For operators in both: changed settings (parallelism,
        max parallelism, key type), states added/removed/changed (kind or type), the keyed
        diff - rows added, removed or changed with their old and new states (`keyed_changes`) -,
        timers added or removed (`timer_changes`) and the rows of each list, union and broadcast
        state of both sides added, removed or changed (`state_row_changes`). Files with the same
        checksums in both are not read.

    Raises
    ------
    KeyTypeMismatchError
        An operator is keyed by different types in `a` and `b`, so rows cannot be matched.
    UnknownOperatorError
        `op` is in neither savepoint.

    Examples
    --------
    >>> d = diff("sp-1", "sp-2", op="counter")               # doctest: +SKIP
    >>> d.operator("counter").keyed.to_pylist()              # doctest: +SKIP
    [{'key': 2, 'change': 'changed', 'old': {'count': 20}, 'new': {'count': 21}}]
    """
    sa = a if isinstance(a, Savepoint) else Savepoint.open(a, plan=plan)
    sb = b if isinstance(b, Savepoint) else Savepoint.open(b, plan=plan)
    out = SavepointDiff(str(sa.path), str(sb.path))
    ops_a = {m.uid_hash: m for m in sa.operators}
    ops_b = {m.uid_hash: m for m in sb.operators}
    if op is not None:
        wanted = OperatorIdentifier.coerce(op).uid_hash
        if wanted not in ops_a and wanted not in ops_b:
            sa.operator(op)  # raises UnknownOperatorError naming what exists
        ops_a = {h: m for h, m in ops_a.items() if h == wanted}
        ops_b = {h: m for h, m in ops_b.items() if h == wanted}
    if rows:
        for h in ops_a.keys() & ops_b.keys():  # refuse before reading any rows
            check_same_keys(ops_a[h], ops_b[h])
    out.operators_removed = [ops_a[h].display_name for h in ops_a if h not in ops_b]
    out.operators_added = [ops_b[h].display_name for h in ops_b if h not in ops_a]
    for h, ma in ops_a.items():
        if h in ops_b:
            out.operators.append(_operator_diff(sa, sb, ma, ops_b[h], examples, rows))
    return out


def _operator_diff(sa: Savepoint, sb: Savepoint, ma: OperatorMetadata, mb: OperatorMetadata, n: int,
                   rows: bool) -> OperatorDiff:  # fmt: skip
    d = OperatorDiff(mb.uid or ma.uid, ma.uid_hash)
    for name in SETTINGS:
        va, vb = getattr(ma, name), getattr(mb, name)
        if va != vb:
            d.settings[name] = (va, vb)
    all_a: list[StateInfo | OperatorStateInfo] = [*ma.keyed_states, *ma.operator_states]
    all_b: list[StateInfo | OperatorStateInfo] = [*mb.keyed_states, *mb.operator_states]
    states_a = {s.name: s for s in all_a}
    states_b = {s.name: s for s in all_b}
    d.states_removed = [s for s in states_a if s not in states_b]
    d.states_added = [s for s in states_b if s not in states_a]
    d.states_changed = [s for s in states_a if s in states_b and states_a[s] != states_b[s]]
    if not rows:
        return d
    _operator_state_rows(sa, sb, ma, mb, d)
    if ma.key_type is None:
        return d
    if not _same_files(ma, mb, "timers"):
        d.timers = timers = timer_changes(sa.timers(ma.identifier), sb.timers(mb.identifier))
        change = timers.column("change")
        d.timers_added = int(pc.sum(pc.equal(change, "added")).as_py() or 0)
        d.timers_removed = timers.num_rows - d.timers_added
    if _same_files(ma, mb, "keyed") and ma.keyed_states == mb.keyed_states:
        return d  # same files: same keys and values
    d.keyed = keyed = keyed_changes(
        sa.keyed_table(ma.identifier), sb.keyed_table(mb.identifier),
        [s.name for s in ma.keyed_states], [s.name for s in mb.keyed_states],
    )  # fmt: skip
    change = keyed.column("change")
    for kind in CHANGES:
        picked = keyed.filter(pc.equal(change, kind))
        setattr(d, f"keys_{kind}", picked.num_rows)
        head = picked.slice(0, max(n, 0))
        keys = [_display_key(k) for k in head.column("key").to_pylist()]
        if "namespace" in head.column_names:
            keys = [(k, _display_key(ns)) for k, ns in zip(keys, head.column("namespace").to_pylist())]
        d.examples[kind] = sorted(keys, key=repr)
    return d


def _same_files(ma: OperatorMetadata, mb: OperatorMetadata, table: Any, state: str | None = None) -> bool:
    """Both sides list the same files (by checksum) for `table`: same rows, nothing to read."""
    if ma.is_native or mb.is_native:
        return False  # native RocksDB files hold every table
    fa, fb = ma.files_of(table, state), mb.files_of(table, state)
    return bool(fa) and [f.checksum for f in fa] == [f.checksum for f in fb]


def _operator_state_rows(sa: Savepoint, sb: Savepoint, ma: OperatorMetadata, mb: OperatorMetadata,
                         d: OperatorDiff) -> None:  # fmt: skip
    """Compare the rows of each operator state both sides hold with the same redistribution."""
    infos_b = {s.name: s for s in mb.operator_states}
    for info in ma.operator_states:
        other = infos_b.get(info.name)
        if other is None or other.redistribution != info.redistribution:
            continue
        broadcast = info.redistribution == "broadcast"
        table = "broadcast" if broadcast else "operator"
        if _same_files(ma, mb, table, info.name):
            continue
        read = {"broadcast": "broadcast_state", "union": "union_state"}.get(info.redistribution, "list_state")
        changes = state_row_changes(getattr(sa, read)(ma.identifier, info.name), getattr(sb, read)(mb.identifier, info.name),
                                    broadcast=broadcast)  # fmt: skip
        if changes.num_rows:
            d.state_rows[info.name] = changes


def _display_key(key: Any) -> Any:
    if isinstance(key, dict):
        return tuple(key.values())
    return key
