"""Evictors: remove elements from a window's buffer before and/or after its function runs (Flink's ``Evictor``)."""

from __future__ import annotations

from typing import Any

from statekit.errors import InvalidArgumentError
from statekit.windowing import TimestampedValue  # shared with the Spark window bootstrap

__all__ = ["CountEvictor", "Evictor", "TimeEvictor", "TimestampedValue"]


class Evictor:
    """Removes elements from ``elements`` (a list, edited in place) around each window evaluation.

    A window with an evictor keeps every element (list state, with their timestamps) instead of
    pre-aggregating, as in Flink: ``reduce``/``aggregate`` then run over what the evictor leaves.
    """

    def evict_before(self, elements: list[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        """Called after the trigger fires, before the window function."""

    def evict_after(self, elements: list[TimestampedValue], size: int, window: Any, evictor_context: Any) -> None:
        """Called after the window function."""


class _OneSidedEvictor(Evictor):
    """Evicts either before the window function (the default) or after it."""

    do_evict_after = False

    def _evict(self, elements: list[TimestampedValue]) -> None:
        raise NotImplementedError

    def evict_before(self, elements, size, window, evictor_context):
        if not self.do_evict_after:
            self._evict(elements)

    def evict_after(self, elements, size, window, evictor_context):
        if self.do_evict_after:
            self._evict(elements)


class CountEvictor(_OneSidedEvictor):
    """Keeps at most `max_count` elements: the most recently added ones (Flink's ``CountEvictor``)."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        if max_count < 0:
            raise InvalidArgumentError(f"CountEvictor.of({max_count}): the count must be >= 0")
        self.max_count = max_count
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> "CountEvictor":
        return CountEvictor(max_count, do_evict_after)

    def _evict(self, elements: list[TimestampedValue]) -> None:
        if len(elements) > self.max_count:
            del elements[: len(elements) - self.max_count]


class TimeEvictor(_OneSidedEvictor):
    """Keeps the elements within `window_size` ms of the newest element's timestamp (Flink's ``TimeEvictor``).

    Elements without timestamps are never evicted (nor is anything when none has one).
    """

    def __init__(self, window_size: int, do_evict_after: bool = False) -> None:
        if window_size < 0:
            raise InvalidArgumentError(f"TimeEvictor.of({window_size}): the size must be >= 0 ms")
        self.window_size = window_size
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(window_size: int, do_evict_after: bool = False) -> "TimeEvictor":
        return TimeEvictor(window_size, do_evict_after)

    def _evict(self, elements: list[TimestampedValue]) -> None:
        stamps = [e.timestamp for e in elements if e.timestamp is not None]
        if not stamps:
            return
        cutoff = max(stamps) - self.window_size
        elements[:] = [e for e in elements if e.timestamp is None or e.timestamp > cutoff]
