"""User-facing state handles (PyFlink's names): the interfaces every backend's handles implement."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, Iterable, Iterator, TypeVar

from statekit.errors import StateAccessError

__all__ = [
    "AggregatingState",
    "AppendingState",
    "BroadcastState",
    "ListState",
    "MapState",
    "ReadOnlyBroadcastState",
    "ReducingState",
    "State",
    "ValueState",
]

T = TypeVar("T")
IN = TypeVar("IN")
OUT = TypeVar("OUT")
K = TypeVar("K")
V = TypeVar("V")


class State(ABC):
    """Base of every state handle; keyed handles act on the current key (and namespace)."""

    __slots__ = ()

    @abstractmethod
    def clear(self) -> None:
        """Remove the value of the current key (keyed state) or all values (operator state)."""


class ValueState(State, Generic[T]):
    """One value per key.

    `value` returns the descriptor's default (or None) while unset; ``update(None)`` clears.
    """

    __slots__ = ()

    @abstractmethod
    def value(self) -> T | None:
        """The current value, or the descriptor's default when unset."""

    @abstractmethod
    def update(self, value: T | None) -> None:
        """Set the value; None clears it."""


class AppendingState(State, Generic[IN, OUT]):
    """State that values are added to and read back as one result (list, reducing, aggregating)."""

    __slots__ = ()

    @abstractmethod
    def get(self) -> OUT:
        """The current result."""

    @abstractmethod
    def add(self, value: IN) -> None:
        """Add one value."""


class ListState(AppendingState[T, Iterable[T]]):
    """A list of elements per key. Elements must not be None (Flink forbids null elements)."""

    __slots__ = ()

    @abstractmethod
    def get(self) -> list[T]:
        """A copy of the elements; an empty list when unset."""

    @abstractmethod
    def add(self, value: T) -> None:
        """Append one element; None raises `StateTypeError`."""

    @abstractmethod
    def add_all(self, values: Iterable[T]) -> None:
        """Append every element of `values`; None elements raise and nothing is added."""

    @abstractmethod
    def update(self, values: Iterable[T]) -> None:
        """Replace the elements; an empty iterable clears the state."""

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())


class ReducingState(AppendingState[T, T]):
    """A value folded with the descriptor's reduce function on every `add`; None while unset."""

    __slots__ = ()


class AggregatingState(AppendingState[IN, OUT]):
    """An accumulator driven by an `AggregateFunction`; `get` returns ``get_result(acc)``, None while unset."""

    __slots__ = ()


class _ReadableMap(ABC, Generic[K, V]):
    """Read side shared by map state and broadcast state."""

    __slots__ = ()

    @abstractmethod
    def get(self, key: K) -> V | None:
        """The value under `key`, or None."""

    @abstractmethod
    def contains(self, key: K) -> bool: ...

    @abstractmethod
    def keys(self) -> list[K]:
        """A snapshot list of the keys (safe to modify the state while looping over it)."""

    @abstractmethod
    def values(self) -> list[V]: ...

    @abstractmethod
    def items(self) -> list[tuple[K, V]]: ...

    @abstractmethod
    def is_empty(self) -> bool: ...

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __contains__(self, key: object) -> bool:
        return self.contains(key)  # type: ignore[arg-type]


class MapState(_ReadableMap[K, V], State):
    """A map per key. User keys must not be None; a missing key reads as None."""

    __slots__ = ()

    @abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abstractmethod
    def put_all(self, mapping: dict[K, V] | Iterable[tuple[K, V]]) -> None: ...

    @abstractmethod
    def remove(self, key: K) -> None:
        """Remove `key`; removing a missing key is a no-op."""


class ReadOnlyBroadcastState(_ReadableMap[K, V]):
    """The view of broadcast state on the non-broadcast side: reads only, writes raise `StateAccessError`."""

    __slots__ = ()

    def _read_only(self, what: str) -> StateAccessError:
        return StateAccessError(
            f"broadcast state is read-only here ({what}); modify it in process_broadcast_element only, "
            "so every subtask applies the same changes."
        )

    def put(self, key: K, value: V) -> None:
        raise self._read_only("put")

    def put_all(self, mapping: Any) -> None:
        raise self._read_only("put_all")

    def remove(self, key: K) -> None:
        raise self._read_only("remove")

    def clear(self) -> None:
        raise self._read_only("clear")


class BroadcastState(_ReadableMap[K, V], State):
    """Map-like operator state that every subtask holds a copy of."""

    __slots__ = ()

    @abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abstractmethod
    def put_all(self, mapping: dict[K, V] | Iterable[tuple[K, V]]) -> None: ...

    @abstractmethod
    def remove(self, key: K) -> None: ...

    @abstractmethod
    def read_only(self) -> ReadOnlyBroadcastState[K, V]:
        """A read-only view of this state (for the non-broadcast side of a connected stream)."""
