"""The one contract every state backend implements: keyed state of a subtask and its operator state store."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence, TypeVar

import pyarrow as pa

from statekit.errors import InvalidArgumentError
from statekit.keygroups import KeyGroupRange
from statekit.state.descriptors import (
    BroadcastStateDescriptor,
    KeyedStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    OperatorStateInfo,
    StateInfo,
)
from statekit.state.handles import BroadcastState, ListState

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

BackendName = Literal["heap", "rocksdb"]

#: Every backend statekit ships; state tests are parametrised over this list.
SUPPORTED_BACKENDS: tuple[BackendName, ...] = ("heap", "rocksdb")

#: Namespace of keyed state outside windows (Flink's VoidNamespace). Window operators use
#: ``(start, end)`` tuples of int milliseconds, stored as ``struct<start:bigint,end:bigint>``.
VOID_NAMESPACE = None


@dataclass(frozen=True)
class KeyedSnapshot:
    """A consistent copy of a subtask's keyed state, in the savepoint's keyed-table layout.

    Taking the snapshot is the synchronous part of a checkpoint and must be cheap (a shallow copy,
    a RocksDB checkpoint); `table()` does the expensive conversion and may run in a background
    thread while processing goes on. The table has columns ``key_group int32``, ``key <K>``,
    ``namespace`` (only when some state is namespaced), then one column per state in ``infos``
    order; nulls mean "not set"; rows sorted by key group. Native RocksDB checkpoints set
    ``native_dir``/``native_files`` instead.
    """

    infos: tuple[StateInfo, ...]
    materialize: Callable[[], pa.Table] | None = None
    native_dir: Path | None = None
    native_files: tuple[str, ...] = ()

    def table(self) -> pa.Table:
        if self.materialize is None:
            raise InvalidArgumentError(
                "a native snapshot has no table in memory; read its files with "
                "statekit.format.rocksdb_native.native_to_arrow(snapshot.native_dir, ...)."
            )
        return self.materialize()


class KeyedStateBackend(ABC):
    """Keyed state of one subtask: owns `key_group_range`, scoped to a current key and namespace.

    Created by the runtime with ``create_keyed_backend(name, ...)``. State handles returned by
    `get_state` read and write the entry of the *current* key and namespace at call time, so the
    runtime sets the key once per record and the user's handle follows.
    """

    def __init__(
        self,
        *,
        key_type: pa.DataType,
        max_parallelism: int,
        key_group_range: KeyGroupRange,
        clock: Callable[[], int],
        directory: Path | None = None,
        trust_pickled: bool = False,
    ) -> None:
        self.key_type = key_type
        self.max_parallelism = max_parallelism
        self.key_group_range = key_group_range
        self.clock = clock  # processing time in ms, used by TTL
        self.directory = directory
        self.trust_pickled = trust_pickled

    # -- scope -------------------------------------------------------------------------------------
    @abstractmethod
    def set_current_key(self, key: Any, key_group: int) -> None:
        """Scope every handle to `key` (whose key group the runtime computed once)."""

    @abstractmethod
    def get_current_key(self) -> Any: ...

    @abstractmethod
    def set_current_namespace(self, namespace: Any) -> None:
        """Scope handles to a window namespace ``(start, end)``, or `VOID_NAMESPACE`."""

    # -- registration --------------------------------------------------------------------------------
    @abstractmethod
    def get_state(self, descriptor: KeyedStateDescriptor) -> Any:
        """Register (or fetch the already registered) state and return its handle.

        Same name with a different kind or type raises `StateTypeError`.
        """

    @abstractmethod
    def merge_namespaces(self, state_name: str, sources: Iterable[Any], target: Any) -> None:
        """Merge the current key's state in `sources` into `target` and clear the sources (session windows)."""

    # -- iteration (windows, reader functions, apply-to-all-keys) ----------------------------------
    @abstractmethod
    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        """Keys that have `state_name` set in `namespace`."""

    @abstractmethod
    def namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        """``(key, namespace)`` pairs that have `state_name` set."""

    # -- checkpoints -------------------------------------------------------------------------------
    @abstractmethod
    def snapshot(self, checkpoint_id: int, *, native: bool = False, target_dir: Path | None = None) -> KeyedSnapshot:
        """A consistent snapshot; cheap to take (copy-on-write or buffered) so processing goes on.

        ``native=True`` (RocksDB only) writes a RocksDB checkpoint under `target_dir`, hard-linking
        SST files shared with earlier checkpoints.
        """

    @abstractmethod
    def restore(self, tables: Sequence[pa.Table], infos: Sequence[StateInfo]) -> None:
        """Load keyed tables (savepoint layout); rows outside `key_group_range` are ignored."""

    @abstractmethod
    def close(self) -> None: ...


class OperatorStateStore(ABC):
    """Operator (non-keyed) state of one subtask: list, union list and broadcast state."""

    @abstractmethod
    def get_list_state(self, descriptor: ListStateDescriptor[T]) -> ListState[T]:
        """List state redistributed by even split on rescale."""

    @abstractmethod
    def get_union_list_state(self, descriptor: ListStateDescriptor[T]) -> ListState[T]:
        """List state of which every subtask receives the union on restore."""

    @abstractmethod
    def get_broadcast_state(
        self, descriptor: BroadcastStateDescriptor[K, V] | MapStateDescriptor[K, V]
    ) -> BroadcastState[K, V]:
        """Map-like broadcast state; every subtask holds the same copy."""

    @abstractmethod
    def snapshot(self) -> dict[str, tuple[OperatorStateInfo, pa.Table]]:
        """Per state name: its manifest info and a table (``idx, value`` for lists; ``key, value`` for broadcast)."""

    @abstractmethod
    def restore(self, states: dict[str, tuple[OperatorStateInfo, pa.Table]]) -> None:
        """Load this subtask's share, already redistributed by `statekit.savepoint.redistribute`."""



def iter_chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Yield lists of at most `size` items (snapshot writers batch rows this way)."""
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
