"""What the heap and RocksDB keyed backends share: one state's storage (`Slot`), reducing and aggregating state over
a value store, and `SlotBackend` (registration, key/namespace scope, restore bookkeeping, namespace merging)."""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable, Generic, Iterable, Sequence, TypeVar, cast

import pyarrow as pa

from statekit.backends.base import VOID_NAMESPACE, KeyedStateBackend
from statekit.backends.ttl import TtlListState, TtlMapState, TtlValueState
from statekit.errors import InvalidArgumentError, NullKeyError, StateAccessError, StateTypeError
from statekit.format.keyed_dicts import keyed_table_to_dicts
from statekit.format.ttl import ttl_export, ttl_import
from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    KeyedStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateInfo,
    ValueStateDescriptor,
)
from statekit.state.functions import as_reduce_function
from statekit.state.handles import AggregatingState, ReducingState, ValueState

__all__ = ["NO_KEY", "AggregatingOverValue", "ReducingOverValue", "Slot", "SlotBackend", "as_namespace",
           "check_compatible", "is_mutable", "no_none"]


class _NoKey:
    """The current key before `set_current_key`: hashing it raises, so handles need no check of their own."""

    __slots__ = ()

    def __hash__(self) -> int:
        raise StateAccessError(
            "keyed state was used without a current key; keyed state is only available while processing a "
            "record or timer of a keyed stream (call set_current_key first)."
        )

    def __repr__(self) -> str:
        return "<no current key>"


NO_KEY: Any = _NoKey()


def is_mutable(info: StateInfo) -> bool:
    """Whether stored Python values of this state may be mutated in place by user code."""
    t = info.arrow_type
    return info.pickled or pa.types.is_list(t) or pa.types.is_map(t) or pa.types.is_struct(t)


def no_none(values: Iterable[Any]) -> list[Any]:
    """`values` as a list; a None among them is a `StateTypeError` (list state holds no nulls, as in Flink)."""
    items = list(values)
    if any(v is None for v in items):
        raise StateTypeError("list state cannot hold None (Flink forbids null elements); state unchanged.")
    return items


def as_namespace(namespace: Any) -> Any:
    """A namespace as the backends key it: None (VOID_NAMESPACE) or a window as ``(start, end)`` in milliseconds."""
    if namespace is None or type(namespace) is tuple:
        return namespace
    if hasattr(namespace, "start") and hasattr(namespace, "end"):
        return (int(namespace.start), int(namespace.end))
    if isinstance(namespace, (list, tuple)) and len(namespace) == 2:
        return (int(namespace[0]), int(namespace[1]))
    raise InvalidArgumentError(
        f"namespace {namespace!r} is neither VOID_NAMESPACE (None) nor a window (start, end) in milliseconds."
    )


# --- raw storage of one state ---------------------------------------------------------------------


class Slot:
    """Storage of one state: ``{namespace: {key: stored}}``, with the current namespace's dict at hand.

    Handles read ``self._data`` (the dict of the current namespace) and ``self._b._key``: one
    attribute chain and one dict operation per call. The backend repoints ``_data`` when the
    namespace changes, which happens far less often than the key.
    """

    __slots__ = ("_b", "_by_ns", "_data", "info", "ttl", "_default")

    def __init__(self, backend: "SlotBackend", info: StateInfo, ttl: Any, default: Any = None) -> None:
        self._b = backend
        self.info = info
        self.ttl = ttl
        self._default = default
        self._by_ns: dict[Any, dict[Any, Any]] = {VOID_NAMESPACE: {}}
        self._data = self._by_ns.setdefault(backend._ns, {})

    def _switch(self, old: Any, new: Any) -> None:
        if not self._data and old is not None:
            self._by_ns.pop(old, None)  # drop emptied window namespaces so they cost nothing later
        d = self._by_ns.get(new)
        if d is None:
            d = self._by_ns[new] = {}
        self._data = d

    def load(self, by_ns: dict[Any, dict[Any, Any]]) -> None:
        """Add restored entries (already in stored form)."""
        for ns, entries in by_ns.items():
            d = self._by_ns.get(ns)
            if d is None:
                d = self._by_ns[ns] = {}
            d.update(entries)

    def _own(self, d: dict, k: Any, container: Any) -> Any:
        # Copy-on-write: a container a pending snapshot still holds is copied before its first
        # in-place change. `_fresh` holds ids of containers made since the latest snapshot (an id
        # can only be reused by an object made later still, so the set stays sound).
        fresh = self._b._fresh
        if fresh is None or id(container) in fresh:
            return container
        container = copy.copy(container)
        d[k] = container
        fresh.add(id(container))
        return container


# --- reducing and aggregating state over a value store -------------------------------------------


class ReducingOverValue(ReducingState):
    """Reducing state as a value store plus the descriptor's reduce function."""

    __slots__ = ("_v", "_reduce")

    def __init__(self, inner: ValueState, reduce: Callable[[Any, Any], Any]) -> None:
        self._v = inner
        self._reduce = reduce

    def get(self) -> Any:
        return self._v.value()

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeError("reducing state cannot add None; skip it or use a neutral value.")
        old = self._v.value()
        self._v.update(value if old is None else self._reduce(old, value))

    def clear(self) -> None:
        self._v.clear()


class AggregatingOverValue(AggregatingState):
    """Aggregating state as a value store holding the accumulator plus the `AggregateFunction`."""

    __slots__ = ("_v", "_fn")

    def __init__(self, inner: ValueState, fn: Any) -> None:
        self._v = inner
        self._fn = fn

    def get(self) -> Any:
        acc = self._v.value()
        return None if acc is None else self._fn.get_result(acc)

    def add(self, value: Any) -> None:
        acc = self._v.value()
        if acc is None:
            acc = self._fn.create_accumulator()
        self._v.update(self._fn.add(value, acc))

    def clear(self) -> None:
        self._v.clear()


# --- the registry, scope and merging shared by the heap and RocksDB backends ---------------------


S = TypeVar("S", bound=Slot)


class SlotBackend(KeyedStateBackend, Generic[S]):
    """Registration, key/namespace scope, restore bookkeeping and namespace merging over `Slot` stores.

    Subclasses say how to store (`_new_slot`) and how to snapshot, restore and iterate.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._key: Any = NO_KEY
        self._kg = -1
        self._ns: Any = VOID_NAMESPACE
        self._slots: dict[str, S] = {}
        self._handles: dict[str, tuple[KeyedStateDescriptor, Any]] = {}
        # restored state not registered yet: name → (info, {ns: {key: plain value}})
        self._pending: dict[str, tuple[StateInfo, dict[Any, dict[Any, Any]]]] = {}
        # copy-on-write while snapshots that share containers with the live state are pending
        self._fresh: set[int] | None = None
        # whether window namespaces were used (or restored): snapshots then keep the namespace column
        self._namespaced = False
        self._cow_lock = threading.Lock()
        self._pending_snapshots = 0

    # -- scope ---------------------------------------------------------------------------------------
    def set_current_key(self, key: Any, key_group: int) -> None:
        if key is None:
            raise NullKeyError("the key is None; Flink keys cannot be null. Filter or replace null keys before key_by.")
        self._key = key
        self._kg = key_group

    def get_current_key(self) -> Any:
        return None if self._key is NO_KEY else self._key

    def set_current_namespace(self, namespace: Any) -> None:
        if namespace is not None and type(namespace) is not tuple:
            namespace = as_namespace(namespace)
        old = self._ns
        if namespace == old:
            return
        self._ns = namespace
        if namespace is not None:
            self._namespaced = True
        for slot in self._slots.values():
            slot._switch(old, namespace)

    # -- registration --------------------------------------------------------------------------------
    def get_state(self, descriptor: KeyedStateDescriptor) -> Any:
        if not isinstance(descriptor, KeyedStateDescriptor):
            raise StateTypeError(f"{descriptor!r} is not a keyed state descriptor (ValueStateDescriptor, ...).")
        name = descriptor.name
        info = descriptor.info()
        known = self._handles.get(name)
        if known is not None:
            check_compatible(known[0].info(), info, "is already registered")
            return known[1]
        pending = self._pending.get(name)
        if pending is not None:
            check_compatible(pending[0], info, "was restored")
            del self._pending[name]
        default = descriptor.default if isinstance(descriptor, ValueStateDescriptor) and descriptor.ttl is None else None
        slot = self._new_slot(info, descriptor.ttl, default)
        if pending is not None:
            slot.load(self._to_stored(info, descriptor.ttl, pending[1]))
        self._slots[name] = slot
        handle = self._wrap(descriptor, slot)
        self._handles[name] = (descriptor, handle)
        return handle

    def _new_slot(self, info: StateInfo, ttl: Any, default: Any) -> S:
        raise NotImplementedError

    def _wrap(self, descriptor: KeyedStateDescriptor, slot: Slot) -> Any:
        ttl = descriptor.ttl
        if isinstance(descriptor, ListStateDescriptor):
            return TtlListState(slot, ttl, self.clock) if ttl else slot
        if isinstance(descriptor, MapStateDescriptor):
            return TtlMapState(slot, ttl, self.clock) if ttl else slot
        if isinstance(descriptor, ValueStateDescriptor):
            return TtlValueState(slot, ttl, self.clock, descriptor.default) if ttl else slot
        # Reducing and aggregating state are stored in a value slot (`_new_slot` makes one for every
        # kind but list and map) and folded by the wrapper.
        inner = TtlValueState(slot, ttl, self.clock) if ttl else cast(ValueState, slot)
        if isinstance(descriptor, ReducingStateDescriptor):
            return ReducingOverValue(inner, as_reduce_function(descriptor.reduce_function).reduce)
        assert isinstance(descriptor, AggregatingStateDescriptor), descriptor
        return AggregatingOverValue(inner, descriptor.aggregate_function)

    def _to_stored(self, info: StateInfo, ttl: Any, by_ns: dict[Any, dict[Any, Any]]) -> dict[Any, dict[Any, Any]]:
        if ttl is None:
            return by_ns
        imp = ttl_import(info.kind, self.clock())
        return {ns: {k: imp(v) for k, v in d.items()} for ns, d in by_ns.items()}

    def _export(self, slot: Slot, now: int) -> Callable[[Any], Any] | None:
        return None if slot.ttl is None else ttl_export(slot.info.kind, slot.ttl.ttl_ms, now)

    def state_infos(self) -> tuple[StateInfo, ...]:
        """Infos of every state in snapshots: registered ones, then restored ones not registered yet."""
        return tuple(s.info for s in self._slots.values()) + tuple(p[0] for p in self._pending.values())

    def _slot(self, state_name: str) -> Slot:
        slot = self._slots.get(state_name)
        if slot is None:
            raise StateAccessError(f"no keyed state named {state_name!r} is registered; call get_state first.")
        return slot

    def _shared_snapshot(self, parts: list[Any], build: Callable[[], pa.Table]) -> Callable[[], pa.Table]:
        """Start copy-on-write for a snapshot sharing containers with live state; return its materialiser.

        The materialiser runs `build` once (later calls return the same table or raise the same
        error), then releases `parts` and, when no snapshot is left pending, stops copying.
        """
        with self._cow_lock:
            self._fresh = set()  # from now on, containers the copies share are copied before changes
            self._pending_snapshots += 1
        result: list[Any] = []
        once = threading.Lock()

        def materialize() -> pa.Table:
            with once:
                if not result:
                    try:
                        result.append(build())
                    except Exception as exc:  # kept, so every caller of table() sees the same failure
                        result.append(exc)
                    finally:
                        parts.clear()
                        with self._cow_lock:
                            self._pending_snapshots -= 1
                            if self._pending_snapshots == 0:
                                self._fresh = None  # no snapshot left to protect: stop copying
                if isinstance(result[0], Exception):
                    raise result[0]
                return result[0]

        return materialize

    # -- restore ----------------------------------------------------------------------------------------
    def restore(self, tables: Sequence[pa.Table], infos: Sequence[StateInfo]) -> None:
        for table in tables:
            self._namespaced = self._namespaced or "namespace" in table.column_names
            parsed, _ = keyed_table_to_dicts(
                table,
                infos,
                key_type=self.key_type,
                max_parallelism=self.max_parallelism,
                key_group_range=self.key_group_range,
                trust_pickled=self.trust_pickled,
            )
            for name, (info, by_ns) in parsed.items():
                slot = self._slots.get(name)
                if slot is not None:
                    check_compatible(slot.info, info, "is registered")
                    self._load_into(slot, self._to_stored(slot.info, slot.ttl, by_ns))
                elif name in self._pending:
                    for ns, d in by_ns.items():
                        self._pending[name][1].setdefault(ns, {}).update(d)
                else:
                    self._pending[name] = (info, by_ns)

    def _load_into(self, slot: Slot, by_ns: dict[Any, dict[Any, Any]]) -> None:
        slot.load(by_ns)

    # -- merging (session windows) --------------------------------------------------------------------
    def merge_namespaces(self, state_name: str, sources: Iterable[Any], target: Any) -> None:
        """Merge the current key's state in `sources` into `target` and clear the sources (Flink's ``mergeNamespaces``).

        For list state the elements are concatenated; reducing state is reduced; aggregating state
        merges accumulators with ``AggregateFunction.merge``.
        """
        known = self._handles.get(state_name)
        if known is None:
            raise StateAccessError(f"no keyed state named {state_name!r} is registered; call get_state first.")
        descriptor, handle = known
        target = as_namespace(target)
        sources = [s for s in map(as_namespace, sources) if s != target]
        saved = self._ns
        try:
            if descriptor.kind == "list":
                merged: list[Any] = []
                for ns in sources:
                    self.set_current_namespace(ns)
                    merged.extend(handle.get())
                    handle.clear()
                self.set_current_namespace(target)
                if merged:
                    handle.add_all(merged)
            elif descriptor.kind in ("reducing", "aggregating"):
                combine = (
                    descriptor.reduce_function.reduce  # type: ignore[attr-defined]
                    if descriptor.kind == "reducing"
                    else descriptor.aggregate_function.merge  # type: ignore[attr-defined]
                )
                acc = None
                for ns in sources + [target]:
                    self.set_current_namespace(ns)
                    v = handle._v.value()  # the raw value / accumulator (through TTL when configured)
                    if v is not None:
                        acc = v if acc is None else combine(acc, v)
                    handle.clear()
                if acc is not None:
                    handle._v.update(acc)  # namespace is `target` after the loop
            else:
                raise StateTypeError(
                    f"state {state_name!r} is {descriptor.kind} state; only list, reducing and aggregating "
                    "state can be merged (Flink's MergingState)."
                )
        finally:
            self.set_current_namespace(saved)


def check_compatible(old: StateInfo, new: StateInfo, how: str) -> None:
    """Refuse (`StateTypeError`) a state declared again with another kind or type than it was `how` (registered...)."""
    if old.kind != new.kind or old.arrow_type != new.arrow_type or old.pickled != new.pickled:
        pick = lambda i: " (pickled)" if i.pickled else ""  # noqa: E731
        raise StateTypeError(
            f"state {new.name!r} {how} as {old.kind} state of type {old.type}{pick(old)}, but is now declared "
            f"as {new.kind} state of type {new.type}{pick(new)}; use a new state name or migrate the savepoint."
        )
