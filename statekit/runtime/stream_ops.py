"""Concrete one- and two-input operators: map, flat_map, filter, process, reduce, map_with_state, co-functions, timestamps."""

from __future__ import annotations

from typing import Any, Callable

from statekit.errors import JobError
from statekit.runtime.operators import KeyedOperatorMixin, StreamOperator, method_or_callable
from statekit.runtime.watermarks import MAX_WATERMARK, MIN_WATERMARK
from statekit.state.descriptors import ValueStateDescriptor

# How each one-input kind calls the user function: (method name, output mode).
_ONE_INPUT = {
    "map": ("map", "one"),
    "flat_map": ("flat_map", "many"),
    "filter": ("filter", "filter"),
    "process": ("process_element", "process"),
}


class OneInputOperator(StreamOperator):
    """map / flat_map / filter / process over a non-keyed stream."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        method, self.mode = _ONE_INPUT[self.transformation.kind]
        self.call = method_or_callable(self.function, method)

    def process(self, value: Any, ts: Any) -> None:
        mode = self.mode
        if mode == "one":
            self.emit(self.call(value), ts)
        elif mode == "filter":
            if self.call(value):
                self.emit(value, ts)
        elif mode == "many":
            out = self.call(value)
            if out is not None:
                emit = self.emit
                for o in out:
                    emit(o, ts)
        else:
            ctx = self.ctx
            ctx._ts = ts
            out = self.call(value, ctx)
            if out is not None:
                emit = self.emit
                for o in out:
                    emit(o, ts)


class KeyedOneInputOperator(KeyedOperatorMixin, OneInputOperator):
    """The same kinds on a KeyedStream: keyed state and timers available."""

    def process_keyed(self, value: Any, ts: Any, key: Any, kg: int) -> None:
        backend = self.backend
        if backend is None:
            self.ensure_backend(key)
            backend = self.backend
        backend.set_current_key(key, kg)
        if self.mode == "process":  # the hot path of keyed jobs, inlined
            ctx = self.ctx
            ctx._ts = ts
            out = self.call(value, ctx)
            if out is not None:
                emit = self.emit
                for o in out:
                    emit(o, ts)
        else:
            self.process(value, ts)

    def on_timer(self, ts: int, ctx: Any) -> None:
        on_timer = getattr(self.function, "on_timer", None)
        if on_timer is None:
            raise JobError(f"{self.name!r}: a timer fired but {type(self.function).__name__} has no on_timer")
        self.emit_all(on_timer(ts, ctx), ts)


class KeyedProcessOperator(KeyedOneInputOperator):
    """``KeyedStream.process``: the hot path of keyed jobs, without per-element dispatch.

    ``fusable``: the upstream router may scope the backend and call the function itself
    (see `statekit.runtime.keys.hash_router`), skipping `process_keyed`.
    """

    fusable = True

    def process_keyed(self, value: Any, ts: Any, key: Any, kg: int) -> None:
        backend = self.backend
        if backend is None:
            self.ensure_backend(key)
            backend = self.backend
        backend.set_current_key(key, kg)
        ctx = self.ctx
        ctx._ts = ts
        out = self.call(value, ctx)
        if out is not None:
            emit = self.emit
            for o in out:
                emit(o, ts)


class _FusedKeyedOperator(KeyedOperatorMixin, StreamOperator):
    """A keyed operator whose whole per-element work is ``call(value, ctx)`` once the key is scoped.

    The upstream router calls ``call`` directly (``fusable``); `process_keyed` is the same path
    for callers that are not fused.
    """

    fusable = True
    call: Callable[[Any, Any], None]  # set by each subclass's __init__

    def process_keyed(self, value: Any, ts: Any, key: Any, kg: int) -> None:
        backend = self.backend
        if backend is None:
            self.ensure_backend(key)
            backend = self.backend
        backend.set_current_key(key, kg)
        ctx = self.ctx
        ctx._ts = ts
        self.call(value, ctx)


class ReduceOperator(_FusedKeyedOperator):
    """``KeyedStream.reduce``: fold each key's elements, emitting the running result (Flink's StreamGroupedReduce)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reduce = method_or_callable(self.function, "reduce")
        self.call = self._reduce
        self.state: Any = None

    def initialize_internal_state(self, restored: bool) -> None:
        self.state = self.backend.get_state(ValueStateDescriptor("_op_state", self.transformation.options["state_type"]))

    def _reduce(self, value: Any, ctx: Any) -> None:
        state = self.state
        current = state.value()
        new = value if current is None else self.reduce(current, value)
        state.update(new)
        self.emit(new, ctx._ts)


class MapWithStateOperator(_FusedKeyedOperator):
    """``map_with_state``: ``fn(value, state) -> (output, new_state)`` over one ValueState per key.

    A ``new_state`` of None clears the state; an ``output`` of None emits nothing.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fn = method_or_callable(self.function, "map_with_state")
        self.call = self._map_with_state
        self.state: Any = None

    def initialize_internal_state(self, restored: bool) -> None:
        opts = self.transformation.options
        self.state = self.backend.get_state(ValueStateDescriptor(opts["state_name"], opts["state_type"], opts["default"]))

    def _map_with_state(self, value: Any, ctx: Any) -> None:
        state = self.state
        out, new = self.fn(value, state.value())
        if new is None:
            state.clear()
        else:
            state.update(new)
        if out is not None:
            self.emit(out, ctx._ts)


# -- two inputs ------------------------------------------------------------------------------------

_TWO_INPUT = {
    "co_map": (("map1", "map2"), "one"),
    "co_flat_map": (("flat_map1", "flat_map2"), "many"),
    "co_process": (("process_element1", "process_element2"), "process"),
}


class TwoInputOperator(StreamOperator):
    """``connect(...)`` followed by map / flat_map / process with a Co-function."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        (m1, m2), self.mode = _TWO_INPUT[self.transformation.kind]
        fn = self.function
        for m in (m1, m2):
            if not callable(getattr(fn, m, None)):
                raise JobError(f"{self.name!r}: {type(fn).__name__} must define {m1}() and {m2}()")
        self.call1, self.call2 = getattr(fn, m1), getattr(fn, m2)

    def _run(self, call: Any, value: Any, ts: Any) -> None:
        mode = self.mode
        if mode == "one":
            self.emit(call(value), ts)
            return
        if mode == "process":
            self.ctx._ts = ts
            out = call(value, self.ctx)
        else:
            out = call(value)
        if out is not None:
            emit = self.emit
            for o in out:
                emit(o, ts)

    def process1(self, value: Any, ts: Any) -> None:
        self._run(self.call1, value, ts)

    def process2(self, value: Any, ts: Any) -> None:
        self._run(self.call2, value, ts)


class KeyedTwoInputOperator(KeyedOperatorMixin, TwoInputOperator):
    """Connected keyed streams: both inputs share the keyed state of their common key."""

    def process1_keyed(self, value: Any, ts: Any, key: Any, kg: int) -> None:
        self.set_key(key, kg)
        self._run(self.call1, value, ts)

    def process2_keyed(self, value: Any, ts: Any, key: Any, kg: int) -> None:
        self.set_key(key, kg)
        self._run(self.call2, value, ts)

    def on_timer(self, ts: int, ctx: Any) -> None:
        on_timer = getattr(self.function, "on_timer", None)
        if on_timer is None:
            raise JobError(f"{self.name!r}: a timer fired but {type(self.function).__name__} has no on_timer")
        self.emit_all(on_timer(ts, ctx), ts)


class TimestampsAndWatermarksOperator(StreamOperator):
    """``assign_timestamps_and_watermarks``: stamps elements and emits its own watermarks.

    Upstream watermarks are swallowed except the end-of-input one, as in Flink.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.strategy = self.transformation.options["strategy"]
        self.max_ts = MIN_WATERMARK
        self.last_wm = MIN_WATERMARK

    def process(self, value: Any, ts: Any) -> None:
        strategy = self.strategy
        new_ts = strategy.extract(value, ts)
        self.emit(value, new_ts)
        if new_ts is not None and new_ts > self.max_ts and strategy.has_watermarks:
            self.max_ts = new_ts
            wm = new_ts - strategy.out_of_orderness_ms - 1
            if wm > self.last_wm:
                self.last_wm = wm
                self.current_watermark = wm
                self.emit_watermark(wm)

    def process_watermark(self, watermark: int, channel: Any) -> None:
        if watermark == MAX_WATERMARK:
            super().process_watermark(watermark, channel)


class UnionOperator(StreamOperator):
    """``DataStream.union``: elements of every input pass through; the watermark is the minimum of the inputs'."""

    def process(self, value: Any, ts: Any) -> None:
        self.emit(value, ts)
