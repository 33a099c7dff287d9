"""Operator (non-keyed) state of one subtask: split and union list state, broadcast state."""

from __future__ import annotations

import pickle
from typing import Any, Iterable, TypeVar

import pyarrow as pa

from statekit import serde
from statekit.backends.base import OperatorStateStore
from statekit.errors import NullKeyError, StateTypeError
from statekit.format.values import python_converter
from statekit.state.descriptors import (
    BroadcastStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    OperatorStateInfo,
    operator_list_info,
)
from statekit.state.handles import BroadcastState, ListState, ReadOnlyBroadcastState
from statekit.types import is_pickled, parse_ddl, to_arrow_array

__all__ = ["DefaultOperatorStateStore", "OperatorBroadcastState", "OperatorListState"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class OperatorListState(ListState):
    """The subtask's share of an operator list state (a plain list)."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[Any] = []

    def get(self) -> list[Any]:
        return list(self._items)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeError("list state cannot hold None (Flink forbids null elements); skip it or use a sentinel.")
        self._items.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        items = list(values)
        if any(v is None for v in items):
            raise StateTypeError("list state cannot hold None (Flink forbids null elements); nothing was added.")
        self._items.extend(items)

    def update(self, values: Iterable[Any]) -> None:
        items = list(values)
        if any(v is None for v in items):
            raise StateTypeError("list state cannot hold None (Flink forbids null elements); state unchanged.")
        self._items = items

    def clear(self) -> None:
        self._items = []


class OperatorBroadcastState(BroadcastState):
    """Broadcast state: a dict every subtask holds the same copy of."""

    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self._d.get(key)

    def put(self, key: Any, value: Any) -> None:
        if key is None:
            raise NullKeyError("broadcast state keys cannot be None.")
        self._d[key] = value

    def put_all(self, mapping: Any) -> None:
        pairs = dict(mapping.items() if hasattr(mapping, "items") else mapping)
        if None in pairs:
            raise NullKeyError("broadcast state keys cannot be None; nothing was put.")
        self._d.update(pairs)

    def remove(self, key: Any) -> None:
        self._d.pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._d

    def keys(self) -> list[Any]:
        return list(self._d)

    def values(self) -> list[Any]:
        return list(self._d.values())

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._d.items())

    def is_empty(self) -> bool:
        return not self._d

    def clear(self) -> None:
        self._d.clear()

    def read_only(self) -> ReadOnlyBroadcastState:
        return _ReadOnlyView(self)


class _ReadOnlyView(ReadOnlyBroadcastState):
    __slots__ = ("_s",)

    def __init__(self, state: OperatorBroadcastState) -> None:
        self._s = state

    def get(self, key: Any) -> Any:
        return self._s.get(key)

    def contains(self, key: Any) -> bool:
        return self._s.contains(key)

    def keys(self) -> list[Any]:
        return self._s.keys()

    def values(self) -> list[Any]:
        return self._s.values()

    def items(self) -> list[tuple[Any, Any]]:
        return self._s.items()

    def is_empty(self) -> bool:
        return self._s.is_empty()


class DefaultOperatorStateStore(OperatorStateStore):
    """Operator state of one subtask, in Python lists and dicts.

    Examples
    --------
    >>> store = DefaultOperatorStateStore()
    >>> offsets = store.get_list_state(ListStateDescriptor("offsets", "bigint"))
    >>> offsets.update([3, 7])
    >>> info, table = store.snapshot()["offsets"]
    >>> info.redistribution, table.to_pylist()
    ('split', [{'idx': 0, 'value': 3}, {'idx': 1, 'value': 7}])
    """

    def __init__(self, *, trust_pickled: bool = False) -> None:
        self.trust_pickled = trust_pickled
        self._states: dict[str, tuple[OperatorStateInfo, Any]] = {}
        self._restored: dict[str, tuple[OperatorStateInfo, pa.Table]] = {}

    def get_list_state(self, descriptor: ListStateDescriptor[T]) -> ListState[T]:
        return self._list(descriptor, "split")

    def get_union_list_state(self, descriptor: ListStateDescriptor[T]) -> ListState[T]:
        return self._list(descriptor, "union")

    def _list(self, descriptor: ListStateDescriptor, redistribution: str) -> ListState:
        if not isinstance(descriptor, ListStateDescriptor):
            raise StateTypeError(f"operator list state needs a ListStateDescriptor, got {descriptor!r}.")
        info = operator_list_info(descriptor, redistribution)  # type: ignore[arg-type]
        return self._register(info, OperatorListState)

    def get_broadcast_state(
        self, descriptor: BroadcastStateDescriptor[K, V] | MapStateDescriptor[K, V]
    ) -> BroadcastState[K, V]:
        if isinstance(descriptor, MapStateDescriptor):
            descriptor = BroadcastStateDescriptor(descriptor.name, descriptor.key_type, descriptor.value_type)
        if not isinstance(descriptor, BroadcastStateDescriptor):
            raise StateTypeError(f"broadcast state needs a BroadcastStateDescriptor or MapStateDescriptor, got {descriptor!r}.")
        if is_pickled(descriptor.key_type):
            raise StateTypeError(f"broadcast state {descriptor.name!r}: keys need a declared type, not PICKLED.")
        return self._register(descriptor.info(), OperatorBroadcastState)

    def _register(self, info: OperatorStateInfo, cls: type) -> Any:
        known = self._states.get(info.name)
        if known is not None:
            _check_compatible(known[0], info)
            return known[1]
        handle = cls()
        restored = self._restored.get(info.name)
        if restored is not None:
            _check_compatible(restored[0], info)
            if isinstance(handle, OperatorListState):
                handle._items = self._read_list(info, restored[1])
            else:
                handle._d = self._read_broadcast(info, restored[1])
            del self._restored[info.name]
        self._states[info.name] = (info, handle)
        return handle

    # -- checkpoints ---------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, tuple[OperatorStateInfo, pa.Table]]:
        out: dict[str, tuple[OperatorStateInfo, pa.Table]] = {}
        for name, (info, handle) in self._states.items():
            value_type = pa.binary() if info.pickled else parse_ddl(info.type)
            dump = serde.dumps if info.pickled else None
            where = f"operator state {name!r}"
            if isinstance(handle, OperatorListState):
                values = handle._items if dump is None else [dump(v) for v in handle._items]
                table = pa.table(
                    {
                        "idx": pa.array(range(len(values)), pa.int64()),
                        "value": to_arrow_array(values, value_type, what=f"{where} element"),
                    }
                )
            else:
                keys = list(handle._d)
                values = list(handle._d.values())
                if dump is not None:
                    values = [None if v is None else dump(v) for v in values]
                table = pa.table(
                    {
                        "key": to_arrow_array(keys, parse_ddl(info.key_type), what=f"{where} key"),  # type: ignore[arg-type]
                        "value": to_arrow_array(values, value_type, what=f"{where} value"),
                    }
                )
            out[name] = (info, table)
        out.update(self._restored)  # restored but not registered (yet): carried along unchanged
        return out

    def restore(self, states: dict[str, tuple[OperatorStateInfo, pa.Table]]) -> None:
        for name, (info, table) in states.items():
            known = self._states.get(name)
            if known is None:  # kept as a table until registered: nothing is unpickled before that
                self._restored[name] = (info, table)
                continue
            _check_compatible(known[0], info)
            handle = known[1]
            if isinstance(handle, OperatorListState):
                handle._items = self._read_list(info, table)
            else:
                handle._d = self._read_broadcast(info, table)

    def _values(self, info: OperatorStateInfo, column: Any) -> list[Any]:
        values = column.to_pylist()
        if info.pickled:
            serde.loads(None, trusted=self.trust_pickled, where=f"operator state {info.name!r}")
            return [None if v is None else pickle.loads(v) for v in values]
        conv = python_converter(parse_ddl(info.type))
        return values if conv is None else [conv(v) for v in values]

    def _read_list(self, info: OperatorStateInfo, table: pa.Table) -> list[Any]:
        order = [(c, "ascending") for c in ("subtask", "idx") if c in table.column_names]
        if order:
            table = table.sort_by(order)
        return self._values(info, table.column("value"))

    def _read_broadcast(self, info: OperatorStateInfo, table: pa.Table) -> dict[Any, Any]:
        keys = table.column("key").to_pylist()
        kconv = python_converter(parse_ddl(info.key_type), hashable=True)  # type: ignore[arg-type]
        if kconv is not None:
            keys = [kconv(k) for k in keys]
        return dict(zip(keys, self._values(info, table.column("value"))))


def _check_compatible(old: OperatorStateInfo, new: OperatorStateInfo) -> None:
    same_types = parse_ddl(old.type) == parse_ddl(new.type) and (old.key_type is None) == (new.key_type is None)
    if same_types and old.key_type is not None:
        same_types = parse_ddl(old.key_type) == parse_ddl(new.key_type)  # type: ignore[arg-type]
    if old.redistribution != new.redistribution or not same_types or old.pickled != new.pickled:
        raise StateTypeError(
            f"operator state {new.name!r} exists as {old.redistribution} state of type {old.type}, but is now "
            f"requested as {new.redistribution} state of type {new.type}; use a new name or migrate the savepoint."
        )
