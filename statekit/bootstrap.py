"""Bootstrap a keyed operator's value states from the columns of a table (Parquet, CSV, JSON lines, Delta).

The local counterpart of Spark's columnar bootstrap (`OperatorTransformation...columns`): no
Python per row; the result is a new savepoint written atomically by `SavepointBuilder`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from statekit.errors import InvalidArgumentError, SavepointExistsError
from statekit.format.tables import read_table  # its home: format/ (savepoint/sql_bootstrap reads tables too)

__all__ = ["StateColumn", "bootstrap_columns", "parse_state_spec", "read_table"]


@dataclass(frozen=True)
class StateColumn:
    """A value state `name` filled from column `column`, of DDL type `type` (default: the column's)."""

    name: str
    column: str
    type: str | None = None


def parse_state_spec(text: str) -> StateColumn:
    """``NAME=COLUMN[:TYPE]`` (or just ``NAME`` for a column of that name).

    >>> parse_state_spec("balance=amount:double"), parse_state_spec("count")
    (StateColumn(name='balance', column='amount', type='double'), StateColumn(name='count', column='count', type=None))
    """
    name, _, rest = text.partition("=")
    column, _, ddl = (rest or name).partition(":")
    if not name or not column:
        raise InvalidArgumentError(f"--state {text!r}: write NAME=COLUMN[:TYPE], e.g. balance=amount:double.")
    return StateColumn(name.strip(), column.strip(), ddl.strip() or None)


def bootstrap_columns(table: pa.Table, target: str | os.PathLike, *, uid: str, key: str, states: Sequence[StateColumn],
                      max_parallelism: int, parallelism: int = 1, key_type: str | None = None,
                      dry_run: bool = False, source: str = "the input") -> str:
    """Write a savepoint at `target` with operator `uid` keyed by column `key` and one value state per
    `StateColumn`. Keys must be unique and not null. Returns a description of what is (or would be) written.
    """
    from statekit.keygroups import check_max_parallelism, check_parallelism
    from statekit.savepoint import SavepointBuilder
    from statekit.state import ValueStateDescriptor
    from statekit.types import parse_ddl, to_ddl

    check_max_parallelism(max_parallelism)
    check_parallelism(parallelism, max_parallelism)
    from statekit.format.storage import as_path

    where = as_path(target)
    if where.exists():
        raise SavepointExistsError(f"{target} already exists; savepoints are never overwritten, so this bootstrap "
                                   "would fail. Choose a new target path.")
    missing = [c for c in [key, *(s.column for s in states)] if c not in table.column_names]
    if missing:
        raise InvalidArgumentError(f"{source} has no column(s) {missing}; its columns are {table.column_names}.")
    names = [s.name for s in states]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"--state names must differ; got {names}.")
    kt = key_type or to_ddl(table.schema.field(key).type)
    columns = {"key": _cast(table.column(key), parse_ddl(kt), f"key column {key!r}")}
    descriptors = []
    for s in states:
        ddl = s.type or to_ddl(table.schema.field(s.column).type)
        columns[s.name] = _cast(table.column(s.column), parse_ddl(ddl), f"state {s.name!r} (column {s.column!r})")
        descriptors.append(ValueStateDescriptor(s.name, ddl))
    keyed = pa.table(columns)
    text = (f"{'would write' if dry_run else 'wrote'} {target}: operator {uid} keyed by {key} ({kt}), "
            f"max parallelism {max_parallelism}, {keyed.num_rows} key(s), state(s) "
            + ", ".join(f"{s.name} {s.type or to_ddl(table.schema.field(s.column).type)}" for s in states))
    if dry_run:
        from statekit.format.keyed import check_unique_keys

        check_unique_keys(keyed, has_namespace=False, what=f"keys of {source}")
        return text
    with SavepointBuilder(where, checkpoint_id=0, job_name=None) as b:
        op = b.add_operator(uid, parallelism=parallelism, max_parallelism=max_parallelism, key_type=kt,
                            keyed_states=descriptors)
        op.write_keyed(keyed)
    return text


def _cast(column: pa.ChunkedArray, arrow: pa.DataType, what: str) -> pa.ChunkedArray:
    from statekit.errors import StateTypeError

    if column.type == arrow:
        return column
    try:
        return column.cast(arrow, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise StateTypeError(f"{what} of type {column.type} does not convert to {arrow} ({exc}).") from None
