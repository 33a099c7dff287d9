"""Heap keyed state backend: per state and namespace a dict keyed by the key, copy-on-write snapshots."""

from __future__ import annotations

import copy
from typing import Any, Iterable, Iterator

from statekit.backends.base import VOID_NAMESPACE, KeyedSnapshot
from statekit.backends.slots import (
    Slot,
    SlotBackend,
    as_namespace,
    is_mutable,
    no_none,
)
from statekit.errors import InvalidArgumentError, NullKeyError, StateTypeError
from statekit.format.keyed_dicts import dicts_to_keyed_table
from statekit.state.descriptors import (
    StateInfo,
)
from statekit.state.handles import ListState, MapState, ValueState

__all__ = ["HeapKeyedStateBackend"]


class HeapValueState(Slot, ValueState):
    """Value state (and the raw store of reducing/aggregating state) on the heap."""

    __slots__ = ()

    def value(self) -> Any:
        return self._data.get(self._b._key, self._default)

    def update(self, value: Any) -> None:
        if value is None:
            self._data.pop(self._b._key, None)
        else:
            self._data[self._b._key] = value

    def clear(self) -> None:
        self._data.pop(self._b._key, None)


class HeapMutableValueState(HeapValueState):
    """Value state of a mutable type: reads hand out a private copy while a snapshot is pending."""

    __slots__ = ()

    def value(self) -> Any:
        d, k = self._data, self._b._key
        v = d.get(k)
        if v is None:
            return self._default
        fresh = self._b._fresh
        if fresh is None or id(v) in fresh:
            return v
        v = copy.deepcopy(v)
        d[k] = v
        fresh.add(id(v))
        return v


class HeapListState(Slot, ListState):
    """List state on the heap: a Python list per key, never empty (empty means unset)."""

    __slots__ = ()

    def get(self) -> list[Any]:
        lst = self._data.get(self._b._key)
        return [] if lst is None else list(lst)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeError("list state cannot hold None (Flink forbids null elements); skip it or use a sentinel.")
        d, k = self._data, self._b._key
        lst = d.get(k)
        if lst is None:
            d[k] = [value]
        else:
            self._own(d, k, lst).append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        items = no_none(values)
        if not items:
            return
        d, k = self._data, self._b._key
        lst = d.get(k)
        if lst is None:
            d[k] = items
        else:
            self._own(d, k, lst).extend(items)

    def update(self, values: Iterable[Any]) -> None:
        items = no_none(values)
        if items:
            self._data[self._b._key] = items
        else:
            self._data.pop(self._b._key, None)

    def clear(self) -> None:
        self._data.pop(self._b._key, None)


class HeapMapState(Slot, MapState):
    """Map state on the heap: a Python dict per key, never empty (empty means unset)."""

    __slots__ = ()

    def get(self, key: Any) -> Any:
        m = self._data.get(self._b._key)
        return None if m is None else m.get(key)

    def put(self, key: Any, value: Any) -> None:
        if key is None:
            raise NullKeyError("map state keys cannot be None (Flink forbids null map keys).")
        d, k = self._data, self._b._key
        m = d.get(k)
        if m is None:
            d[k] = {key: value}
        else:
            self._own(d, k, m)[key] = value

    def put_all(self, mapping: Any) -> None:
        pairs = dict(mapping.items() if hasattr(mapping, "items") else mapping)
        if None in pairs:
            raise NullKeyError("map state keys cannot be None (Flink forbids null map keys); nothing was put.")
        if not pairs:
            return
        d, k = self._data, self._b._key
        m = d.get(k)
        if m is None:
            d[k] = pairs
        else:
            self._own(d, k, m).update(pairs)

    def remove(self, key: Any) -> None:
        d, k = self._data, self._b._key
        m = d.get(k)
        if m is not None and key in m:
            m = self._own(d, k, m)
            del m[key]
            if not m:
                del d[k]

    def contains(self, key: Any) -> bool:
        m = self._data.get(self._b._key)
        return m is not None and key in m

    def keys(self) -> list[Any]:
        m = self._data.get(self._b._key)
        return [] if m is None else list(m)

    def values(self) -> list[Any]:
        m = self._data.get(self._b._key)
        return [] if m is None else list(m.values())

    def items(self) -> list[tuple[Any, Any]]:
        m = self._data.get(self._b._key)
        return [] if m is None else list(m.items())

    def is_empty(self) -> bool:
        return self._data.get(self._b._key) is None

    def clear(self) -> None:
        self._data.pop(self._b._key, None)


# --- the heap backend ----------------------------------------------------------------------------------


class HeapKeyedStateBackend(SlotBackend[Slot]):
    """Keyed state in Python dicts; snapshots are shallow copies, tables are built off the hot path.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from statekit.keygroups import KeyGroupRange
    >>> from statekit.state import ValueStateDescriptor
    >>> b = HeapKeyedStateBackend(key_type=pa.string(), max_parallelism=128,
    ...                           key_group_range=KeyGroupRange(0, 127), clock=lambda: 0)
    >>> count = b.get_state(ValueStateDescriptor("count", "bigint", default=0))
    >>> b.set_current_key("a", 81)
    >>> count.update(count.value() + 1)
    >>> b.snapshot(1).table().to_pylist()
    [{'key_group': 81, 'key': 'a', 'count': 1}]
    """

    def set_current_key(self, key: Any, key_group: int) -> None:
        # the hot path: the heap backend needs no key group per record (snapshots compute them)
        if key is None:
            raise NullKeyError("the key is None; Flink keys cannot be null. Filter or replace null keys before key_by.")
        self._key = key

    def _new_slot(self, info: StateInfo, ttl: Any, default: Any) -> Slot:
        if info.kind == "list":
            return HeapListState(self, info, ttl)
        if info.kind == "map":
            return HeapMapState(self, info, ttl)
        cls = HeapMutableValueState if is_mutable(info) else HeapValueState
        return cls(self, info, ttl, default)

    # -- iteration -----------------------------------------------------------------------------------------
    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        slot = self._slot(state_name)
        d = slot._by_ns.get(as_namespace(namespace)) or {}
        export = self._export(slot, self.clock())
        return iter([k for k, v in d.items() if export is None or export(v) is not None])

    def namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        slot = self._slot(state_name)
        export = self._export(slot, self.clock())
        return iter(
            [(k, ns) for ns, d in slot._by_ns.items() for k, v in d.items() if export is None or export(v) is not None]
        )

    # -- checkpoints ----------------------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int, *, native: bool = False, target_dir: Any = None) -> KeyedSnapshot:
        if native:
            raise InvalidArgumentError("native snapshots are a RocksDB feature; the heap backend writes tables only.")
        now = self.clock()
        parts: list[Any] = [
            (slot.info, {ns: dict(d) for ns, d in slot._by_ns.items() if d}, self._export(slot, now))
            for slot in self._slots.values()
        ]
        parts += [(info, {ns: dict(d) for ns, d in by_ns.items()}, None) for info, by_ns in self._pending.values()]
        infos = tuple(p[0] for p in parts)
        namespaced = self._namespaced
        build = lambda: dicts_to_keyed_table(  # noqa: E731
            key_type=self.key_type, max_parallelism=self.max_parallelism, states=parts, namespaced=namespaced
        )
        return KeyedSnapshot(infos, materialize=self._shared_snapshot(parts, build))

    def close(self) -> None:
        self._slots.clear()
        self._handles.clear()
        self._pending.clear()
