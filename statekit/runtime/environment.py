"""StreamExecutionEnvironment: where jobs are declared (sources, settings) and executed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekit.backends.base import SUPPORTED_BACKENDS
from statekit.errors import InvalidArgumentError
from statekit.keygroups import check_max_parallelism, check_parallelism
from statekit.runtime.clock import ManualClock, SystemClock
from statekit.runtime.config import CheckpointConfig, RestartStrategies, RestartStrategy
from statekit.runtime.datastream import DataStream
from statekit.runtime.graph import Edge, Transformation
from statekit.runtime.sources import CollectionSource, FileSource, SourceOperator


class StreamExecutionEnvironment:
    """The context of a streaming job, PyFlink's call shapes with keyword options.

    Parameters
    ----------
    parallelism
        Default parallelism of operators (sources from collections and files are non-parallel).
    max_parallelism
        Number of key groups; defaults per operator as in Flink (at least 128).
    state_backend
        ``"heap"`` or ``"rocksdb"`` (or a `HashMapStateBackend` / `EmbeddedRocksDBStateBackend`).
    clock
        Source of processing time; a `ManualClock` makes timers, TTL and restart delays testable
        without sleeping.
    working_dir
        Where RocksDB instances and default checkpoints live (a temporary directory by default).

    Examples
    --------
    >>> env = StreamExecutionEnvironment(parallelism=2)
    >>> env.from_collection([1, 2, 3]).map(lambda x: x * 10).execute_and_collect()
    [10, 20, 30]
    """

    def __init__(
        self,
        parallelism: int = 1,
        max_parallelism: int | None = None,
        state_backend: Any = "heap",
        *,
        clock: SystemClock | ManualClock | None = None,
        working_dir: str | Path | None = None,
    ) -> None:
        self._parallelism = check_parallelism(parallelism)
        self._max_parallelism = None if max_parallelism is None else check_max_parallelism(max_parallelism)
        self._incremental = False
        self.set_state_backend(state_backend)
        self.clock = clock if clock is not None else SystemClock()
        self.working_dir = None if working_dir is None else Path(working_dir)
        self._checkpoint_config = CheckpointConfig()
        self._restart_strategy: RestartStrategy | None = None
        self._transformations: list[Transformation] = []
        self.parameters: dict[str, Any] = {}

    @staticmethod
    def get_execution_environment(**kwargs: Any) -> "StreamExecutionEnvironment":
        """A new environment (PyFlink's entry point); keyword options as in the constructor."""
        return StreamExecutionEnvironment(**kwargs)

    # -- settings -------------------------------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        self._parallelism = check_parallelism(parallelism, self._max_parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        self._max_parallelism = check_max_parallelism(max_parallelism)
        return self

    def get_max_parallelism(self) -> int | None:
        return self._max_parallelism

    def set_state_backend(self, state_backend: Any) -> "StreamExecutionEnvironment":
        name = getattr(state_backend, "name", state_backend)
        if name not in SUPPORTED_BACKENDS:
            raise InvalidArgumentError(f"unknown state backend {state_backend!r}; choose one of {', '.join(SUPPORTED_BACKENDS)}")
        self.state_backend = name
        self._incremental = bool(getattr(state_backend, "incremental", False))
        return self

    def enable_checkpointing(
        self, interval: int | None = None, mode: str = "exactly_once", *, every_records: int | None = None
    ) -> "StreamExecutionEnvironment":
        """Checkpoint every `interval` ms of processing time (and/or every `every_records` source elements)."""
        if interval is None and every_records is None:
            raise InvalidArgumentError("enable_checkpointing needs an interval in ms or every_records=")
        cfg = self._checkpoint_config
        if interval is not None:
            cfg.set_checkpoint_interval(interval)
        if every_records is not None:
            cfg.set_checkpoint_interval_records(every_records)
        cfg.set_checkpointing_mode(mode)
        cfg.incremental = self._incremental
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    def set_restart_strategy(self, restart_strategy: RestartStrategy) -> "StreamExecutionEnvironment":
        self._restart_strategy = restart_strategy
        return self

    @property
    def restart_strategy(self) -> RestartStrategy:
        if self._restart_strategy is not None:
            return self._restart_strategy
        # Flink's defaults: restart (practically) forever with checkpoints, never without.
        if self._checkpoint_config.enabled:
            return RestartStrategies.fixed_delay_restart(2**31 - 1, 1000)
        return RestartStrategies.no_restart()

    # -- graph ----------------------------------------------------------------------------------------
    def _add(
        self,
        kind: str,
        name: str,
        function: Any,
        inputs: list[Edge],
        operator_class: type,
        *,
        keyed: bool = False,
        key_type: Any = None,
        options: dict[str, Any] | None = None,
        default_parallelism: int | None = None,
    ) -> Transformation:
        t = Transformation(
            kind, name, function, inputs, operator_class, self,
            keyed=keyed, key_type=key_type, options=dict(options or {}), default_parallelism=default_parallelism,
        )
        t.position = len(self._transformations)
        self._transformations.append(t)
        return t

    # -- sources --------------------------------------------------------------------------------------
    def from_collection(self, collection: Any, type_info: Any = None) -> DataStream:
        """A bounded, non-parallel source of the collection's elements (position checkpointed)."""
        src = CollectionSource(collection)
        t = self._add("source", "Collection Source", src, [], SourceOperator, options={"non_parallel": True}, default_parallelism=1)
        return DataStream(self, t)

    def from_source(self, source: Any, watermark_strategy: Any = None, source_name: str = "Source") -> DataStream:
        """A `SourceFunction`, `FileSource` or collection, stamped by `watermark_strategy`.

        Sources run at parallelism 1 unless ``set_parallelism`` is called on the stream (user
        sources only; each subtask gets its own copy of the function).
        """
        if not isinstance(source, (FileSource, CollectionSource)) and not callable(getattr(source, "run", None)):
            source = CollectionSource(source)
        opts: dict[str, Any] = {"watermark_strategy": watermark_strategy}
        if isinstance(source, (FileSource, CollectionSource)):
            opts["non_parallel"] = True
        t = self._add("source", source_name, source, [], SourceOperator, options=opts, default_parallelism=1)
        return DataStream(self, t)

    def add_source(self, source_function: Any, source_name: str = "Custom Source") -> DataStream:
        """A `SourceFunction` without watermarks (PyFlink's ``add_source``)."""
        return self.from_source(source_function, None, source_name)

    def read_parquet(self, path: str | Path, watermark_strategy: Any = None) -> DataStream:
        return self.from_source(FileSource.parquet(path), watermark_strategy, f"Parquet {path}")

    def read_json_lines(self, path: str | Path, watermark_strategy: Any = None) -> DataStream:
        return self.from_source(FileSource.json_lines(path), watermark_strategy, f"JSON lines {path}")

    def read_csv(self, path: str | Path, watermark_strategy: Any = None, **csv_options: Any) -> DataStream:
        return self.from_source(FileSource.csv(path, **csv_options), watermark_strategy, f"CSV {path}")

    # -- execution ------------------------------------------------------------------------------------
    def execute(
        self,
        job_name: str = "job",
        *,
        restore_from: str | Path | None = None,
        allow_non_restored_state: bool = False,
        final_savepoint: str | Path | None = None,
        trust_pickled: bool = False,
    ) -> Any:
        """Run the job to the end of its (bounded) input and return a `JobExecutionResult`.

        Parameters
        ----------
        restore_from
            A savepoint or checkpoint to start from, at any parallelism up to the max parallelism;
            state is matched to operators by uid hash.
        allow_non_restored_state
            Skip savepoint state whose operator is not in this job instead of failing.
        final_savepoint
            Write a savepoint once every source is exhausted, *before* any end-of-input watermark
            fires pending event-time timers, then end as stop-with-savepoint without drain: the
            timers stay pending in the savepoint (and unfired), so restoring it and feeding the
            rest of the input gives the same results as one uninterrupted run. Sinks still commit.
        trust_pickled
            Allow restoring pickled state from `restore_from` (never needed for the job's own
            checkpoints after a failure).
        """
        from statekit.runtime.job import JobRunner

        runner = JobRunner(
            self, job_name, restore_from=restore_from, allow_non_restored_state=allow_non_restored_state,
            final_savepoint=final_savepoint, trust_pickled=trust_pickled,
        )
        return runner.run()

    def execute_async(self, job_name: str = "job", **options: Any) -> Any:
        """Start the job in a background thread and return its `JobClient` (savepoints, cancel, result)."""
        from statekit.runtime.job import JobClient, JobRunner

        runner = JobRunner(self, job_name, **options)
        return JobClient.start(runner)
