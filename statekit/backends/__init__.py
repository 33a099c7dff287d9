"""Keyed state backends (heap, RocksDB) and the operator state store, behind one contract.

Usage (what the runtime does per subtask)::

    from statekit.backends import create_keyed_backend, DefaultOperatorStateStore
    from statekit.keygroups import KeyGroupRange, assign_to_key_group
    from statekit.state import ValueStateDescriptor

    backend = create_keyed_backend(
        "heap",                                   # or "rocksdb" (then pass directory=<temp dir>)
        key_type=pa.string(), max_parallelism=128,
        key_group_range=KeyGroupRange(0, 127), clock=lambda: now_ms,
    )
    count = backend.get_state(ValueStateDescriptor("count", "bigint", default=0))   # in open()
    for key in records:                           # per record: scope, then the user's code
        backend.set_current_key(key, assign_to_key_group(key, 128, pa.string()))
        count.update(count.value() + 1)
    snap = backend.snapshot(checkpoint_id=1)      # cheap, synchronous part of a checkpoint
    table = snap.table()                          # the keyed table; may run in another thread
    backend.restore([table], snap.infos)          # keeps only rows of key_group_range

Window operators call ``set_current_namespace((start, end))`` before touching state and
``merge_namespaces(name, sources, target)`` when session windows merge. Operator state lives in a
`DefaultOperatorStateStore` (``get_list_state``, ``get_union_list_state``, ``get_broadcast_state``).

The RocksDB backend also writes native, incremental checkpoints (SST files hard-linked between
checkpoints)::

    snap = backend.snapshot(2, native=True, target_dir=checkpoint_dir / "op-1" / "subtask-0")
    table = statekit.format.rocksdb_native.native_to_arrow(
        snap.native_dir, key_type="string", infos=snap.infos, max_parallelism=128)

Modules: `heap` and `rocksdb` (keyed backends), `create` (a backend by name), `slots` (what both keyed backends share: state storage,
scope, restore and merging), `operator` (operator state), `ttl` (state TTL handles). What the backends store and snapshot is defined in `statekit.format`: the RocksDB byte
encodings (`rocksdb_encoding`), dicts ↔ the keyed table (`keyed_dicts`), reading RocksDB
checkpoints as keyed tables (`rocksdb_native`) and TTL stamps (`ttl`).
"""

from statekit.backends.base import (
    SUPPORTED_BACKENDS,
    VOID_NAMESPACE,
    KeyedSnapshot,
    KeyedStateBackend,
    OperatorStateStore,
)
from statekit.backends.create import create_keyed_backend
from statekit.backends.heap import HeapKeyedStateBackend
from statekit.backends.operator import DefaultOperatorStateStore

__all__ = [
    "SUPPORTED_BACKENDS",
    "VOID_NAMESPACE",
    "DefaultOperatorStateStore",
    "HeapKeyedStateBackend",
    "KeyedSnapshot",
    "KeyedStateBackend",
    "OperatorStateStore",
    "create_keyed_backend",
]
