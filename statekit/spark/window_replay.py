"""Replays bootstrap history through a window trigger (and evictor), leaving the state a window operator would hold.

Flink's window bootstrap runs the job's own window operator over the history with its output
discarded and no watermark ever arriving (`Long.MIN_VALUE`). `WindowReplay` does the same per key
over the runtime's heap backend, so the savepoint holds exactly what the runtime's window operator
(`statekit.runtime.windows.WindowOperator`) would hold after seeing the history:

- each element is added to its windows' contents (``window-contents``; with an evictor also
  ``window-timestamps``), session windows merged as the operator's merging window set merges them
  (contents and trigger state merged, ``on_merge`` called, merged-away windows cleared);
- the trigger's ``on_element`` decides: FIRE emits nothing at bootstrap, but with an evictor the
  evictor runs on the buffer as the evicting operator's emit does (and its survivors are kept);
  a purge (FIRE_AND_PURGE, PURGE) drops the window's contents;
- the trigger's own state (``get_partitioned_state``: CountTrigger's ``count-trigger``, a custom
  trigger's states) is written, and so are the timers it registered and did not delete, plus each
  window's cleanup timer (end + allowed lateness; none for the global window).

No timer fires during the replay (the watermark stays `MIN_LONG`, and processing-time timers never
fire, as with Flink's ``NeverFireProcessingTimeService``); they fire in the restored job.
"""

from __future__ import annotations

import time
from typing import Any

from statekit.format.keyed import CONTENTS, NO_TIMESTAMP, SESSIONS, TIMESTAMPS
from statekit.state.descriptors import MapStateDescriptor
from statekit.windowing import GLOBAL_WINDOW, MIN_LONG, TimestampedValue, TimeWindow, TriggerStateAccess, cleanup_time

__all__ = ["WindowReplay"]


class _Context(TriggerStateAccess):
    """The trigger's context (and the evictor's): timers and per-window state of the current key."""

    __slots__ = ("_replay", "window", "merged", "_now")

    def __init__(self, replay: "WindowReplay") -> None:
        self._replay = replay
        self.window: TimeWindow = GLOBAL_WINDOW
        self.merged: list[TimeWindow] = []  # windows merged into `window` (during on_merge)
        self._now = time.time_ns() // 1_000_000  # processing time is the bootstrap's wall clock

    def get_current_watermark(self) -> int:
        return MIN_LONG  # no watermark reaches a bootstrap

    current_watermark = get_current_watermark

    def get_current_processing_time(self) -> int:
        return self._now

    current_processing_time = get_current_processing_time

    def _timer(self, time_: int, domain: str) -> tuple:
        return (self._replay.key, self.window.start, self.window.end, int(time_), domain)

    def register_event_time_timer(self, time_: int) -> None:
        self._replay.timers[self._timer(time_, "event")] = None

    def register_processing_time_timer(self, time_: int) -> None:
        self._replay.timers[self._timer(time_, "processing")] = None

    def delete_event_time_timer(self, time_: int) -> None:
        self._replay.timers.pop(self._timer(time_, "event"), None)

    def delete_processing_time_timer(self, time_: int) -> None:
        self._replay.timers.pop(self._timer(time_, "processing"), None)

    def _state_backend(self) -> Any:
        return self._replay.backend


class WindowReplay:
    """One task's replay: `add(key, elements)` per key, then the backend's table and `timers`."""

    def __init__(self, backend: Any, contents: Any, stamps: Any, assigner: Any, trigger: Any, evictor: Any,
                 allowed_lateness: int) -> None:  # fmt: skip
        self.backend = backend
        self.contents = contents
        self.stamps = stamps  # list state of the elements' timestamps (evicting windows), else None
        self.assigner = assigner
        self.trigger = trigger
        self.evictor = evictor
        self.lateness = allowed_lateness
        self.merging = assigner.is_merging()
        self.sessions: Any = backend.get_state(MapStateDescriptor(SESSIONS, "bigint", "bigint")) if self.merging else None
        self.ctx = _Context(self)
        self.key: Any = None
        #: (key, window start, window end, timestamp, domain): an ordered set, as the timer queue dedups
        self.timers: dict[tuple, None] = {}

    def add(self, key: Any, elements: list[tuple[Any, Any]]) -> None:
        """Replay `key`'s elements ``(timestamp, element)``, in the order given."""
        self.key = key
        self.backend.set_current_key(key, -1)
        for ts, element in elements:
            for window in self.assigner.assign_windows(element, ts, self.ctx):
                if self.merging:
                    window = self._merge(window)
                self._element(window, element, ts)

    def _element(self, window: TimeWindow, element: Any, ts: Any) -> None:
        backend, ctx = self.backend, self.ctx
        backend.set_current_namespace(window)
        self.contents.add(element)
        if self.stamps is not None:
            self.stamps.add(NO_TIMESTAMP if ts is None else ts)
        ctx.window = window
        result = self.trigger.on_element(element, ts, window, ctx)
        if result.is_fire() and self.evictor is not None:
            self._evict(window)  # the evicting operator's emit runs the evictor; the output is discarded
        if result.is_purge():
            backend.set_current_namespace(window)
            self.contents.clear()
            if self.stamps is not None:
                self.stamps.clear()
        if window != GLOBAL_WINDOW:  # as the operator: each window's cleanup timer, never for the global one
            ctx.window = window
            self.timers[ctx._timer(cleanup_time(window, self.lateness, True), "event")] = None

    def _evict(self, window: TimeWindow) -> None:
        self.backend.set_current_namespace(window)
        values = self.contents.get() or []
        if not values:
            return
        stamps = self.stamps.get() or [NO_TIMESTAMP] * len(values)
        buffered = [TimestampedValue(v, None if t == NO_TIMESTAMP else t) for v, t in zip(values, stamps)]
        self.evictor.evict_before(buffered, len(buffered), window, self.ctx)
        self.evictor.evict_after(buffered, len(buffered), window, self.ctx)
        if len(buffered) != len(values):
            self.backend.set_current_namespace(window)
            self.contents.update([e.value for e in buffered])
            self.stamps.update([NO_TIMESTAMP if e.timestamp is None else e.timestamp for e in buffered])

    def _merge(self, window: TimeWindow) -> TimeWindow:
        """Add a session window for the current key, merging the windows it touches (the operator's
        `_merge`: contents and trigger state merged, ``on_merge``, merged-away windows cleared)."""
        backend, ctx = self.backend, self.ctx
        backend.set_current_namespace(None)
        touching = [w for w in (TimeWindow(s, e) for s, e in self.sessions.items()) if w.intersects(window)]
        merged = window
        for w in touching:
            merged = merged.cover(w)
        if touching == [merged]:
            return merged  # inside an existing window: nothing to merge
        self.sessions.put(merged.start, merged.end)
        sources = [w for w in touching if w != merged]
        if sources:
            backend.merge_namespaces(CONTENTS, sources, merged)
            if self.stamps is not None:
                backend.merge_namespaces(TIMESTAMPS, sources, merged)
        if touching:
            ctx.window, ctx.merged = merged, sources
            self.trigger.on_merge(merged, ctx)
            ctx.merged = []
        for w in sources:
            ctx.window = w
            self.trigger.clear(w, ctx)
            self.timers.pop(ctx._timer(cleanup_time(w, self.lateness, True), "event"), None)
            backend.set_current_namespace(None)
            if w.start != merged.start:
                self.sessions.remove(w.start)
        return merged
