"""`OperatorTransformation`: state bootstrapped from a Spark DataFrame (Flink's State Processor API, write side).

Three function kinds, as in Flink, plus a columnar fast path:

- `KeyedStateBootstrapFunction` (``bootstrap_with(df).key_by(col).transform(fn)``): rows are
  repartitioned by key, so each key's rows meet in one Spark task; every task runs the
  runtime's own heap backend (`HeapKeyedStateBackend`), so state handles behave exactly as in a
  live job. Timers registered through ``ctx.timer_service()`` are written with the state.
- ``bootstrap_with(df).key_by(col).columns(...)``: one row per key, one column per keyed state;
  no Python function per row.
- `StateBootstrapFunction`: operator list state (split or union); each Spark partition is a subtask.
- `BroadcastStateBootstrapFunction`: broadcast state, from all rows in one task.

Keyed state is written by the executors (`statekit.spark.parts`): rows are shuffled by key-group
range, each task builds its range's state and writes its Parquet files into the savepoint's staging
directory, and the driver only commits the manifest from the files' descriptions; nothing
proportional to the keyed state passes through the driver. Operator and broadcast state (small by
nature) still travel to the driver as Arrow IPC blobs.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Iterable, Iterator, TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from statekit.backends.heap import HeapKeyedStateBackend
from statekit.backends.operator import DefaultOperatorStateStore
from statekit.errors import InvalidArgumentError, StateAccessError, StateTypeError
from statekit.format.values import python_converter
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import SavepointBuilder
from statekit.spark import parts as P
from statekit.spark.bootstrap_tasks import (
    KEY_COLUMN,
    BootstrapTransformation,
    keyed_frame,
    parallelism_of,
    part_plan,
    rows_of,
    task_backend,
    write_discovered,
)
from statekit.spark.reader_function import no_gc
from statekit.spark.window_bootstrap import WindowedBootstrap
from statekit.state.descriptors import (
    AggregatingStateDescriptor,
    BroadcastStateDescriptor,
    KeyedStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statekit.state.handles import AggregatingState, ListState, MapState, ReducingState, ValueState
from statekit.types import parse_ddl, to_arrow_array, to_ddl

__all__ = [
    "BootstrapTransformation",
    "BroadcastStateBootstrapFunction",
    "KeyedStateBootstrapFunction",
    "OperatorTransformation",
    "StateBootstrapFunction",
]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")

#: Rows per Arrow IPC blob an executor sends back (keeps each Spark binary value small).
BLOB_ROWS = 65_536
_BLOBS = StructType([StructField("kind", StringType()), StructField("subtask", IntegerType()),
                     StructField("payload", BinaryType())])


# --- the functions users subclass ------------------------------------------------------------------


class KeyedStateBootstrapFunction:
    """Writes keyed state, one input row at a time, with handles scoped to the row's key.

    Register states in `open` (``ctx.get_state(ValueStateDescriptor(...))``, ``get_list_state``,
    ``get_map_state``, ``get_reducing_state``, ``get_aggregating_state``); registering later raises.
    `process_element` gets each row (a `pyspark.sql.Row`) and may set timers with
    ``ctx.timer_service().register_event_time_timer(ts)``; they fire once a job restores the savepoint.

    Examples
    --------
    >>> class Balances(KeyedStateBootstrapFunction):
    ...     def open(self, ctx):
    ...         self.balance = ctx.get_state(ValueStateDescriptor("balance", "double"))
    ...     def process_element(self, row, ctx):
    ...         self.balance.update((self.balance.value() or 0.0) + row.amount)
    """

    def open(self, ctx: "KeyedBootstrapContext") -> None:
        """Register the states this function writes."""

    def process_element(self, value: Any, ctx: "KeyedBootstrapContext") -> Iterable[Any] | None:
        """Write the states of `value`'s key (a generator's output is ignored, as a Flink function's)."""
        raise NotImplementedError("implement process_element(value, ctx)")

    def close(self) -> None:
        """Called once per task after its last row (the function is a rich function, as in Flink)."""


class StateBootstrapFunction:
    """Writes operator list state: each Spark partition of the input is one subtask.

    Register states in `initialize_state` (``ctx.get_operator_state_store().get_list_state(desc)``
    or ``get_union_list_state``); `snapshot_state` runs after the subtask's last row. As a rich
    function (Flink's ``AbstractRichFunction``) it is opened after `initialize_state`, before the
    first row (`open`), and closed after the state is snapshot (`close`), once per subtask.
    """

    def initialize_state(self, ctx: "OperatorBootstrapContext") -> None:
        raise NotImplementedError("implement initialize_state(ctx) and register list state there")

    def open(self, ctx: "OperatorBootstrapContext") -> None:
        """Called once per subtask after `initialize_state`, before the first row."""

    def close(self) -> None:
        """Called once per subtask after its last row and `snapshot_state`."""

    def process_element(self, value: Any, ctx: "OperatorBootstrapContext") -> None:
        raise NotImplementedError("implement process_element(value, ctx)")

    def snapshot_state(self, ctx: "OperatorBootstrapContext") -> None:
        """Called once after the subtask's last row, before its state is written."""


class BroadcastStateBootstrapFunction:
    """Writes broadcast state: every row passes through one function instance, in one task.

    ``ctx.get_broadcast_state(MapStateDescriptor(...) or BroadcastStateDescriptor(...))`` returns the
    writable map. As in Flink, the whole broadcast state must fit in memory. A rich function:
    `open` runs before the first row, `close` after the last.
    """

    def open(self, ctx: "OperatorBootstrapContext") -> None:
        """Called once before the first row."""

    def close(self) -> None:
        """Called once after the last row."""

    def process_element(self, value: Any, ctx: "OperatorBootstrapContext") -> None:
        raise NotImplementedError("implement process_element(value, ctx)")


# --- contexts --------------------------------------------------------------------------------------


class TimerService:
    """Timers registered during a bootstrap: kept per key, written with the state, fired after restore."""

    def __init__(self, ctx: "KeyedBootstrapContext") -> None:
        self._ctx = ctx
        self.timers: dict[tuple[Any, int, str], None] = {}  # an ordered set, as Flink's timer queue dedups

    def _key(self) -> Any:
        return self._ctx.get_current_key()

    def register_event_time_timer(self, timestamp: int) -> None:
        self.timers[(self._key(), int(timestamp), "event")] = None

    def register_processing_time_timer(self, timestamp: int) -> None:
        self.timers[(self._key(), int(timestamp), "processing")] = None

    def delete_event_time_timer(self, timestamp: int) -> None:
        self.timers.pop((self._key(), int(timestamp), "event"), None)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self.timers.pop((self._key(), int(timestamp), "processing"), None)


class KeyedBootstrapContext:
    """What a `KeyedStateBootstrapFunction` sees: state registration in `open`, the key and timers after."""

    def __init__(self, backend: HeapKeyedStateBackend) -> None:
        self._backend = backend
        self._opened = False
        self._timers = TimerService(self)

    def _get(self, descriptor: KeyedStateDescriptor) -> Any:
        if self._opened:
            raise StateAccessError(
                f"state {getattr(descriptor, 'name', descriptor)!r} registered outside open(); register every "
                "state in KeyedStateBootstrapFunction.open(ctx)."
            )
        return self._backend.get_state(descriptor)

    # Typed per kind (as RuntimeContext); the backend picks the handle from the descriptor's kind.
    def get_state(self, descriptor: ValueStateDescriptor[T]) -> ValueState[T]:
        """Register a value state in open() and return its handle."""
        return self._get(descriptor)

    def get_list_state(self, descriptor: ListStateDescriptor[T]) -> ListState[T]:
        """Register a list state in open() and return its handle."""
        return self._get(descriptor)

    def get_map_state(self, descriptor: MapStateDescriptor[K, V]) -> MapState[K, V]:
        """Register a map state in open() and return its handle."""
        return self._get(descriptor)

    def get_reducing_state(self, descriptor: ReducingStateDescriptor[T]) -> ReducingState[T]:
        """Register a reducing state in open() and return its handle."""
        return self._get(descriptor)

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor[IN, Any, OUT]) -> AggregatingState[IN, OUT]:
        """Register an aggregating state in open() and return its handle."""
        return self._get(descriptor)

    def get_current_key(self) -> Any:
        return self._backend.get_current_key()

    def timer_service(self) -> TimerService:
        return self._timers


class OperatorBootstrapContext:
    """What operator-state bootstrap functions see: the subtask's operator state store."""

    def __init__(self, store: DefaultOperatorStateStore, subtask: int) -> None:
        self._store = store
        self.index_of_this_subtask = subtask

    def get_operator_state_store(self) -> DefaultOperatorStateStore:
        return self._store

    def get_broadcast_state(self, descriptor: BroadcastStateDescriptor | MapStateDescriptor) -> Any:
        return self._store.get_broadcast_state(descriptor)


# --- the API ---------------------------------------------------------------------------------------


class OperatorTransformation:
    """Entry point: ``OperatorTransformation.bootstrap_with(df)``."""

    @staticmethod
    def bootstrap_with(df: DataFrame, *, parallelism: int | None = None) -> "OneInputOperatorTransformation":
        """Start a transformation over `df` (any DataFrame: Parquet, Delta, SQL, ...).

        `parallelism` is the operator's parallelism in the savepoint (and the number of subtasks of
        operator list state); by default the DataFrame's partition count (keyed: capped at max parallelism).
        """
        if not isinstance(df, DataFrame):
            raise InvalidArgumentError(f"bootstrap_with() takes a pyspark DataFrame, got {type(df).__name__}.")
        if parallelism is not None and parallelism < 1:
            raise InvalidArgumentError(f"parallelism must be positive, got {parallelism}.")
        return OneInputOperatorTransformation(df, parallelism)


class OneInputOperatorTransformation:
    """A DataFrame to bootstrap from; `key_by` for keyed state, `transform` for operator state."""

    def __init__(self, df: DataFrame, parallelism: int | None) -> None:
        self.df = df
        self.parallelism = parallelism

    def key_by(self, key: str | Callable[[Any], Any], *, key_type: Any = None) -> "KeyedOperatorTransformation":
        """Key rows by column `key`, or by a function of the row (then `key_type` is required).

        `key_type` (DDL such as ``"bigint"``, pyarrow type, ``Types.*()``) decides how keys hash;
        for a column it defaults to the column's type, which must match the job's ``key_by`` type.
        """
        if isinstance(key, str):
            if key not in self.df.columns:
                raise InvalidArgumentError(f"key_by({key!r}): no such column; the DataFrame has {self.df.columns}.")
            if key_type is None:
                from pyspark.sql.pandas.types import to_arrow_type

                key_type = to_arrow_type(self.df.schema[key].dataType)
        elif not callable(key):
            raise InvalidArgumentError(f"key_by() takes a column name or a function of the row, got {key!r}.")
        elif key_type is None:
            raise InvalidArgumentError("key_by(fn) needs key_type= (e.g. 'bigint' or 'string'): keys hash by declared type.")
        return KeyedOperatorTransformation(self, key, to_ddl(key_type))

    def transform(self, fn: StateBootstrapFunction | BroadcastStateBootstrapFunction) -> "BootstrapTransformation":
        """Operator list state (`StateBootstrapFunction`) or broadcast state (`BroadcastStateBootstrapFunction`)."""
        if isinstance(fn, KeyedStateBootstrapFunction):
            raise InvalidArgumentError("a KeyedStateBootstrapFunction needs keyed input: call key_by(...) first.")
        if not isinstance(fn, (StateBootstrapFunction, BroadcastStateBootstrapFunction)):
            raise InvalidArgumentError(
                f"{fn!r} is not a StateBootstrapFunction or BroadcastStateBootstrapFunction."
            )
        # As in Flink, the function's initialize_state/open run only in the tasks (never on the driver).
        return BootstrapTransformation(lambda *a: _write_operator_state(self, fn, *a), None)


class KeyedOperatorTransformation:
    """Keyed input: `transform` with a `KeyedStateBootstrapFunction`, or `columns` for the fast path."""

    def __init__(self, source: OneInputOperatorTransformation, key: str | Callable[[Any], Any], key_type: str) -> None:
        self.source = source
        self.key = key
        self.key_type = key_type

    def transform(self, fn: KeyedStateBootstrapFunction) -> "BootstrapTransformation":
        if not isinstance(fn, KeyedStateBootstrapFunction):
            raise InvalidArgumentError(f"{fn!r} is not a KeyedStateBootstrapFunction.")
        # As in Flink, the function is opened only in the tasks: the states it registers there are
        # reported with the written files and declared when the operator is written.
        return BootstrapTransformation(lambda *a: _write_keyed_function(self, fn, *a), None)

    def window(self, assigner: Any, *, timestamp: str | None = None, allowed_lateness: int = 0) -> Any:
        """Pending event-time windows (Flink's window bootstrap): rows go to `assigner`'s windows by
        their `timestamp` column (epoch milliseconds or a Spark timestamp; optional for `GlobalWindows`);
        add the job's ``trigger``/``evictor`` and finish with ``reduce``, ``aggregate``, ``process`` or
        ``apply`` exactly as the job defines its window (`statekit.spark.window_bootstrap`).

        >>> (OperatorTransformation.bootstrap_with(clicks).key_by("user")            # doctest: +SKIP
        ...     .window(TumblingEventTimeWindows.of(60_000), timestamp="ts")
        ...     .aggregate(ClickCounter(), accumulator_type="bigint"))
        """
        return WindowedBootstrap(self, assigner, timestamp, allowed_lateness)

    def columns(self, *descriptors: KeyedStateDescriptor, **by_column: KeyedStateDescriptor) -> "BootstrapTransformation":
        """The columnar fast path: one row per key, each state read from a column, no Python per row.

        A positional descriptor reads the column of its own name; ``column=descriptor`` reads
        another. Columns hold the state's stored form: value/reducing → the value, list →
        an array, map → a map, aggregating → the accumulator; null means "not set". Keys must be
        unique (a duplicate raises `DuplicateKeyError`).

        >>> OperatorTransformation.bootstrap_with(df).key_by("user").columns(   # doctest: +SKIP
        ...     ValueStateDescriptor("balance", "double"), seen=ListStateDescriptor("events", "string"))
        """
        if not isinstance(self.key, str):
            raise InvalidArgumentError("columns() reads the key from a column: use key_by('column').")
        pairs = [(d.name, d) for d in descriptors] + list(by_column.items())
        if not pairs:
            raise InvalidArgumentError("columns() needs at least one state descriptor.")
        for col, d in pairs:
            if not isinstance(d, KeyedStateDescriptor):
                raise InvalidArgumentError(f"columns(): {d!r} (for column {col!r}) is not a keyed state descriptor.")
            if col not in self.source.df.columns:
                raise InvalidArgumentError(f"columns(): no column {col!r}; the DataFrame has {self.source.df.columns}.")
        infos = tuple(d.info() for _, d in pairs)
        out = BootstrapTransformation(lambda *a: _write_keyed_columns(self, pairs, infos, *a), infos)
        out.columnar = (self, pairs)  # lets a Flink write encode the columns directly (statekit.spark.flink_columnar)
        return out


# --- execution ---------------------------------------------------------------------------------------


def _blobs(kind: str, subtask: int, table: pa.Table, *, always: bool = False) -> Iterator[pa.RecordBatch]:
    for offset in range(0, max(table.num_rows, 1 if always else 0), BLOB_ROWS):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table.slice(offset, BLOB_ROWS))
        yield pa.RecordBatch.from_arrays(
            [pa.array([kind]), pa.array([subtask], pa.int32()), pa.array([sink.getvalue().to_pybytes()], pa.binary())],
            names=["kind", "subtask", "payload"],
        )


def _collect(df: DataFrame) -> list[tuple[str, int, pa.Table]]:
    out = df.toArrow()
    return [(k, s, pa.ipc.open_stream(p).read_all())
            for k, s, p in zip(*(out.column(c).to_pylist() for c in ("kind", "subtask", "payload")))]


def _call(result: Any) -> None:
    if result is not None and hasattr(result, "__next__"):  # a generator: run it to the end, ignore its output
        for _ in result:
            pass


def _call_if(fn: Any, method: str, *args: Any) -> None:
    # Functions written before open/close existed (or duck-typed ones) may lack them.
    m = getattr(fn, method, None)
    if m is not None:
        m(*args)


def _write_keyed_function(t: KeyedOperatorTransformation, fn: KeyedStateBootstrapFunction,
                          builder: SavepointBuilder, ident: OperatorIdentifier, max_parallelism: int) -> None:
    key_type = t.key_type
    arrow_key = parse_ddl(key_type)
    to_key = python_converter(arrow_key, hashable=True)
    parallelism = parallelism_of(t.source, max_parallelism)
    keyed, key_col = keyed_frame(t.source.df, t.key, key_type)
    writer = builder.add_operator(ident, parallelism=parallelism, max_parallelism=max_parallelism, key_type=key_type)

    def bootstrap(batches: Iterable[pa.RecordBatch]) -> tuple[pa.Table | None, pa.Table | None, Any]:
        backend = task_backend(key_type, max_parallelism)
        ctx = KeyedBootstrapContext(backend)
        _call_if(fn, "open", ctx)
        ctx._opened = True
        with no_gc():  # the backend grows by one entry per key: generational GC passes would dominate
            for batch in batches:
                keys = batch.column(key_col).to_pylist()
                for k, row in zip(keys, rows_of(batch, (KEY_COLUMN, P.KEY_GROUP))):
                    backend.set_current_key(k if to_key is None else to_key(k), -1)
                    _call(fn.process_element(row, ctx))
        _call_if(fn, "close")
        table = backend.snapshot(0).table()
        timers = None
        if ctx._timers.timers:
            k, ts, dom = zip(*ctx._timers.timers)
            timers = pa.table({"key": to_arrow_array(list(k), arrow_key, what="timer key"),
                               "timestamp": pa.array(ts, pa.int64()), "domain": pa.array(dom, pa.string())})
        # the states registered in open() (none for a timers-only function, as in Flink)
        return (table if table.num_rows else None), timers, backend.state_infos()

    write_discovered(keyed, key_col, builder, writer, bootstrap)


def _write_keyed_columns(t: KeyedOperatorTransformation, pairs: list, infos: Any, builder: SavepointBuilder,
                         ident: OperatorIdentifier, max_parallelism: int) -> None:
    from pyspark.sql import functions as F

    assert isinstance(t.key, str)  # columns() refuses a key function
    df = t.source.df.select(F.col(t.key).alias("key"), *[F.col(c).alias(d.name) for c, d in pairs])
    writer = builder.add_operator(ident, parallelism=parallelism_of(t.source, max_parallelism),
                                  max_parallelism=max_parallelism, key_type=t.key_type, keyed_states=infos)
    writer.add_files(P.write_keyed_parts(df, "key", part_plan(df, builder, writer)))


def _write_operator_state(t: OneInputOperatorTransformation, fn: Any, builder: SavepointBuilder,
                          ident: OperatorIdentifier, max_parallelism: int) -> None:
    broadcast = isinstance(fn, BroadcastStateBootstrapFunction)
    if broadcast:  # one instance sees every row, so the map is complete; it is stored once
        df, parallelism = t.df.coalesce(1), min(t.parallelism or 1, max_parallelism)
    else:
        # As Flink, an operator never has more subtasks than its max parallelism: the write
        # parallelism is capped (the input's partitions merged), not refused.
        parallelism = parallelism_of(t, max_parallelism)
        if t.parallelism:
            df = t.df.repartition(parallelism)
        elif t.df.rdd.getNumPartitions() > parallelism:
            df = t.df.coalesce(parallelism)
        else:
            df = t.df

    def bootstrap(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None  # runs inside a Spark task
        subtask = task.partitionId()
        ctx = OperatorBootstrapContext(DefaultOperatorStateStore(), subtask)
        if not broadcast:
            fn.initialize_state(ctx)
        _call_if(fn, "open", ctx)  # Flink: initializeState, open, elements, snapshot, close
        for batch in batches:
            for row in rows_of(batch):
                _call(fn.process_element(row, ctx))
        if not broadcast:
            fn.snapshot_state(ctx)
        _call_if(fn, "close")
        for name, (info, table) in ctx._store.snapshot().items():
            # the state's declaration travels with its rows (our own executor's data, so pickle is safe)
            table = table.replace_schema_metadata({b"statekit.info": pickle.dumps(info)})
            yield from _blobs(name, subtask, table, always=True)

    results = _collect(df.mapInArrow(bootstrap, _BLOBS))
    if not broadcast and not results and df.rdd.getNumPartitions():  # tasks ran, none registered a state
        raise InvalidArgumentError(
            f"operator {ident}: {type(fn).__name__}.initialize_state registered no list state; register it with "
            "ctx.get_operator_state_store().get_list_state(ListStateDescriptor(...))."
        )
    writer = builder.add_operator(ident, parallelism=parallelism, max_parallelism=max_parallelism)
    states: dict[str, tuple[Any, list[list[pa.Table]]]] = {}
    for name, subtask, table in results:
        info = pickle.loads(table.schema.metadata[b"statekit.info"])
        known = states.setdefault(name, (info, [[] for _ in range(parallelism)]))
        if known[0] != info:
            raise StateTypeError(f"operator {ident}: subtasks declared state {name!r} differently ({known[0]} vs {info}).")
        known[1][subtask].append(table)
    for name, (info, per_subtask) in sorted(states.items()):
        if broadcast:
            writer.write_broadcast_state(info, pa.concat_tables(per_subtask[0]))
            continue
        value_type = pa.binary() if info.pickled else parse_ddl(info.type)
        lists = []
        for tables in per_subtask:
            table = pa.concat_tables(tables) if tables else None
            lists.append(table.sort_by("idx").column("value").combine_chunks() if table is not None and table.num_rows
                         else pa.array([], value_type))
        writer.write_list_state(info, lists)
