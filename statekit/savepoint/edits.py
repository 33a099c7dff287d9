"""The repair edits and their one registry: each edit's name, fields, plan entry and help, read by
`statekit.savepoint.patch` (which plans and writes them), `statekit repair --plan` and the CLI's commands.

An edit is a frozen dataclass; `EDITS` maps its name (the CLI command and the JSON plan's ``"edit"``) to an
`EditKind`. Adding an edit is one dataclass and one `EditKind` here, one planner in `patch.PLANNERS` and one
command in `statekit_cli.repair`; `tests/cli/test_edit_registry.py` fails until all three know it. This module
imports no pyarrow: the CLI reads the registry at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Union

from statekit.identifiers import OperatorIdentifier, OpLike

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EDITS", "DeleteKeys", "Edit", "EditKind", "OpLike", "PlanItem", "RemoveOperator", "RemoveState",
           "RenameOperator", "Rekey", "SetMaxParallelism", "SetValue", "kind_of"]


@dataclass(frozen=True)
class SetValue:
    """Set keyed state `state` of `key` to `value` (a Python value of the state's type; None clears it).

    On a Flink SQL operator `state` may also be a column of the query's result (``cnt``) when the savepoint is
    opened with the job's compiled plan (`repair(plan=)`), and `namespace` names a pending window of a window
    aggregate (its slice end, or ``{"start", "end"}``)."""
    op: OpLike
    key: Any
    state: str
    value: Any
    namespace: Any = None


@dataclass(frozen=True)
class DeleteKeys:
    """Delete every state and timer of `keys`."""
    op: OpLike
    keys: tuple


@dataclass(frozen=True)
class RemoveState:
    """Drop a keyed or operator state of an operator (a restored job starts it empty)."""
    op: OpLike
    state: str


@dataclass(frozen=True)
class RenameOperator:
    """Give an operator a new identifier (uid or uid hash); its state moves with it."""
    op: OpLike
    new: OpLike


@dataclass(frozen=True)
class RemoveOperator:
    """Remove an operator and all of its state."""
    op: OpLike


@dataclass(frozen=True)
class SetMaxParallelism:
    """Change an operator's max parallelism (its key groups are redistributed)."""
    op: OpLike
    max_parallelism: int


@dataclass(frozen=True)
class Rekey:
    """Replace every key through `mapping` (a table ``key``, ``new_key``; see `statekit.savepoint.rekey`)."""
    op: OpLike
    mapping: pa.Table


Edit = Union[SetValue, DeleteKeys, RemoveState, RenameOperator, RemoveOperator, SetMaxParallelism, Rekey]


class PlanItem(Protocol):
    """One entry of a JSON plan, as the plan's reader hands it to `EditKind.from_plan`: the raw fields, and the
    operator, keys and values parsed against the savepoint (the CLI parses them as on its command line)."""

    def __getitem__(self, field: str) -> Any:
        """The raw JSON value of `field`; KeyError when the entry lacks it."""

    def get(self, field: str, default: Any = None) -> Any:
        """The raw JSON value of `field`, or `default`."""

    def operator(self) -> OpLike:
        """The operator the entry names ("uid", "hash" or "name")."""

    def new_operator(self) -> OperatorIdentifier:
        """The new identifier a rename gives ("new_uid" or "new_hash")."""

    def key(self, value: Any) -> Any:
        """`value` (JSON) as a key of the operator's key type."""

    def value(self, state: str, value: Any) -> Any:
        """`value` (JSON) as a value of the operator's state `state` (a SQL result column's as given)."""

    def key_mapping(self, expr: str) -> pa.Table:
        """The ``key``, ``new_key`` table of a SQL expression over the operator's keys."""


@dataclass(frozen=True)
class EditKind:
    """An edit as the library, the JSON plan and the CLI name it.

    `name` is the CLI command and the plan's ``"edit"``; `edit` the dataclass `statekit.savepoint.patch.repair`
    plans; `plan_entry` the plan's JSON object as ``statekit repair --help`` shows it; `from_plan` builds the edit
    from one plan entry."""
    name: str
    edit: type
    plan_entry: str
    from_plan: Callable[[PlanItem], Edit]

    @property
    def help(self) -> str:
        """One line saying what the edit does (its dataclass's first docstring line)."""
        return (self.edit.__doc__ or "").strip().splitlines()[0]


def _set(item: PlanItem) -> Edit:
    op = item.operator()
    value = item.value(item["state"], item["value"])  # before the key: a plan's faults are reported in this order
    return SetValue(op, item.key(item["key"]), item["state"], value, namespace=item.get("namespace"))


#: Every edit, by name, in the order the CLI lists its commands.
EDITS: dict[str, EditKind] = {k.name: k for k in (
    EditKind("set", SetValue, '{"edit": "set", "uid": U, "key": K, "state": S, "value": V}', _set),
    EditKind("delete-key", DeleteKeys, '{"edit": "delete-key", "uid": U, "keys": [K, ...]}',
             lambda item: DeleteKeys(item.operator(), tuple(item.key(k) for k in item["keys"]))),
    EditKind("rm-state", RemoveState, '{"edit": "rm-state", "uid": U, "state": S}',
             lambda item: RemoveState(item.operator(), item["state"])),
    EditKind("rekey", Rekey, '{"edit": "rekey", "uid": U, "expr": SQL}',
             lambda item: Rekey(item.operator(), item.key_mapping(item["expr"]))),
    EditKind("rename-uid", RenameOperator, '{"edit": "rename-uid", "uid": U, "new_uid": U2}',
             lambda item: RenameOperator(item.operator(), item.new_operator())),
    EditKind("remove-operator", RemoveOperator, '{"edit": "remove-operator", "uid": U}',
             lambda item: RemoveOperator(item.operator())),
    EditKind("set-max-parallelism", SetMaxParallelism, '{"edit": "set-max-parallelism", "uid": U, "max": N}',
             lambda item: SetMaxParallelism(item.operator(), int(item["max"]))),
)}

_BY_CLASS = {k.edit: k for k in EDITS.values()}


def kind_of(edit: Any) -> EditKind | None:
    """The registered kind of `edit` (an edit dataclass or an instance of one); None for anything else."""
    return _BY_CLASS.get(edit if isinstance(edit, type) else type(edit))
