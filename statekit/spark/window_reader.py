"""`WindowReaderFunction`: read a window operator's pending windows one (key, window) at a time, as Flink's window reader does.

A window operator (``statekit.runtime`` windows, or a Flink-style bootstrap) keeps each window's
contents in keyed state ``window-contents`` under the window's namespace ``(start, end)``, trigger
state (e.g. a count trigger's count) under the same namespace, and one cleanup timer per window.
`read_window` is called once per (key, window) whose contents are set, with the window's elements:
the buffered elements for ``process``/``apply`` windows, ``[reduced value]`` for ``reduce``
windows and ``[aggregate_function.get_result(accumulator)]`` for ``aggregate`` windows.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.format.keyed import CONTENTS, SESSIONS
from statekit.savepoint import OperatorMetadata, Savepoint
from statekit.spark.reader_function import HANDLES, checked_state, decode_value, no_gc, python_key, timers_in_range
from statekit.spark.scan import ScanTask, TableSpec, read_task_table, task_range
from statekit.state.descriptors import KeyedStateDescriptor, StateInfo
from statekit.state.functions import AggregateFunction
from statekit.windowing import TimeWindow, window_of

__all__ = ["WindowReaderContext", "WindowReaderFunction", "check_window_operator", "iter_window_output"]


class WindowReaderFunction:
    """Reads a window operator's state one (key, window) at a time (Flink's ``WindowReaderFunction``).

    Examples
    --------
    >>> class ClickReader(WindowReaderFunction):
    ...     def read_window(self, key, ctx, elements):
    ...         yield {"user": key, "count": next(iter(elements)), "start": ctx.window.start,
    ...                "timers": ctx.registered_event_time_timers()}
    """

    def open(self, ctx: "WindowReaderContext") -> None:
        """Called once per partition before the first window."""

    def read_window(self, key: Any, ctx: "WindowReaderContext", elements: Iterable[Any]) -> Iterable[Any]:
        """Yield output rows (dicts, ``Row``s or tuples in output-schema order) for one window of `key`."""
        raise NotImplementedError(f"{type(self).__name__} must implement read_window(key, ctx, elements)")

    def close(self) -> None:
        """Called once after the last window of a partition."""


class WindowReaderContext:
    """What `read_window` sees: the window, its timers and its trigger state."""

    def __init__(self, meta: OperatorMetadata, *, trust_pickled: bool = False) -> None:
        self._meta = meta
        self._trust = trust_pickled
        self.window: TimeWindow | None = None
        self._key: Any = None
        self._columns: dict[str, list] = {}  # the task's state columns; this window is row _index
        self._index = -1
        self._timers: tuple[list[int], list[int]] = ([], [])
        self._windows: pa.Table | None = None  # the task's window rows (row _index is this window)
        self._globals: pa.Table | None = None  # the task's rows in the void namespace (global state)
        self._global_columns: dict[str, list] = {}
        self._global_rows: dict[Any, int] | None = None

    def window_state(self) -> "_ReaderStateStore":
        """Keyed state of the current key in the current window, read-only (Flink's ``Context.windowState()``):
        ``ctx.window_state().get_state(ValueStateDescriptor("fires", "bigint")).value()``."""
        return _ReaderStateStore(self, in_window=True)

    def global_state(self) -> "_ReaderStateStore":
        """Keyed state of the current key outside any window, read-only (Flink's ``Context.globalState()``)."""
        return _ReaderStateStore(self, in_window=False)

    def _column(self, name: str) -> list:
        column = self._columns.get(name)
        if column is None:
            column = self._columns[name] = self._windows.column(name).to_pylist()  # type: ignore[union-attr]
        return column

    def _global_value(self, name: str) -> Any:
        if self._global_rows is None:
            keys = self._globals.column("key").to_pylist()  # type: ignore[union-attr]
            self._global_rows = {python_key(k): i for i, k in enumerate(keys)}
        i = self._global_rows.get(self._key)
        if i is None:
            return None
        column = self._global_columns.get(name)
        if column is None:
            column = self._global_columns[name] = self._globals.column(name).to_pylist()  # type: ignore[union-attr]
        return column[i]

    def registered_event_time_timers(self) -> list[int]:
        """Event-time timers of the current key in the current window (its cleanup timer, trigger timers)."""
        return list(self._timers[0])

    def registered_processing_time_timers(self) -> list[int]:
        """Processing-time timers of the current key in the current window."""
        return list(self._timers[1])

    def trigger_state(self, descriptor: KeyedStateDescriptor) -> Any:
        """The current window's value of a trigger's state (e.g. ``CountTrigger``'s ``count-trigger``).

        Value, reducing and aggregating state give their stored value (an aggregating state its
        accumulator), list state a list, map state a dict; None when unset in this window.
        """
        info = self._meta.keyed_state(descriptor.name)  # UnknownStateError lists the states
        if info.kind != descriptor.kind:
            raise StateTypeError(
                f"trigger state {descriptor.name!r} is {info.kind} state, but {type(descriptor).__name__} declares "
                f"{descriptor.kind} state; use the matching descriptor."
            )
        column = self._columns.get(info.name)
        return None if column is None else decode_value(info, column[self._index])


class _ReaderStateStore:
    """Read-only keyed state of the current key, in the current window or in the void namespace."""

    def __init__(self, ctx: WindowReaderContext, *, in_window: bool) -> None:
        self._ctx = ctx
        self._in_window = in_window
        self.registered: dict[str, tuple[StateInfo, KeyedStateDescriptor]] = {}

    def _get(self, descriptor: KeyedStateDescriptor) -> Any:
        info = checked_state(self._ctx._meta, descriptor, trust_pickled=self._ctx._trust)
        self.registered[info.name] = (info, descriptor)
        return HANDLES[info.kind](self, info.name)

    get_state = get_list_state = get_map_state = get_reducing_state = get_aggregating_state = _get

    def _value(self, name: str) -> Any:
        ctx = self._ctx
        raw = ctx._column(name)[ctx._index] if self._in_window else ctx._global_value(name)
        return decode_value(self.registered[name][0], raw)


def check_window_operator(
    meta: OperatorMetadata, aggregate_function: AggregateFunction | None, *, elements: bool = True
) -> StateInfo:
    """The operator's window-contents state, after checking `meta` is a window operator (and, when a
    reader function will see `elements`, that `aggregate_function` is given exactly for aggregates)."""
    if meta.namespace_type is None or CONTENTS not in {s.name for s in meta.keyed_states}:
        raise InvalidArgumentError(
            f"operator {meta.display_name!r} is not a window operator (no {CONTENTS!r} state in window "
            f"namespaces; its keyed states: {[s.name for s in meta.keyed_states] or 'none'}). Read it with "
            "read_keyed_state(op)."
        )
    info = meta.keyed_state(CONTENTS)
    if not elements:
        return info
    if info.kind == "aggregating" and aggregate_function is None:
        raise InvalidArgumentError(
            f"operator {meta.display_name!r} aggregates its windows; pass the job's aggregate_function= so "
            "the reader function receives get_result(accumulator), as Flink's window(...).aggregate(...) does."
        )
    if aggregate_function is not None and info.kind != "aggregating":
        raise InvalidArgumentError(
            f"operator {meta.display_name!r} keeps {info.kind} window contents, not an aggregate; drop aggregate_function=."
        )
    return info


def trigger_states(meta: OperatorMetadata) -> list[StateInfo]:
    """Keyed states other than the contents and the session-window set: the triggers' state."""
    return [s for s in meta.keyed_states if s.name not in (CONTENTS, SESSIONS)]


def _window_timers(sp: Savepoint, meta: OperatorMetadata, spec: TableSpec, lo: int, hi: int) -> dict:
    table = timers_in_range(sp, meta, spec, lo, hi)
    if table is None:
        return {}
    table = table.filter(pc.is_valid(table.column("namespace")))
    starts, ends = _bounds(table)
    keys = table.column("key").to_pylist()
    if pa.types.is_struct(table.schema.field("key").type):
        keys = [python_key(k) for k in keys]
    out: dict[Any, tuple[list[int], list[int]]] = {}
    event = pc.equal(table.column("domain"), "event").to_pylist()
    with no_gc():  # building 100,000s of small containers: generational GC passes would dominate
        for key, start, end, ts, is_event in zip(keys, starts, ends, table.column("timestamp").to_pylist(), event):
            entry = out.get((key, start, end))
            if entry is None:
                entry = out[(key, start, end)] = ([], [])
            entry[0 if is_event else 1].append(ts)
    for ev, pt in out.values():
        ev.sort()
        pt.sort()
    return out


def _bounds(table: pa.Table) -> tuple[list[int], list[int]]:
    """Window starts and ends of a table's (non-null) ``namespace`` column, as plain ints."""
    ns = table.column("namespace")
    return pc.struct_field(ns, "start").to_pylist(), pc.struct_field(ns, "end").to_pylist()


def iter_window_output(
    fn: WindowReaderFunction,
    meta: OperatorMetadata,
    spec: TableSpec,
    task: ScanTask,
    sp: Savepoint,
    aggregate_function: AggregateFunction | None,
) -> Iterator[Any]:
    """Run `fn` over one task's windows and yield its raw output rows."""
    contents = check_window_operator(meta, aggregate_function)
    triggers = trigger_states(meta)
    kspec = spec.sibling("keyed")
    table = read_task_table(sp, meta, kspec, task)
    ctx = WindowReaderContext(meta, trust_pickled=spec.trust_pickled)
    if table.num_rows:
        ctx._globals = table.filter(pc.is_null(table.column("namespace")))
        table = table.filter(pc.and_(pc.is_valid(table.column("namespace")), pc.is_valid(table.column(CONTENTS))))
    else:
        ctx._globals = table
    ctx._windows = table
    timers = _window_timers(sp, meta, spec, *task_range(task)) if table.num_rows else {}
    ctx._columns = columns = {s.name: table.column(s.name).to_pylist() for s in [contents, *triggers]}
    values = columns[CONTENTS]
    empty: tuple[list[int], list[int]] = ([], [])
    fn.open(ctx)
    starts, ends = _bounds(table)
    keys = table.column("key").to_pylist()
    if pa.types.is_struct(table.schema.field("key").type):
        keys = [python_key(k) for k in keys]
    try:
        for i, (key, start, end) in enumerate(zip(keys, starts, ends)):
            ctx.window = window_of((start, end))
            ctx._key = key
            ctx._index = i
            ctx._timers = timers.get((key, start, end), empty)
            value = decode_value(contents, values[i])
            if contents.kind == "list":
                elements = value
            elif contents.kind == "aggregating":
                elements = [aggregate_function.get_result(value)]  # type: ignore[union-attr]
            else:
                elements = [value]
            out = fn.read_window(key, ctx, elements)
            if out is not None:
                yield from out
    finally:
        fn.close()


def window_columns(meta: OperatorMetadata) -> list[str]:
    """The columnar view's column names after ``key``, ``window_start``, ``window_end``, ``contents``."""
    return [s.name for s in trigger_states(meta)]

