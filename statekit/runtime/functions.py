"""User function interfaces with PyFlink's names: map, flat map, process, co-functions, sources, sinks, checkpointing hooks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from statekit.runtime.context import RuntimeContext


class Function:
    """Base of every user function (PyFlink's ``Function``)."""


class RichFunction(Function):
    """A function with a lifecycle: `open` receives the `RuntimeContext`, where state is declared."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Declare state and set up; called once per subtask before any element."""

    def close(self) -> None:
        """Release resources; called once per subtask at the end."""


class MapFunction(RichFunction):
    """One output per element."""

    @abstractmethod
    def map(self, value: Any) -> Any: ...


class FlatMapFunction(RichFunction):
    """Zero or more outputs per element: ``flat_map`` yields them (or returns an iterable)."""

    @abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any] | None: ...


class FilterFunction(RichFunction):
    """Keeps the elements for which ``filter`` returns true."""

    @abstractmethod
    def filter(self, value: Any) -> bool: ...


class KeySelector(Function):
    """Extracts the key of an element."""

    @abstractmethod
    def get_key(self, value: Any) -> Any: ...


class ProcessFunction(RichFunction):
    """Low-level processing of a non-keyed stream; yields outputs."""

    class Context:  # documented shape; the runtime passes its own context object
        pass

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...


class KeyedProcessFunction(RichFunction):
    """Processing of a keyed stream with keyed state and timers; both methods yield outputs."""

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """Called when a registered timer fires; the context is scoped to the timer's key."""
        return None


class CoMapFunction(RichFunction):
    """One output per element of either input."""

    @abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(RichFunction):
    """Zero or more outputs per element of either input (yield them)."""

    @abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any] | None: ...


class CoProcessFunction(RichFunction):
    """Low-level processing of two connected non-keyed inputs."""

    @abstractmethod
    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...


class KeyedCoProcessFunction(RichFunction):
    """Two connected keyed inputs sharing keyed state and timers."""

    @abstractmethod
    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        return None


class SinkFunction(RichFunction):
    """Receives every element: ``invoke(value, context)``. At-least-once unless it is transactional."""

    @abstractmethod
    def invoke(self, value: Any, context: Any) -> None: ...

    def finish(self) -> None:
        """End of input (not called after a failure): flush what is still buffered."""


class SourceFunction(RichFunction):
    """A replayable source: ``run(ctx)`` emits with ``ctx.collect(x)`` (or yields), ``cancel()`` stops it.

    Keep the read position in operator state (`CheckpointedFunction`) and advance it right after
    ``collect``: the runtime only checkpoints between a ``collect`` returning and the next one
    starting, so emitting a record and advancing the offset are atomic with respect to checkpoints
    (Flink's checkpoint lock; ``ctx.get_checkpoint_lock()`` is provided for code written that way).
    """

    @abstractmethod
    def run(self, ctx: Any) -> Any: ...

    def cancel(self) -> None:
        """Ask `run` to return."""


class CheckpointedFunction(ABC):
    """Operator state hooks: ``initialize_state`` (before ``open``, also on restore) and ``snapshot_state``."""

    @abstractmethod
    def snapshot_state(self, context: Any) -> None: ...

    @abstractmethod
    def initialize_state(self, context: Any) -> None: ...


class ListCheckpointed(ABC):
    """The simpler style: ``snapshot_state`` returns a list of items, ``restore_state`` gets them back.

    Items are stored as operator list state (even split on rescale). Set the class attribute
    ``state_type`` to their type (a DDL string, pyarrow or Python type); the default pickles them,
    which restoring from a user savepoint only accepts with ``trust_pickled=True``.
    """

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int, timestamp: int) -> list[Any]: ...

    @abstractmethod
    def restore_state(self, state: list[Any]) -> None: ...


class CheckpointListener(ABC):
    """Told when a checkpoint is complete (durable), e.g. to commit a transaction."""

    @abstractmethod
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None: ...

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """A checkpoint was abandoned (timeout); its pending work will be part of a later one."""


__all__ = [name for name, obj in list(globals().items()) if isinstance(obj, type) and obj.__module__ == __name__]
