"""State time-to-live: handles that stamp values with their last access time and hide expired ones.

A TTL handle wraps a backend's raw handle that stores ``(value, last_access_ms)`` items: whole
values for value/reducing/aggregating state, elements for list state, entries for map state (as
Flink expires collection elements one by one; `statekit.format.ttl` converts the stamps for
snapshots). States without TTL never go through this module, so the hot path of plain state pays
nothing for it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from statekit.errors import StateTypeError
from statekit.state.descriptors import StateTtlConfig
from statekit.state.handles import ListState, MapState, ValueState

__all__ = ["TtlListState", "TtlMapState", "TtlValueState"]


class _Ttl:
    __slots__ = ("_raw", "_ttl", "_clock", "_on_read", "_return_expired")

    def __init__(self, raw: Any, ttl: StateTtlConfig, clock: Callable[[], int]) -> None:
        self._raw = raw
        self._ttl = int(ttl.ttl_ms)
        self._clock = clock
        self._on_read = ttl.update_type == "on_read_and_write"
        self._return_expired = ttl.state_visibility == "return_expired_if_not_cleaned_up"


class TtlValueState(_Ttl, ValueState):
    """Value state whose value expires `ttl_ms` after its last write (or read, with on_read_and_write)."""

    __slots__ = ("_default",)

    def __init__(self, raw: Any, ttl: StateTtlConfig, clock: Callable[[], int], default: Any = None) -> None:
        super().__init__(raw, ttl, clock)
        self._default = default

    def value(self) -> Any:
        item = self._raw.value()
        if item is None:
            return self._default
        now = self._clock()
        if item[1] + self._ttl <= now:
            self._raw.clear()  # cleaned up on access, as Flink's TTL decorators do
            return item[0] if self._return_expired else self._default
        if self._on_read:
            self._raw.update((item[0], now))
        return item[0]

    def update(self, value: Any) -> None:
        if value is None:
            self._raw.clear()
        else:
            self._raw.update((value, self._clock()))

    def clear(self) -> None:
        self._raw.clear()


class TtlListState(_Ttl, ListState):
    """List state whose elements expire one by one."""

    __slots__ = ()

    def get(self) -> list[Any]:
        items = self._raw.get()
        if not items:
            return []
        now, ttl = self._clock(), self._ttl
        live = [it for it in items if it[1] + ttl > now]
        if self._on_read and live:
            self._raw.update([(v, now) for v, _ in live])
        elif len(live) != len(items):
            self._raw.update(live)  # an empty list clears
        shown = items if self._return_expired else live
        return [v for v, _ in shown]

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeError("list state cannot hold None (Flink forbids null elements); skip it or use a sentinel.")
        self._raw.add((value, self._clock()))

    def add_all(self, values: Iterable[Any]) -> None:
        now = self._clock()
        items = [(v, now) for v in values]
        if any(v is None for v, _ in items):
            raise StateTypeError("list state cannot hold None (Flink forbids null elements); nothing was added.")
        self._raw.add_all(items)

    def update(self, values: Iterable[Any]) -> None:
        now = self._clock()
        items = [(v, now) for v in values]
        if any(v is None for v, _ in items):
            raise StateTypeError("list state cannot hold None (Flink forbids null elements); state unchanged.")
        self._raw.update(items)

    def clear(self) -> None:
        self._raw.clear()


class TtlMapState(_Ttl, MapState):
    """Map state whose entries expire one by one."""

    __slots__ = ()

    def _live(self, key: Any) -> tuple[bool, Any]:
        item = self._raw.get(key)
        if item is None:
            return False, None
        now = self._clock()
        if item[1] + self._ttl <= now:
            self._raw.remove(key)
            return self._return_expired, item[0]
        if self._on_read:
            self._raw.put(key, (item[0], now))
        return True, item[0]

    def get(self, key: Any) -> Any:
        found, value = self._live(key)
        return value if found else None

    def contains(self, key: Any) -> bool:
        return self._live(key)[0]

    def _entries(self) -> list[tuple[Any, Any]]:
        items = self._raw.items()
        if not items:
            return []
        now, ttl = self._clock(), self._ttl
        live = []
        for k, (v, ts) in items:
            if ts + ttl > now:
                live.append((k, v))
                if self._on_read:
                    self._raw.put(k, (v, now))
            else:
                self._raw.remove(k)
                if self._return_expired:
                    live.append((k, v))
        return live

    def keys(self) -> list[Any]:
        return [k for k, _ in self._entries()]

    def values(self) -> list[Any]:
        return [v for _, v in self._entries()]

    def items(self) -> list[tuple[Any, Any]]:
        return self._entries()

    def is_empty(self) -> bool:
        return not self._entries()

    def put(self, key: Any, value: Any) -> None:
        self._raw.put(key, (value, self._clock()))

    def put_all(self, mapping: Any) -> None:
        now = self._clock()
        pairs = mapping.items() if hasattr(mapping, "items") else mapping
        self._raw.put_all([(k, (v, now)) for k, v in pairs])

    def remove(self, key: Any) -> None:
        self._raw.remove(key)

    def clear(self) -> None:
        self._raw.clear()
