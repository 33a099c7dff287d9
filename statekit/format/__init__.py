"""On-disk formats, below both engines: statekit's savepoint format v1 and Flink's (`statekit.format.flink`).

Modules: `manifest` (the ``_metadata.json`` manifest and its validation), `files` (Parquet parts,
checksums, verified reads), `keyed` (the keyed-table layout: columns, namespace type, key-group
column, timers table, window contents, key-group splits), `keyed_dicts` (keyed tables ↔ the
``{namespace: {key: value}}`` dicts of the heap backend), `values` (the one decoder from stored
values to the Python values state handles hold), `rocksdb_encoding` and `rocksdb_native` (the byte
encoding of native RocksDB checkpoints and reading them as keyed tables), `ttl` (TTL stamps),
`arrow_memory` (Arrow arrays filled from numpy in Arrow-owned memory, without importing pandas).

The runtime, the backends, `statekit.savepoint`, `statekit.spark` and the CLI import from here;
nothing here imports `statekit.runtime` or `statekit.backends`.
"""
