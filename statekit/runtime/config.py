"""Checkpoint configuration, restart strategies and state backend choices (PyFlink's names)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from statekit.errors import InvalidArgumentError

CheckpointingModeName = Literal["exactly_once", "at_least_once"]


class CheckpointingMode:
    """PyFlink's ``CheckpointingMode.EXACTLY_ONCE`` / ``AT_LEAST_ONCE`` (plain strings work too)."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class CheckpointConfig:
    """Periodic checkpoint settings: ``env.get_checkpoint_config().set_...``.

    Checkpoints are written in the savepoint format under ``<storage>/chk-<id>``. In this
    runtime every checkpoint is aligned for free (one element in flight at a time), so
    ``at_least_once`` gives the same exactly-once state as ``exactly_once``.
    """

    def __init__(self) -> None:
        self.interval_ms: int | None = None
        self.every_records: int | None = None
        self.mode: CheckpointingModeName = "exactly_once"
        self.storage: Path | None = None
        self.timeout_ms = 600_000
        self.max_concurrent = 1
        self.min_pause_ms = 0
        self.retained = 1
        self.incremental = False

    @property
    def enabled(self) -> bool:
        return self.interval_ms is not None or self.every_records is not None

    def set_checkpoint_interval(self, interval_ms: int) -> "CheckpointConfig":
        if int(interval_ms) <= 0:
            raise InvalidArgumentError(f"checkpoint interval must be > 0 ms, got {interval_ms}")
        self.interval_ms = int(interval_ms)
        return self

    def set_checkpoint_interval_records(self, records: int) -> "CheckpointConfig":
        """statekit extension: checkpoint every `records` source elements (deterministic runs and tests)."""
        if int(records) <= 0:
            raise InvalidArgumentError(f"checkpoint interval must be > 0 records, got {records}")
        self.every_records = int(records)
        return self

    def set_checkpointing_mode(self, mode: str) -> "CheckpointConfig":
        m = str(getattr(mode, "value", mode)).lower()
        if m not in ("exactly_once", "at_least_once"):
            raise InvalidArgumentError(f"checkpointing mode must be 'exactly_once' or 'at_least_once', got {mode!r}")
        self.mode = m  # type: ignore[assignment]
        return self

    def set_checkpoint_storage_dir(self, path: str | Path) -> "CheckpointConfig":
        self.storage = Path(path)
        return self

    set_checkpoint_storage = set_checkpoint_storage_dir

    def set_checkpoint_timeout(self, timeout_ms: int) -> "CheckpointConfig":
        if int(timeout_ms) <= 0:
            raise InvalidArgumentError(f"checkpoint timeout must be > 0 ms, got {timeout_ms}")
        self.timeout_ms = int(timeout_ms)
        return self

    def set_max_concurrent_checkpoints(self, n: int) -> "CheckpointConfig":
        if int(n) < 1:
            raise InvalidArgumentError(f"max concurrent checkpoints must be >= 1, got {n}")
        self.max_concurrent = int(n)
        return self

    def set_min_pause_between_checkpoints(self, ms: int) -> "CheckpointConfig":
        if int(ms) < 0:
            raise InvalidArgumentError(f"min pause must be >= 0 ms, got {ms}")
        self.min_pause_ms = int(ms)
        return self

    def set_num_retained_checkpoints(self, n: int) -> "CheckpointConfig":
        """How many completed checkpoints to keep on disk (Flink's ``state.checkpoints.num-retained``)."""
        if int(n) < 1:
            raise InvalidArgumentError(f"retained checkpoints must be >= 1, got {n}")
        self.retained = int(n)
        return self

    def get_checkpoint_interval(self) -> int | None:
        return self.interval_ms


@dataclass(frozen=True)
class RestartStrategy:
    """How often and after what delay a failed job restarts from its latest completed checkpoint."""

    attempts: int
    delay_ms: int = 0


class RestartStrategies:
    """PyFlink's factory: ``RestartStrategies.fixed_delay_restart(3, 1000)`` / ``no_restart()``."""

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts: int = 0) -> RestartStrategy:
        if int(restart_attempts) < 0:
            raise InvalidArgumentError(f"restart attempts must be >= 0, got {restart_attempts}")
        return RestartStrategy(int(restart_attempts), int(delay_between_attempts))

    @staticmethod
    def no_restart() -> RestartStrategy:
        return RestartStrategy(0, 0)


class HashMapStateBackend:
    """Keyed state in Python dicts (the heap backend)."""

    name = "heap"


class EmbeddedRocksDBStateBackend:
    """Keyed state in RocksDB (rocksdict); incremental checkpoints keep native RocksDB files."""

    name = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: bool = False) -> None:
        self.incremental = bool(enable_incremental_checkpointing)
