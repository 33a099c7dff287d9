"""The broadcast state pattern: BroadcastStream, (Keyed)BroadcastProcessFunction and their operators."""

from __future__ import annotations

from typing import Any, Iterable, TypeVar

from statekit.errors import InvalidArgumentError, JobError, StateAccessError
from statekit.runtime.functions import RichFunction
from statekit.runtime.operators import KeyedOperatorMixin, StreamOperator
from statekit.state.descriptors import BroadcastStateDescriptor, MapStateDescriptor
from statekit.state.handles import BroadcastState, ReadOnlyBroadcastState

K = TypeVar("K")
V = TypeVar("V")


class BroadcastProcessFunction(RichFunction):
    """Connects a non-keyed stream with a broadcast stream; both methods yield outputs."""

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        raise NotImplementedError

    def process_broadcast_element(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedBroadcastProcessFunction(BroadcastProcessFunction):
    """Connects a keyed stream with a broadcast stream: keyed state and timers on the keyed side."""

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        return None


def _check_descriptors(descriptors: tuple) -> list[BroadcastStateDescriptor]:
    out = []
    for d in descriptors:
        if isinstance(d, MapStateDescriptor):
            d = BroadcastStateDescriptor(d.name, d.key_type, d.value_type)
        if not isinstance(d, BroadcastStateDescriptor):
            raise InvalidArgumentError(f"broadcast(...) takes MapStateDescriptors (or BroadcastStateDescriptors), got {d!r}")
        out.append(d)
    return out


class BroadcastStream:
    """``DataStream.broadcast(descriptor, ...)``: every element reaches every subtask of the connected operator."""

    def __init__(self, stream: Any, descriptors: tuple) -> None:
        self._stream = stream
        self.descriptors = _check_descriptors(descriptors)


class BroadcastConnectedStream:
    """A (keyed or not) stream connected with a `BroadcastStream`; ``process`` it with a broadcast process function."""

    def __init__(self, env: Any, first: Any, broadcast: BroadcastStream) -> None:
        self._env = env
        self.first = first
        self.broadcast = broadcast

    def process(self, func: BroadcastProcessFunction, output_type: Any = None) -> Any:
        """A `KeyedBroadcastProcessFunction` (keyed input) or `BroadcastProcessFunction`."""
        from statekit.runtime.graph import Edge

        for m in ("process_element", "process_broadcast_element"):
            if not callable(getattr(func, m, None)):
                raise InvalidArgumentError(
                    f"{type(func).__name__} must define process_element() and process_broadcast_element()"
                )
        first = self.first._edge()
        first.input_index = 0
        second = Edge(self.broadcast._stream._t, "broadcast", input_index=1)
        options = {"descriptors": self.broadcast.descriptors}
        if first.key_selector is not None:  # a keyed input (a KeyedStream's edge carries its key selector)
            t = self._env._add(
                "keyed_broadcast_process", "KeyedBroadcastProcess", func, [first, second], KeyedBroadcastOperator,
                keyed=True, key_type=self.first._key_type, options=options,
            )
        else:
            t = self._env._add(
                "broadcast_process", "BroadcastProcess", func, [first, second], BroadcastOperator, options=options
            )
        return self.first._derive(t)


class _Context:
    """The ``ctx`` of both methods: timestamp, times, broadcast state (read-only on the element side)."""

    __slots__ = ("_op", "_ts", "_writable")

    def __init__(self, op: Any, writable: bool) -> None:
        self._op = op
        self._ts: Any = None
        self._writable = writable

    def timestamp(self) -> Any:
        return self._ts

    def current_processing_time(self) -> int:
        return self._op.clock.now()

    def current_watermark(self) -> int:
        return self._op.current_watermark

    def get_broadcast_state(
        self, state_descriptor: BroadcastStateDescriptor[K, V] | MapStateDescriptor[K, V]
    ) -> BroadcastState[K, V] | ReadOnlyBroadcastState[K, V]:
        # One context class serves both sides: the broadcast side gets the writable state, the element
        # side its read-only view (both have the same methods; writes on the view raise).
        """The broadcast state of `state_descriptor` (one of those passed to ``broadcast``); read-only for elements."""
        op = self._op
        name = state_descriptor.name
        state = op.broadcast_states.get(name)
        if state is None:
            known = ", ".join(sorted(op.broadcast_states)) or "none"
            raise StateAccessError(
                f"{op.name!r}: no broadcast state {name!r}; pass its descriptor to broadcast(...) (known: {known})"
            )
        return state if self._writable else state.read_only()

    # keyed element side
    def get_current_key(self) -> Any:
        if not self._op.is_keyed:
            raise StateAccessError(f"operator {self._op.name!r} is not keyed; there is no current key")
        return self._op.current_key

    def timer_service(self) -> Any:
        return self._op.ctx.timer_service()

    def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None:
        """Call ``function(key, state)`` for every key of this subtask that has `state_descriptor` set."""
        op = self._op
        if not self._writable or not op.is_keyed:
            raise StateAccessError("apply_to_keyed_state is available in process_broadcast_element of a KeyedBroadcastProcessFunction")
        if op.backend is None:
            return
        from statekit.keygroups import assign_to_key_group

        state = op.backend.get_state(state_descriptor)
        for key in list(op.backend.keys(state_descriptor.name)):
            op.backend.set_current_key(key, assign_to_key_group(key, op.max_parallelism, op.key_type))
            function(key, state)


class BroadcastOperator(StreamOperator):
    """``connect(broadcast_stream).process(BroadcastProcessFunction)``: input 1 normal, input 2 broadcast."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.element_ctx = _Context(self, writable=False)
        self.broadcast_ctx = _Context(self, writable=True)
        self.broadcast_states: dict[str, Any] = {}

    def initialize_internal_state(self, restored: bool) -> None:
        # Registered before open(): restored broadcast state is in place for the function's first call.
        for d in self.transformation.options["descriptors"]:
            self.broadcast_states[d.name] = self.operator_state_store.get_broadcast_state(d)

    def process1(self, value: Any, ts: Any) -> None:
        ctx = self.element_ctx
        ctx._ts = ts
        self.emit_all(self.function.process_element(value, ctx), ts)

    def process2(self, value: Any, ts: Any) -> None:
        ctx = self.broadcast_ctx
        ctx._ts = ts
        self.emit_all(self.function.process_broadcast_element(value, ctx), ts)


class KeyedBroadcastOperator(KeyedOperatorMixin, BroadcastOperator):
    """The keyed variant: keyed state and timers for elements, broadcast state for both inputs."""

    def process1_keyed(self, value: Any, ts: Any, key: Any, kg: int) -> None:
        self.set_key(key, kg)
        ctx = self.element_ctx
        ctx._ts = ts
        self.emit_all(self.function.process_element(value, ctx), ts)

    def process2(self, value: Any, ts: Any) -> None:
        if self.backend is None and not self.opened:
            self._open_without_key()
        super().process2(value, ts)

    def _open_without_key(self) -> None:
        """A broadcast element arrived before any keyed one and the key type is not known yet."""
        raise JobError(
            f"{self.name!r}: a broadcast element arrived before the key type was known; declare "
            "key_by(..., key_type=...) on the keyed input of a broadcast connection"
        )

    def on_timer(self, ts: int, ctx: Any) -> None:
        on_timer = getattr(self.function, "on_timer", None)
        if on_timer is None:
            raise JobError(f"{self.name!r}: a timer fired but {type(self.function).__name__} has no on_timer")
        ectx = self.element_ctx
        ectx._ts = ts
        self.emit_all(on_timer(ts, ectx), ts)


__all__ = [
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "KeyedBroadcastOperator",
    "KeyedBroadcastProcessFunction",
    "BroadcastOperator",
]
