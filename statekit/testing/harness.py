"""Operator test harnesses (Flink's ``KeyedOneInputStreamOperatorTestHarness``) over the runtime's real operators.

A harness builds one operator with the real `StreamExecutionEnvironment` API, instantiates the
runtime's own operator class for it (one subtask) and lets a test drive it by hand: elements with
timestamps, watermarks, processing time on a `ManualClock`. Output, side outputs and keyed state
are read back; ``snapshot(path)`` writes a real savepoint that a new harness (or a job, or
`statekit.savepoint.Savepoint`) restores with ``restore_from=path``.

>>> from statekit.runtime import KeyedProcessFunction
>>> from statekit.state.descriptors import ValueStateDescriptor
>>> class Count(KeyedProcessFunction):
...     def open(self, ctx):
...         self.n = ctx.get_state(ValueStateDescriptor("n", int))
...     def process_element(self, value, ctx):
...         self.n.update((self.n.value() or 0) + 1)
...         yield value, self.n.value()
>>> with ProcessFunctionTestHarnesses.for_keyed_process_function(Count(), lambda v: v, "string") as h:
...     h.process_element("a", 10); h.process_element("a", 11); h.process_element("b", 12)
...     h.extract_output_values(), sorted(h.keyed_state("n").items())
([('a', 1), ('a', 2), ('b', 1)], [('a', 2), ('b', 1)])
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from statekit.errors import InvalidArgumentError, StateAccessError
from statekit.runtime.checkpointing import OperatorSnapshot, write_snapshot
from statekit.runtime.clock import ManualClock
from statekit.runtime.datastream import DataStream, KeyedStream, OutputTag
from statekit.runtime.environment import StreamExecutionEnvironment
from statekit.runtime.keys import hash_router, selector_of
from statekit.runtime.restore import RestorePlan
from statekit.runtime.watermarks import MIN_WATERMARK

__all__ = [
    "KeyedOneInputStreamOperatorTestHarness",
    "OneInputStreamOperatorTestHarness",
    "ProcessFunctionTestHarnesses",
    "StreamRecord",
    "Watermark",
]

_CHANNEL = "harness-input"  # the one input channel whose watermarks the harness sets


@dataclass(frozen=True)
class StreamRecord:
    """One emitted element and its timestamp (None when the element had none)."""

    value: Any
    timestamp: int | None = None


@dataclass(frozen=True)
class Watermark:
    """A watermark the operator emitted downstream."""

    timestamp: int


class _HarnessJob:
    """The hooks an operator calls on the job running it (`statekit.runtime.job.Execution`'s), for one
    operator driven by hand: processing-time timers fire when the harness's clock is set."""

    attempt = 0

    def __init__(self, clock: ManualClock, backend_name: str, workdir: Path, trust_pickled: bool) -> None:
        self.clock = clock
        self.backend_name = backend_name
        self.parameters: dict[str, Any] = {}
        self.trust_pickled = trust_pickled
        self._workdir = workdir

    def backend_directory(self, op: Any) -> Path | None:
        if self.backend_name != "rocksdb":
            return None
        d = self._workdir / f"subtask-{op.subtask_index}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def native_snapshot_args(self, op: Any) -> dict[str, Any]:
        return {}  # harness snapshots are savepoints: canonical Parquet

    def on_processing_timer_registered(self, ts: int) -> None:
        return None  # set_processing_time fires what is due

    def register_timer_operator(self, op: Any) -> None:
        return None


class _SideOutputs:
    """``operator.side_outputs`` that collects every tag (the job wires only tags some stream reads)."""

    def __init__(self) -> None:
        self.records: dict[str, list[StreamRecord]] = {}

    def get(self, tag_id: str, default: Any = ()) -> list[Callable[[Any, Any], None]]:
        out = self.records.setdefault(tag_id, [])
        return [lambda value, ts: out.append(StreamRecord(value, ts))]


class OneInputStreamOperatorTestHarness:
    """One subtask of the operator that ``build(stream)`` adds to a stream, driven by hand.

    Parameters
    ----------
    build
        Adds the operator under test to the given input stream and returns its output stream, e.g.
        ``lambda s: s.process(MyProcessFunction())``. The harness drives the last operator added.
    state_backend
        ``"heap"`` (default) or ``"rocksdb"``; the RocksDB files live in a temporary directory.
    max_parallelism
        The operator's key-group count (Flink's default 128).
    restore_from
        A savepoint (from `snapshot` or any job) to restore the operator's state from; it is matched
        by the operator's uid (``uid=``) as in a job.
    uid
        The uid given to the operator when `build` gives none, so snapshots restore into the next harness.
    trust_pickled
        Allow restored pickled state to be unpickled (only for savepoints you wrote yourself).
    """

    def __init__(
        self,
        build: Callable[[DataStream], DataStream],
        *,
        state_backend: str = "heap",
        max_parallelism: int = 128,
        restore_from: str | Path | None = None,
        uid: str = "operator-under-test",
        trust_pickled: bool = False,
    ) -> None:
        self.clock = ManualClock(0)
        env = StreamExecutionEnvironment(
            parallelism=1, max_parallelism=max_parallelism, state_backend=state_backend, clock=self.clock
        )
        out = build(env.from_collection([]))
        if not isinstance(out, DataStream):
            raise InvalidArgumentError(f"build(stream) must return the operator's output stream, not {out!r}")
        t = out._t
        if t.uid is None and t.explicit_id is None:
            t.set_uid(uid)
        self.transformation = t
        self._workdir = Path(tempfile.mkdtemp(prefix="statekit-harness-"))
        self._job = _HarnessJob(self.clock, env.state_backend, self._workdir, trust_pickled)
        self.max_parallelism = max_parallelism
        self._restore: Any = None
        if restore_from is not None:
            plan = RestorePlan(restore_from, [t], allow_non_restored_state=False, trust_pickled=trust_pickled)
            shares = plan.for_operator(t, 1, max_parallelism)
            self._restore = shares[0] if shares else None
        op = t.operator_class(t, 0, 1, max_parallelism, self._job)
        op.input_watermarks[_CHANNEL] = MIN_WATERMARK
        self._output: list[StreamRecord | Watermark] = []
        self._side = _SideOutputs()
        op.emit = lambda value, ts: self._output.append(StreamRecord(value, ts))
        op.emit_watermark = lambda wm: self._output.append(Watermark(wm))
        op.side_outputs = self._side
        self.operator = op
        self._input = self._input_route()
        self._opened = False
        self._closed = False

    def _input_route(self) -> Callable[[Any, Any], None]:
        return self.operator.process

    # -- lifecycle ------------------------------------------------------------------------------------
    def open(self) -> None:
        """Restore state (with ``restore_from``) and open the function; done by the first element if not called."""
        if not self._opened:
            self._opened = True
            self.operator.initialize(self._restore)

    def close(self) -> None:
        """Close the function and the state backend and remove the harness's temporary files."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._opened:
                self.operator.close()
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> OneInputStreamOperatorTestHarness:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- input ----------------------------------------------------------------------------------------
    def process_element(self, value: Any, timestamp: int | None = None) -> None:
        """Hand one element (with its event timestamp) to the operator."""
        self.open()
        self._input(value, timestamp)

    def process_elements(self, values: list[Any], timestamp: int | None = None) -> None:
        """`process_element` for each of `values`, all with `timestamp`."""
        for v in values:
            self.process_element(v, timestamp)

    def process_watermark(self, timestamp: int) -> None:
        """Advance the input's watermark: due event-time timers and windows fire."""
        self.open()
        self.operator.process_watermark(int(timestamp), _CHANNEL)

    def set_processing_time(self, timestamp: int) -> None:
        """Move the processing-time clock to `timestamp` and fire the processing-time timers now due."""
        self.open()
        if timestamp < self.clock.now():
            raise InvalidArgumentError(f"processing time moves forward only: {timestamp} < {self.clock.now()}")
        self.clock.set(int(timestamp))
        fire = getattr(self.operator, "fire_processing_timers", None)
        if fire is not None:
            fire(self.clock.now())

    # -- output ---------------------------------------------------------------------------------------
    def get_output(self) -> list[StreamRecord | Watermark]:
        """Everything emitted so far, in order: `StreamRecord` elements and `Watermark` s."""
        return list(self._output)

    def get_records(self) -> list[StreamRecord]:
        """The emitted elements with their timestamps."""
        return [r for r in self._output if isinstance(r, StreamRecord)]

    def extract_output_values(self) -> list[Any]:
        """The emitted elements' values, in order (Flink's ``extractOutputValues``)."""
        return [r.value for r in self.get_records()]

    def get_side_output(self, tag: OutputTag) -> list[StreamRecord]:
        """What the operator sent to side output `tag` (e.g. a window's late elements)."""
        return list(self._side.records.get(tag.tag_id, []))

    def clear_output(self) -> None:
        """Forget the output collected so far (side outputs too)."""
        self._output.clear()
        self._side.records.clear()

    # -- snapshots ------------------------------------------------------------------------------------
    def snapshot(self, path: str | Path, *, checkpoint_id: int = 1) -> Path:
        """Write the operator's state (keyed state, timers, operator state) as a savepoint at `path`.

        The savepoint is an ordinary one: restore it with ``restore_from=path`` in a new harness or a
        job, or read it with `statekit.savepoint.Savepoint`.
        """
        self.open()
        t, op = self.transformation, self.operator
        snap = op.snapshot(checkpoint_id, self.clock.now())
        record = OperatorSnapshot(t.identifier, t.name, 1, self.max_parallelism, t.keyed, [snap])
        return write_snapshot(Path(path), checkpoint_id, "savepoint", "statekit-harness", [record])


class KeyedOneInputStreamOperatorTestHarness(OneInputStreamOperatorTestHarness):
    """A harness for an operator on a keyed stream: elements are keyed as a job keys them.

    ``build`` receives the `KeyedStream` (``key_by(key_selector, key_type)`` of the input) and adds the
    operator, e.g. ``lambda keyed: keyed.process(fn)`` or ``lambda keyed: keyed.window(...).reduce(...)``.
    """

    def __init__(
        self,
        build: Callable[[KeyedStream], DataStream],
        key_selector: Any,
        key_type: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(lambda s: build(s.key_by(key_selector, key_type=key_type)), **options)

    def _input_route(self) -> Callable[[Any, Any], None]:
        edge = self.transformation.inputs[0]
        key_type = edge.key_type
        if key_type is None and self._restore is not None:
            key_type = self._restore.key_type
        op = self.operator
        # The job's own router: key groups and the operator's key scope exactly as in a running job.
        return hash_router(selector_of(edge.key_selector), key_type, self.max_parallelism, [op.process_keyed], [op])

    # -- keyed state ----------------------------------------------------------------------------------
    def _keyed_rows(self) -> Iterator[dict[str, Any]]:
        backend = self.operator.backend
        if backend is None:
            return iter(())
        return iter(backend.snapshot(0).table().to_pylist())

    def keyed_state(self, name: str) -> dict[Any, Any]:
        """Per key, the value of keyed state `name` (keys without it left out); window state per (key, window)."""
        out: dict[Any, Any] = {}
        for row in self._keyed_rows():
            if name not in row:
                raise StateAccessError(f"the operator has no keyed state {name!r}; it has {sorted(set(row) - {'key', 'key_group', 'namespace'})}")
            if row[name] is None:
                continue
            key = row["key"] if row.get("namespace") is None else (row["key"], tuple(row["namespace"].values()))
            out[key] = row[name]
        return out

    def num_keyed_state_entries(self) -> int:
        """How many (key, namespace, state) entries are set (Flink's ``numKeyedStateEntries``)."""
        return sum(1 for row in self._keyed_rows() for k, v in row.items()
                   if k not in ("key", "key_group", "namespace") and v is not None)

    def timers(self) -> list[tuple[int, Any, str]]:
        """Registered timers as ``(timestamp, key, domain)``, domain ``event`` or ``processing``, by time."""
        ts = self.operator.timer_service
        if ts is None:
            return []
        return sorted((row[3], row[1], row[4]) for row in ts.snapshot())


class ProcessFunctionTestHarnesses:
    """Flink's ``ProcessFunctionTestHarnesses``: a ready harness for a process function."""

    @staticmethod
    def for_process_function(function: Any, **options: Any) -> OneInputStreamOperatorTestHarness:
        """A harness for a `ProcessFunction` on a non-keyed stream."""
        return OneInputStreamOperatorTestHarness(lambda s: s.process(function), **options)

    @staticmethod
    def for_keyed_process_function(
        function: Any, key_selector: Any, key_type: Any = None, **options: Any
    ) -> KeyedOneInputStreamOperatorTestHarness:
        """A harness for a `KeyedProcessFunction`, keyed by `key_selector` (of declared `key_type`)."""
        return KeyedOneInputStreamOperatorTestHarness(lambda k: k.process(function), key_selector, key_type, **options)
