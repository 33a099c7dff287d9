"""Typed state handles: mypy checks this file in `make test` (``assert_type``), pytest runs it.

The descriptors carry the value types (from a Python type, a default, or written out), and every
context that registers state (`RuntimeContext`, the Spark bootstrap and reader contexts) returns
handles of those types, so ``self.count.value() + 1`` is checked like any other ``int | None``.
"""

from __future__ import annotations

from typing import Any, Iterable, assert_type

from statekit.runtime import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from statekit.spark import KeyedBootstrapContext, KeyedStateBootstrapFunction, KeyedStateReaderFunction, ReaderContext
from statekit.state import AggregatingState, ListState, MapState, ReducingState, ValueState
from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statekit.testing import ClickCounter

COUNT = ValueStateDescriptor("count", int)
TOTAL = ValueStateDescriptor("total", "bigint", default=0)
NAME = ValueStateDescriptor[str]("name", "string")
SEEN = ListStateDescriptor("seen", str)
LAST_BY_KIND = MapStateDescriptor("last_by_kind", str, float)
CLICKS = AggregatingStateDescriptor("clicks", ClickCounter(), "bigint")
UNTYPED = ValueStateDescriptor("untyped", "bigint")  # a DDL string alone says nothing to mypy: Any


def _longer(a: str, b: str) -> str:
    return a if len(a) >= len(b) else b


LONGEST_WORD = ReducingStateDescriptor("longest_word", _longer, str)


class Tally(KeyedProcessFunction):
    """Every state kind, typed; emits (key, count, total, seen, last_by_kind, longest, clicks)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(COUNT)
        self.total = runtime_context.get_state(TOTAL)
        self.name = runtime_context.get_state(NAME)
        self.seen = runtime_context.get_list_state(SEEN)
        self.last = runtime_context.get_map_state(LAST_BY_KIND)
        self.longest = runtime_context.get_reducing_state(LONGEST_WORD)
        self.clicks = runtime_context.get_aggregating_state(CLICKS)
        self.untyped = runtime_context.get_state(UNTYPED)
        assert_type(self.count, ValueState[int])
        assert_type(self.total, ValueState[int])
        assert_type(self.name, ValueState[str])
        assert_type(self.seen, ListState[str])
        assert_type(self.last, MapState[str, float])
        assert_type(self.longest, ReducingState[str])
        assert_type(self.clicks, AggregatingState[Any, int])
        assert_type(self.untyped, ValueState[Any])

    def process_element(self, value: tuple[str, str, float], ctx: Any) -> Iterable[Any]:
        key, word, amount = value
        count = (self.count.value() or 0) + 1
        assert_type(self.count.value(), int | None)
        self.count.update(count)
        self.total.update((self.total.value() or 0) + int(amount))
        self.seen.add(word)
        assert_type(self.seen.get(), list[str])
        self.last.put(word[:1], amount)
        assert_type(self.last.get("a"), float | None)
        assert_type(self.last.items(), list[tuple[str, float]])
        self.longest.add(word)
        self.clicks.add(value)
        yield key, count, self.total.value(), self.seen.get(), dict(self.last.items()), self.longest.get(), self.clicks.get()


class Balances(KeyedStateBootstrapFunction):
    """The Spark bootstrap context returns the same typed handles."""

    def open(self, ctx: KeyedBootstrapContext) -> None:
        self.balance = ctx.get_state(ValueStateDescriptor("balance", float))
        self.history = ctx.get_list_state(ListStateDescriptor("history", float))
        assert_type(self.balance, ValueState[float])
        assert_type(self.history, ListState[float])

    def process_element(self, value: Any, ctx: KeyedBootstrapContext) -> None:
        self.balance.update((self.balance.value() or 0.0) + value.amount)
        self.history.add(value.amount)


class ReadBalances(KeyedStateReaderFunction):
    """So does the Spark reader context."""

    def open(self, ctx: ReaderContext) -> None:
        self.balance = ctx.get_state(ValueStateDescriptor("balance", float))
        self.by_day = ctx.get_map_state(MapStateDescriptor("by_day", int, float))
        assert_type(self.balance, ValueState[float])
        assert_type(self.by_day, MapState[int, float])

    def read_key(self, key: Any, ctx: ReaderContext) -> Iterable[Any]:
        yield key, self.balance.value(), self.by_day.items()


def test_typed_handles_run_as_typed():
    env = StreamExecutionEnvironment(parallelism=1)
    events = [("a", "apple", 1.5), ("b", "bee", 2.0), ("a", "avocado", 3.0)]
    out = list(env.from_collection(events).key_by(lambda e: e[0]).process(Tally()).execute_and_collect())
    assert out == [
        ("a", 1, 1, ["apple"], {"a": 1.5}, "apple", 1),
        ("b", 1, 2, ["bee"], {"b": 2.0}, "bee", 1),
        ("a", 2, 4, ["apple", "avocado"], {"a": 3.0}, "avocado", 2),
    ]
