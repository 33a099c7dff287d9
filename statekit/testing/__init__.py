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
    "EDGE_KEYS",
    "ClickCounter",
    "KeyedOneInputStreamOperatorTestHarness",
    "ManualClock",
    "OneInputStreamOperatorTestHarness",
    "ProcessFunctionTestHarnesses",
    "StreamRecord",
    "Watermark",
    "tree_digest",
]

#: Keys of every scalar key type, edge values included (extremes, sign changes, NaN-free floats,
#: multi-byte and astral-plane strings): what a second implementation of Flink's key-group hash
#: (statekit's JVM classes, a user's own) must agree with `statekit.keygroups` on.
EDGE_KEYS: dict[str, list] = {
    "bigint": [0, -1, 1, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, *range(-200, 200, 7)],
    "int": [0, -1, 2**31 - 1, -(2**31), *range(-500, 500, 11)],
    "smallint": [0, -1, 32767, -32768, *range(-300, 300, 13)],
    "tinyint": list(range(-128, 128)),
    "string": ["", "a", "key-42", "ünïcödé", "日本語", "emoji 🎉", "\U0001F600x", *(f"user-{i}" for i in range(150))],
    "boolean": [True, False],
    "double": [0.0, -1.5, 1e300, -1e-300, float("inf"), float("-inf"), *(i / 7 for i in range(-100, 100, 3))],
    "float": [0.0, -1.5, 3.25, float("inf"), *(i / 4 for i in range(-100, 100, 3))],
}


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
