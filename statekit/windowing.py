"""Windows, window assigners and triggers with PyFlink's names (tumbling, sliding, session, global; event and processing time)."""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

from statekit.errors import InvalidArgumentError, JobError
from statekit.state.descriptors import ReducingStateDescriptor

MIN_LONG, MAX_LONG = -(2**63), 2**63 - 1


class TimeWindow(NamedTuple):
    """A window ``[start, end)`` in milliseconds; it is also the state namespace ``(start, end)``."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        """The largest timestamp inside the window (``end - 1``): event-time windows fire when the watermark passes it."""
        return self.end - 1

    def intersects(self, other: "TimeWindow") -> bool:
        """Overlapping or adjacent (Flink merges session windows that touch)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))


class GlobalWindow(TimeWindow):
    """The one window of `GlobalWindows` (count windows); stored under the namespace ``(MIN_LONG, MAX_LONG)``."""

    @staticmethod
    def get() -> "GlobalWindow":
        return GLOBAL_WINDOW

    def max_timestamp(self) -> int:
        return MAX_LONG


GLOBAL_WINDOW = GlobalWindow(MIN_LONG, MAX_LONG)


def window_of(namespace: Any) -> TimeWindow:
    """The window a state or timer namespace ``(start, end)`` stands for."""
    start, end = namespace
    if (start, end) == (MIN_LONG, MAX_LONG):
        return GLOBAL_WINDOW
    return TimeWindow(int(start), int(end))


def _window_start(timestamp: int, offset: int, size: int) -> int:
    """Flink's ``TimeWindow.getWindowStartWithOffset`` (Python's % is already non-negative)."""
    return timestamp - (timestamp - offset) % size


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive number of milliseconds, got {value!r}")
    return value


# -- triggers ----------------------------------------------------------------------------------------


class TriggerResult(Enum):
    """What a trigger decides for a window: keep collecting, fire (emit), purge (drop contents), or both."""

    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    def is_fire(self) -> bool:
        return self.value[0]

    def is_purge(self) -> bool:
        return self.value[1]


class TriggerStateAccess:
    """Per-window state for triggers through the current key's backend: one rule for the runtime's
    window operator and the Spark window bootstrap's replay (their contexts subclass it)."""

    __slots__ = ()
    window: TimeWindow
    merged: list[TimeWindow]

    def _state_backend(self) -> Any:
        raise NotImplementedError

    def get_partitioned_state(self, descriptor: Any) -> Any:
        backend = self._state_backend()
        handle = backend.get_state(descriptor)
        backend.set_current_namespace(self.window)
        return handle

    def merge_partitioned_state(self, descriptor: Any) -> None:
        backend = self._state_backend()
        backend.get_state(descriptor)
        backend.merge_namespaces(descriptor.name, self.merged, self.window)


class Trigger:
    """Decides when a window fires. ``ctx`` registers timers and gives per-window state (`get_partitioned_state`)."""

    def on_element(self, element: Any, timestamp: Any, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        raise JobError(f"{type(self).__name__} does not support merging windows (session windows)")

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        """Drop the trigger's timers and state of `window` (called when the window is purged for good)."""


class EventTimeTrigger(Trigger):
    """Fires when the watermark passes the window's end; fires again for each allowed late element."""

    @staticmethod
    def create() -> "EventTimeTrigger":
        return EventTimeTrigger()

    def on_element(self, element: Any, timestamp: Any, window: TimeWindow, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # a late element within the allowed lateness
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires when processing time reaches the window's end."""

    @staticmethod
    def create() -> "ProcessingTimeTrigger":
        return ProcessingTimeTrigger()

    def on_element(self, element: Any, timestamp: Any, window: TimeWindow, ctx: Any) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


def _add(a: int, b: int) -> int:
    return a + b


class CountTrigger(Trigger):
    """Fires when the window holds `count` elements (the count is per-window keyed state, so it is savepointed)."""

    def __init__(self, count: int) -> None:
        self.count = _positive("count", count)
        self.state_desc = ReducingStateDescriptor("count-trigger", _add, "bigint")

    @staticmethod
    def of(count: int) -> "CountTrigger":
        return CountTrigger(count)

    def on_element(self, element: Any, timestamp: Any, window: TimeWindow, ctx: Any) -> TriggerResult:
        state = ctx.get_partitioned_state(self.state_desc)
        state.add(1)
        if state.get() >= self.count:
            state.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        ctx.get_partitioned_state(self.state_desc).clear()


class ContinuousEventTimeTrigger(Trigger):
    """Fires every `interval` ms of event time within the window, and at its end (Flink's
    ``ContinuousEventTimeTrigger``); the next fire time is per-window keyed state ``fire-time``."""

    def __init__(self, interval: int) -> None:
        self.interval = _positive("interval", interval)
        self.state_desc = ReducingStateDescriptor("fire-time", min, "bigint")

    @staticmethod
    def of(interval: int) -> "ContinuousEventTimeTrigger":
        return ContinuousEventTimeTrigger(interval)

    def _register_next(self, time: int, window: TimeWindow, ctx: Any) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        ctx.get_partitioned_state(self.state_desc).add(next_fire)
        ctx.register_event_time_timer(next_fire)

    def on_element(self, element: Any, timestamp: Any, window: TimeWindow, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # the watermark is already past the window
        ctx.register_event_time_timer(window.max_timestamp())
        if ctx.get_partitioned_state(self.state_desc).get() is None:
            rem = abs(timestamp) % self.interval  # Java's %: the sign of the dividend
            self._register_next(timestamp - (rem if timestamp >= 0 else -rem), window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        state = ctx.get_partitioned_state(self.state_desc)
        if state.get() == time:
            state.clear()
            self._register_next(time, window, ctx)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()
        if next_fire is not None:
            ctx.register_event_time_timer(next_fire)

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        state = ctx.get_partitioned_state(self.state_desc)
        next_fire = state.get()
        if next_fire is not None:
            ctx.delete_event_time_timer(next_fire)
            state.clear()


class PurgingTrigger(Trigger):
    """Turns every FIRE of the nested trigger into FIRE_AND_PURGE."""

    def __init__(self, nested: Trigger) -> None:
        self.nested = nested

    @staticmethod
    def of(nested: Trigger) -> "PurgingTrigger":
        return PurgingTrigger(nested)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: Any, window: TimeWindow, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested.can_merge()

    def on_merge(self, window: TimeWindow, ctx: Any) -> None:
        self.nested.on_merge(window, ctx)

    def clear(self, window: TimeWindow, ctx: Any) -> None:
        self.nested.clear(window, ctx)


class TimestampedValue:
    """A window's buffered element with its timestamp (None when it had none), as evictors see it."""

    __slots__ = ("value", "timestamp")

    def __init__(self, value: Any, timestamp: int | None) -> None:
        self.value = value
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"TimestampedValue(value={self.value!r}, timestamp={self.timestamp!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimestampedValue) and (self.value, self.timestamp) == (other.value, other.timestamp)

    def get_value(self) -> Any:
        return self.value

    def get_timestamp(self) -> int | None:
        return self.timestamp

    def has_timestamp(self) -> bool:
        return self.timestamp is not None


# -- assigners -----------------------------------------------------------------------------------------


class WindowAssigner:
    """Assigns each element to windows; says whether windows are event-time and whether they merge."""

    def assign_windows(self, element: Any, timestamp: Any, context: Any) -> list[TimeWindow]:
        raise NotImplementedError

    def get_default_trigger(self, env: Any = None) -> Trigger:
        raise NotImplementedError

    def is_event_time(self) -> bool:
        return True

    def is_merging(self) -> bool:
        return False


def _event_timestamp(timestamp: Any, assigner: Any) -> int:
    if timestamp is None:
        raise JobError(
            f"{type(assigner).__name__} needs event timestamps but an element has none; call "
            "assign_timestamps_and_watermarks(...) (or from_source with a WatermarkStrategy) before key_by"
        )
    return timestamp


class TumblingEventTimeWindows(WindowAssigner):
    """Fixed-size, non-overlapping event-time windows ``[k*size + offset, (k+1)*size + offset)``."""

    def __init__(self, size: int, offset: int = 0) -> None:
        self.size = _positive("size", size)
        self.offset = offset % self.size

    @classmethod
    def of(cls, size: int, offset: int = 0) -> "TumblingEventTimeWindows":
        return cls(size, offset)

    def _timestamp(self, timestamp: Any, context: Any) -> int:
        return _event_timestamp(timestamp, self)

    def assign_windows(self, element: Any, timestamp: Any, context: Any) -> list[TimeWindow]:
        start = _window_start(self._timestamp(timestamp, context), self.offset, self.size)
        return [TimeWindow(start, start + self.size)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()


class _ProcessingTime:
    """Turns an event-time assigner into its processing-time twin: same windows, arrival time, wall-clock trigger."""

    def _timestamp(self, timestamp: Any, context: Any) -> int:
        return context.get_current_processing_time()

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class TumblingProcessingTimeWindows(_ProcessingTime, TumblingEventTimeWindows):
    """Tumbling windows over the processing time at which elements arrive."""


class SlidingEventTimeWindows(WindowAssigner):
    """Windows of `size` starting every `slide`: an element belongs to ``size / slide`` windows.

    Examples
    --------
    >>> SlidingEventTimeWindows.of(10, 5).assign_windows("e", 12, None)
    [TimeWindow(start=10, end=20), TimeWindow(start=5, end=15)]
    >>> TumblingEventTimeWindows.of(10).assign_windows("e", -3, None)[0].max_timestamp()
    -1
    """

    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        self.size = _positive("size", size)
        self.slide = _positive("slide", slide)
        self.offset = offset % self.slide

    @classmethod
    def of(cls, size: int, slide: int, offset: int = 0) -> "SlidingEventTimeWindows":
        return cls(size, slide, offset)

    def _timestamp(self, timestamp: Any, context: Any) -> int:
        return _event_timestamp(timestamp, self)

    def assign_windows(self, element: Any, timestamp: Any, context: Any) -> list[TimeWindow]:
        ts = self._timestamp(timestamp, context)
        last_start = _window_start(ts, self.offset, self.slide)
        return [TimeWindow(s, s + self.size) for s in range(last_start, ts - self.size, -self.slide)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()


class SlidingProcessingTimeWindows(_ProcessingTime, SlidingEventTimeWindows):
    """Sliding windows over processing time."""


class EventTimeSessionWindows(WindowAssigner):
    """Session windows: an element opens ``[ts, ts + gap)``; windows that touch or overlap merge."""

    def __init__(self, gap: int) -> None:
        self.gap = _positive("gap", gap)

    @classmethod
    def with_gap(cls, gap: int) -> "EventTimeSessionWindows":
        return cls(gap)

    def _timestamp(self, timestamp: Any, context: Any) -> int:
        return _event_timestamp(timestamp, self)

    def assign_windows(self, element: Any, timestamp: Any, context: Any) -> list[TimeWindow]:
        ts = self._timestamp(timestamp, context)
        return [TimeWindow(ts, ts + self.gap)]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_merging(self) -> bool:
        return True


class ProcessingTimeSessionWindows(_ProcessingTime, EventTimeSessionWindows):
    """Session windows over processing time."""


class GlobalWindows(WindowAssigner):
    """Every element in one window per key, which never fires by itself: give it a trigger (count windows do)."""

    @classmethod
    def create(cls) -> "GlobalWindows":
        return cls()

    def assign_windows(self, element: Any, timestamp: Any, context: Any) -> list[TimeWindow]:
        return [GLOBAL_WINDOW]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return _NeverTrigger()

    def is_event_time(self) -> bool:
        return False


class _NeverTrigger(Trigger):
    pass


__all__ = [
    "GLOBAL_WINDOW",
    "ContinuousEventTimeTrigger",
    "CountTrigger",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "GlobalWindow",
    "GlobalWindows",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "TimeWindow",
    "TimestampedValue",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "WindowAssigner",
    "cleanup_time",
]


def cleanup_time(window: TimeWindow, allowed_lateness: int, event_time: bool) -> int:
    """When a window's state is dropped for good (its cleanup timer): end of window plus allowed lateness
    in event time, the end of the window in processing time, never for the global window."""
    if window == GLOBAL_WINDOW:
        return GLOBAL_WINDOW.max_timestamp()
    return window.max_timestamp() + (allowed_lateness if event_time else 0)
