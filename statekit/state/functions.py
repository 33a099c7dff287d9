"""Reduce and aggregate functions used by reducing/aggregating state and windows (PyFlink's names)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Generic, TypeVar

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")


class ReduceFunction(ABC, Generic[IN]):
    """Combines two values of the same type into one (``reduce(a, b)``)."""

    @abstractmethod
    def reduce(self, value1: IN, value2: IN) -> IN: ...


class AggregateFunction(ABC, Generic[IN, ACC, OUT]):
    """Incremental aggregation: accumulator created, added to, merged, and read out."""

    @abstractmethod
    def create_accumulator(self) -> ACC: ...

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC: ...

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT: ...

    def merge(self, acc_a: ACC, acc_b: ACC) -> ACC:
        raise NotImplementedError(f"{type(self).__name__} does not support merging (needed by session windows)")


class _CallableReduce(ReduceFunction[Any]):
    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def reduce(self, value1: Any, value2: Any) -> Any:
        return self.fn(value1, value2)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CallableReduce) and other.fn == self.fn

    def __hash__(self) -> int:
        return hash(self.fn)


def as_reduce_function(fn: ReduceFunction | Callable[[Any, Any], Any]) -> ReduceFunction:
    """Accept a `ReduceFunction` or a plain two-argument callable (as PyFlink does)."""
    if isinstance(fn, ReduceFunction):
        return fn
    if callable(fn):
        return _CallableReduce(fn)
    raise TypeError(f"{fn!r} is neither a ReduceFunction nor a callable of two arguments")
