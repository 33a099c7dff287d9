"""Watermark strategies with PyFlink's names: monotonous or bounded out-of-orderness, plus a timestamp assigner."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from statekit.errors import InvalidArgumentError

#: Flink's Long.MIN_VALUE / Long.MAX_VALUE watermarks: "nothing yet" and "end of input".
MIN_WATERMARK = -(2**63)
MAX_WATERMARK = 2**63 - 1


class TimestampAssigner:
    """Extracts an event timestamp (ms) from an element: ``extract_timestamp(value, record_timestamp)``."""

    def extract_timestamp(self, value: Any, record_timestamp: int | None) -> int:
        raise NotImplementedError


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source stamps events and generates watermarks.

    Watermarks are generated per record (not periodically on a wall clock) so that runs are
    deterministic: after each element the source emits ``max_timestamp - out_of_orderness - 1``
    when that advanced, as Flink's periodic generator would at its next tick.

    Examples
    --------
    >>> s = WatermarkStrategy.for_bounded_out_of_orderness(100).with_timestamp_assigner(lambda e, ts: e[1])
    >>> s.out_of_orderness_ms, s.extract((0, 1_000))
    (100, 1000)
    """

    out_of_orderness_ms: int = 0
    assigner: Callable[[Any, Any], int] | TimestampAssigner | None = None
    idleness_ms: int | None = None
    has_watermarks: bool = True

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        """Timestamps only ever increase: watermark = max timestamp - 1."""
        return WatermarkStrategy(0)

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness_ms: int) -> "WatermarkStrategy":
        """Events are at most `max_out_of_orderness_ms` late."""
        ms = getattr(max_out_of_orderness_ms, "to_milliseconds", lambda: max_out_of_orderness_ms)()
        if int(ms) < 0:
            raise InvalidArgumentError(f"out-of-orderness must be >= 0 ms, got {ms}; pass 0 for in-order events.")
        return WatermarkStrategy(int(ms))

    @staticmethod
    def no_watermarks() -> "WatermarkStrategy":
        """Timestamps (if an assigner is set) but no watermarks; event-time timers fire only at end of input."""
        return WatermarkStrategy(0, has_watermarks=False)

    def with_timestamp_assigner(self, assigner: Callable[[Any, Any], int] | TimestampAssigner) -> "WatermarkStrategy":
        """Use `assigner` (a `TimestampAssigner` or ``fn(value, record_timestamp)``) for event time."""
        return replace(self, assigner=assigner)

    def with_idleness(self, idle_timeout_ms: int) -> "WatermarkStrategy":
        """Accepted for PyFlink compatibility; a single-process runtime has no idle partitions."""
        return replace(self, idleness_ms=int(idle_timeout_ms))

    def extract(self, value: Any, record_timestamp: int | None = None) -> int | None:
        """The event timestamp of `value` (None without an assigner)."""
        a = self.assigner
        if a is None:
            return record_timestamp
        if isinstance(a, TimestampAssigner):
            return int(a.extract_timestamp(value, record_timestamp))
        return int(a(value, record_timestamp))
