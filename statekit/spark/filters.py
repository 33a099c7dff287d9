"""Key filters: which keys (and so which key groups) a query's filters on ``key`` can possibly match.

Pruning rule
------------
``key = v``, ``key <=> v`` and ``key IN (...)`` name their keys exactly. On integer keys
(``tinyint``, ``smallint``, ``int``, ``bigint``) a range with both bounds (``key BETWEEN a AND b``,
``key >= a AND key < b``, ...) is enumerated when it holds at most `RANGE_ENUMERATION_LIMIT` keys.
Several such filters intersect. The named keys are hashed to their key groups with the operator's
declared key type (statekit.keygroups, Flink's hash) and only files covering those key groups are
read. Anything else (open ranges, string ranges, LIKE, OR) reads every file and is left to Spark.

Struct keys of Flink SQL operators (and their logical tables' key columns) are pruned by
`struct_key_rows`: when equality or IN filters fix every field of the key, the named key rows are
hashed by the savepoint (`FlinkSavepoint.key_group_of`: the BinaryRowData hash) and only their key
groups are read; Spark still applies the filters to the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from statekit.errors import StatekitError
from statekit.keygroups import assign_to_key_group

__all__ = ["RANGE_ENUMERATION_LIMIT", "KeyPruning", "key_pruning", "key_groups_of", "struct_key_rows"]

#: A closed integer range on ``key`` with at most this many values is enumerated for pruning.
RANGE_ENUMERATION_LIMIT = 4096

_INTEGER_KEYS = {"tinyint", "smallint", "int", "integer", "bigint", "long"}


@dataclass(frozen=True)
class KeyPruning:
    """The outcome of analysing pushed filters.

    Attributes
    ----------
    keys
        The only keys that can match, or None when the filters do not narrow the keys.
    handled
        Indices of the filters that the scan applies exactly (Spark need not re-check them).
    """

    keys: frozenset | None
    handled: tuple[int, ...]


def _is_key(attribute: Sequence[str]) -> bool:
    return tuple(attribute) == ("key",)


def key_pruning(filters: Sequence[Any], key_type: str | None) -> KeyPruning:
    """Analyse PySpark 4.1 data source filters (``pyspark.sql.datasource.Filter``) on ``key``.

    Parameters
    ----------
    filters
        The filters passed to ``DataSourceReader.pushFilters`` (an AND of all of them).
    key_type
        The operator's key type in DDL; struct keys are never pruned.

    Returns
    -------
    KeyPruning
        Equality and IN filters are handled exactly; range filters narrow the keys but are left to
        Spark as well.
    """
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        LessThan,
        LessThanOrEqual,
    )

    if key_type is None:
        return KeyPruning(None, ())
    if key_type.strip().lower().startswith(("struct", "row")):
        return KeyPruning(None, tuple(i for i, f in enumerate(filters) if isinstance(f, IsNotNull) and _is_key(f.attribute)))
    keys: set | None = None
    handled: list[int] = []
    low = high = None
    for i, f in enumerate(filters):
        if not _is_key(getattr(f, "attribute", ())):
            continue
        if isinstance(f, IsNotNull):
            handled.append(i)  # keys are never null: exact, and claiming it makes Spark use this scan's plan
            continue
        if isinstance(f, (EqualTo, EqualNullSafe)) and f.value is not None and not isinstance(f.value, list):
            found = {f.value}
        elif isinstance(f, In):
            found = {v for v in f.value if v is not None}
        elif key_type.strip().lower() in _INTEGER_KEYS and isinstance(getattr(f, "value", None), int):
            v = f.value
            if isinstance(f, GreaterThan):
                low = v + 1 if low is None else max(low, v + 1)
            elif isinstance(f, GreaterThanOrEqual):
                low = v if low is None else max(low, v)
            elif isinstance(f, LessThan):
                high = v - 1 if high is None else min(high, v - 1)
            elif isinstance(f, LessThanOrEqual):
                high = v if high is None else min(high, v)
            continue
        else:
            continue
        keys = found if keys is None else keys & found
        handled.append(i)
    if low is not None and high is not None and high - low + 1 <= RANGE_ENUMERATION_LIMIT:
        in_range = set(range(low, high + 1))
        keys = in_range if keys is None else {k for k in keys if isinstance(k, int) and low <= k <= high}
    elif keys is not None and (low is not None or high is not None):
        keys = {k for k in keys if (low is None or k >= low) and (high is None or k <= high)}
    return KeyPruning(None if keys is None else frozenset(keys), tuple(handled))


def key_groups_of(keys: Iterable[Any], max_parallelism: int, key_type: str) -> dict[int, set]:
    """Group `keys` by their key group; keys that cannot be of `key_type` are dropped (they match nothing)."""
    out: dict[int, set] = {}
    for key in keys:
        # SQL equality has 0.0 = -0.0, but Java's hashCode (Flink's key groups) tells them apart.
        for variant in (key, -key) if isinstance(key, float) and key == 0 else (key,):
            try:
                kg = assign_to_key_group(variant, max_parallelism, key_type)
            except StatekitError:
                continue  # e.g. a value outside the key type's range: no stored key can equal it
            out.setdefault(kg, set()).add(variant)
    return out


def struct_key_rows(filters: Sequence[Any], fields: Sequence[str], prefix: tuple[str, ...]) -> list[dict] | None:
    """The key rows (``{field: value}``) that equality and IN filters on every field of a struct key allow.

    Parameters
    ----------
    filters
        The pushed filters (an AND of all of them).
    fields
        The key's field names, in order.
    prefix
        The column path of the key's fields: ``("key",)`` in a keyed table (``key.user_name``),
        ``()`` in a logical table, whose key fields are top-level columns.

    Returns
    -------
    list of dict or None
        Every combination of the allowed values (at most `RANGE_ENUMERATION_LIMIT`), or None when a
        field is not fixed (no pruning).
    """
    from pyspark.sql.datasource import EqualNullSafe, EqualTo, In

    allowed: dict[str, set] = {}
    for f in filters:
        path = tuple(getattr(f, "attribute", ()))
        if len(path) != len(prefix) + 1 or path[: len(prefix)] != prefix or path[-1] not in fields:
            continue
        if isinstance(f, (EqualTo, EqualNullSafe)) and f.value is not None and not isinstance(f.value, list):
            found = {f.value}
        elif isinstance(f, In):
            found = {v for v in f.value if v is not None}
        else:
            continue
        name = path[-1]
        allowed[name] = found if name not in allowed else allowed[name] & found
    if set(allowed) != set(fields):
        return None
    count = 1
    for name in fields:
        count *= len(allowed[name])
    if count > RANGE_ENUMERATION_LIMIT:
        return None
    rows: list[dict] = [{}]
    for name in fields:
        rows = [{**r, name: v} for r in rows for v in allowed[name]]
    return rows
