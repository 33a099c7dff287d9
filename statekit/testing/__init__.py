"""Small functions from Flink's documentation, shared by statekit's tests, benchmarks and examples."""

from __future__ import annotations

from statekit.state.functions import AggregateFunction

__all__ = ["ClickCounter"]


class ClickCounter(AggregateFunction):
    """Counts a window's elements (the State Processor API docs' click-counter example)."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b
