"""Window bootstrap: pending event-time windows built from a DataFrame, laid out as the runtime's window operator keeps them.

``OperatorTransformation.bootstrap_with(df).key_by("user").window(TumblingEventTimeWindows.of(60_000),
timestamp="ts").aggregate(ClickCounter(), accumulator_type="bigint")`` assigns every row to its
windows with the job's assigner and adds it to keyed state ``window-contents`` under the window's
namespace (reducing, aggregating or list state, as the job's ``reduce``/``aggregate``/``process``
keeps it) and registers each window's cleanup timer. Restored into a job with the same window
definition (Flink's rule: assigner, trigger and function must match), the windows fire when the
watermark passes them, holding the bootstrapped elements and the new ones alike.

With an evictor (``.window(...).evictor(CountEvictor.of(n))``, `TimeEvictor`, custom ones) the job's
window operator is Flink's evicting one: it buffers every element with its timestamp whatever the
function (``window-contents`` list state plus ``window-timestamps``), and the evictor and function
run when the window fires; the bootstrap writes that buffer, so a restored job evicts and
reduces/aggregates/processes the bootstrapped and live elements together.

Bootstrap supports event-time assigners (tumbling, sliding and session windows, each key's elements
merged into sessions as the operator's merging window set would, the active sessions in map state
``session-windows``) and `GlobalWindows`. Processing-time assigners are refused: their windows depend
on the wall clock at bootstrap.

With the job's trigger (``.window(...).trigger(CountTrigger.of(100))``, `PurgingTrigger`,
`ContinuousEventTimeTrigger`, `EventTimeTrigger`, `ProcessingTimeTrigger` or a custom `Trigger`),
each key's history is replayed through it in timestamp order as the job's window operator would see
it (`statekit.spark.window_replay`): the trigger's own state and the timers it registered are written
with the windows, a window whose trigger purged it keeps only what came after, and a FIRE emits
nothing (as Flink's bootstrap, whose output is discarded). The trigger's states are discovered in
the Spark tasks, as a bootstrap function's are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampNTZType, TimestampType

from statekit.errors import InvalidArgumentError
from statekit.format.keyed import CONTENTS, NAMESPACE_ARROW, NAMESPACE_TYPE, NO_TIMESTAMP, SESSIONS, TIMESTAMPS
from statekit.format.values import python_converter
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import SavepointBuilder
from statekit.spark import bootstrap_tasks as B
from statekit.spark import parts as P
from statekit.spark.reader_function import no_gc
from statekit.spark.window_replay import WindowReplay
from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    KeyedStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateInfo,
)
from statekit.state.functions import AggregateFunction, as_reduce_function
from statekit.types import parse_ddl, to_arrow_array, to_ddl
from statekit.windowing import GlobalWindows, TimeWindow, Trigger, WindowAssigner, cleanup_time

if TYPE_CHECKING:
    from statekit.spark.bootstrap import KeyedOperatorTransformation

__all__ = ["WindowedBootstrap"]

_TS = "__statekit_ts"


class WindowedBootstrap:
    """`KeyedOperatorTransformation.window(...)`: finish with `reduce`, `aggregate` or `process`."""

    def __init__(self, keyed: KeyedOperatorTransformation, assigner: WindowAssigner, timestamp: str | None,
                 allowed_lateness: int) -> None:  # fmt: skip
        if not isinstance(assigner, WindowAssigner):
            raise InvalidArgumentError(f"window(...) needs a WindowAssigner, got {assigner!r}.")
        if not assigner.is_event_time() and not isinstance(assigner, GlobalWindows):
            raise InvalidArgumentError(
                f"{type(assigner).__name__} assigns windows by the wall clock; bootstrap builds event-time windows "
                "from a timestamp column (use the event-time assigner of the same size)."
            )
        df = keyed.source.df
        if timestamp is None and assigner.is_event_time():
            raise InvalidArgumentError(f"{type(assigner).__name__} needs each row's event time: pass window(timestamp=column).")
        if timestamp is not None and timestamp not in df.columns:
            raise InvalidArgumentError(f"window(timestamp={timestamp!r}): no such column; the DataFrame has {df.columns}.")
        if allowed_lateness < 0:
            raise InvalidArgumentError(f"allowed_lateness must be >= 0 ms, got {allowed_lateness}.")
        self.keyed = keyed
        self.assigner = assigner
        self.timestamp = timestamp
        self.allowed_lateness = allowed_lateness
        self._evictor: Any = None
        self._trigger: Trigger | None = None

    def trigger(self, trigger: Trigger) -> "WindowedBootstrap":
        """The job's trigger (`CountTrigger`, `PurgingTrigger`, `ContinuousEventTimeTrigger`, a custom
        `Trigger`): the history is replayed through it, and its state and timers are written with the
        windows (`statekit.spark.window_replay`)."""
        if not isinstance(trigger, Trigger):
            raise InvalidArgumentError(f"trigger(...) needs a Trigger such as CountTrigger.of(10), got {trigger!r}.")
        if self.assigner.is_merging() and not trigger.can_merge():
            raise InvalidArgumentError(
                f"trigger {type(trigger).__name__} cannot merge session windows (can_merge() is False); the job "
                "would refuse it too. Use a trigger that can merge."
            )
        self._trigger = trigger
        return self

    def evictor(self, evictor: Any) -> "WindowedBootstrap":
        """The job's evictor (`CountEvictor`, `TimeEvictor`, a custom one): the windows then buffer every
        element with its timestamp, as Flink's evicting window operator does (``aggregate`` then stores
        elements of the DataFrame's type, or ``element_type=``). The evictor itself runs in the restored job,
        when a window fires."""
        if not (callable(getattr(evictor, "evict_before", None)) and callable(getattr(evictor, "evict_after", None))):
            raise InvalidArgumentError(f"evictor(...) needs an Evictor such as CountEvictor.of(10), got {evictor!r}.")
        self._evictor = evictor
        return self

    def _element_type(self, value: str | Callable[[Any], Any] | None, declared: Any, what: str) -> str:
        """The stored element type: as declared, else the DataFrame's (a column's type, or the row's struct).

        Flink's bootstrap takes it from the DataStream's type; here the DataFrame's schema plays that part.
        Only an element computed by a function of the row has no schema to come from."""
        if declared is not None:
            return to_ddl(declared)
        if callable(value):
            raise InvalidArgumentError(
                f"{what} needs the stored type when value= is a function: pass the job's type (a DDL string).")
        from pyspark.sql.pandas.types import to_arrow_type

        schema = self.keyed.source.df.schema
        if isinstance(value, str):
            if value not in schema.names:
                raise InvalidArgumentError(f"value={value!r}: no such column; the DataFrame has {schema.names}.")
            return to_ddl(to_arrow_type(schema[value].dataType))
        return to_ddl(to_arrow_type(schema))  # value=None: the element is the whole row

    def reduce(self, reduce_function: Any, *, value: str | Callable[[Any], Any] | None = None,
               output_type: Any = None) -> B.BootstrapTransformation:  # fmt: skip
        """Reduce each window's elements as the job's ``window(...).reduce(fn, output_type=...)`` does.

        An element is column `value` of a row, `value(row)`, or the row itself (None); `output_type`
        defaults to the column's type.
        """
        state_type = self._element_type(value, output_type, "reduce(output_type=)")
        if self._evictor is not None:
            return self._finish(ListStateDescriptor(CONTENTS, state_type), value)
        desc = ReducingStateDescriptor(CONTENTS, as_reduce_function(reduce_function), state_type)
        return self._finish(desc, value)

    def aggregate(self, aggregate_function: AggregateFunction, *, accumulator_type: Any,
                  value: str | Callable[[Any], Any] | None = None,
                  element_type: Any = None) -> B.BootstrapTransformation:  # fmt: skip
        """Aggregate each window as the job's ``window(...).aggregate(fn, accumulator_type=...)`` does.

        With an evictor the elements are buffered: their type is the `value` column's, the row's struct
        (`value` None), or `element_type` where given (needed only when `value` is a function)."""
        if not isinstance(aggregate_function, AggregateFunction):
            raise InvalidArgumentError(f"aggregate(...) needs an AggregateFunction, got {aggregate_function!r}.")
        if self._evictor is not None:
            etype = self._element_type(value, element_type, "with an evictor, aggregate(element_type=)")
            return self._finish(ListStateDescriptor(CONTENTS, etype), value)
        desc = AggregatingStateDescriptor(CONTENTS, aggregate_function, to_ddl(accumulator_type))
        return self._finish(desc, value)

    def process(self, *, value: str | Callable[[Any], Any] | None = None,
                element_type: Any = None) -> B.BootstrapTransformation:  # fmt: skip
        """Buffer each window's elements as the job's ``window(...).process(fn, element_type=...)`` does."""
        desc = ListStateDescriptor(CONTENTS, self._element_type(value, element_type, "process(element_type=)"))
        return self._finish(desc, value)

    def apply(self, *, value: str | Callable[[Any], Any] | None = None,
              element_type: Any = None) -> B.BootstrapTransformation:  # fmt: skip
        """As `process`, for a job whose window uses ``apply(WindowFunction)`` (the same buffered state)."""
        return self.process(value=value, element_type=element_type)

    def _finish(self, desc: KeyedStateDescriptor, value: str | Callable[[Any], Any] | None) -> B.BootstrapTransformation:
        parse_ddl(desc.info().type)  # a bad type fails here, not in a Spark task
        if isinstance(value, str) and value not in self.keyed.source.df.columns:
            raise InvalidArgumentError(f"value={value!r}: no such column; the DataFrame has {self.keyed.source.df.columns}.")
        if value is not None and not isinstance(value, str) and not callable(value):
            raise InvalidArgumentError(f"value= takes a column name or a function of the row, not {value!r}.")
        stamps = ListStateDescriptor(TIMESTAMPS, "bigint") if self._evictor is not None else None
        infos: tuple[StateInfo, ...] = (desc.info(),) if stamps is None else (desc.info(), stamps.info())
        if self.assigner.is_merging():  # session windows: the active windows per key, as the operator keeps them
            infos += (MapStateDescriptor(SESSIONS, "bigint", "bigint").info(),)
        trigger = self._trigger
        if trigger is None and isinstance(self.assigner, GlobalWindows):
            trigger = self.assigner.get_default_trigger()  # fires never: elements are only kept
        if trigger is not None:  # the trigger's states are known once it runs: discovered in the tasks
            return B.BootstrapTransformation(lambda *a: _write_windows(self, desc, value, infos, stamps, *a,
                                                                       trigger=trigger), None)  # fmt: skip
        return B.BootstrapTransformation(lambda *a: _write_windows(self, desc, value, infos, stamps, *a), infos)


def _write_windows(w: WindowedBootstrap, desc: KeyedStateDescriptor, value: Any, infos: Any,
                   stamps_desc: ListStateDescriptor | None, builder: SavepointBuilder, ident: OperatorIdentifier,
                   max_parallelism: int, *, trigger: Trigger | None = None) -> None:  # fmt: skip
    t = w.keyed
    df, key_type = t.source.df, t.key_type
    if w.timestamp is None:  # global windows without event time: elements carry no timestamp
        millis = F.lit(None).cast("bigint")
    else:
        ts_col = df.schema[w.timestamp]
        millis = F.unix_millis(F.col(w.timestamp)) if isinstance(ts_col.dataType, (TimestampType, TimestampNTZType)) \
            else F.col(w.timestamp).cast("bigint")  # fmt: skip
    df = df.withColumn(_TS, millis)
    keyed, key_col = B.keyed_frame(df, t.key, key_type)
    # The task closure must not hold `w`: it reaches the DataFrame, which cannot be shipped to executors.
    assigner, lateness, ts_name, evictor = w.assigner, w.allowed_lateness, w.timestamp, w._evictor
    arrow_key = parse_ddl(key_type)
    to_key = python_converter(arrow_key, hashable=True)
    parallelism = B.parallelism_of(t.source, max_parallelism)

    merging = assigner.is_merging()

    def _add(backend: Any, contents: Any, stamp_state: Any, timers: set, key: Any, window: Any, element: Any,
             ts: int) -> None:  # fmt: skip
        backend.set_current_namespace(window)
        contents.add(element)
        if stamp_state is not None:  # evicting windows keep each element's timestamp beside it
            stamp_state.add(NO_TIMESTAMP if ts is None else ts)
        # the event-time trigger's timer (end of window) and the cleanup timer (plus allowed lateness)
        timers.add((key, window.start, window.end, window.max_timestamp()))
        timers.add((key, window.start, window.end, cleanup_time(window, lateness, True)))

    def _assign(batches: Iterable[pa.RecordBatch], backend: Any, contents: Any, stamp_state: Any, timers: set,
                pending: dict) -> None:  # fmt: skip
        for batch in batches:
            keys = batch.column(key_col).to_pylist()
            stamps = batch.column(_TS).to_pylist()
            for k, ts, row in zip(keys, stamps, B.rows_of(batch, (B.KEY_COLUMN, _TS, P.KEY_GROUP))):
                if ts is None and ts_name is not None:
                    raise InvalidArgumentError(f"row {row} has a null {ts_name!r}: every element needs a timestamp.")
                element = row if value is None else row[value] if isinstance(value, str) else value(row)
                key = k if to_key is None else to_key(k)  # hashable (struct keys become tuples)
                if merging or trigger is not None:  # replayed per key once every element of the key is seen
                    pending.setdefault(key, []).append((ts, element))
                    continue
                backend.set_current_key(key, -1)
                for window in assigner.assign_windows(element, ts, None):
                    _add(backend, contents, stamp_state, timers, key, window, element, ts)

    def _sessions(backend: Any, contents: Any, stamp_state: Any, timers: set, pending: dict) -> None:
        """Each key's session windows as the operator would hold them after seeing its elements: windows
        that overlap or touch merged (Flink's MergingWindowSet), elements in timestamp order."""
        sessions = backend.get_state(MapStateDescriptor(SESSIONS, "bigint", "bigint"))
        for key, elements in pending.items():
            backend.set_current_key(key, -1)
            elements.sort(key=lambda e: e[0])
            merged: list[list] = []  # [window, [(ts, element), ...]]
            for ts, element in elements:
                for window in assigner.assign_windows(element, ts, None):
                    if merged and merged[-1][0].intersects(window):
                        merged[-1][0] = merged[-1][0].cover(window)
                        merged[-1][1].append((ts, element))
                    else:
                        merged.append([TimeWindow(window.start, window.end), [(ts, element)]])
            for window, members in merged:
                for ts, element in members:
                    _add(backend, contents, stamp_state, timers, key, window, element, ts)
                backend.set_current_namespace(None)
                sessions.put(window.start, window.end)

    def _timers(timers: Any) -> pa.Table | None:
        if not timers:
            return None
        k, starts, ends, ts, domains = zip(*timers)  # the part writer orders timers by key group
        return pa.table({
            "key": to_arrow_array(list(k), arrow_key, what="timer key"),
            "namespace": pa.array([{"start": s, "end": e} for s, e in zip(starts, ends)], NAMESPACE_ARROW),
            "timestamp": pa.array(ts, pa.int64()),
            "domain": pa.array(domains, pa.string()),
        })  # fmt: skip

    def bootstrap(batches: Iterable[pa.RecordBatch]) -> tuple[pa.Table | None, pa.Table | None]:
        backend = B.task_backend(key_type, max_parallelism)
        contents = backend.get_state(desc)
        stamps = backend.get_state(stamps_desc) if stamps_desc is not None else None
        timers: set[tuple] = set()
        pending: dict[Any, list] = {}
        with no_gc():
            _assign(batches, backend, contents, stamps, timers, pending)
            if merging:
                _sessions(backend, contents, stamps, timers, pending)
        table = backend.snapshot(0).table()
        return (table if table.num_rows else None), _timers([(*t, "event") for t in timers])

    def replayed(batches: Iterable[pa.RecordBatch]) -> tuple[pa.Table | None, pa.Table | None, Any]:
        backend = B.task_backend(key_type, max_parallelism)
        contents = backend.get_state(desc)
        stamps = backend.get_state(stamps_desc) if stamps_desc is not None else None
        replay = WindowReplay(backend, contents, stamps, assigner, trigger, evictor, lateness)
        pending: dict[Any, list] = {}
        with no_gc():
            _assign(batches, backend, contents, stamps, set(), pending)
            for key, elements in pending.items():
                if ts_name is not None:  # Spark gives no row order: each key's history in event-time order
                    elements.sort(key=lambda e: e[0])
                replay.add(key, elements)
        table = backend.snapshot(0).table()
        return (table if table.num_rows else None), _timers(list(replay.timers)), backend.state_infos()

    writer = builder.add_operator(ident, name="WindowBootstrap", parallelism=parallelism,
                                  max_parallelism=max_parallelism, key_type=key_type,
                                  keyed_states=infos if trigger is None else (), namespace_type=NAMESPACE_TYPE)  # fmt: skip
    if trigger is not None:
        B.write_discovered(keyed, key_col, builder, writer, replayed)
        return
    writer.add_files(P.write_keyed_parts(keyed, key_col, B.part_plan(keyed, builder, writer), bootstrap))
