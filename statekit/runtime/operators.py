"""Operator subtasks: the per-subtask runtime of each transformation (state, timers, watermarks, user calls)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable

from statekit.backends.create import create_keyed_backend
from statekit.errors import JobError, RestoreError, StateTypeError
from statekit.format.keyed import EVENT, PROCESSING
from statekit.runtime.context import (
    FunctionInitializationContext,
    FunctionSnapshotContext,
    ProcessContext,
    RuntimeContext,
)
from statekit.runtime.functions import CheckpointedFunction, CheckpointListener, ListCheckpointed
from statekit.runtime.timers import InternalTimerService
from statekit.runtime.watermarks import MIN_WATERMARK
from statekit.state.descriptors import ListStateDescriptor
from statekit.types import PICKLED


def _noop_emit(value: Any, ts: Any) -> None:
    return None


def _noop_watermark(wm: int) -> None:
    return None


def method_or_callable(fn: Any, method: str) -> Callable:
    """``fn.method`` for function objects, ``fn`` itself for plain callables (PyFlink accepts both)."""
    bound = getattr(fn, method, None)
    if bound is not None and callable(bound):
        return bound
    if callable(fn):
        return fn
    raise JobError(f"{fn!r} has no {method}() and is not callable; pass a function or an object with {method}()")


class StreamOperator:
    """One subtask of a transformation.

    The engine drives every subtask synchronously from the sources, so there is never more than
    one element in flight: a checkpoint taken between two source records is aligned by
    construction (Flink's barrier alignment with nothing to align).
    """

    is_keyed = False

    # Keyed operators read these from their backend (see KeyedOperatorMixin).
    @property
    def current_key(self) -> Any:
        return None

    @property
    def current_key_group(self) -> int:
        return -1

    def __init__(self, transformation: Any, subtask_index: int, parallelism: int, max_parallelism: int, job: Any) -> None:
        self.transformation = transformation
        self.name = transformation.name
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.job = job
        self.clock = job.clock
        self.attempt = job.attempt
        self.job_parameters = job.parameters
        # Flink deserialises a fresh copy of the user function per subtask and per attempt; the
        # clock is shared so that tests keep driving processing time.
        memo = {id(job.clock): job.clock}
        fn = transformation.function
        self.function = fn if fn is None or getattr(fn, "shared", False) is True else copy.deepcopy(fn, memo)
        self.emit: Callable[[Any, Any], None] = _noop_emit
        self.emit_watermark: Callable[[int], None] = _noop_watermark
        self.backend: Any = None
        self.timer_service: InternalTimerService | None = None
        self._operator_state_store: Any = None
        self.current_namespace: Any = None
        self.current_watermark = MIN_WATERMARK
        self.input_watermarks: dict[Any, int] = {}
        self.runtime_context = RuntimeContext(self)
        self.ctx = ProcessContext(self)
        self.opened = False
        self._list_checkpointed_state: Any = None

    # -- operator state -------------------------------------------------------------------------------
    @property
    def operator_state_store(self) -> Any:
        if self._operator_state_store is None:
            from statekit.backends.operator import DefaultOperatorStateStore

            self._operator_state_store = DefaultOperatorStateStore()
        return self._operator_state_store

    # -- lifecycle ------------------------------------------------------------------------------------
    def initialize(self, restore: Any | None) -> None:
        """Restore state (if any), then ``initialize_state`` and ``open`` the user function."""
        if restore is not None and restore.operator_states:
            self.operator_state_store.restore(restore.operator_states)
        fn = self.function
        restored = restore is not None
        rc = self.runtime_context
        rc._registration_open = True
        try:
            if isinstance(fn, CheckpointedFunction):
                fn.initialize_state(FunctionInitializationContext(self, restored))
            if isinstance(fn, ListCheckpointed):
                desc = ListStateDescriptor("list_checkpointed", getattr(fn, "state_type", PICKLED))
                self._list_checkpointed_state = self.operator_state_store.get_list_state(desc)
                if restored:
                    fn.restore_state(list(self._list_checkpointed_state.get() or []))
            self.initialize_internal_state(restored)
            if hasattr(fn, "open"):
                fn.open(rc)
        except StateTypeError as exc:
            if not restored:
                raise
            raise _restore_type_error(self.transformation, exc) from None
        finally:
            rc._registration_open = False
        self.opened = True

    def initialize_internal_state(self, restored: bool) -> None:
        """Hook for runtime-owned state (source offsets, sink transactions)."""

    def finish(self) -> None:
        """End of input, after the final watermark: the function's ``finish()`` (flush), if it has one.

        Unlike ``close()``, which also runs after a failure, ``finish()`` only runs when the input
        really ended, so it is where buffered output may be flushed.
        """
        finish = getattr(self.function, "finish", None)
        if self.opened and callable(finish):
            finish()

    def close(self) -> None:
        fn = self.function
        try:
            if self.opened and hasattr(fn, "close"):
                fn.close()
        finally:
            if self.backend is not None:
                self.backend.close()
                self.backend = None

    # -- watermarks ------------------------------------------------------------------------------------
    def process_watermark(self, watermark: int, channel: Any) -> None:
        chans = self.input_watermarks
        if watermark <= chans.get(channel, MIN_WATERMARK):
            return
        chans[channel] = watermark
        combined = min(chans.values())
        if combined > self.current_watermark:
            self.current_watermark = combined
            self.advance_watermark(combined)
            self.emit_watermark(combined)

    def advance_watermark(self, watermark: int) -> None:
        """Fire what became due at `watermark` (event-time timers)."""

    def fire_processing_timers(self, now: int) -> None:
        """Fire processing-time timers due at `now`."""

    # -- checkpoints -----------------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int, timestamp: int) -> "SubtaskSnapshot":
        """Synchronous part of a checkpoint: user hooks, then cheap copies of every state."""
        fn = self.function
        if isinstance(fn, CheckpointedFunction):
            fn.snapshot_state(FunctionSnapshotContext(checkpoint_id, timestamp))
        if isinstance(fn, ListCheckpointed):
            items = fn.snapshot_state(checkpoint_id, timestamp)
            self._list_checkpointed_state.update(list(items or []))
        self.snapshot_internal_state(checkpoint_id)
        keyed = self.backend.snapshot(checkpoint_id, **self.job.native_snapshot_args(self)) if self.backend is not None else None
        timers = self.timer_service.snapshot() if self.timer_service is not None else []
        op_states = self._operator_state_store.snapshot() if self._operator_state_store is not None else {}
        return SubtaskSnapshot(
            self.subtask_index, keyed, timers, op_states, self.backend_key_type(), getattr(self, "key_group_range", None)
        )

    def snapshot_internal_state(self, checkpoint_id: int) -> None:
        """Hook for runtime-owned state."""

    def backend_key_type(self) -> Any:
        return None

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        fn = self.function
        if isinstance(fn, CheckpointListener):
            fn.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        fn = self.function
        if isinstance(fn, CheckpointListener):
            fn.notify_checkpoint_aborted(checkpoint_id)

    # -- output helpers --------------------------------------------------------------------------------
    side_outputs: dict[str, list] = {}  # tag id -> outputs of `get_side_output` streams (set by the job)

    def emit_side(self, tag_id: str, value: Any, ts: Any) -> None:
        """Send `value` to the side output `tag_id` (dropped when no stream reads it)."""
        for collect in self.side_outputs.get(tag_id, ()):
            collect(value, ts)

    def emit_all(self, out: Any, ts: Any) -> None:
        if out is not None:
            emit = self.emit
            for o in out:
                emit(o, ts)


class SubtaskSnapshot:
    """What one subtask contributes to a checkpoint (materialised later, off the processing thread)."""

    __slots__ = ("subtask", "keyed", "timers", "operator_states", "key_type", "key_group_range")

    def __init__(
        self, subtask: int, keyed: Any, timers: list, operator_states: dict, key_type: Any, key_group_range: Any = None
    ) -> None:
        self.subtask = subtask
        self.keyed = keyed
        self.timers = timers
        self.operator_states = operator_states
        self.key_type = key_type
        self.key_group_range = key_group_range


class KeyedOperatorMixin:
    """Keyed-state plumbing: a backend over the subtask's key-group range, timers, and timer firing.

    With a declared key type the backend exists from the start. Without one the type is inferred
    from the first key this operator sees (or taken from the restored savepoint), and the user
    function is opened at that moment: declaring state needs a backend, and the backend needs to
    know how to encode keys.
    """

    is_keyed = True
    if TYPE_CHECKING:  # what the mixin uses of the StreamOperator it is mixed into
        transformation: Any
        name: str
        subtask_index: int
        parallelism: int
        max_parallelism: int
        job: Any
        clock: Any
        backend: Any
        timer_service: InternalTimerService | None
        current_namespace: Any
        ctx: ProcessContext
        key_group_range: Any
        _pending_restore: Any

    # The current key lives in the backend only: the per-element path sets it there once
    # (`set_current_key`) and does not mirror it here. Its key group, needed only to register a
    # timer, is looked up in a per-subtask cache (computed once per key that registers timers).

    @property
    def current_key(self) -> Any:
        return None if self.backend is None else self.backend.get_current_key()

    @property
    def current_key_group(self) -> int:
        key = self.current_key
        if key is None:
            from statekit.errors import StateAccessError

            raise StateAccessError(
                f"{self.name!r} has no current key: timers can only be set or deleted while an element "
                "or a timer of the keyed stream is being processed"
            )
        try:
            kg = self._key_groups.get(key)
        except TypeError:  # unhashable (dict) struct key
            kg = None
        if kg is None:
            from statekit.keygroups import assign_to_key_group

            kg = assign_to_key_group(key, self.max_parallelism, self.key_type)
            self._remember_key_group(key, kg)
        return kg

    @property
    def timers(self) -> InternalTimerService:
        """The timer service, which exists once the backend does (`setup_keyed`)."""
        ts = self.timer_service
        if ts is None:
            raise JobError(f"{self.name!r} used its timers before its keyed backend was set up")
        return ts

    def _remember_key_group(self, key: Any, kg: int) -> None:
        cache = self.__dict__.setdefault("_key_groups", {})
        if len(cache) < 1 << 20:
            try:
                cache[key] = kg
            except TypeError:
                pass

    def setup_keyed(self, key_type: Any) -> None:
        from statekit.keygroups import key_group_range

        kgr = key_group_range(self.max_parallelism, self.parallelism, self.subtask_index)
        self.key_group_range = kgr
        self.key_type = key_type
        self._key_groups: dict[Any, int] = {}
        self.backend = create_keyed_backend(
            self.job.backend_name,
            key_type=key_type,
            max_parallelism=self.max_parallelism,
            key_group_range=kgr,
            clock=self.clock.now,
            directory=self.job.backend_directory(self),
            trust_pickled=self.job.trust_pickled,
        )
        self.timer_service = InternalTimerService(self.job.on_processing_timer_registered)
        self.job.register_timer_operator(self)

    def backend_key_type(self) -> Any:
        return getattr(self, "key_type", None)

    def advance_watermark(self, watermark: int) -> None:
        ts_service = self.timer_service
        if ts_service is None:
            return
        pop = ts_service.pop_event_timer
        timer = pop(watermark)
        while timer is not None:
            self._fire(timer, EVENT)
            timer = pop(watermark)

    def fire_processing_timers(self, now: int) -> None:
        ts_service = self.timer_service
        if ts_service is None:
            return
        timer = ts_service.pop_processing_timer(now)
        while timer is not None:
            self._fire(timer, PROCESSING)
            timer = ts_service.pop_processing_timer(now)

    def _fire(self, timer: tuple, domain: str) -> None:
        ts, key, namespace, kg = timer
        self.backend.set_current_key(key, kg)
        self._remember_key_group(key, kg)
        if namespace is not None or self.current_namespace is not None:
            self.backend.set_current_namespace(namespace)
            self.current_namespace = namespace
        ctx = self.ctx
        ctx._ts, ctx._domain = ts, domain
        try:
            self.on_timer(ts, ctx)
        finally:
            ctx._domain = None

    def on_timer(self, ts: int, ctx: Any) -> None:
        raise JobError(f"operator {self.name!r} registered a timer but has no on_timer")

    def ensure_backend(self, key: Any) -> None:
        """Create the backend with the key type inferred from `key`, then open the function."""
        from statekit.runtime.keys import infer_key_type

        key_type = self.transformation.shared.get("key_type")
        if key_type is None:
            key_type = infer_key_type(key)
            self.transformation.shared["key_type"] = key_type
        self.setup_keyed(key_type)
        StreamOperator.initialize(self, self._pending_restore)  # type: ignore[arg-type]
        self._pending_restore = None

    def initialize(self, restore: Any | None) -> None:
        key_type = self.transformation.key_type
        if restore is not None and restore.key_type is not None:
            if key_type is not None and key_type != restore.key_type:
                from statekit.errors import RestoreError
                from statekit.types import to_ddl

                raise RestoreError(
                    f"operator {self.name!r} is keyed by {to_ddl(key_type)} but its saved state is keyed by "
                    f"{to_ddl(restore.key_type)}; declare key_by(..., key_type={to_ddl(restore.key_type)!r}) or "
                    "re-key the savepoint offline"
                )
            key_type = restore.key_type
        if key_type is None:
            key_type = self.transformation.shared.get("key_type")
        if key_type is None:
            self._pending_restore = restore  # opened on the first key
            return
        self.setup_keyed(key_type)
        if restore is not None:
            if restore.keyed_tables:
                self.backend.restore(restore.keyed_tables, restore.keyed_infos)
            if restore.timers:
                self.timers.restore(restore.timers)
        StreamOperator.initialize(self, restore)  # type: ignore[arg-type]

    def set_key(self, key: Any, kg: int) -> None:
        if self.backend is None:
            self.ensure_backend(key)
        self.backend.set_current_key(key, kg)


__all__ = ["KeyedOperatorMixin", "StreamOperator", "SubtaskSnapshot", "method_or_callable"]


def _restore_type_error(transformation: Any, exc: StateTypeError) -> RestoreError:
    """A state declared with another kind or type than the savepoint holds: restarting cannot fix it, a
    migration of the savepoint can (the message names the operator by uid and the commands)."""
    uid = transformation.uid
    who = f"operator uid {uid!r}" if uid else f"operator {transformation.name!r} (no uid)"
    op = uid or "<uid>"
    return RestoreError(
        f"{who} cannot restore its state: {exc} Restarting will not help; migrate the savepoint offline "
        f"first: `statekit rm-state SAVEPOINT NEW --uid {op} --state <name> --apply` drops the state (the job "
        "starts it empty), or read it (statekit.sql / SavepointReader), convert it, and write it in the new type "
        f"(`statekit set`, `statekit bootstrap`, SavepointWriter.with_operator), then restore from NEW."
    )

