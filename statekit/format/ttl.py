"""TTL stamps: stored state items carry ``(value, last_access_ms)``; snapshots hold plain values."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["ttl_export", "ttl_import"]


def ttl_export(kind: str, ttl_ms: int, now: int) -> Callable[[Any], Any]:
    """Stored TTL items → the plain value a snapshot holds, or None when everything expired."""
    if kind == "list":

        def export_list(items: list) -> Any:
            live = [v for v, ts in items if ts + ttl_ms > now]
            return live or None

        return export_list
    if kind == "map":

        def export_map(entries: dict) -> Any:
            live = {k: v for k, (v, ts) in entries.items() if ts + ttl_ms > now}
            return live or None

        return export_map

    def export_value(item: tuple) -> Any:
        return item[0] if item[1] + ttl_ms > now else None

    return export_value


def ttl_import(kind: str, now: int) -> Callable[[Any], Any]:
    """A restored plain value → stored TTL items stamped `now` (snapshots keep no access times)."""
    if kind == "list":
        return lambda values: [(v, now) for v in values]
    if kind == "map":
        return lambda entries: {k: (v, now) for k, v in entries.items()}
    return lambda value: (value, now)
