"""`KeyedStateReaderFunction`: read keyed state key by key through state handles, as Flink's readKeyedState does.

States are registered in `open` (``ctx.get_state(ValueStateDescriptor(...))`` and friends, checked
against the manifest); `read_key` is then called once per key that has one of the registered
states set, with handles scoped to that key and the key's timers on the context.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from typing import Any, Callable, Iterable, Iterator, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import StateAccessError, StateTypeError, UntrustedPicklePayloadError
from statekit.format.keyed import same_type
from statekit.format.values import state_value_decoder
from statekit.savepoint import OperatorMetadata, Savepoint
from statekit.spark.scan import ScanTask, TableSpec, read_task_table, task_range
from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    KeyedStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateInfo,
    ValueStateDescriptor,
)
from statekit.state.handles import AggregatingState, ListState, MapState, ReducingState, ValueState
from statekit.types import parse_ddl, to_ddl

__all__ = ["KeyedStateReaderFunction", "ReaderContext", "iter_output", "open_function", "run_rows"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")


class KeyedStateReaderFunction:
    """Reads keyed state one key at a time (Flink's ``KeyedStateReaderFunction``).

    Subclass it; register every state in `open` and yield output rows from `read_key`.

    Examples
    --------
    >>> class Balances(KeyedStateReaderFunction):
    ...     def open(self, ctx):
    ...         self.balance = ctx.get_state(ValueStateDescriptor("balance", "bigint"))
    ...     def read_key(self, key, ctx):
    ...         yield {"account": key, "balance": self.balance.value(),
    ...                "timers": ctx.registered_event_time_timers()}
    """

    def open(self, ctx: "ReaderContext") -> None:
        """Register the states to read with ``ctx.get_state`` / ``get_list_state`` / ... ."""

    def read_key(self, key: Any, ctx: "ReaderContext") -> Iterable[Any]:
        """Yield output rows (dicts, ``Row``s or tuples in output-schema order) for `key`."""
        raise NotImplementedError(f"{type(self).__name__} must implement read_key(key, ctx)")

    def close(self) -> None:
        """Called once after the last key of a partition."""


class ReaderContext:
    """What a `KeyedStateReaderFunction` sees: state registration in `open`, the key's timers in `read_key`."""

    def __init__(self, meta: OperatorMetadata, *, trust_pickled: bool) -> None:
        self._meta = meta
        self._trust = trust_pickled
        self._open = True
        self.registered: dict[str, tuple[StateInfo, KeyedStateDescriptor]] = {}
        self._values: dict[str, Any] = {}
        self._timers: tuple[list[int], list[int]] = ([], [])
        self.current_key: Any = None

    # -- registration (only inside open) ----------------------------------------------------------
    def _register(self, descriptor: KeyedStateDescriptor, handle_cls: Callable[..., Any]) -> Any:
        if not self._open:
            raise StateAccessError(
                f"state {descriptor.name!r} was registered outside open(); a KeyedStateReaderFunction must "
                "register every state in open(ctx), before keys are read."
            )
        info = checked_state(self._meta, descriptor, trust_pickled=self._trust)
        self.registered[info.name] = (info, descriptor)
        return handle_cls(self, info.name)

    def get_state(self, descriptor: ValueStateDescriptor[T]) -> ValueState[T]:
        """Register a value state and return its read-only handle."""
        return self._register(descriptor, _Value)

    def get_list_state(self, descriptor: ListStateDescriptor[T]) -> ListState[T]:
        return self._register(descriptor, _List)

    def get_map_state(self, descriptor: MapStateDescriptor[K, V]) -> MapState[K, V]:
        return self._register(descriptor, _Map)

    def get_reducing_state(self, descriptor: ReducingStateDescriptor[T]) -> ReducingState[T]:
        return self._register(descriptor, _Reducing)

    def get_aggregating_state(
        self, descriptor: AggregatingStateDescriptor[IN, Any, OUT]
    ) -> AggregatingState[IN, OUT]:
        return self._register(descriptor, _Aggregating)

    # -- per key --------------------------------------------------------------------------------
    def registered_event_time_timers(self) -> list[int]:
        """Event-time timers registered for the current key, ascending."""
        return list(self._timers[0])

    def registered_processing_time_timers(self) -> list[int]:
        """Processing-time timers registered for the current key, ascending."""
        return list(self._timers[1])

    def _value(self, name: str) -> Any:
        return self._values.get(name)


def checked_state(meta: OperatorMetadata, descriptor: KeyedStateDescriptor, *, trust_pickled: bool) -> StateInfo:
    """The manifest's entry for `descriptor`'s state, after checking its kind, stored type and pickling."""
    info = meta.keyed_state(descriptor.name)  # UnknownStateError lists the operator's states
    if info.kind != descriptor.kind:
        raise StateTypeError(
            f"state {descriptor.name!r} of operator {meta.display_name!r} is {info.kind} state, but "
            f"{type(descriptor).__name__} declares {descriptor.kind} state; use the matching descriptor."
        )
    if not info.pickled and not same_type(parse_ddl(info.type), descriptor.column_type):
        raise StateTypeError(
            f"state {descriptor.name!r} is stored as {info.type}, but the descriptor declares "
            f"{to_ddl(descriptor.column_type)}; declare the stored type."
        )
    if info.pickled and not trust_pickled:
        raise UntrustedPicklePayloadError(
            f"state {descriptor.name!r} of operator {meta.display_name!r} holds pickled values; "
            "unpickling runs arbitrary code. Pass trust_pickled=True only if you trust the savepoint."
        )
    return info


HANDLES: dict[str, Callable[..., Any]] = {}  # state kind -> read-only handle class (filled below)


def _read_only(what: str) -> StateAccessError:
    return StateAccessError(f"{what}: state read from a savepoint is read-only; write with SavepointWriter.")


class _Handle:
    __slots__ = ("_ctx", "_name")

    def __init__(self, ctx: ReaderContext, name: str) -> None:
        self._ctx, self._name = ctx, name

    def clear(self) -> None:
        raise _read_only(f"clear() on {self._name!r}")


class _Value(_Handle, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        v = self._ctx._value(self._name)
        if v is not None:
            return v
        d = self._ctx.registered[self._name][1]
        return d.default if isinstance(d, ValueStateDescriptor) else None

    def update(self, value: Any) -> None:
        raise _read_only(f"update() on {self._name!r}")


class _Appending(_Handle):
    __slots__ = ()

    def get(self) -> Any:
        return self._ctx._value(self._name)

    def add(self, value: Any) -> None:
        raise _read_only(f"add() on {self._name!r}")


class _List(_Appending, ListState):
    __slots__ = ()

    def get(self) -> list:
        return list(self._ctx._value(self._name) or [])

    def add_all(self, values: Iterable[Any]) -> None:
        raise _read_only(f"add_all() on {self._name!r}")

    def update(self, values: Iterable[Any]) -> None:
        raise _read_only(f"update() on {self._name!r}")


class _Reducing(_Appending, ReducingState):
    __slots__ = ()


class _Aggregating(_Appending, AggregatingState):
    __slots__ = ()

    def get(self) -> Any:
        acc = self._ctx._value(self._name)
        if acc is None:
            return None
        d = self._ctx.registered[self._name][1]
        assert isinstance(d, AggregatingStateDescriptor)  # registered by get_aggregating_state
        return d.aggregate_function.get_result(acc)


class _Map(_Handle, MapState):
    __slots__ = ()

    def _map(self) -> dict:
        return self._ctx._value(self._name) or {}

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def contains(self, key: Any) -> bool:
        return key in self._map()

    def keys(self) -> list:
        return list(self._map().keys())

    def values(self) -> list:
        return list(self._map().values())

    def items(self) -> list:
        return list(self._map().items())

    def is_empty(self) -> bool:
        return not self._map()

    def put(self, key: Any, value: Any) -> None:
        raise _read_only(f"put() on {self._name!r}")

    def put_all(self, mapping: Any) -> None:
        raise _read_only(f"put_all() on {self._name!r}")

    def remove(self, key: Any) -> None:
        raise _read_only(f"remove() on {self._name!r}")


HANDLES.update(value=_Value, list=_List, map=_Map, reducing=_Reducing, aggregating=_Aggregating)


def python_key(key: Any) -> Any:
    # Struct keys arrive as dicts; Flink hands tuple keys to read_key, and dicts are unhashable.
    return tuple(key.values()) if isinstance(key, dict) else key


@functools.lru_cache(maxsize=256)
def _decoder(info: StateInfo) -> Callable[[Any], Any]:
    return state_value_decoder(info, trusted=True)  # trust was checked when the state was registered


def decode_value(info: StateInfo, value: Any) -> Any:
    """A stored value as the handle holds it (`state_value_decoder`)."""
    return _decoder(info)(value)


def open_function(fn: KeyedStateReaderFunction, meta: OperatorMetadata, *, trust_pickled: bool) -> ReaderContext:
    """Call ``fn.open`` with a fresh context, then close registration."""
    ctx = ReaderContext(meta, trust_pickled=trust_pickled)
    fn.open(ctx)
    ctx._open = False
    if not ctx.registered:
        raise StateAccessError(
            f"{type(fn).__name__}.open() registered no state; register the states of operator "
            f"{meta.display_name!r} ({[s.name for s in meta.keyed_states]}) with ctx.get_state(...) etc."
        )
    return ctx




def timers_in_range(sp: Savepoint, meta: OperatorMetadata, spec: TableSpec, lo: int, hi: int) -> pa.Table | None:
    """The operator's timers in key groups `lo`..`hi` (with ``key_group``), or None when it has none there."""
    files = tuple(f for f in meta.files_of("timers") if f.overlaps(lo, hi))
    if not files:
        return None
    tspec = spec.sibling("timers")
    table = read_task_table(sp, meta, tspec, ScanTask(files=files))
    kg = table.column("key_group")
    return table.filter(pc.and_(pc.greater_equal(kg, lo), pc.less_equal(kg, hi)))


def _timers_by_key(sp: Savepoint, meta: OperatorMetadata, spec: TableSpec, lo: int, hi: int) -> dict:
    table = timers_in_range(sp, meta, spec, lo, hi)
    if table is None:
        return {}
    out: dict[Any, tuple[list[int], list[int]]] = {}
    for key, ts, domain in zip(
        table.column("key").to_pylist(), table.column("timestamp").to_pylist(), table.column("domain").to_pylist()
    ):
        entry = out.setdefault(python_key(key), ([], []))
        entry[0 if domain == "event" else 1].append(ts)
    for ev, pt in out.values():
        ev.sort()
        pt.sort()
    return out


def as_row_dict(row: Any, names: list[str]) -> dict:
    if isinstance(row, dict):
        return row
    if hasattr(row, "asDict"):
        return row.asDict(recursive=True)
    if isinstance(row, (tuple, list)):
        return dict(zip(names, row))
    if len(names) == 1:
        return {names[0]: row}
    raise StateTypeError(f"the reader function yielded {row!r}; yield dicts, Rows or tuples in output-schema order.")


def iter_output(
    fn: KeyedStateReaderFunction, meta: OperatorMetadata, spec: TableSpec, task: ScanTask, sp: Savepoint
) -> Iterator[Any]:
    """Run `fn` over one task's keys and yield its raw output rows."""
    ctx = open_function(fn, meta, trust_pickled=spec.trust_pickled)
    kspec = spec.sibling("keyed")
    table = read_task_table(sp, meta, kspec, task)
    names = list(ctx.registered)
    infos = [ctx.registered[n][0] for n in names]
    timers = _timers_by_key(sp, meta, spec, *task_range(task)) if task.files or task.key_group_range else {}
    # Keys whose registered states are all unset are skipped (the table only holds keys with some state).
    mask = None
    for n in names:
        valid = pc.is_valid(table.column(n))
        mask = valid if mask is None else pc.or_(mask, valid)
    if mask is not None and table.num_rows:
        table = table.filter(mask)
    columns = [table.column(n).to_pylist() for n in names]
    decoders = [state_value_decoder(info, trusted=True) for info in infos]  # trust checked at registration
    empty: tuple[list[int], list[int]] = ([], [])
    try:
        for i, key in enumerate(table.column("key").to_pylist()):
            key = python_key(key)
            ctx.current_key = key
            ctx._values = {n: dec(col[i]) for n, dec, col in zip(names, decoders, columns)}
            ctx._timers = timers.get(key, empty)
            out = fn.read_key(key, ctx)
            if out is not None:
                yield from out
    finally:
        fn.close()


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (reference counting still frees memory).

    Reading state builds 100,000s of small containers per task; generational collections over
    them cost more than the work itself (measured: about half of a reader function's time).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run_rows(
    rows_of: Callable[[ScanTask, Savepoint], Iterable[Any]],
    spec: TableSpec,
    tasks: list[ScanTask],
    arrow_schema: pa.Schema,
    task_ids: Iterable[int],
    *,
    batch_rows: int = 8192,
) -> Iterator[pa.RecordBatch]:
    """Executor side: the rows `rows_of(task, savepoint)` yields for the tasks `task_ids`, as batches of `arrow_schema`."""
    sp = spec.open(plan=False)
    names = arrow_schema.names
    for tid in task_ids:
        rows: list[dict] = []
        with no_gc():
            for row in rows_of(tasks[tid], sp):
                rows.append(as_row_dict(row, names))
                if len(rows) >= batch_rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)
                    rows = []
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)
