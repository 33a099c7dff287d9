"""Diff two savepoints: operators and states added or removed, and keyed rows added, removed or changed."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import KeyTypeMismatchError, UnknownOperatorError
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.keyed import same_type
from statekit.savepoint.manifest import OperatorMetadata
from statekit.savepoint.reader import Savepoint
from statekit.types import parse_ddl

__all__ = ["CHANGES", "OperatorDiff", "SavepointDiff", "check_same_keys", "diff", "diff_operators", "keyed_changes"]

#: Values of the ``change`` column of a keyed diff.
CHANGES = ("added", "removed", "changed")
_PROPERTIES = ("parallelism", "max_parallelism", "key_type", "namespace_type")


@dataclass(frozen=True)
class OperatorDiff:
    """How one operator present in both savepoints differs.

    ``states_added``/``states_removed`` name keyed and operator states (operator states as
    ``"<redistribution>:<name>"``); ``properties`` maps a changed property (``max_parallelism``,
    ``state:<name>`` for a state whose kind or type changed, ...) to ``(old, new)``; ``keyed`` is the
    keyed diff (see `keyed_changes`), or None when rows were not compared.
    """

    operator: str
    states_added: tuple[str, ...] = ()
    states_removed: tuple[str, ...] = ()
    properties: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    keyed: pa.Table | None = None

    def counts(self) -> dict[str, int]:
        """Rows per change (``added``, ``removed``, ``changed``) of the keyed diff."""
        if self.keyed is None:
            return {}
        changes = self.keyed.column("change").to_pylist()
        return {c: changes.count(c) for c in CHANGES}

    @property
    def is_empty(self) -> bool:
        keyed_empty = self.keyed is None or self.keyed.num_rows == 0
        return keyed_empty and not (self.states_added or self.states_removed or self.properties)


@dataclass(frozen=True)
class SavepointDiff:
    """The difference between savepoints `a` (old) and `b` (new); operators are matched by uid hash."""

    operators_added: tuple[str, ...]
    operators_removed: tuple[str, ...]
    operators: dict[str, OperatorDiff]

    @property
    def is_empty(self) -> bool:
        return not (self.operators_added or self.operators_removed) and all(d.is_empty for d in self.operators.values())

    def __str__(self) -> str:
        lines = [f"operator added: {o}" for o in self.operators_added]
        lines += [f"operator removed: {o}" for o in self.operators_removed]
        for name, d in self.operators.items():
            lines += [f"{name}: state added: {s}" for s in d.states_added]
            lines += [f"{name}: state removed: {s}" for s in d.states_removed]
            lines += [f"{name}: {p}: {old} -> {new}" for p, (old, new) in d.properties.items()]
            counts = d.counts()
            if any(counts.values()):
                lines.append(f"{name}: keys " + ", ".join(f"{c} {n}" for c, n in counts.items()))
        return "\n".join(lines) if lines else "no differences"


def _open(sp: Savepoint | str | os.PathLike[str], trust_pickled: bool) -> Savepoint:
    return sp if isinstance(sp, Savepoint) else Savepoint.open(sp, trust_pickled=trust_pickled)


def _states(meta: OperatorMetadata) -> dict[str, str]:
    out = {s.name: f"{s.kind} {s.type}" for s in meta.keyed_states}
    out.update({f"{s.redistribution}:{s.name}": s.type for s in meta.operator_states})
    return out


def diff_operators(a: OperatorMetadata, b: OperatorMetadata) -> OperatorDiff:
    """Compare two operators' manifest entries (states added/removed, changed properties), not their rows."""
    sa, sb = _states(a), _states(b)
    props = {p: (getattr(a, p), getattr(b, p)) for p in _PROPERTIES if getattr(a, p) != getattr(b, p)}
    props.update({f"state:{n}": (sa[n], sb[n]) for n in sa if n in sb and sa[n] != sb[n]})
    return OperatorDiff(
        b.display_name,
        tuple(n for n in sb if n not in sa),
        tuple(n for n in sa if n not in sb),
        props,
    )


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
        else:
            cols[name] = arr

    add("k", t.column("key"))
    if "namespace" in t.column_names:
        ns = t.column("namespace")
        cols["ns_void"] = pc.is_null(ns)
        for i, f in enumerate(ns.type):
            cols[f"ns.{f.name}"] = pc.fill_null(pc.struct_field(ns, [i]), 0)  # void namespace matches void
    names = list(cols)
    cols[prefix] = pa.array(range(t.num_rows), pa.int64())
    return pa.table(cols), names


def _equal(x: pa.ChunkedArray, y: pa.ChunkedArray) -> pa.Array:
    """Null-safe row-wise equality; nested values (lists, maps, structs) compared as Python values, maps as dicts."""
    if not same_type(x.type, y.type):
        try:
            x = x.cast(y.type)  # a type change (int -> bigint): compare the values
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return pa.array([False] * len(x))
    if pa.types.is_nested(y.type):
        is_map = pa.types.is_map(y.type)
        norm = (lambda v: None if v is None else dict(v)) if is_map else (lambda v: v)
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


def diff(
    a: Savepoint | str | os.PathLike[str],
    b: Savepoint | str | os.PathLike[str],
    op: OperatorIdentifier | str | None = None,
    *,
    rows: bool = True,
    trust_pickled: bool = False,
) -> SavepointDiff:
    """Compare savepoint `a` (old) with `b` (new), locally with pyarrow.

    Parameters
    ----------
    a, b
        Savepoints (statekit or Flink), as paths or opened `Savepoint`s. Neither is modified.
    op
        Compare only this operator (a uid, or an `OperatorIdentifier`); it must be in `a` or `b`.
    rows
        Also compare keyed rows (``OperatorDiff.keyed``, see `keyed_changes`); with ``rows=False``
        only the manifests are read.
    trust_pickled
        Needed only to open savepoints with pickled state; pickled values are compared as bytes.

    Returns
    -------
    SavepointDiff
        Operators added and removed (by uid, or uid hash when there is none) and, per operator in
        both, states added and removed, changed properties and the keyed diff.

    Raises
    ------
    KeyTypeMismatchError
        An operator is keyed by different types in `a` and `b` (rows cannot be matched).
    UnknownOperatorError
        `op` is in neither savepoint.

    Examples
    --------
    >>> d = diff("sp-1", "sp-2", "counter")             # doctest: +SKIP
    >>> d.operators["counter"].keyed.to_pylist()        # doctest: +SKIP
    [{'key': 2, 'change': 'changed', 'old': {'count': 20}, 'new': {'count': 21}}]
    """
    sa, sb = _open(a, trust_pickled), _open(b, trust_pickled)
    ops_a = {m.uid_hash: m for m in sa.operators}
    ops_b = {m.uid_hash: m for m in sb.operators}
    if op is not None:
        ident = OperatorIdentifier.coerce(op)
        if ident.uid_hash not in ops_a and ident.uid_hash not in ops_b:
            raise UnknownOperatorError(
                f"operator {ident} is in neither savepoint; operators: "
                f"{sorted({m.display_name for m in [*ops_a.values(), *ops_b.values()]})}"
            )
        ops_a = {h: m for h, m in ops_a.items() if h == ident.uid_hash}
        ops_b = {h: m for h, m in ops_b.items() if h == ident.uid_hash}
    for h in ops_a.keys() & ops_b.keys():  # refuse before reading any rows
        if rows:
            check_same_keys(ops_a[h], ops_b[h])
    operators = {}
    for h, mb in ops_b.items():
        ma = ops_a.get(h)
        if ma is None:
            continue
        d = diff_operators(ma, mb)
        if rows and mb.key_type is not None:
            keyed = keyed_changes(
                sa.keyed_table(ma.identifier),
                sb.keyed_table(mb.identifier),
                [s.name for s in ma.keyed_states],
                [s.name for s in mb.keyed_states],
            )
            d = OperatorDiff(d.operator, d.states_added, d.states_removed, d.properties, keyed)
        operators[mb.display_name] = d
    return SavepointDiff(
        tuple(m.display_name for h, m in ops_b.items() if h not in ops_a),
        tuple(m.display_name for h, m in ops_a.items() if h not in ops_b),
        operators,
    )
