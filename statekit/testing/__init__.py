"""What tests of stateful code keep needing: operator test harnesses, a manual clock and small functions.

`ManualClock` is the runtime's clock that moves only when told (``clock.advance(ms)``); pass it as
``StreamExecutionEnvironment(clock=...)`` or as a backend's ``clock=`` so timers and TTL never sleep.
The harnesses (`ProcessFunctionTestHarnesses`, `KeyedOneInputStreamOperatorTestHarness`) drive one
real runtime operator by hand: elements, watermarks, processing time, output, keyed state, snapshots.
`tree_digest` proves an operation left a directory (a savepoint) untouched.
"""

from __future__ import annotations

from typing import Any

from statekit.runtime.clock import ManualClock
from statekit.state.functions import AggregateFunction
from statekit.testing.files import tree_digest
from statekit.testing.harness import (
    KeyedOneInputStreamOperatorTestHarness,
    OneInputStreamOperatorTestHarness,
    ProcessFunctionTestHarnesses,
    StreamRecord,
    Watermark,
)

__all__ = [
    "ClickCounter",
    "KeyedOneInputStreamOperatorTestHarness",
    "ManualClock",
    "OneInputStreamOperatorTestHarness",
    "ProcessFunctionTestHarnesses",
    "StreamRecord",
    "Watermark",
    "tree_digest",
]


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
