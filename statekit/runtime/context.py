"""Contexts handed to user functions: RuntimeContext (state), process/timer contexts, and checkpoint contexts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from statekit.errors import StateAccessError
from statekit.format.keyed import EVENT, PROCESSING
from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    KeyedStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statekit.state.handles import AggregatingState, ListState, MapState, ReducingState, ValueState

if TYPE_CHECKING:  # pragma: no cover
    from statekit.runtime.operators import StreamOperator

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")


class RuntimeContext:
    """What ``open(runtime_context)`` receives: subtask facts and keyed state registration.

    Keyed state can only be declared while the function is being opened (or in
    ``initialize_state``) and only on a keyed stream; the handles it returns follow the key of the
    element or timer being processed.
    """

    def __init__(self, operator: "StreamOperator") -> None:
        self._op = operator
        self._registration_open = False

    # -- facts ----------------------------------------------------------------------------------------
    def get_task_name(self) -> str:
        return self._op.name

    def get_index_of_this_subtask(self) -> int:
        return self._op.subtask_index

    def get_number_of_parallel_subtasks(self) -> int:
        return self._op.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._op.max_parallelism

    def get_attempt_number(self) -> int:
        return self._op.attempt

    def get_job_parameter(self, key: str, default_value: Any = None) -> Any:
        return self._op.job_parameters.get(key, default_value)

    # -- keyed state ----------------------------------------------------------------------------------
    def _register(self, descriptor: KeyedStateDescriptor, kind: type) -> Any:
        if not isinstance(descriptor, kind):
            raise StateAccessError(f"expected a {kind.__name__}, got {descriptor!r}")
        op = self._op
        if op.backend is None and not op.is_keyed:
            raise StateAccessError(
                f"operator {op.name!r} is not keyed: keyed state ({descriptor.name!r}) needs a KeyedStream; "
                "call key_by(...) before this operator, or use operator state (CheckpointedFunction)."
            )
        if not self._registration_open:
            raise StateAccessError(
                f"state {descriptor.name!r} registered outside open()/initialize_state() in {op.name!r}; "
                "declare every state in open(runtime_context) and keep the handle in a field."
            )
        return op.backend.get_state(descriptor)

    def get_state(self, state_descriptor: ValueStateDescriptor[T]) -> ValueState[T]:
        """A `ValueState` handle: ``value()``, ``update(v)``, ``clear()``."""
        return self._register(state_descriptor, ValueStateDescriptor)

    def get_list_state(self, state_descriptor: ListStateDescriptor[T]) -> ListState[T]:
        """A `ListState` handle: ``get()``, ``add(v)``, ``add_all(vs)``, ``update(vs)``, ``clear()``."""
        return self._register(state_descriptor, ListStateDescriptor)

    def get_map_state(self, state_descriptor: MapStateDescriptor[K, V]) -> MapState[K, V]:
        """A `MapState` handle: ``get/put/put_all/contains/remove/keys/values/items/is_empty/clear``."""
        return self._register(state_descriptor, MapStateDescriptor)

    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor[T]) -> ReducingState[T]:
        """A `ReducingState` handle: ``get()``, ``add(v)``, ``clear()``."""
        return self._register(state_descriptor, ReducingStateDescriptor)

    def get_aggregating_state(
        self, state_descriptor: AggregatingStateDescriptor[IN, Any, OUT]
    ) -> AggregatingState[IN, OUT]:
        """An `AggregatingState` handle: ``get()``, ``add(v)``, ``clear()``."""
        return self._register(state_descriptor, AggregatingStateDescriptor)


class TimerService:
    """``ctx.timer_service()``: current times and timers of the current key (and namespace)."""

    __slots__ = ("_op",)

    def __init__(self, operator: "StreamOperator") -> None:
        self._op = operator

    def current_processing_time(self) -> int:
        return self._op.clock.now()

    def current_watermark(self) -> int:
        return self._op.current_watermark

    def _timers(self):
        op = self._op
        if op.timer_service is None:
            raise StateAccessError(
                f"timers need a keyed stream; operator {op.name!r} is not keyed. Call key_by(...) first."
            )
        return op.timer_service

    def register_event_time_timer(self, timestamp: int) -> None:
        op = self._op
        self._timers().register_event_time_timer(timestamp, op.current_key, op.current_key_group, op.current_namespace)

    def register_processing_time_timer(self, timestamp: int) -> None:
        op = self._op
        self._timers().register_processing_time_timer(
            timestamp, op.current_key, op.current_key_group, op.current_namespace
        )

    def delete_event_time_timer(self, timestamp: int) -> None:
        op = self._op
        self._timers().delete_event_time_timer(timestamp, op.current_key, op.current_namespace)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        op = self._op
        self._timers().delete_processing_time_timer(timestamp, op.current_key, op.current_namespace)


class ProcessContext:
    """The ``ctx`` of ``process_element`` / ``on_timer``: timestamp, key, timer service, time domain.

    One instance per subtask, updated in place for every element (no per-record allocation).
    """

    __slots__ = ("_op", "_ts", "_timer_service", "_domain")

    def __init__(self, operator: "StreamOperator") -> None:
        self._op = operator
        self._ts: int | None = None
        self._timer_service = TimerService(operator)
        self._domain: str | None = None

    def timestamp(self) -> int | None:
        """Event timestamp of the element (or the firing time of the timer)."""
        return self._ts

    def get_current_key(self) -> Any:
        op = self._op
        if not op.is_keyed:
            raise StateAccessError(f"operator {op.name!r} is not keyed; there is no current key")
        return op.current_key

    def timer_service(self) -> TimerService:
        return self._timer_service

    def time_domain(self) -> str | None:
        """In ``on_timer``: ``TimeDomain.EVENT_TIME`` or ``TimeDomain.PROCESSING_TIME``."""
        return self._domain

    def get_runtime_context(self) -> RuntimeContext:
        return self._op.runtime_context


class TimeDomain:
    """PyFlink's ``TimeDomain`` values as returned by ``ctx.time_domain()``."""

    EVENT_TIME = EVENT
    PROCESSING_TIME = PROCESSING


class FunctionInitializationContext:
    """What ``CheckpointedFunction.initialize_state`` receives."""

    def __init__(self, operator: "StreamOperator", restored: bool) -> None:
        self._op = operator
        self._restored = restored

    def is_restored(self) -> bool:
        """True when the job was restored from a checkpoint or savepoint."""
        return self._restored

    def get_operator_state_store(self) -> Any:
        """List, union list and broadcast state of this subtask."""
        return self._op.operator_state_store

    def get_keyed_state_store(self) -> RuntimeContext:
        """Keyed state registration (keyed operators only)."""
        return self._op.runtime_context


class FunctionSnapshotContext:
    """What ``CheckpointedFunction.snapshot_state`` receives."""

    __slots__ = ("_id", "_ts")

    def __init__(self, checkpoint_id: int, timestamp: int) -> None:
        self._id = checkpoint_id
        self._ts = timestamp

    def get_checkpoint_id(self) -> int:
        return self._id

    def get_checkpoint_timestamp(self) -> int:
        return self._ts


class SinkContext:
    """The ``context`` of ``SinkFunction.invoke``."""

    __slots__ = ("_op", "_ts")

    def __init__(self, operator: "StreamOperator") -> None:
        self._op = operator
        self._ts: int | None = None

    def timestamp(self) -> int | None:
        return self._ts

    def current_processing_time(self) -> int:
        return self._op.clock.now()

    def current_watermark(self) -> int:
        return self._op.current_watermark
