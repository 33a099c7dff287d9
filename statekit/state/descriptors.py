"""State descriptors: frozen declarations of keyed and operator state, turned into handles by a backend."""

from __future__ import annotations

import builtins
import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Literal, Protocol, Union

import pyarrow as pa
from typing_extensions import TypeVar  # PEP 696 defaults: a descriptor whose type is a DDL string is [Any]

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.state.functions import AggregateFunction, ReduceFunction, as_reduce_function
from statekit.types import PickledType, TypeLike, is_pickled, parse_ddl, to_arrow, to_ddl

__all__ = [
    "AggregatingStateDescriptor",
    "BroadcastStateDescriptor",
    "KeyedStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "OperatorStateInfo",
    "ReducingStateDescriptor",
    "StateInfo",
    "StateTtlConfig",
    "Time",
    "ValueStateDescriptor",
]

T = TypeVar("T", default=Any)
K = TypeVar("K", default=Any)
V = TypeVar("V", default=Any)
IN = TypeVar("IN", default=Any)
ACC = TypeVar("ACC", default=Any)
OUT = TypeVar("OUT", default=Any)



class _ArrowType(Protocol):
    """What mypy needs to know of a pyarrow type (pyarrow ships no stubs, so ``pa.DataType`` is Any to it)."""

    def equals(self, other: Any, /, *args: Any, **kwargs: Any) -> bool: ...


#: A declared state type other than a Python type: a DDL string, a pyarrow type or `PICKLED`. Kept apart
#: from ``type[T]`` (and free of Any) so that mypy infers T from ``int``, ``str``, ``list[int]``...
Declared = Union[str, PickledType, _ArrowType]

StateKind = Literal["value", "list", "map", "reducing", "aggregating"]
STATE_KINDS: tuple[StateKind, ...] = ("value", "list", "map", "reducing", "aggregating")
Redistribution = Literal["split", "union", "broadcast"]


class Time:
    """PyFlink's ``Time`` helper: durations in milliseconds."""

    @staticmethod
    def milliseconds(n: int) -> int:
        return int(n)

    @staticmethod
    def seconds(n: float) -> int:
        return int(n * 1000)

    @staticmethod
    def minutes(n: float) -> int:
        return int(n * 60_000)

    @staticmethod
    def hours(n: float) -> int:
        return int(n * 3_600_000)

    @staticmethod
    def days(n: float) -> int:
        return int(n * 86_400_000)


@dataclass(frozen=True)
class StateTtlConfig:
    """Time-to-live for keyed state (Flink's ``StateTtlConfig``); times are processing-time milliseconds."""

    ttl_ms: int
    update_type: Literal["on_create_and_write", "on_read_and_write"] = "on_create_and_write"
    state_visibility: Literal["never_return_expired", "return_expired_if_not_cleaned_up"] = "never_return_expired"

    class UpdateType(str, Enum):
        OnCreateAndWrite = "on_create_and_write"
        OnReadAndWrite = "on_read_and_write"

    class StateVisibility(str, Enum):
        NeverReturnExpired = "never_return_expired"
        ReturnExpiredIfNotCleanedUp = "return_expired_if_not_cleaned_up"

    def __post_init__(self) -> None:
        if int(self.ttl_ms) <= 0:
            raise InvalidArgumentError(f"TTL must be positive milliseconds, got {self.ttl_ms!r}.")
        object.__setattr__(self, "update_type", str(getattr(self.update_type, "value", self.update_type)))
        object.__setattr__(
            self, "state_visibility", str(getattr(self.state_visibility, "value", self.state_visibility))
        )

    @staticmethod
    def new_builder(ttl_ms: int) -> "_TtlBuilder":
        """PyFlink-style builder: ``StateTtlConfig.new_builder(Time.seconds(1)).build()``."""
        return _TtlBuilder(int(ttl_ms))


@dataclass
class _TtlBuilder:
    ttl_ms: int
    update_type: str = "on_create_and_write"
    state_visibility: str = "never_return_expired"

    def set_update_type(self, update_type: Any) -> "_TtlBuilder":
        self.update_type = getattr(update_type, "value", update_type)
        return self

    def set_state_visibility(self, visibility: Any) -> "_TtlBuilder":
        self.state_visibility = getattr(visibility, "value", visibility)
        return self

    def update_ttl_on_create_and_write(self) -> "_TtlBuilder":
        return self.set_update_type("on_create_and_write")

    def update_ttl_on_read_and_write(self) -> "_TtlBuilder":
        return self.set_update_type("on_read_and_write")

    def never_return_expired(self) -> "_TtlBuilder":
        return self.set_state_visibility("never_return_expired")

    def return_expired_if_not_cleaned_up(self) -> "_TtlBuilder":
        return self.set_state_visibility("return_expired_if_not_cleaned_up")

    def cleanup_full_snapshot(self) -> "_TtlBuilder":
        return self  # expired entries are always dropped from snapshots

    def build(self) -> StateTtlConfig:
        return StateTtlConfig(self.ttl_ms, self.update_type, self.state_visibility)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StateInfo:
    """What the manifest records about one keyed state: name, kind, column type, pickling, TTL."""

    name: str
    kind: StateKind
    type: str  # column type in DDL: T, array<T>, map<K,V>, or the accumulator type
    pickled: bool = False
    ttl_ms: int | None = None

    @property
    def arrow_type(self) -> pa.DataType:
        return parse_ddl(self.type)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "type": self.type}
        if self.pickled:
            out["pickled"] = True
        if self.ttl_ms is not None:
            out["ttl_ms"] = self.ttl_ms
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "StateInfo":
        return cls(d["name"], d["kind"], d["type"], bool(d.get("pickled", False)), d.get("ttl_ms"))


@dataclass(frozen=True)
class OperatorStateInfo:
    """What the manifest records about one operator (non-keyed) state."""

    name: str
    redistribution: Redistribution
    type: str  # element type for split/union; value type for broadcast
    key_type: str | None = None  # broadcast only
    pickled: bool = False

    @property
    def broadcast_key_type(self) -> str:
        """The key type of broadcast state (list and union states have none)."""
        if self.key_type is None:
            raise StateTypeError(f"operator state {self.name!r} is {self.redistribution} state, not broadcast: it has no keys.")
        return self.key_type

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "redistribution": self.redistribution, "type": self.type}
        if self.key_type is not None:
            out["key_type"] = self.key_type
        if self.pickled:
            out["pickled"] = True
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OperatorStateInfo":
        return cls(d["name"], d["redistribution"], d["type"], d.get("key_type"), bool(d.get("pickled", False)))


def as_state_kind(kind: str) -> StateKind:
    """`kind` checked to be one of `STATE_KINDS` (for kinds read from a file or declared as text)."""
    for k in STATE_KINDS:
        if k == kind:
            return k
    raise StateTypeError(f"unknown keyed state kind {kind!r}; the kinds are {', '.join(STATE_KINDS)}.")


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"state name must be a non-empty string, got {name!r}.")
    if name in ("key", "key_group", "namespace"):
        raise InvalidArgumentError(
            f"state name {name!r} is reserved for a keyed-table column; choose another name."
        )


def _arrow_or_pickled(t: TypeLike) -> tuple[pa.DataType, bool]:
    if t is None:
        raise StateTypeError(
            "a state type is required: a DDL string ('bigint'), a pyarrow type, int/float/str/bool/bytes, "
            "or statekit.types.PICKLED to opt in to pickling."
        )
    return to_arrow(t), is_pickled(t)


@dataclass(frozen=True)
class KeyedStateDescriptor:
    """Common base of the keyed state descriptors."""

    kind: ClassVar[StateKind]
    if TYPE_CHECKING:  # fields of every subclass (declared there, to keep their constructor order)
        name: str
        ttl: StateTtlConfig | None
    #: The field holding the declared type of the stored values (elements for lists, values for maps).
    _value_field: ClassVar[str] = "type"

    def _post(self) -> None:
        _check_name(self.name)
        _arrow_or_pickled(getattr(self, self._value_field))

    def _declared_value_type(self) -> TypeLike:
        return getattr(self, self._value_field)

    @property
    def column_type(self) -> pa.DataType:
        """The Arrow type of this state's column in the keyed table."""
        return to_arrow(self._declared_value_type())

    @property
    def pickled(self) -> bool:
        """True when the stored values are pickled (declared `PICKLED`)."""
        return is_pickled(self._declared_value_type())

    def info(self) -> StateInfo:
        ttl = self.ttl.ttl_ms if self.ttl is not None else None
        return StateInfo(self.name, self.kind, to_ddl(self.column_type), self.pickled, ttl)

    def with_ttl(self, ttl: StateTtlConfig | None):
        """A copy of this descriptor with `ttl` (descriptors are immutable)."""
        return dataclasses.replace(self, ttl=ttl)

    def enable_time_to_live(self, ttl: StateTtlConfig) -> None:
        """PyFlink compatibility: set TTL in place. Call before the descriptor is registered."""
        object.__setattr__(self, "ttl", ttl)


@dataclass(frozen=True)
class ValueStateDescriptor(KeyedStateDescriptor, Generic[T]):
    """A single value per key: ``ValueStateDescriptor("count", "bigint", default=0)``.

    Typed code gets a ``ValueState[T]`` from ``get_state``: T comes from a Python type (``int``), from
    `default`, or is written out (``ValueStateDescriptor[int]("count", "bigint")``); otherwise it is Any.
    """

    name: str
    type: builtins.type[T] | Declared
    default: T | None = None
    ttl: StateTtlConfig | None = field(default=None, kw_only=True)
    kind: ClassVar[StateKind] = "value"

    def __post_init__(self) -> None:
        self._post()


@dataclass(frozen=True)
class ListStateDescriptor(KeyedStateDescriptor, Generic[T]):
    """A list of elements per key; column type ``array<T>``; ``get_list_state`` returns ``ListState[T]``."""

    name: str
    element_type: builtins.type[T] | Declared
    ttl: StateTtlConfig | None = field(default=None, kw_only=True)
    kind: ClassVar[StateKind] = "list"
    _value_field: ClassVar[str] = "element_type"

    def __post_init__(self) -> None:
        self._post()

    @property
    def column_type(self) -> pa.DataType:
        return pa.list_(to_arrow(self.element_type))


@dataclass(frozen=True)
class MapStateDescriptor(KeyedStateDescriptor, Generic[K, V]):
    """A map per key; column type ``map<K,V>``. Map keys must have a declared (non-pickled) type.

    ``get_map_state`` returns ``MapState[K, V]``.
    """

    name: str
    key_type: builtins.type[K] | Declared
    value_type: builtins.type[V] | Declared
    ttl: StateTtlConfig | None = field(default=None, kw_only=True)
    kind: ClassVar[StateKind] = "map"
    _value_field: ClassVar[str] = "value_type"

    def __post_init__(self) -> None:
        self._post()
        if is_pickled(self.key_type):
            raise StateTypeError(f"map state {self.name!r}: map keys need a declared type, not PICKLED.")
        _arrow_or_pickled(self.key_type)

    @property
    def column_type(self) -> pa.DataType:
        return pa.map_(to_arrow(self.key_type), to_arrow(self.value_type))


@dataclass(frozen=True)
class ReducingStateDescriptor(KeyedStateDescriptor, Generic[T]):
    """A value per key folded with `reduce_function` on every ``add``; ``get_reducing_state`` returns ``ReducingState[T]``."""

    name: str
    reduce_function: ReduceFunction[T] | Callable[[T, T], T]
    type: builtins.type[T] | Declared
    ttl: StateTtlConfig | None = field(default=None, kw_only=True)
    kind: ClassVar[StateKind] = "reducing"

    def __post_init__(self) -> None:
        self._post()
        try:
            fn = as_reduce_function(self.reduce_function)
        except TypeError as exc:  # one error tree: StateTypeError is also a TypeError
            raise StateTypeError(f"reducing state {self.name!r}: {exc}.") from None
        object.__setattr__(self, "reduce_function", fn)


@dataclass(frozen=True)
class AggregatingStateDescriptor(KeyedStateDescriptor, Generic[IN, ACC, OUT]):
    """A per-key accumulator driven by an `AggregateFunction`; the column holds the accumulator.

    ``get_aggregating_state`` returns ``AggregatingState[IN, OUT]`` (the function's input and result types).
    """

    name: str
    aggregate_function: AggregateFunction[IN, ACC, OUT]
    accumulator_type: builtins.type[ACC] | Declared
    ttl: StateTtlConfig | None = field(default=None, kw_only=True)
    kind: ClassVar[StateKind] = "aggregating"
    _value_field: ClassVar[str] = "accumulator_type"

    def __post_init__(self) -> None:
        self._post()
        if not isinstance(self.aggregate_function, AggregateFunction):
            raise StateTypeError(
                f"aggregating state {self.name!r}: {self.aggregate_function!r} is not an AggregateFunction."
            )


@dataclass(frozen=True)
class BroadcastStateDescriptor(Generic[K, V]):
    """Broadcast (map) state shared by all subtasks: same name/key/value shape as `MapStateDescriptor`.

    PyFlink passes a `MapStateDescriptor` to ``broadcast()``; both are accepted there.
    """

    name: str
    key_type: builtins.type[K] | Declared
    value_type: builtins.type[V] | Declared

    def __post_init__(self) -> None:
        _check_name(self.name)
        if is_pickled(self.key_type):  # as for MapStateDescriptor: keys are looked up, so they need a type
            raise StateTypeError(f"broadcast state {self.name!r}: keys need a declared type, not PICKLED.")
        _arrow_or_pickled(self.key_type)
        _arrow_or_pickled(self.value_type)

    def info(self) -> OperatorStateInfo:
        return OperatorStateInfo(
            self.name, "broadcast", to_ddl(self.value_type), to_ddl(self.key_type), is_pickled(self.value_type)
        )


def operator_list_info(descriptor: ListStateDescriptor, redistribution: Redistribution) -> OperatorStateInfo:
    """Manifest entry for operator list state (`split` or `union` redistribution)."""
    return OperatorStateInfo(
        descriptor.name, redistribution, to_ddl(descriptor.element_type), None, descriptor.pickled
    )


