"""DataStream, KeyedStream and ConnectedStreams: PyFlink's stream-building API over the job graph."""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from statekit.errors import InvalidArgumentError
from statekit.runtime.graph import Edge, OutputTag, Transformation
from statekit.runtime.keys import normalise_key_type
from statekit.runtime.sinks import (
    Collector,
    CollectSinkOperator,
    FileSink,
    FileSinkOperator,
    PrintSinkOperator,
    SinkOperator,
)
from statekit.runtime.stream_ops import (
    KeyedOneInputOperator,
    KeyedProcessOperator,
    KeyedTwoInputOperator,
    MapWithStateOperator,
    OneInputOperator,
    ReduceOperator,
    TimestampsAndWatermarksOperator,
    TwoInputOperator,
    UnionOperator,
)


class DataStream:
    """A stream of elements produced by one transformation."""

    def __init__(self, env: Any, transformation: Transformation) -> None:
        self._env = env
        self._t = transformation

    # -- operator settings (apply to the operator that produces this stream) ---------------------------
    def uid(self, uid: str) -> "DataStream":
        """Set the operator's uid: its state is matched to savepoints by the uid's hash."""
        self._t.set_uid(uid)
        return self

    def set_uid_hash(self, uid_hash: str) -> "DataStream":
        """Identify the operator by an explicit uid hash (Flink's ``setUidHash``), e.g. one read from a savepoint.

        The explicit hash wins over ``uid(...)``: the operator's state is written under it and
        restored from it; a uid set as well only names the operator.
        """
        from statekit.identifiers import OperatorIdentifier

        self._t.explicit_id = OperatorIdentifier.for_uid_hash(uid_hash)
        return self

    def name(self, name: str) -> "DataStream":
        self._t.name = str(name)
        return self

    def get_name(self) -> str:
        return self._t.name

    def get_uid(self) -> str | None:
        return self._t.uid

    def set_parallelism(self, parallelism: int) -> "DataStream":
        self._t.set_parallelism(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._t.effective_parallelism(self._env.get_parallelism())

    def set_max_parallelism(self, max_parallelism: int) -> "DataStream":
        self._t.set_max_parallelism(max_parallelism)
        return self

    # -- transformations ------------------------------------------------------------------------------
    def _edge(self) -> Edge:
        return Edge(self._t, "forward")

    def _derive(self, transformation: Transformation) -> "DataStream":
        """The stream `transformation` (an operator added after this stream) produces, in this stream's job."""
        return DataStream(self._env, transformation)

    def _one(self, kind: str, fn: Any, name: str, cls: type = OneInputOperator, **options: Any) -> "DataStream":
        t = self._env._add(kind, name, fn, [self._edge()], cls, options=options)
        return DataStream(self._env, t)

    def map(self, func: Any, output_type: Any = None) -> "DataStream":
        """One output per element: a `MapFunction` or a callable."""
        return self._one("map", func, "Map")

    def flat_map(self, func: Any, output_type: Any = None) -> "DataStream":
        """Any number of outputs per element: ``flat_map`` yields them."""
        return self._one("flat_map", func, "FlatMap")

    def filter(self, func: Any) -> "DataStream":
        """Keep elements for which ``func`` is true."""
        return self._one("filter", func, "Filter")

    def process(self, func: Any, output_type: Any = None) -> "DataStream":
        """A `ProcessFunction` over each element (no keyed state: call `key_by` first for that)."""
        return self._one("process", func, "Process")

    def assign_timestamps_and_watermarks(self, watermark_strategy: Any) -> "DataStream":
        """Stamp elements with event time and generate watermarks downstream of here."""
        return self._one("timestamps", None, "Timestamps/Watermarks", TimestampsAndWatermarksOperator, strategy=watermark_strategy)

    def key_by(self, key_selector: Any, key_type: Any = None) -> "KeyedStream":
        """Partition by key: elements go to the subtask owning their key group, as in Flink.

        ``key_type`` (DDL, pyarrow, ``Types.*()``) decides how keys hash and are stored; without
        it the type is inferred from the keys (int → bigint, str → string, tuple → struct).
        """
        return KeyedStream(self._env, self._t, key_selector, normalise_key_type(key_type))

    def get_side_output(self, output_tag: OutputTag) -> "DataStream":
        """The elements this operator sent to the side output `output_tag` (e.g. ``side_output_late_data``)."""
        if not isinstance(output_tag, OutputTag):
            raise InvalidArgumentError(f"get_side_output(...) needs an OutputTag, got {output_tag!r}")
        t = self._env._add(
            "side_output", f"SideOutput({output_tag.tag_id})", None,
            [Edge(self._t, "forward", side=output_tag.tag_id)], UnionOperator,
        )
        t.parallelism, t.default_parallelism = self._t.parallelism, self._t.default_parallelism
        return DataStream(self._env, t)

    def window_all(self, window_assigner: Any) -> Any:
        """Windows over the whole (non-keyed) stream, evaluated in one subtask: an all-windowed `WindowedStream`.

        Its `process` takes a `ProcessAllWindowFunction` (``process(context, elements)``).
        """
        from statekit.runtime.windows import WindowedStream

        ws = WindowedStream(KeyedStream(self._env, self._t, _all_key, pa.int32()), window_assigner)
        ws._all = True
        return ws

    def count_window_all(self, size: int, slide: int | None = None) -> Any:
        """Windows of `size` elements of the whole stream (sliding by `slide` elements when given)."""
        from statekit.runtime.window_evictors import CountEvictor
        from statekit.windowing import CountTrigger, GlobalWindows, PurgingTrigger

        windows = self.window_all(GlobalWindows.create())
        if slide is None:
            return windows.trigger(PurgingTrigger.of(CountTrigger.of(size)))
        return windows.evictor(CountEvictor.of(size)).trigger(CountTrigger.of(slide))

    def rebalance(self) -> "DataStream":
        """Round-robin the elements to the next operator."""
        return _Partitioned(self._env, self._t, "rebalance")

    def forward(self) -> "DataStream":
        return _Partitioned(self._env, self._t, "forward")

    def broadcast(self, *broadcast_state_descriptors: Any) -> Any:
        """Send every element to every subtask of the next operator.

        With `MapStateDescriptor`s it returns a `BroadcastStream` for the broadcast state pattern:
        ``stream.connect(rules.broadcast(desc)).process(KeyedBroadcastProcessFunction)``.
        """
        if not broadcast_state_descriptors:
            return _Partitioned(self._env, self._t, "broadcast")
        from statekit.runtime.broadcast import BroadcastStream

        return BroadcastStream(self, broadcast_state_descriptors)

    def union(self, *streams: "DataStream") -> "DataStream":
        """One stream of the elements of this and `streams` (same element type, any parallelism)."""
        inputs = [self._edge()] + [s._edge() for s in streams]
        for e in inputs:
            if e.partition == "hash":  # a union of keyed streams is no longer keyed, as in Flink
                e.partition = "forward"
        t = self._env._add("union", "Union", None, inputs, UnionOperator)
        return DataStream(self._env, t)

    def connect(self, other: Any) -> Any:
        """Two inputs into one operator (`CoMapFunction`, `CoFlatMapFunction`, `KeyedCoProcessFunction`).

        Connected with a `BroadcastStream`, it is processed by a (Keyed)`BroadcastProcessFunction`.
        """
        from statekit.runtime.broadcast import BroadcastConnectedStream, BroadcastStream

        if isinstance(other, BroadcastStream):
            return BroadcastConnectedStream(self._env, self, other)
        return ConnectedStreams(self._env, self, other)

    # -- sinks ----------------------------------------------------------------------------------------
    def add_sink(self, sink_func: Any) -> "DataStreamSink":
        """A `SinkFunction` (or callable) receives every element. At-least-once across failures."""
        t = self._env._add("sink", "Sink", sink_func, [self._edge()], SinkOperator)
        return DataStreamSink(self._env, t)

    def sink_to(self, sink: Any) -> "DataStreamSink":
        """A `FileSink`: exactly-once files committed on checkpoint completion."""
        if not isinstance(sink, FileSink):
            return self.add_sink(sink)
        t = self._env._add("file_sink", "FileSink", sink, [self._edge()], FileSinkOperator)
        return DataStreamSink(self._env, t)

    def print(self, sink_identifier: str | None = None) -> "DataStreamSink":
        """Print every element to stdout. At-least-once: replayed elements print again after a failure."""
        t = self._env._add("print", "Print", None, [self._edge()], PrintSinkOperator, options={"prefix": sink_identifier})
        return DataStreamSink(self._env, t)

    def execute_and_collect(
        self,
        job_name: str | None = None,
        limit: int | None = None,
        *,
        restore_from: Any = None,
        final_savepoint: Any = None,
        allow_non_restored_state: bool = False,
        trust_pickled: bool = False,
        job_execution_name: str | None = None,
    ) -> "CollectResult":
        """Run the job and return this stream's elements (exactly once, also across restarts).

        ``job_execution_name`` is PyFlink's name for `job_name`.

        Takes the same `restore_from` / `final_savepoint` options as
        `StreamExecutionEnvironment.execute`.
        """
        collector = Collector()
        t = self._env._add(
            "collect", "Collect", None, [self._edge()], CollectSinkOperator,
            options={"collector": collector, "non_parallel": True}, default_parallelism=1,
        )
        try:
            result = self._env.execute(
                job_name or job_execution_name or "collect",
                restore_from=restore_from,
                final_savepoint=final_savepoint,
                allow_non_restored_state=allow_non_restored_state,
                trust_pickled=trust_pickled,
            )
        finally:
            self._env._transformations.remove(t)
        items = collector.committed if limit is None else collector.committed[:limit]
        return CollectResult(items, result)


class _Partitioned(DataStream):
    """A stream whose next operator reads it with an explicit partitioning."""

    def __init__(self, env: Any, t: Transformation, partition: str) -> None:
        super().__init__(env, t)
        self._partition = partition

    def _edge(self) -> Edge:
        return Edge(self._t, self._partition)


class KeyedStream(DataStream):
    """A stream partitioned by key: operators on it get keyed state and timers."""

    def __init__(self, env: Any, t: Transformation, key_selector: Any, key_type: Any) -> None:
        super().__init__(env, t)
        if key_selector is None:
            raise InvalidArgumentError("key_by needs a key selector (a callable or a KeySelector)")
        self._selector = key_selector
        self._key_type = key_type

    def _edge(self, index: int = 0) -> Edge:
        return Edge(self._t, "hash", self._selector, self._key_type, index)

    def _keyed(self, kind: str, fn: Any, name: str, cls: type = KeyedOneInputOperator, **options: Any) -> DataStream:
        t = self._env._add(kind, name, fn, [self._edge()], cls, keyed=True, key_type=self._key_type, options=options)
        return DataStream(self._env, t)

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._keyed("map", func, "Map")

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        return self._keyed("flat_map", func, "FlatMap")

    def filter(self, func: Any) -> DataStream:
        return self._keyed("filter", func, "Filter")

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        """A `KeyedProcessFunction`: keyed state, timers, ``on_timer``."""
        return self._keyed("process", func, "KeyedProcess", KeyedProcessOperator)

    def reduce(self, func: Any, output_type: Any = None) -> DataStream:
        """Running reduce per key. ``output_type`` declares the stored value's type.

        PyFlink needs no type here because it pickles; statekit stores state natively, so pass
        ``output_type`` (e.g. ``Types.TUPLE([Types.STRING(), Types.LONG()])``) or
        ``statekit.PICKLED`` to opt in to pickling.
        """
        if output_type is None:
            raise InvalidArgumentError(
                "reduce(...) stores its running value as keyed state and needs its type: pass output_type= "
                "(a DDL string, pyarrow type or Types.*()), or output_type=statekit.PICKLED to pickle it"
            )
        return self._keyed("reduce", func, "Reduce", ReduceOperator, state_type=output_type)

    def map_with_state(
        self, func: Callable[[Any, Any], tuple[Any, Any]], state_type: Any, *, default: Any = None, state_name: str = "state"
    ) -> DataStream:
        """``func(value, state) -> (output, new_state)`` with one ValueState per key.

        A ``new_state`` of None clears the key's state; an ``output`` of None emits nothing. The
        fast path for the common "one value per key" job.

        Examples
        --------
        >>> from statekit.runtime import StreamExecutionEnvironment
        >>> words = StreamExecutionEnvironment().from_collection(["a", "b", "a"]).key_by(lambda w: w, key_type="string")
        >>> words.map_with_state(lambda w, n: ((w, (n or 0) + 1), (n or 0) + 1), "bigint").execute_and_collect()
        [('a', 1), ('b', 1), ('a', 2)]
        """
        return self._keyed(
            "map_with_state", func, "MapWithState", MapWithStateOperator,
            state_type=state_type, default=default, state_name=state_name,
        )

    def window(self, window_assigner: Any) -> Any:
        """Group each key's elements into windows (`TumblingEventTimeWindows.of(1000)`, ...): a `WindowedStream`."""
        from statekit.runtime.windows import WindowedStream

        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int | None = None) -> Any:
        """Windows of `size` elements per key (a global window with a purging count trigger); with
        `slide`, the last `size` elements every `slide` elements (count evictor + count trigger)."""
        from statekit.runtime.windows import count_window

        return count_window(self, size, slide)

    def key_by(self, key_selector: Any, key_type: Any = None) -> "KeyedStream":
        raise InvalidArgumentError("the stream is already keyed; key_by the stream it came from instead")


def _all_key(value: Any) -> int:
    """The key of every element of an all-windowed stream (`DataStream.window_all`): one key, one subtask."""
    return 0


class ConnectedStreams:
    """Two streams feeding one operator; keyed when both sides are keyed (`key_by` here or before)."""

    def __init__(self, env: Any, first: DataStream, second: DataStream) -> None:
        self._env = env
        self.first, self.second = first, second

    @property
    def _is_keyed(self) -> bool:
        return isinstance(self.first, KeyedStream) and isinstance(self.second, KeyedStream)

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None) -> "ConnectedStreams":
        """Key both inputs; elements with equal keys meet in the same subtask and keyed state."""
        kt = normalise_key_type(key_type)
        return ConnectedStreams(
            self._env,
            KeyedStream(self._env, self.first._t, key_selector1, kt),
            KeyedStream(self._env, self.second._t, key_selector2, kt),
        )

    def _op(self, kind: str, fn: Any, name: str) -> DataStream:
        if isinstance(self.first, KeyedStream) != isinstance(self.second, KeyedStream):
            raise InvalidArgumentError("connect a keyed stream only with another keyed stream (or key_by both sides)")
        first, second = self.first, self.second
        if isinstance(first, KeyedStream) and isinstance(second, KeyedStream):
            kt1, kt2 = first._key_type, second._key_type
            if kt1 is not None and kt2 is not None and kt1 != kt2:
                raise InvalidArgumentError(f"connected keyed streams must share a key type, got {kt1} and {kt2}")
            edges = [first._edge(0), second._edge(1)]
            t = self._env._add(kind, name, fn, edges, KeyedTwoInputOperator, keyed=True, key_type=kt1 or kt2)
        else:
            e1, e2 = self.first._edge(), self.second._edge()
            e2.input_index = 1
            t = self._env._add(kind, name, fn, [e1, e2], TwoInputOperator)
        return DataStream(self._env, t)

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        """A `CoMapFunction`: ``map1`` / ``map2``."""
        return self._op("co_map", func, "CoMap")

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        """A `CoFlatMapFunction`: ``flat_map1`` / ``flat_map2`` yield outputs."""
        return self._op("co_flat_map", func, "CoFlatMap")

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        """A `KeyedCoProcessFunction` (keyed) or `CoProcessFunction`."""
        return self._op("co_process", func, "CoProcess")


class DataStreamSink:
    """The end of a stream; carries the sink operator's uid, name and parallelism."""

    def __init__(self, env: Any, t: Transformation) -> None:
        self._env = env
        self._t = t

    def uid(self, uid: str) -> "DataStreamSink":
        self._t.set_uid(uid)
        return self

    def name(self, name: str) -> "DataStreamSink":
        self._t.name = str(name)
        return self

    def set_parallelism(self, parallelism: int) -> "DataStreamSink":
        self._t.set_parallelism(parallelism)
        return self


class CollectResult(list):
    """The elements of ``execute_and_collect``: a list that is also a context manager (PyFlink's iterator)."""

    def __init__(self, items: list[Any], job_result: Any) -> None:
        super().__init__(items)
        self.job_execution_result = job_result

    def __enter__(self) -> "CollectResult":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def close(self) -> None:
        return None


__all__ = ["OutputTag", "CollectResult", "ConnectedStreams", "DataStream", "DataStreamSink", "KeyedStream"]
