"""Per-subtask timer service: event- and processing-time timers per (key, namespace), deduplicated and checkpointed."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable

from statekit.format.keyed import EVENT, PROCESSING
from statekit.runtime.watermarks import MIN_WATERMARK


class InternalTimerService:
    """Timers of one keyed subtask, kept as Flink keeps them: one per (timestamp, key, namespace).

    Heaps order the firing; a dict is the source of truth (``(ts, key, ns) -> key_group``), so
    deleting is O(1) and a deleted timer is skipped when it reaches the top of its heap. Timers are
    namespaced so window operators can register one per window.
    """

    def __init__(self, on_processing_registered: Callable[[int], None] | None = None) -> None:
        self._seq = itertools.count()
        self.event: dict[tuple, int] = {}
        self.processing: dict[tuple, int] = {}
        self._event_heap: list[tuple] = []
        self._proc_heap: list[tuple] = []
        self.current_watermark = MIN_WATERMARK
        self._on_processing_registered = on_processing_registered

    # -- registration -------------------------------------------------------------------------------
    def register_event_time_timer(self, ts: int, key: Any, key_group: int, namespace: Any = None) -> None:
        entry = (int(ts), key, namespace)
        if entry not in self.event:
            self.event[entry] = key_group
            heapq.heappush(self._event_heap, (entry[0], next(self._seq), entry))

    def register_processing_time_timer(self, ts: int, key: Any, key_group: int, namespace: Any = None) -> None:
        entry = (int(ts), key, namespace)
        if entry not in self.processing:
            self.processing[entry] = key_group
            heapq.heappush(self._proc_heap, (entry[0], next(self._seq), entry))
            if self._on_processing_registered is not None:
                self._on_processing_registered(entry[0])

    def delete_event_time_timer(self, ts: int, key: Any, namespace: Any = None) -> None:
        self.event.pop((int(ts), key, namespace), None)

    def delete_processing_time_timer(self, ts: int, key: Any, namespace: Any = None) -> None:
        self.processing.pop((int(ts), key, namespace), None)

    # -- firing ---------------------------------------------------------------------------------------
    def pop_event_timer(self, watermark: int) -> tuple | None:
        """The next event timer due at `watermark` as ``(ts, key, namespace, key_group)``, or None."""
        heap, live = self._event_heap, self.event
        while heap and heap[0][0] <= watermark:
            entry = heapq.heappop(heap)[2]
            kg = live.pop(entry, None)
            if kg is not None:
                return entry[0], entry[1], entry[2], kg
        return None

    def pop_processing_timer(self, now: int) -> tuple | None:
        """The next processing timer due at `now`, or None."""
        heap, live = self._proc_heap, self.processing
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)[2]
            kg = live.pop(entry, None)
            if kg is not None:
                return entry[0], entry[1], entry[2], kg
        return None

    def next_processing_time(self) -> int | None:
        """Earliest pending processing timer (stale heap tops are dropped first)."""
        heap = self._proc_heap
        while heap and heap[0][2] not in self.processing:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    # -- checkpoints ----------------------------------------------------------------------------------
    def snapshot(self) -> list[tuple]:
        """A copy of every pending timer as ``(key_group, key, namespace, ts, domain)`` (cheap, synchronous)."""
        rows = [(kg, k, ns, ts, EVENT) for (ts, k, ns), kg in self.event.items()]
        rows += [(kg, k, ns, ts, PROCESSING) for (ts, k, ns), kg in self.processing.items()]
        return rows

    def restore(self, rows: list[tuple]) -> None:
        """Re-register timers from ``(key_group, key, namespace, ts, domain)`` rows."""
        for kg, key, ns, ts, domain in rows:
            if domain == EVENT:
                self.register_event_time_timer(ts, key, kg, ns)
            else:
                self.register_processing_time_timer(ts, key, kg, ns)

    def __len__(self) -> int:
        return len(self.event) + len(self.processing)
