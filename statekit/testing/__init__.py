"""What tests of stateful code keep needing: a manual clock and small functions from Flink's documentation.

`ManualClock` is the runtime's clock that moves only when told (``clock.advance(ms)``); pass it as
``StreamExecutionEnvironment(clock=...)`` or as a backend's ``clock=`` so timers and TTL never sleep.
"""

from __future__ import annotations

from typing import Any

from statekit.runtime.clock import ManualClock
from statekit.state.functions import AggregateFunction

__all__ = ["ClickCounter", "ManualClock"]


class ClickCounter(AggregateFunction[Any, int, int]):
    """Counts a window's elements (the State Processor API docs' click-counter example)."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b
