"""Keyed windows: WindowedStream (reduce / aggregate / process) and the window operator keeping contents in namespaced keyed state."""

from __future__ import annotations

import copy
from typing import Any, Iterable

from statekit.errors import InvalidArgumentError, JobError

# Keyed state names of the window operator (as in Flink's WindowOperator) are part of the layout.
from statekit.format.keyed import CONTENTS, EVENT, NO_TIMESTAMP, SESSIONS, TIMESTAMPS
from statekit.runtime.functions import RichFunction
from statekit.runtime.graph import OutputTag
from statekit.runtime.operators import KeyedOperatorMixin, StreamOperator
from statekit.runtime.window_evictors import CountEvictor, Evictor, TimestampedValue
from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
)
from statekit.state.functions import AggregateFunction, as_reduce_function
from statekit.windowing import (
    GLOBAL_WINDOW,
    CountTrigger,
    GlobalWindows,
    PurgingTrigger,
    TimeWindow,
    Trigger,
    TriggerStateAccess,
    WindowAssigner,
    cleanup_time,
    window_of,
)


class ProcessWindowFunction(RichFunction):
    """Called with all of a window's elements (or the pre-aggregated result): ``process(key, context, elements)`` yields outputs."""

    def process(self, key: Any, context: "WindowContext", elements: Iterable[Any]) -> Iterable[Any] | None:
        raise NotImplementedError

    def clear(self, context: "WindowContext") -> None:
        """Called when a window is purged for good (after its allowed lateness)."""


class ProcessAllWindowFunction(RichFunction):
    """`ProcessWindowFunction` of ``window_all``: ``process(context, elements)`` (there is no key)."""

    def process(self, context: "WindowContext", elements: Iterable[Any]) -> Iterable[Any] | None:
        raise NotImplementedError

    def clear(self, context: "WindowContext") -> None:
        """Called when a window is purged for good."""


class WindowFunction(RichFunction):
    """The older window interface: ``apply(key, window, inputs)`` yields outputs."""

    def apply(self, key: Any, window: TimeWindow, inputs: Iterable[Any]) -> Iterable[Any] | None:
        raise NotImplementedError


class WindowContext:
    """The ``context`` of `ProcessWindowFunction.process`: the window, current times, per-window state."""

    __slots__ = ("_op", "_window")

    def __init__(self, op: "WindowOperator") -> None:
        self._op = op
        self._window: TimeWindow = GLOBAL_WINDOW

    def window(self) -> TimeWindow:
        return self._window

    def current_processing_time(self) -> int:
        return self._op.clock.now()

    def current_watermark(self) -> int:
        return self._op.current_watermark

    def window_state(self) -> "_WindowStateStore":
        """Keyed state scoped to this key and this window (Flink's ``windowState()``).

        As in Flink, it lives as long as you keep it: clear it in ``clear(context)``, which the
        operator calls when the window is cleaned up (end of window plus allowed lateness).
        """
        return _WindowStateStore(self._op, self._window)

    def global_state(self) -> "_WindowStateStore":
        """Keyed state scoped to this key across all its windows (Flink's ``globalState()``), in the
        void namespace like any keyed state: it outlives every window and is never cleared by the operator."""
        return _WindowStateStore(self._op, None)


class _WindowStateStore:
    """Registers keyed state of the window operator used at one namespace (a window, or None for global)."""

    __slots__ = ("_op", "_ns")

    def __init__(self, op: "WindowOperator", namespace: Any) -> None:
        self._op = op
        self._ns = namespace

    def _get(self, descriptor: Any) -> Any:
        return _ScopedState(self._op, self._op.backend.get_state(descriptor), self._ns)

    get_state = get_list_state = get_map_state = get_reducing_state = get_aggregating_state = _get


class _ScopedState:
    """A state handle pinned to one namespace: each call switches the backend to it and back to the
    firing window, so window and global state can be used side by side in one ``process`` call."""

    __slots__ = ("_op", "_handle", "_ns")

    def __init__(self, op: "WindowOperator", handle: Any, namespace: Any) -> None:
        self._op = op
        self._handle = handle
        self._ns = namespace

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._handle, name)
        if not callable(attr):
            return attr

        def scoped(*args: Any, **kwargs: Any) -> Any:
            backend = self._op.backend
            backend.set_current_namespace(self._ns)
            try:
                return attr(*args, **kwargs)  # handles return lists, never lazy views of the namespace
            finally:
                backend.set_current_namespace(self._op.window_ctx._window)

        return scoped

    def __iter__(self) -> Any:
        return iter(self.__getattr__("get")() if hasattr(self._handle, "add") else self.__getattr__("keys")())

    def __contains__(self, key: object) -> bool:
        return self.__getattr__("contains")(key)


class _TriggerContext(TriggerStateAccess):
    """What triggers receive: timers and state of the current key and window."""

    __slots__ = ("_op", "window", "merged")

    def __init__(self, op: "WindowOperator") -> None:
        self._op = op
        self.window: TimeWindow = GLOBAL_WINDOW
        self.merged: list[TimeWindow] = []  # windows merged into `window` (during on_merge)

    def get_current_watermark(self) -> int:
        return self._op.current_watermark

    def get_current_processing_time(self) -> int:
        return self._op.clock.now()

    def register_event_time_timer(self, time: int) -> None:
        op = self._op
        op.timers.register_event_time_timer(time, op._key, op._kg, tuple(self.window))

    def register_processing_time_timer(self, time: int) -> None:
        op = self._op
        op.timers.register_processing_time_timer(time, op._key, op._kg, tuple(self.window))

    def delete_event_time_timer(self, time: int) -> None:
        self._op.timers.delete_event_time_timer(time, self._op._key, tuple(self.window))

    def delete_processing_time_timer(self, time: int) -> None:
        self._op.timers.delete_processing_time_timer(time, self._op._key, tuple(self.window))

    def _state_backend(self) -> Any:
        return self._op.backend


class _WindowFunctions:
    """The user's functions of one window operator (copied per subtask like any user function)."""

    def __init__(self, kind: str, fn: Any, window_function: Any) -> None:
        self.kind = kind  # "reduce", "aggregate" or "process"
        self.fn = fn
        self.window_function = window_function

    def open(self, runtime_context: Any) -> None:
        for f in (self.fn, self.window_function):
            if hasattr(f, "open"):
                f.open(runtime_context)

    def close(self) -> None:
        for f in (self.fn, self.window_function):
            if hasattr(f, "close"):
                f.close()


class WindowOperator(KeyedOperatorMixin, StreamOperator):
    """Flink's WindowOperator without evictors.

    Contents live in keyed state ``window-contents`` under the window's namespace (a list, reducing
    or aggregating state), trigger state likewise, and each window has its trigger and cleanup
    timers in the timer service under the same namespace, so pending windows are part of every
    checkpoint and savepoint and are re-split by key group on rescale. Session windows keep their
    active windows per key in map state ``session-windows`` and merge contents with the backend's
    ``merge_namespaces``. An element is dropped when all its windows are past the watermark by
    more than the allowed lateness (counted in ``late_records_dropped``), or sent to the
    late-data side output when one is set.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        opts = self.transformation.options
        self.assigner: WindowAssigner = opts["assigner"]
        # One trigger per subtask, like any user function; PyFlink passes the env to get_default_trigger.
        self.trigger: Trigger = copy.deepcopy(opts["trigger"]) if opts["trigger"] is not None else self.assigner.get_default_trigger(None)
        self.lateness: int = opts["allowed_lateness"]
        self.event_time = self.assigner.is_event_time()
        self.merging = self.assigner.is_merging()
        self.all_windows = bool(opts.get("all"))
        self.late_tag: str | None = opts.get("late_tag")
        if self.merging and not self.trigger.can_merge():
            raise JobError(f"{self.name!r}: trigger {type(self.trigger).__name__} cannot merge session windows")
        self.fns: _WindowFunctions = self.function
        self.contents: Any = None
        self.sessions: Any = None
        self._key: Any = None
        self._kg = -1
        self.trigger_ctx = _TriggerContext(self)
        self.window_ctx = WindowContext(self)
        self.late_records_dropped = 0

    def initialize_internal_state(self, restored: bool) -> None:
        fns, opts = self.fns, self.transformation.options
        self.evictor: Any = copy.deepcopy(opts["evictor"]) if opts.get("evictor") is not None else None
        self.stamps: Any = None
        if self.evictor is not None:
            # As Flink's EvictingWindowOperator: every element is kept (with its timestamp) and the
            # function runs over what the evictor leaves when the window fires.
            self.contents = self.backend.get_state(ListStateDescriptor(CONTENTS, opts["element_type"]))
            self.stamps = self.backend.get_state(ListStateDescriptor(TIMESTAMPS, "bigint"))
        elif fns.kind == "reduce":
            desc: Any = ReducingStateDescriptor(CONTENTS, fns.fn, opts["state_type"])
        elif fns.kind == "aggregate":
            desc = AggregatingStateDescriptor(CONTENTS, fns.fn, opts["state_type"])
        else:
            desc = ListStateDescriptor(CONTENTS, opts["state_type"])
        if self.evictor is None:
            self.contents = self.backend.get_state(desc)
        if self.merging:
            self.sessions = self.backend.get_state(MapStateDescriptor(SESSIONS, "bigint", "bigint"))

    # -- elements ---------------------------------------------------------------------------------------
    def get_current_processing_time(self) -> int:  # the assigners' context
        return self.clock.now()

    def process_keyed(self, value: Any, ts: Any, key: Any, kg: int) -> None:
        if self.backend is None:
            self.ensure_backend(key)
        backend = self.backend
        backend.set_current_key(key, kg)
        self._key, self._kg = key, kg
        windows = self.assigner.assign_windows(value, ts, self)
        accepted = False
        for assigned in windows:
            window = self._merge(assigned) if self.merging else assigned  # None: merged into a late window
            if window is None or (not self.merging and self._is_late(window)):
                continue
            accepted = True
            backend.set_current_namespace(window)
            self.contents.add(value)
            if self.stamps is not None:
                self.stamps.add(NO_TIMESTAMP if ts is None else ts)
            self.trigger_ctx.window = window
            result = self.trigger.on_element(value, ts, window, self.trigger_ctx)
            if result.is_fire():
                self._emit_window(window)
            if result.is_purge():
                backend.set_current_namespace(window)
                self._clear_contents()
            self._register_cleanup_timer(window)
        if not accepted:
            late_tag = self.late_tag
            if late_tag is None:
                self.late_records_dropped += 1
            else:
                self.emit_side(late_tag, value, ts)

    def _cleanup_time(self, window: TimeWindow) -> int:
        return cleanup_time(window, self.lateness, self.event_time)

    def _is_late(self, window: TimeWindow) -> bool:
        return self.event_time and self._cleanup_time(window) <= self.current_watermark

    def _register_cleanup_timer(self, window: TimeWindow) -> None:
        if window == GLOBAL_WINDOW:
            return  # a global window is never cleaned up (Flink: cleanup time Long.MAX_VALUE)
        t = self._cleanup_time(window)
        if self.event_time:
            self.timers.register_event_time_timer(t, self._key, self._kg, tuple(window))
        else:
            self.timers.register_processing_time_timer(t, self._key, self._kg, tuple(window))

    def _merge(self, window: TimeWindow) -> TimeWindow | None:
        """Add a new session window for the current key, merging it with the windows it touches.

        Returns the window now holding the element, or None when that window is already late.
        """
        backend = self.backend
        backend.set_current_namespace(None)
        active = [TimeWindow(s, e) for s, e in self.sessions.items()]
        touching = [w for w in active if w.intersects(window)]
        merged = window
        for w in touching:
            merged = merged.cover(w)
        if self._is_late(merged):
            return None
        if touching == [merged]:
            return merged  # inside an existing window: nothing to merge
        # As Flink's MergingWindowSet: merge contents and trigger state into the new window, let the
        # trigger register its timers for it, then drop the timers of the windows merged away.
        self.sessions.put(merged.start, merged.end)
        sources = [w for w in touching if w != merged]
        if sources:
            backend.merge_namespaces(CONTENTS, sources, merged)
            if self.stamps is not None:
                backend.merge_namespaces(TIMESTAMPS, sources, merged)
        ctx = self.trigger_ctx
        if touching:
            ctx.window, ctx.merged = merged, sources
            self.trigger.on_merge(merged, ctx)
            ctx.merged = []
        for w in sources:
            ctx.window = w
            self.trigger.clear(w, ctx)
            self._delete_cleanup_timer(w)
            backend.set_current_namespace(None)
            if w.start != merged.start:
                self.sessions.remove(w.start)
        return merged

    def _delete_cleanup_timer(self, window: TimeWindow) -> None:
        t = self._cleanup_time(window)
        if self.event_time:
            self.timers.delete_event_time_timer(t, self._key, tuple(window))
        else:
            self.timers.delete_processing_time_timer(t, self._key, tuple(window))

    # -- timers -----------------------------------------------------------------------------------------
    def _fire(self, timer: tuple, domain: str) -> None:
        ts, key, namespace, kg = timer
        backend = self.backend
        backend.set_current_key(key, kg)
        self._key, self._kg = key, kg
        window = window_of(namespace)
        if self.merging:
            backend.set_current_namespace(None)
            if self.sessions.get(window.start) != window.end:
                return  # merged away since the timer was set
        ctx = self.trigger_ctx
        ctx.window = window
        if domain == EVENT:
            result = self.trigger.on_event_time(ts, window, ctx)
        else:
            result = self.trigger.on_processing_time(ts, window, ctx)
        if result.is_fire():
            self._emit_window(window)
        if result.is_purge():
            backend.set_current_namespace(window)
            self._clear_contents()
        if (domain == EVENT) == self.event_time and ts == self._cleanup_time(window):
            self._clear_all_state(window)

    def _clear_contents(self) -> None:
        self.contents.clear()
        if self.stamps is not None:
            self.stamps.clear()

    def _clear_all_state(self, window: TimeWindow) -> None:
        backend = self.backend
        backend.set_current_namespace(window)
        self._clear_contents()
        self.trigger_ctx.window = window
        self.trigger.clear(window, self.trigger_ctx)
        clear = getattr(self.fns.window_function, "clear", None)
        if clear is not None:
            self.window_ctx._window = window
            backend.set_current_namespace(window)
            clear(self.window_ctx)
        if self.merging:
            backend.set_current_namespace(None)
            self.sessions.remove(window.start)

    # -- output -----------------------------------------------------------------------------------------
    def _emit_window(self, window: TimeWindow) -> None:
        self.backend.set_current_namespace(window)
        if self.evictor is not None:
            self._emit_evicting(window)
            return
        contents = self.contents.get()
        fns = self.fns
        if fns.kind == "process":
            if not contents:
                return
            elements: Any = contents
        elif contents is None:
            return
        else:
            elements = [contents]
        self._apply(window, elements)

    def _emit_evicting(self, window: TimeWindow) -> None:
        values = self.contents.get() or []
        if not values:
            return
        stamps = self.stamps.get() or [NO_TIMESTAMP] * len(values)
        buffered = [TimestampedValue(v, None if t == NO_TIMESTAMP else t) for v, t in zip(values, stamps)]
        self.evictor.evict_before(buffered, len(buffered), window, self.window_ctx)
        kept = [e.value for e in buffered]
        fns = self.fns
        if kept:  # a window the evictor emptied produces nothing
            if fns.kind == "reduce":
                result = kept[0]
                for v in kept[1:]:
                    result = fns.fn.reduce(result, v)
                self._apply(window, [result])
            elif fns.kind == "aggregate":
                acc = fns.fn.create_accumulator()
                for v in kept:
                    acc = fns.fn.add(v, acc)
                self._apply(window, [fns.fn.get_result(acc)])
            else:
                self._apply(window, kept)
        self.evictor.evict_after(buffered, len(buffered), window, self.window_ctx)
        if len(buffered) != len(values):
            self.backend.set_current_namespace(window)
            self.contents.update([e.value for e in buffered])
            self.stamps.update([NO_TIMESTAMP if e.timestamp is None else e.timestamp for e in buffered])

    def _apply(self, window: TimeWindow, elements: Any) -> None:
        """Emit a fired window's `elements`, through the window function if there is one."""
        fns = self.fns
        ts = window.max_timestamp()
        wf = fns.window_function
        if wf is None:
            self.emit_all(elements, ts)
        elif isinstance(wf, WindowFunction) or (not hasattr(wf, "process") and hasattr(wf, "apply")):
            if self.all_windows:
                self.emit_all(wf.apply(window, elements), ts)
            else:
                self.emit_all(wf.apply(self._key, window, elements), ts)
        else:
            ctx = self.window_ctx
            ctx._window = window
            if self.all_windows:
                self.emit_all(wf.process(ctx, elements), ts)
            else:
                self.emit_all(wf.process(self._key, ctx, elements), ts)


class WindowedStream:
    """``KeyedStream.window(assigner)``: configure lateness and trigger, then reduce, aggregate or process."""

    def __init__(self, keyed_stream: Any, assigner: WindowAssigner) -> None:
        if not isinstance(assigner, WindowAssigner):
            raise InvalidArgumentError(f"window(...) needs a WindowAssigner such as TumblingEventTimeWindows.of(1000), got {assigner!r}")
        self._keyed = keyed_stream
        self._assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness = 0
        self._all = False
        self._late_tag: str | None = None
        self._evictor: Any = None

    def allowed_lateness(self, time_ms: int) -> "WindowedStream":
        """Keep event-time windows (and re-fire them) for late elements up to `time_ms` after the watermark passed their end."""
        if not isinstance(time_ms, int) or time_ms < 0:
            raise InvalidArgumentError(f"allowed_lateness must be a non-negative number of milliseconds, got {time_ms!r}")
        self._lateness = time_ms
        return self

    def side_output_late_data(self, output_tag: Any) -> "WindowedStream":
        """Send elements that are too late for every window to `output_tag` instead of dropping them.

        Read them with ``windowed_result.get_side_output(output_tag)``.
        """
        if not isinstance(output_tag, OutputTag):
            raise InvalidArgumentError(f"side_output_late_data(...) needs an OutputTag, got {output_tag!r}")
        self._late_tag = output_tag.tag_id
        return self

    def trigger(self, trigger: Trigger) -> "WindowedStream":
        """Replace the assigner's default trigger."""
        if not isinstance(trigger, Trigger):
            raise InvalidArgumentError(f"trigger(...) needs a Trigger, got {trigger!r}")
        self._trigger = trigger
        return self

    def evictor(self, evictor: Evictor) -> "WindowedStream":
        """Remove elements before/after the window function runs (`CountEvictor`, `TimeEvictor`).

        With an evictor every element is buffered (as in Flink), so ``aggregate`` also needs
        ``element_type=``; ``reduce`` buffers elements of its ``output_type``.
        """
        if not isinstance(evictor, Evictor):
            raise InvalidArgumentError(f"evictor(...) needs an Evictor such as CountEvictor.of(10), got {evictor!r}")
        self._evictor = evictor
        return self

    def _op(self, kind: str, fn: Any, window_function: Any, state_type: Any, name: str,
            element_type: Any = None) -> Any:  # fmt: skip
        ks = self._keyed
        if self._evictor is not None:
            element_type = state_type if kind in ("reduce", "process") else element_type
            if element_type is None:
                raise InvalidArgumentError(
                    "with an evictor, aggregate(...) buffers the elements themselves and needs their type: pass "
                    "element_type= (a DDL string, pyarrow type or Types.*()), or element_type=statekit.PICKLED"
                )
        options = {
            "assigner": self._assigner, "trigger": self._trigger, "allowed_lateness": self._lateness,
            "state_type": state_type, "all": self._all, "late_tag": self._late_tag,
            "evictor": self._evictor, "element_type": element_type,
        }
        t = ks._env._add(
            "window", name, _WindowFunctions(kind, fn, window_function), [ks._edge()], WindowOperator,
            keyed=True, key_type=ks._key_type, options=options,
        )
        if self._all:
            t.set_parallelism(1)  # Flink's windowAll: one subtask sees every element
        return ks._derive(t)

    def reduce(self, reduce_function: Any, window_function: Any = None, output_type: Any = None) -> Any:
        """Fold each window's elements with ``reduce(a, b)`` as they arrive; ``output_type`` is the stored value's type.

        With a `ProcessWindowFunction` (or `WindowFunction`) it receives the single reduced value.
        """
        if output_type is None:
            raise InvalidArgumentError(
                "window reduce(...) keeps the running value in keyed state and needs its type: pass output_type= "
                "(a DDL string, pyarrow type or Types.*()), or output_type=statekit.PICKLED to pickle it"
            )
        return self._op("reduce", as_reduce_function(reduce_function), window_function, output_type, "WindowReduce")

    def aggregate(self, aggregate_function: AggregateFunction, window_function: Any = None, *, accumulator_type: Any = None,
                  output_type: Any = None, element_type: Any = None) -> Any:  # fmt: skip
        """Aggregate each window incrementally with an `AggregateFunction`; ``accumulator_type`` is the stored accumulator's type."""
        if not isinstance(aggregate_function, AggregateFunction):
            raise InvalidArgumentError(f"aggregate(...) needs an AggregateFunction, got {aggregate_function!r}")
        if accumulator_type is None:
            raise InvalidArgumentError(
                "window aggregate(...) keeps the accumulator in keyed state and needs its type: pass accumulator_type= "
                "(a DDL string, pyarrow type or Types.*()), or accumulator_type=statekit.PICKLED to pickle it"
            )
        return self._op("aggregate", aggregate_function, window_function, accumulator_type, "WindowAggregate",
                        element_type)  # fmt: skip

    def process(self, process_window_function: Any, output_type: Any = None, *, element_type: Any = None) -> Any:
        """Buffer each window's elements (list state of ``element_type``) and call ``process(key, context, elements)`` when it fires."""
        if element_type is None:
            raise InvalidArgumentError(
                "window process(...) buffers the window's elements in keyed list state and needs their type: pass "
                "element_type= (a DDL string, pyarrow type or Types.*()), or element_type=statekit.PICKLED to pickle them"
            )
        return self._op("process", None, process_window_function, element_type, "WindowProcess")

    def apply(self, window_function: WindowFunction, output_type: Any = None, *, element_type: Any = None) -> Any:
        """A `WindowFunction`: ``apply(key, window, inputs)`` over the buffered elements."""
        return self.process(window_function, output_type, element_type=element_type)


def count_window(keyed_stream: Any, size: int, slide: int | None = None) -> WindowedStream:
    """Windows of `size` elements per key: `GlobalWindows` with a purging `CountTrigger`; with `slide`,
    the last `size` elements every `slide` elements (a `CountEvictor` and a non-purging trigger, as Flink)."""
    windows = WindowedStream(keyed_stream, GlobalWindows.create())
    if slide is None:
        return windows.trigger(PurgingTrigger.of(CountTrigger.of(size)))
    return windows.evictor(CountEvictor.of(size)).trigger(CountTrigger.of(slide))


__all__ = ["ProcessAllWindowFunction", "ProcessWindowFunction", "WindowContext", "WindowFunction", "WindowOperator", "WindowedStream", "count_window"]
