"""Flink SQL jobs: the `JobKind` of operators keyed by BinaryRowData (group/window aggregates, deduplications, joins).

Boundary: keys and values are decoded by `keyed`/`values`/`rowdata` from the `LogicalType`s inside
the serializer snapshots (`../shared/flink/sql/SQL-FORMAT.md`); this kind adds what is SQL's own:
a key given as a value, tuple or ``{k0: ...}`` dict, the key group by the BinaryRowData hash
(`statekit.keyhash.binary_row_hashes`, not the DataStream one), which SQL operator an operator is
(from its stored name's type part and its state names), and which states statekit cannot decode
(a type it does not know: their bytes are kept and the reason reported, never called damage).
Without the job's compiled plan, key columns are ``k0, k1, ...`` and row fields ``f0, f1, ...``.
"""

from __future__ import annotations

import re
from typing import Any

from statekit.errors import UnsupportedFormatError
from statekit.format.flink.keyed import KeyedLayout, KeyedResult, state_ddl
from statekit.format.flink.rowdata import encode_row
from statekit.format.flink.serializers import ROWDATA_SNAPSHOT, FlinkType
from statekit.keygroups import compute_key_groups_for_key_hashes
from statekit.keyhash import binary_row_hashes
from statekit.state.descriptors import StateInfo

__all__ = ["KIND", "is_sql", "key_groups_of_rows", "operator_kind"]

#: the type part of a stored SQL operator name (``GroupAggregate[51]``) -> the operator kind shown
_BY_NAME = {
    "GroupAggregate": "group aggregate",
    "GlobalGroupAggregate": "group aggregate",
    "IncrementalGroupAggregate": "group aggregate",
    "GlobalWindowAggregate": "window TVF aggregate",
    "WindowAggregate": "window TVF aggregate",
    "GroupWindowAggregate": "legacy group window aggregate",
    "Join": "regular join",
}
#: the key row of a global aggregate (no GROUP BY columns): header only, RowKind +I, no fields
EMPTY_ROW = encode_row([], [])
_NAME = re.compile(r"^([A-Za-z]+)\[\d+\]$")


def is_sql(lay: KeyedLayout) -> bool:
    """Whether an operator's keys are SQL key rows (`RowDataSerializer`), i.e. a Flink SQL operator."""
    return lay.key_type.snapshot_class == ROWDATA_SNAPSHOT


def operator_kind(name: str, lay: KeyedLayout | None) -> str | None:
    """The SQL operator kind of a stored operator name and its states; ``other`` for an unrecognized SQL operator.

    >>> operator_kind("GroupAggregate[51]", None)
    'group aggregate'
    """
    m = _NAME.match(name or "")
    base = m.group(1) if m else None
    if base == "Deduplicate" and lay is not None:
        states = {s.name: s for s in lay.states}
        if "waiting-to-emit-on-timer" in states:
            return "deduplication keep-first (rowtime)"
        dedup = states.get("deduplicate-state")
        if dedup is not None:
            t = dedup.value_type.children[1] if dedup.value_type.form == "ttl" else dedup.value_type
            return "deduplication keep-first (proctime)" if t.kind == "boolean" else "deduplication keep-last"
    return _BY_NAME.get(base or "", "other")


def key_groups_of_rows(rows: list[bytes], max_parallelism: int) -> list[int]:
    """The key groups of serialized SQL key rows (BinaryRowData bytes without their length prefix)."""
    return compute_key_groups_for_key_hashes(binary_row_hashes(rows), max_parallelism).tolist()


def key_fields(key: Any, t: FlinkType) -> list[Any]:
    """A user's key as the list of its fields: a value (one-field keys), a tuple/list, or a ``{"k0": ...}`` dict."""
    names = t.field_names
    if isinstance(key, dict):
        return [key.get(n) for n in names] if set(key) <= set(names) else list(key.values())
    if isinstance(key, (tuple, list)):
        return list(key)
    return [key]


def _sub_micros(types: Any) -> bool:
    """Whether a row of `types` has a TIMESTAMP(7..9) field anywhere (decoded to microseconds: not invertible)."""
    return any((t.root.startswith("TIMESTAMP") and (t.precision or 0) > 6) or _sub_micros(t.children) for t in types)


class SqlKind:
    """Flink SQL operators (see the module docstring)."""

    name = "sql"

    def key_ddl(self, lay: KeyedLayout) -> str:
        return lay.key_type.ddl()

    def states(self, lay: KeyedLayout, declared: dict[str, str]) -> tuple[StateInfo, ...]:
        return tuple(StateInfo(s.name, s.keyed_kind or "value", state_ddl(s)) for s in lay.states)

    def decode(self, result: KeyedResult, lay: KeyedLayout, declared: dict[str, str], where: str) -> KeyedResult:
        return result  # already typed: rows were decoded by their LogicalTypes

    def key_value(self, key: Any, lay: KeyedLayout) -> Any:
        """The key as the keyed table holds it (``{"k0": ..., "k1": ...}``; a global aggregate's: its row bytes)."""
        if lay.key_type.form == "empty_row":
            return EMPTY_ROW
        self._need_types(lay)
        fields = key_fields(key, lay.key_type)
        return dict(zip(lay.key_type.field_names, fields)) if len(fields) == len(lay.key_type.field_names) else key

    def key_group(self, key: Any, lay: KeyedLayout, max_parallelism: int) -> int | None:
        if lay.key_type.form == "empty_row":  # any key given: there is only the one
            return key_groups_of_rows([EMPTY_ROW], max_parallelism)[0]
        self._need_types(lay)
        if _sub_micros(lay.key_type.logical):  # None: every key group is read and the key matched by value
            return None
        row = encode_row(key_fields(key, lay.key_type), lay.key_type.logical)
        return key_groups_of_rows([row], max_parallelism)[0]

    def key_bytes(self, key: Any, lay: KeyedLayout) -> bytes | None:
        """The key as `RowDataSerializer` stores it (i32 length, the BinaryRowData) for the one-key byte match.

        None (the key group's table is built and filtered) for a global aggregate's empty key row and keys
        whose bytes a decoded value cannot rebuild (TIMESTAMP(7..9) fields).
        """
        if lay.key_type.form != "row" or _sub_micros(lay.key_type.logical):
            return None
        row = encode_row(key_fields(key, lay.key_type), lay.key_type.logical)
        return len(row).to_bytes(4, "big") + row

    def key_groups(self, keys: list[Any], lay: KeyedLayout, max_parallelism: int) -> list[int] | None:
        """The key groups of the keyed table's keys (`check` compares them with where each key is stored); None
        where the table's keys do not hold all the key bytes (a TIMESTAMP(7..9) field: its nanoseconds beyond
        the microsecond are not in the column, so the key row cannot be rebuilt)."""
        if lay.key_type.form != "row":  # undecoded keys (and a global aggregate's) are the row bytes themselves
            return key_groups_of_rows(list(keys), max_parallelism)
        if _sub_micros(lay.key_type.logical):
            return None
        return key_groups_of_rows([encode_row(key_fields(k, lay.key_type), lay.key_type.logical) for k in keys],
                                  max_parallelism)

    def operator_kind(self, name: str, lay: KeyedLayout | None) -> str | None:
        return operator_kind(name, lay)

    def unsupported(self, lay: KeyedLayout) -> list[str]:
        """Why a part of the operator's state stays raw bytes, one sentence per state (empty when all decodes)."""
        out = []
        if lay.key_type.form not in ("row", "empty_row"):
            out.append("its key row has a SQL type statekit does not decode: keys stay bytes and cannot be looked up")
        for s in lay.states:
            for role, t in s.serializers.items():
                if t.snapshot_class == ROWDATA_SNAPSHOT and t.form != "row":
                    out.append(f"state {s.name!r} ({role}) holds rows with a SQL type statekit does not decode; "
                               "its values stay bytes")
        return out

    @staticmethod
    def _need_types(lay: KeyedLayout) -> None:
        if lay.key_type.form != "row":
            raise UnsupportedFormatError(
                "this SQL operator's key row has a type statekit does not decode, so a key cannot be encoded to "
                "find its key group; read the whole keyed table instead (its keys are the row bytes)."
            )


KIND = SqlKind()
