"""`SavepointReader`: a savepoint's tables as Spark DataFrames (Flink's State Processor API, read side)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from statekit.errors import InvalidArgumentError, UntrustedPicklePayloadError
from statekit.format.files import check_present
from statekit.format.keyed import CONTENTS
from statekit.format.storage import StoragePath, is_remote
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import OperatorMetadata, Savepoint
from statekit.spark.datasource import storage_source_options
from statekit.spark.filters import RANGE_ENUMERATION_LIMIT
from statekit.spark.pruning import LITERAL_PATHS, pruning_unavailable, relation_options
from statekit.spark.reader_function import KeyedStateReaderFunction, iter_output, open_function, run_rows
from statekit.spark.scan import (
    TableSpec,
    plan_tasks,
    spark_ddl,
    split_tasks,
    struct_type,
    table_schema,
    verified_keyed_paths,
)
from statekit.spark.session import prepare_session
from statekit.spark.window_reader import WindowReaderFunction, check_window_operator, iter_window_output, window_columns
from statekit.state.functions import AggregateFunction
from statekit.types import parse_ddl

__all__ = ["SavepointReader"]

OpLike = OperatorIdentifier | str
#: Rows the driver runs a reader function over to infer its output schema when none is given.
INFER_ROWS = 1000


class SavepointReader:
    """Reads one savepoint (or checkpoint) with Spark.

    Use `read` to open one. Every method checks the operator and state against the manifest on the
    driver first, so an unknown operator or state, a damaged manifest or an unsupported format
    version raise statekit's typed errors at once; a file that turns out damaged while a Spark job
    reads it raises its typed error (e.g. `ChecksumMismatchError`) from the action.

    Examples
    --------
    >>> reader = SavepointReader.read(spark, "/savepoints/sp-7")            # doctest: +SKIP
    >>> reader.read_keyed_state("counter").where("key = 42").show()          # doctest: +SKIP
    """

    def __init__(self, spark: SparkSession, savepoint: Savepoint, *, storage_options: dict[str, str] | None = None) -> None:
        self.spark = spark
        self.savepoint = savepoint
        self.remote = is_remote(savepoint.path)
        self.path = str(savepoint.path) if self.remote else str(Path(savepoint.path).resolve())
        self.plan: str | None = None  # the compiled plan's file, given to the data source (`read`)
        # Explicit storage options (by default those the savepoint was opened with) travel to each task inside the
        # data source's options (redacted by Spark) and `TableSpec`s (no repr); without them the executors' own
        # environment and profiles apply.
        if storage_options is None and isinstance(savepoint.path, StoragePath):
            storage_options = dict(savepoint.path.options)
        self._storage = {k: str(v) for k, v in (storage_options or {}).items()}

    def __repr__(self) -> str:
        return f"SavepointReader({self.path!r})"

    def _spec(self, meta: OperatorMetadata, table: Any, **kw: Any) -> TableSpec:
        return TableSpec(self.path, meta.uid_hash, table, storage=tuple(sorted(self._storage.items())), **kw)

    @classmethod
    def read(cls, spark: SparkSession, path: str | os.PathLike[str], *, trust_pickled: bool = False,
             plan: str | os.PathLike[str] | None = None,
             storage_options: dict[str, str] | None = None) -> "SavepointReader":
        """Open the savepoint at `path` for reading with `spark`.

        Parameters
        ----------
        spark
            Any session; statekit's data sources and settings are added to it.
        path
            A savepoint or checkpoint directory: a local path, or a URI (``s3://``, ``s3a://``, ``gs://``, ...)
            that the driver and every executor task open themselves (no state passes through the driver).
        trust_pickled
            Let reader functions unpickle state declared ``PICKLED``. Unpickling runs arbitrary
            code: only for savepoints you trust. DataFrames show pickled columns as ``binary``.
        plan
            A Flink SQL job's compiled plan (JSON file): columns in the query's names, and
            `read_logical_table` / a ``logical`` table per SQL operator in `register`.
        storage_options
            Credentials and endpoint of a URI (`statekit.format.stores.filesystem_for`), used on the driver and
            sent to the tasks (never shown in query plans, logs or errors). Without them the driver and each
            executor use their own environment (``AWS_*`` variables, ``AWS_PROFILE``, ``~/.aws``, roles).

        Raises
        ------
        NotASavepointError, CorruptSavepointError, UnsupportedFormatError, UnsafePathError
            From `statekit.savepoint.Savepoint.open`.
        """
        prepare_session(spark)
        reader = cls(spark, Savepoint.open(path, trust_pickled=trust_pickled, plan=plan, storage_options=storage_options))
        reader.plan = str(Path(plan).resolve()) if plan is not None else None
        return reader

    # -- metadata ----------------------------------------------------------------------------------
    def metadata(self) -> DataFrame:
        """One row per operator: ``checkpoint_id``, ``operator_name``, ``operator_uid``,
        ``operator_uid_hash``, ``parallelism``, ``max_parallelism``, ``subtask_state_count``,
        ``total_size_bytes``, ``file_count``, ``keyed_rows``, ``key_type``, ``keyed_format`` and
        ``states`` (array of ``name``, ``kind``, ``type``)."""
        return self.spark.read.format("statekit-metadata").options(**storage_source_options(self._storage)).load(self.path)

    # -- tables ------------------------------------------------------------------------------------
    def _operator(self, op: OpLike) -> OperatorMetadata:
        return self.savepoint.operator(OperatorIdentifier.coerce(op))

    def _load(self, meta: OperatorMetadata, table: str, *, with_key_group: bool = False) -> DataFrame:
        df = (
            self.spark.read.format("statekit")
            .option("uid_hash", meta.uid_hash)
            .option("table", table)
            .option("with_key_group", str(with_key_group).lower())
            .option("trust_pickled", str(self.savepoint.trust_pickled).lower())
            .options(**({"plan": self.plan} if self.plan else {}))
            .options(**storage_source_options(self._storage))
            .load(self.path)
        )
        if table in ("keyed", "timers"):
            # Keys are never null; the filter makes every query push filters, so a reused DataFrame
            # never runs with key pruning left over from an earlier query (statekit.spark.datasource).
            df = df.where(F.col("key").isNotNull())
        return df

    def read_keyed_state(
        self,
        op: OpLike,
        reader_function: KeyedStateReaderFunction | None = None,
        *,
        with_key_group: bool = False,
        output_schema: StructType | str | None = None,
        engine: Literal["auto", "parquet", "statekit"] = "auto",
    ) -> DataFrame:
        """The operator's keyed state: one row per key (and namespace), one column per state.

        Without `reader_function`: columns ``key``, [``namespace``], one per keyed state with the
        manifest's types (``key_group`` first with ``with_key_group=True``). Filters on ``key``
        (``=``, ``IN``, ``OR`` of those, small closed integer ranges) read only the files of those
        keys' key groups.

        `engine` picks who reads the files:

        * ``"parquet"``: Spark's own vectorised Parquet reader, with statekit's Catalyst rule
          (`statekit.spark.pruning`) pruning files by key group and verifying each file it keeps
          against the manifest before Spark reads it. Needs a JDK to compile the rule once; without
          it, every file is verified on the driver when the DataFrame is created and key filters
          prune nothing.
        * ``"statekit"``: statekit's Python data source (`statekit.spark.datasource`): reads native
          RocksDB checkpoints too and prunes every key type, at a fraction of the scan speed.
        * ``"auto"`` (default): ``"parquet"`` when the rule is installed and the operator is
          canonical Parquet whose key type the rule hashes (scalars, structs without float fields),
          else ``"statekit"``. Both give equal DataFrames.

        With a `KeyedStateReaderFunction`: its rows, computed per partition on the executors
        (always by statekit). `output_schema` (a `StructType` or DDL string) is inferred from up to
        `INFER_ROWS` rows the function produces on the driver when not given.

        Raises
        ------
        UnknownOperatorError
            `op` is not in the savepoint (the message lists its operators).
        """
        meta = self._operator(op)
        if meta.key_type is None:
            raise InvalidArgumentError(
                f"operator {meta.display_name!r} has no keyed state; its operator states are "
                f"{[s.name for s in meta.operator_states] or 'none'}."
            )
        resolved = self._engine(meta, engine)
        if reader_function is not None:
            if engine == "parquet":
                raise InvalidArgumentError("reader functions run on engine='statekit' (or 'auto') only.")
            return self._read_with_function(meta, reader_function, output_schema)
        if output_schema is not None:
            raise InvalidArgumentError("output_schema applies only with a reader_function.")
        if resolved == "parquet":
            return self._load_parquet(meta, with_key_group=with_key_group)
        return self._load(meta, "keyed", with_key_group=with_key_group)

    def _engine(self, meta: OperatorMetadata, engine: str) -> str:
        if engine not in ("auto", "parquet", "statekit"):
            raise InvalidArgumentError(f"engine must be 'auto', 'parquet' or 'statekit', not {engine!r}.")
        if engine == "auto" or meta.stored_key_groups:  # the rule would prune stored (user-code) key groups by hash
            return "parquet" if self._rule_prunes(meta) else "statekit"
        return engine

    def _rule_prunes(self, meta: OperatorMetadata) -> bool:
        """Whether Spark's Parquet reader with statekit's rule serves `meta`'s keyed table fully
        (the rule prunes scalar keys and structs without float fields; the data source the rest)."""
        prunable = _jvm_prunable(parse_ddl(meta.keyed_key_type)) and not meta.stored_key_groups
        if self.remote:  # the rule verifies files on local disk; on object storage each task reads and verifies
            return False
        return meta.keyed_format == "parquet" and prunable and pruning_unavailable(self.spark) is None

    def _load_parquet(
        self, meta: OperatorMetadata, table: Literal["keyed", "timers"] = "keyed", *, with_key_group: bool
    ) -> DataFrame:
        if self.remote:
            raise InvalidArgumentError(
                f"engine='parquet' reads local savepoints; {self.path} is on object storage, where statekit's tasks "
                "read (and verify) the files themselves: use engine='statekit' (or 'auto').")
        spec = self._spec(meta, table, with_key_group=True)
        schema = spark_ddl(table_schema(meta, spec))
        files = meta.files_of(table)
        if meta.is_native or meta.keyed_format == "flink":
            verified_keyed_paths(self.savepoint, meta)  # raises: only statekit decodes native and Flink state
        if not files:
            df = self.spark.createDataFrame([], schema)
        elif pruning_unavailable(self.spark) is None:
            # Spark refuses missing paths with a JVM error at once, so existence and sizes are
            # checked here (by stat); checksums are verified by the rule, for the files a query reads.
            paths = [str(check_present(self.savepoint.path, e).resolve()) for e in files]
            options = relation_options(self.savepoint, meta, files, RANGE_ENUMERATION_LIMIT)
            df = self.spark.read.schema(schema).options(**options).parquet(*paths)
        else:
            paths = verified_keyed_paths(self.savepoint, meta, table)
            df = self.spark.read.schema(schema).options(**LITERAL_PATHS).parquet(*paths)
        return df if with_key_group else df.drop("key_group")

    def read_list_state(self, op: OpLike, name: str) -> DataFrame:
        """Operator list state (even-split redistribution): ``subtask``, ``idx``, ``value``."""
        meta = self._operator(op)
        meta.operator_state(name, redistribution="split")
        return self._load(meta, name)

    def read_union_state(self, op: OpLike, name: str) -> DataFrame:
        """Union list state as one copy (what a restore at parallelism 1 gets): ``idx``, ``value``."""
        meta = self._operator(op)
        meta.operator_state(name, redistribution="union")
        return self._load(meta, name)

    def read_broadcast_state(self, op: OpLike, name: str) -> DataFrame:
        """Broadcast state, one copy: ``key``, ``value``."""
        meta = self._operator(op)
        meta.operator_state(name, redistribution="broadcast")
        return self._load(meta, name)

    def read_logical_table(self, op: OpLike) -> DataFrame:
        """A Flink SQL operator's state in the query's terms (`statekit.savepoint.Savepoint.logical_table`);
        the reader must have been opened with the job's compiled plan (``plan=``)."""
        meta = self._operator(op)
        self.savepoint.logical_table(meta.identifier, rows=False)  # refuses by name what has no logical table
        return self._load(meta, "logical")

    def read_timers(
        self, op: OpLike, *, with_key_group: bool = False, engine: Literal["auto", "parquet", "statekit"] = "auto"
    ) -> DataFrame:
        """Registered timers: ``key``, [``namespace``], ``timestamp``, ``domain`` (event | processing).

        `engine` and key pruning work as for `read_keyed_state`.
        """
        meta = self._operator(op)
        if meta.key_type is None:
            raise InvalidArgumentError(f"operator {meta.display_name!r} is not keyed, so it has no timers.")
        if self._engine(meta, engine) == "parquet":
            return self._load_parquet(meta, "timers", with_key_group=with_key_group)
        return self._load(meta, "timers", with_key_group=with_key_group)

    def export(
        self,
        path: str | os.PathLike[str],
        *,
        format: Literal["delta", "parquet"] = "delta",
        op: OpLike | None = None,
        prefix: str | None = None,
    ) -> dict[str, int]:
        """Write every table (or operator `op`'s) as Delta or Parquet under ``<path>/<database>/<table>``,
        atomically; see `statekit.spark.export.export`. Returns ``{"db/table": rows}``."""
        from statekit.spark.export import export

        return export(self, path, format=format, op=op, prefix=prefix)

    # -- reader functions --------------------------------------------------------------------------
    def _read_with_function(
        self, meta: OperatorMetadata, fn: KeyedStateReaderFunction, output_schema: StructType | str | None
    ) -> DataFrame:
        if not isinstance(fn, KeyedStateReaderFunction):
            raise InvalidArgumentError(f"{fn!r} is not a KeyedStateReaderFunction.")
        if meta.namespace_type is not None:
            raise InvalidArgumentError(
                f"operator {meta.display_name!r} keeps windowed state (a namespace per key); reader functions "
                "read non-windowed keyed state. Use read_window_state(op, ...) or read_keyed_state(op)."
            )
        # Validate the function on the driver (registration errors surface here, typed) on a copy,
        # so the instance shipped to executors is the user's untouched object.
        open_function(pickle.loads(_dumps(fn)), meta, trust_pickled=self.savepoint.trust_pickled)

        def rows_of(task: Any, sp: Savepoint, fn: Any = fn) -> Any:
            return iter_output(fn, meta, spec, task, sp)

        spec = self._spec(meta, "keyed", trust_pickled=self.savepoint.trust_pickled)
        return self._function_frame(spec, plan_tasks(meta, spec), rows_of, fn, output_schema)

    def read_window_state(
        self,
        op: OpLike,
        reader_function: WindowReaderFunction | None = None,
        *,
        aggregate_function: AggregateFunction | None = None,
        output_schema: StructType | str | None = None,
    ) -> DataFrame:
        """A window operator's pending windows (Flink's ``SavepointReader.window(...)``).

        Without `reader_function`: one row per (key, window) with contents, columns ``key``,
        ``window_start``, ``window_end``, ``contents`` (the buffered elements, the reduced value, or
        the accumulator of an ``aggregate`` window) and one column per state kept per window (the
        trigger's, a ``ProcessWindowFunction``'s ``window_state()``); read as `read_keyed_state` reads
        (key filters prune files). A key's state outside windows (``global_state()``) is not a column
        of this table, as in Flink's state catalog: it is in `read_keyed_state` rows whose
        ``namespace`` is null (finding which states those are runs one Spark job over them).

        With a `WindowReaderFunction`: its rows; `read_window(key, ctx, elements)` runs once per
        (key, window) on the executors. Aggregating windows need the job's `aggregate_function`:
        elements is then ``[get_result(accumulator)]``. `output_schema` is inferred when not given.

        Raises
        ------
        InvalidArgumentError
            The operator keeps no window state, or `aggregate_function` is missing or superfluous.
        """
        meta = self._operator(op)
        check_window_operator(meta, aggregate_function, elements=reader_function is not None)
        if reader_function is None:
            if aggregate_function is not None or output_schema is not None:
                raise InvalidArgumentError("aggregate_function and output_schema apply only with a reader_function.")
            keyed = self.read_keyed_state(meta.identifier)
            states = window_columns(meta)
            outside = _outside_windows(keyed, states)
            return keyed.where(F.col("namespace").isNotNull() & F.col(f"`{CONTENTS}`").isNotNull()).select(
                "key",
                F.col("namespace.start").alias("window_start"),
                F.col("namespace.end").alias("window_end"),
                F.col(f"`{CONTENTS}`").alias("contents"),
                *(F.col(f"`{name}`") for name in states if name not in outside),
            )
        if not isinstance(reader_function, WindowReaderFunction):
            raise InvalidArgumentError(f"{reader_function!r} is not a WindowReaderFunction.")
        spec = self._spec(meta, "keyed", trust_pickled=self.savepoint.trust_pickled)
        if meta.keyed_state(CONTENTS).pickled and not self.savepoint.trust_pickled:
            raise UntrustedPicklePayloadError(
                f"operator {meta.display_name!r} keeps pickled window contents; unpickling runs arbitrary code. "
                "Open the savepoint with trust_pickled=True only if you trust it."
            )

        def rows_of(task: Any, sp: Savepoint, fn: Any = reader_function) -> Any:
            return iter_window_output(fn, meta, spec, task, sp, aggregate_function)

        return self._function_frame(spec, plan_tasks(meta, spec), rows_of, reader_function, output_schema)

    def _function_frame(
        self, spec: TableSpec, tasks: list, rows_of: Any, fn: Any, output_schema: StructType | str | None
    ) -> DataFrame:
        """A DataFrame of the rows `rows_of(task, savepoint)` yields, one Spark partition per task."""
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

        if output_schema is None:
            # Sample on the driver with a copy, so the function shipped to executors is untouched.
            probe = pickle.loads(_dumps(fn))
            schema = from_arrow_schema(self._infer_schema(lambda task: rows_of(task, self.savepoint, probe), tasks))
        elif isinstance(output_schema, str):
            schema = struct_type(output_schema)
        else:
            schema = output_schema
        if not tasks:
            return self.spark.createDataFrame([], schema)
        tasks = split_tasks(tasks, self.spark.sparkContext.defaultParallelism)
        arrow_schema = to_arrow_schema(schema)

        def run(batches: Any) -> Any:
            for batch in batches:
                yield from run_rows(rows_of, spec, tasks, arrow_schema, batch.column(0).to_pylist())

        return self.spark.range(0, len(tasks), 1, numPartitions=len(tasks)).mapInArrow(run, schema)

    def _infer_schema(self, rows_of_task: Any, tasks: list) -> pa.Schema:
        sample: list[Any] = []
        for task in tasks:
            for row in rows_of_task(task):
                sample.append(row)
                if len(sample) >= INFER_ROWS:
                    break
            if sample:
                break
        if not sample or not all(isinstance(r, dict) or hasattr(r, "asDict") for r in sample):
            raise InvalidArgumentError(
                "cannot infer the reader function's output schema: "
                + ("it produced no rows" if not sample else "it yields rows without field names")
                + "; pass output_schema= (a StructType or a DDL string such as 'key bigint, total bigint')."
            )
        rows = [r if isinstance(r, dict) else r.asDict(recursive=True) for r in sample]
        schema = pa.Table.from_pylist(rows).schema
        nulls = [f.name for f in schema if pa.types.is_null(f.type)]
        if nulls:
            raise InvalidArgumentError(
                f"cannot infer the type of column(s) {nulls}: every sampled value is None; pass output_schema=."
            )
        return schema

    # -- the savepoint as a database ---------------------------------------------------------------
    def register(self, prefix: str | None = None, *, format: str = "parquet") -> dict[str, list[str]]:
        """Create one Spark database per operator with a table per state, so plain SQL works.

        Each operator gets a database named from its uid (without one: a Flink SQL operator's stored
        name, else its uid hash), lower-cased with characters other than letters, digits and ``_``
        replaced by ``_``, and prefixed with ``<prefix>_`` when `prefix` is given
        (`statekit.query.database_names`). It holds ``keyed`` and ``timers`` (keyed operators)
        and one table per operator state (named after the state).

        ``keyed`` and ``timers`` are external Parquet tables over the savepoint's own files (no copy)
        when statekit's pruning rule is active (`statekit.spark.pruning`): the rule reads exactly
        the manifest's files, verified, and prunes them by key, as `read_keyed_state` does. Operator
        state tables (and keyed tables without the rule, or of native RocksDB state) are copies
        written into the session catalog's warehouse in `format`: Spark's catalog cannot hold
        tables backed by a Python data source, and a savepoint is immutable, so a copy stays exact.
        Registering again replaces the tables.

        Returns
        -------
        dict
            Database name -> its table names.

        Examples
        --------
        >>> reader.register("myapp")                                              # doctest: +SKIP
        {'myapp_proc': ['keyed', 'timers']}
        >>> spark.sql("SELECT * FROM myapp_proc.keyed WHERE key = 7").show()      # doctest: +SKIP
        """
        from statekit.table_names import database_names  # the naming rule lives once, shared with statekit.sql

        out: dict[str, list[str]] = {}
        dbs = database_names(self.savepoint, prefix)
        for meta in self.savepoint.operators:
            db = dbs[meta.uid_hash]
            tables = (["keyed", "timers"] if meta.key_type is not None else []) + [
                s.name for s in meta.operator_states
            ] + (["logical"] if self.savepoint.has_logical_table(meta.identifier) else [])
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{db}`")
            names = []
            for table in tables:
                name = _identifier(table)
                qualified = f"`{db}`.`{name}`"
                self.spark.sql(f"DROP TABLE IF EXISTS {qualified}")
                kind: Literal["keyed", "timers"] | None = "keyed" if table == "keyed" else "timers" if table == "timers" else None
                if not (kind is not None and self._register_in_place(meta, kind, qualified)):
                    self._load(meta, table).write.format(format).saveAsTable(qualified)
                names.append(name)
            out[db] = names
        return out

    def _register_in_place(self, meta: OperatorMetadata, table: Literal["keyed", "timers"], qualified: str) -> bool:
        """Register `meta`'s keyed (or timer) files as an external Parquet table, if the pruning rule guards it."""
        files = meta.files_of(table)
        folders = {str(Path(e.path).parent) for e in files}
        if not files or len(folders) != 1 or not self._rule_prunes(meta):
            return False
        paths = [check_present(self.savepoint.path, e) for e in files]
        spec = self._spec(meta, table)
        schema = struct_type(spark_ddl(table_schema(meta, spec)))
        options = relation_options(self.savepoint, meta, files, RANGE_ENUMERATION_LIMIT)
        # The folder may hold files the manifest does not list; the rule reads only listed ones.
        self.spark.catalog.createTable(
            qualified, path=str(paths[0].parent.resolve()), source="parquet", schema=schema, **options
        )
        return True


def _jvm_prunable(t: pa.DataType) -> bool:
    """Mirror of ``KeyFilter.prunable`` (statekit/spark/java): the key types the rule hashes."""
    if pa.types.is_struct(t):
        return t.num_fields > 0 and all(not pa.types.is_floating(f.type) and _jvm_prunable(f.type) for f in t)
    return True  # every scalar key type statekit allows


def _identifier(text: str) -> str:
    from statekit.table_names import table_name  # the naming rule lives once, shared with statekit.sql

    return table_name(text)


def _dumps(obj: Any) -> bytes:
    from pyspark import cloudpickle

    return cloudpickle.dumps(obj)


def _outside_windows(keyed: DataFrame, names: list[str]) -> set[str]:
    """The states among `names` kept outside windows (a value in a row with a null namespace).

    A window operator keeps nothing else there but its merging-window set, so a state set in the
    void namespace is a ``global_state()``: Flink registers each state with one namespace serializer,
    so a state is never both per window and global."""
    if not names:
        return set()
    counts = keyed.where(F.col("namespace").isNull()).agg(*(F.count(F.col(f"`{n}`")) for n in names)).first()
    return {n for n, c in zip(names, counts or ()) if c}
