"""Kinds of Flink job (DataStream, PyFlink, SQL) behind one interface, chosen once per operator when a savepoint is opened.

Boundary: a `JobKind` says how one operator's keys and values are presented (key column type,
state columns, the decoded tables), which key group a user's key lives in, and which kind of
operator it is; `choose` picks it from the operator's keyed layout. `statekit.savepoint.flink`
asks only this interface, so a new kind is one new module here, not branches through the callers.
Precedence when choosing: a SQL key (RowData) first, then PyFlink (a one-field Row key with
``python-state-`` states, or with types the user declared), then DataStream.
"""

from __future__ import annotations

from typing import Any, Protocol

from statekit.format.flink.keyed import KeyedLayout, KeyedResult
from statekit.state.descriptors import StateInfo

__all__ = ["JobKind", "choose"]


class JobKind(Protocol):
    """What differs between kinds of Flink job, for one operator's keyed state."""

    #: ``datastream`` | ``pyflink`` | ``sql``
    name: str

    def key_ddl(self, lay: KeyedLayout) -> str:
        """The statekit type of the key column."""
        ...

    def states(self, lay: KeyedLayout, declared: dict[str, str]) -> tuple[StateInfo, ...]:
        """The keyed state columns (`declared`: types the user gave for this operator, PyFlink only)."""
        ...

    def decode(self, result: KeyedResult, lay: KeyedLayout, declared: dict[str, str], where: str) -> KeyedResult:
        """The keyed and timers tables as this kind presents them, from the tables as stored."""
        ...

    def key_value(self, key: Any, lay: KeyedLayout) -> Any:
        """A user's key as the keyed table's ``key`` column holds it (to match rows)."""
        ...

    def key_group(self, key: Any, lay: KeyedLayout, max_parallelism: int) -> int | None:
        """The key group of a user's key, or None when only the job's own code could compute it (read every key group)."""
        ...

    def key_groups(self, keys: list[Any], lay: KeyedLayout, max_parallelism: int) -> list[int] | None:
        """The key group of every key of the keyed table (for `check`), or None where `check` computes them itself."""
        ...

    def key_bytes(self, key: Any, lay: KeyedLayout) -> bytes | None:
        """The key as stored, for the one-key byte match, or None where that path does not apply."""
        ...

    def operator_kind(self, name: str, lay: KeyedLayout | None) -> str | None:
        """What the operator is, in this kind's terms (e.g. ``group aggregate``), or None when not recognized."""
        ...

    def unsupported(self, lay: KeyedLayout) -> list[str]:
        """Why parts of the operator's state stay undecoded (reported as unsupported, never as damage)."""
        ...


def choose(lay: KeyedLayout | None, *, declared: bool = False) -> JobKind:
    """The kind of job whose operator has keyed layout `lay` (None: no keyed state, presented as DataStream)."""
    from statekit.format.flink import datastream, pyflink, sql

    if lay is not None and sql.is_sql(lay):
        return sql.KIND
    if lay is not None and pyflink.is_pyflink(lay, declared=declared):
        return pyflink.KIND
    return datastream.KIND
