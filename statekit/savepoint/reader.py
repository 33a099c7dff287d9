"""`Savepoint`: the local (pyarrow) reader of savepoints and checkpoints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence, cast

import pyarrow as pa

from statekit.errors import (
    CorruptSavepointError,
    InvalidArgumentError,
    SchemaMismatchError,
    UntrustedPicklePayloadError,
)
from statekit.format.arrow_memory import empty_table
from statekit.format.files import read_parquet_verified, read_verified_bytes
from statekit.format.manifest import FileEntry, Manifest, OperatorMetadata, load_manifest, safe_relative_path
from statekit.format.storage import StoragePath
from statekit.format.values import state_value_decoder
from statekit.identifiers import OpLike
from statekit.keygroups import KeyGroupRange, assign_to_key_group
from statekit.savepoint.kinds import open_savepoint
from statekit.types import parse_ddl

if TYPE_CHECKING:
    from statekit.format.flink.versions import FlinkVersion
    from statekit.format.keyed_stream import KeyedFiles
    from statekit.savepoint.stats import SavepointStats
    from statekit.state.descriptors import OperatorStateInfo

# pyarrow.compute, the keyed-table layout (statekit.format.keyed) and thread pools are imported where
# they are used: opening a savepoint and reading one key (`statekit get`) start without them.


class Savepoint:
    """An opened savepoint (or checkpoint): the manifest, and verified reads of its tables.

    Readers trust only files the manifest lists; each file's size and checksum are checked before
    it is parsed. Columns declared ``PICKLED`` are returned as ``binary``; `get` unpickles them
    only when the savepoint was opened with ``trust_pickled=True``.
    """

    def __init__(self, path: Path | StoragePath, manifest: Manifest, *, trust_pickled: bool = False) -> None:
        # A StoragePath offers the Path operations the readers use (statekit.format.storage), so it is typed as one.
        self.path: Path = cast(Path, path)
        self.manifest = manifest
        self.trust_pickled = trust_pickled

    @classmethod
    def open(cls, path: "str | os.PathLike[str] | StoragePath", *, trust_pickled: bool = False,
             pyflink_types: dict[str, dict[str, str]] | None = None,
             plan: str | os.PathLike[str] | dict | None = None, storage_options: dict[str, Any] | None = None,
             filesystem: Any = None, sql: str | os.PathLike[str] | None = None) -> "Savepoint":
        """Open and validate the savepoint at `path` (reads only the manifest).

        `path` is a local path or a URI (``s3://bucket/savepoints/sp-1``, ``gs://``, ``abfs://``, ``hdfs://``,
        ``file://``); ``storage_options`` are its credentials and endpoint when the environment does not
        hold them, ``filesystem`` a `pyarrow.fs` or fsspec filesystem to use instead
        (`statekit.format.storage.locate`). ``pyflink_types`` (Flink savepoints of PyFlink jobs only): the
        Python type of each state per operator; ``plan`` (Flink SQL jobs' savepoints only): the job's compiled
        plan, for named columns and logical tables; ``sql`` instead: the job's statements (text or a ``.sql`` file),
        compiled to that plan by Flink's planner where a JDK and Maven are present
        (`statekit.format.flink.sqlcompile`). See `statekit.savepoint.flink.FlinkSavepoint.open`.
        """
        return open_savepoint(path, storage_options=storage_options, filesystem=filesystem, trust_pickled=trust_pickled,
                              pyflink_types=pyflink_types, plan=plan, sql=sql)

    @classmethod
    def open_manifest(cls, path: Path, *, trust_pickled: bool = False, pyflink_types: Any = None, plan: Any = None,
                      sql: Any = None) -> "Savepoint":
        """The statekit savepoint at located `path` (its manifest read and validated): statekit's kind of
        savepoint (`statekit.savepoint.kinds`); the options of other kinds are refused by name."""
        if sql is not None:
            raise InvalidArgumentError(f"{path} is a statekit savepoint; sql= names the state of Flink SQL jobs' savepoints.")
        if pyflink_types:
            raise InvalidArgumentError(f"{path} is a statekit savepoint; pyflink_types applies to Flink savepoints of PyFlink jobs.")
        if plan is not None:
            raise InvalidArgumentError(f"{path} is a statekit savepoint; plan= names the state of Flink SQL jobs' savepoints.")
        return cls(path, load_manifest(path), trust_pickled=trust_pickled)

    # -- metadata ----------------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """The manifest as a JSON-like dict."""
        return self.manifest.to_json()

    @property
    def checkpoint_id(self) -> int:
        return self.manifest.checkpoint_id

    @property
    def kind(self) -> str:
        return self.manifest.kind

    @property
    def flink_version(self) -> "FlinkVersion | None":
        """The Flink version line this state came from (None: not from Flink), the default target of `write_flink`.

        A statekit savepoint converted from Flink records it with each operator's carried serializers;
        operators of different lines give the oldest, whose `_metadata` every one of them reads.
        """
        from statekit.format.flink.versions import FlinkVersion

        lines = [FlinkVersion.parse(op.flink.flink_version) for op in self.manifest.operators
                 if op.flink is not None and op.flink.flink_version is not None]
        return min(lines) if lines else None

    @property
    def job_name(self) -> str | None:
        return self.manifest.job_name

    @property
    def operators(self) -> list[OperatorMetadata]:
        return list(self.manifest.operators)

    def operator(self, op: OpLike) -> OperatorMetadata:
        """Metadata of `op` (an `OperatorIdentifier` or a uid string)."""
        return self.manifest.operator(op)

    def __repr__(self) -> str:
        return f"Savepoint({str(self.path)!r}, checkpoint_id={self.checkpoint_id}, operators={len(self.operators)})"

    # -- files -------------------------------------------------------------------------------------
    def keyed_files(self, op: OpLike, *, key_groups: KeyGroupRange | None = None) -> list[FileEntry]:
        """Files of `op`'s keyed table (or native RocksDB files), optionally only those overlapping `key_groups`."""
        meta = self.operator(op)
        files = meta.files_of("rocksdb" if meta.is_native else "keyed")
        if key_groups is not None:
            files = [f for f in files if f.overlaps(key_groups.start, key_groups.end)]
        return files

    def read_file(self, entry: FileEntry, *, max_rows: int | None = None) -> pa.Table:
        """One verified Parquet file of this savepoint (with `max_rows`: decoding only the leading row
        groups that hold at least that many rows; the whole file is still checksummed)."""
        return self._read_one(entry) if max_rows is None else self._read_one(entry, max_rows=max_rows)

    def _read_files(self, entries: Sequence[FileEntry], **kw: Any) -> list[pa.Table]:
        if len(entries) <= 1:
            return [self._read_one(e, **kw) for e in entries]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(4, len(entries))) as pool:
            return list(pool.map(lambda e: self._read_one(e, **kw), entries))

    def _read_one(self, entry: FileEntry, **kw: Any) -> pa.Table:
        table = read_parquet_verified(self.path, entry, **kw)
        if not kw and table.num_rows != entry.rows:  # a filtered read returns fewer rows on purpose
            raise CorruptSavepointError(
                f"{self.path}: file {entry.path} holds {table.num_rows} rows but the manifest recorded {entry.rows}; "
                "the manifest does not describe this file. Restore the savepoint or use another one."
            )
        return table

    def _check_schema(self, table: pa.Table, expected: pa.Schema, where: str) -> pa.Table:
        from statekit.format import keyed as K

        if table.num_columns != len(expected) or any(
            a.name != b.name or not K.same_type(a.type, b.type) for a, b in zip(table.schema, expected)
        ):
            got = ", ".join(f"{f.name} {f.type}" for f in table.schema)
            want = ", ".join(f"{f.name} {f.type}" for f in expected)
            raise SchemaMismatchError(
                f"{self.path}: {where} has columns ({got}) but the manifest declares ({want}). The file does not "
                "belong to this savepoint or was rewritten; restore it or use another savepoint."
            )
        if table.schema == expected:
            return table
        try:
            return table.cast(expected)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError) as exc:
            # e.g. nulls in a column the format requires (key, key_group): the file was not written by statekit
            raise SchemaMismatchError(
                f"{self.path}: {where} does not fit the schema the manifest declares ({exc}). Restore it or use "
                "another savepoint; `statekit.savepoint.check` lists every such problem."
            ) from None

    # -- keyed state -------------------------------------------------------------------------------
    def keyed_schema(self, op: OpLike, *, with_key_group: bool = True) -> pa.Schema:
        from statekit.format import keyed as K

        meta = self.operator(op)
        return K.keyed_schema(
            meta.keyed_key_type, meta.keyed_states, namespace_type=meta.namespace_type, with_key_group=with_key_group
        )

    def keyed_table(
        self, op: OpLike, *, with_key_group: bool = False, key_groups: KeyGroupRange | None = None
    ) -> pa.Table:
        """The operator's keyed table: [``key_group``], ``key``, [``namespace``], one column per state."""
        meta = self.operator(op)
        if meta.key_type is None:
            return pa.table({"key": pa.array([], pa.null())}).slice(0, 0)
        expected = self.keyed_schema(op)
        if meta.is_native:
            table = self._native_table(meta, key_groups)
        else:
            files = self.keyed_files(op, key_groups=key_groups)
            parts = [
                self._check_schema(t, expected, f"file {e.path}")
                for e, t in zip(files, self._read_files(files))
            ]
            table = pa.concat_tables(parts) if parts else empty_table(expected)
        if key_groups is not None:
            import pyarrow.compute as pc

            kg = table.column("key_group")
            table = table.filter(pc.and_(pc.greater_equal(kg, key_groups.start), pc.less_equal(kg, key_groups.end)))
        return table if with_key_group else table.drop_columns(["key_group"])

    def keyed_stream(self, op: OpLike) -> "KeyedFiles | None":
        """The keyed table of `op` as `KeyedFiles`, read one verified file at a time by key-group range (for bulk
        writers), or None where only `keyed_table` reads it (native RocksDB files, files sharing key groups, or a
        subclass reading another format)."""
        meta = self.operator(op)
        if meta.key_type is None or meta.is_native or type(self).keyed_table is not Savepoint.keyed_table:
            return None
        from statekit.format.keyed_stream import KeyedFiles

        expected = self.keyed_schema(op)
        return KeyedFiles.of(self.path, self.keyed_files(op), expected,
                             lambda t, where: self._check_schema(t, expected, where),
                             lambda: self.keyed_table(op, with_key_group=True))

    def _native_table(self, meta: OperatorMetadata, key_groups: KeyGroupRange | None) -> pa.Table:
        from statekit.format import keyed as K
        from statekit.format.rocksdb_native import native_to_arrow  # RocksDB is only needed for native checkpoints

        by_subtask: dict[int, list[FileEntry]] = {}
        for f in meta.files_of("rocksdb"):
            by_subtask.setdefault(f.subtask or 0, []).append(f)
        parts = []
        for subtask, entries in sorted(by_subtask.items()):
            if key_groups is not None and not any(
                e.overlaps(key_groups.start, key_groups.end) for e in entries
            ):
                continue
            for e in entries:
                read_verified_bytes(self.path, e)
            directory = safe_relative_path(self.path, entries[0].path).parent
            parts.append(
                native_to_arrow(
                    directory,
                    key_type=parse_ddl(meta.keyed_key_type),
                    infos=meta.keyed_states,
                    max_parallelism=meta.max_parallelism,
                    key_groups=key_groups,
                )
            )
        expected = K.keyed_schema(meta.keyed_key_type, meta.keyed_states, namespace_type=meta.namespace_type)
        parts = [self._check_schema(p, expected, f"native RocksDB state of {meta.display_name}") for p in parts]
        return pa.concat_tables(parts) if parts else empty_table(expected)

    def size_stats(self, *, top: int = 10) -> "SavepointStats":
        """Where the bytes are (`statekit stats`): entries and bytes per operator, state, subtask and key group, the
        `top` largest keys and the skew (`statekit.savepoint.stats`). Named apart from `FlinkSavepoint.stats`, the
        decoder's statistics."""
        from statekit.savepoint.stats import savepoint_stats

        return savepoint_stats(self, top=top)

    def source_offsets(self, op: OpLike | None = None) -> pa.Table:
        """Where the job's Kafka sources resume (reader splits and enumerator), one row per split: see
        `statekit.savepoint.offsets.source_offsets`."""
        from statekit.savepoint.offsets import source_offsets

        return source_offsets(self, op)

    def get(self, op: OpLike, key: Any, *, namespace: Any = None) -> dict[str, Any] | None:
        """The states of one key as Python values, or None.

        Reads only the file(s) of its key group, checksummed whole, and decodes only the row groups whose
        ``key_group`` statistics may hold the key group.
        """
        meta = self.operator(op)
        if meta.key_type is None:
            return None
        if namespace is not None and meta.namespace_type is None:
            raise InvalidArgumentError(
                f"operator {meta.display_name!r} keeps no namespaces (it is not a window operator); "
                "call get() without namespace=."
            )
        if meta.stored_key_groups:  # the key class's own hashCode placed it: look in every key group
            table = self.keyed_table(op)
            hits = [i for i, k in enumerate(table.column("key").to_pylist()) if same_key(k, key)]
            rows = [r for r in table.take(pa.array(hits, pa.int64())).to_pylist() if same_namespace(r.get("namespace"), namespace)]
            return decode_row(rows[0], meta, trusted=self.trust_pickled) if rows else None
        kg = assign_to_key_group(key, meta.max_parallelism, meta.key_type)
        if meta.is_native:
            rows = self._native_table(meta, KeyGroupRange(kg, kg)).to_pylist()
        else:
            expected = self.keyed_schema(op)
            rows = []
            for e in self.keyed_files(op):
                if e.covers(kg):
                    table = self._check_schema(self._read_one(e, key_group=kg), expected, f"file {e.path}")
                    rows += _rows_of_key(table, kg, key, struct_key=pa.types.is_struct(expected.field("key").type))
        rows = [r for r in rows if same_key(r["key"], key) and same_namespace(r.get("namespace"), namespace)]
        if not rows:
            return None
        return decode_row(rows[0], meta, trusted=self.trust_pickled)

    def has_logical_table(self, op: OpLike) -> bool:
        """Whether `op` has a logical table (a Flink SQL operator of a savepoint opened with its compiled plan)."""
        return False

    def logical_table(self, op: OpLike, *, rows: bool = True, key_groups: KeyGroupRange | None = None) -> pa.Table:
        """A Flink SQL operator's state in the query's terms; Flink SQL savepoints opened with ``plan=`` only."""
        raise InvalidArgumentError(
            f"operator {self.operator(op).display_name!r} of statekit savepoint {self.path} has no logical table: "
            "logical tables are for Flink SQL jobs' savepoints opened with their compiled plan (plan=, --plan)."
        )

    # -- timers and operator state -----------------------------------------------------------------
    def timers(self, op: OpLike) -> pa.Table:
        """Registered timers: ``key_group``, ``key``, [``namespace``], ``timestamp``, ``domain``."""
        meta = self.operator(op)
        if meta.key_type is None:
            return pa.table({})
        from statekit.format import keyed as K

        expected = K.timers_schema(meta.key_type, namespace_type=meta.namespace_type)
        files = meta.files_of("timers")
        parts = [self._check_schema(t, expected, f"file {e.path}") for e, t in zip(files, self._read_files(files))]
        return pa.concat_tables(parts) if parts else empty_table(expected)

    def _operator_state_table(self, op: OpLike, name: str, redistribution: str | None) -> tuple["OperatorStateInfo", pa.Table]:
        meta = self.operator(op)
        info = meta.operator_state(name, redistribution=redistribution)
        sub: Literal["broadcast", "operator"] = "broadcast" if info.redistribution == "broadcast" else "operator"
        if info.redistribution == "broadcast":
            expected = pa.schema([pa.field("key", parse_ddl(info.broadcast_key_type), nullable=False),
                                  pa.field("value", parse_ddl(info.type))])
        else:
            expected = pa.schema([pa.field("subtask", pa.int32()), pa.field("idx", pa.int64()),
                                  pa.field("value", parse_ddl(info.type))])
        files = meta.files_of(sub, name)
        parts = [self._check_schema(t, expected, f"file {e.path}") for e, t in zip(files, self._read_files(files))]
        table = pa.concat_tables(parts) if parts else empty_table(expected)
        return info, table

    def list_state(self, op: OpLike, name: str) -> pa.Table:
        """Operator list state (split redistribution): ``subtask``, ``idx``, ``value``, in subtask order."""
        _, table = self._operator_state_table(op, name, None)
        return table.sort_by([("subtask", "ascending"), ("idx", "ascending")])

    def union_state(self, op: OpLike, name: str) -> pa.Table:
        """Union list state read as one copy: the concatenation of every subtask's list (``idx``, ``value``).

        This is what each subtask receives when the job is restored.
        """
        _, table = self._operator_state_table(op, name, "union")
        table = table.sort_by([("subtask", "ascending"), ("idx", "ascending")])
        return pa.table({"idx": pa.array(range(table.num_rows), pa.int64()), "value": table.column("value")})

    def broadcast_state(self, op: OpLike, name: str) -> pa.Table:
        """Broadcast state: ``key``, ``value`` (one copy)."""
        _, table = self._operator_state_table(op, name, "broadcast")
        return table

    def operator_state_lists(self, op: OpLike, name: str) -> tuple["OperatorStateInfo", list[list[Any]]]:
        """A list state as it was snapshotted: one Python list per subtask (for restores)."""
        info, table = self._operator_state_table(op, name, None)
        meta = self.operator(op)
        out: list[list[Any]] = [[] for _ in range(meta.parallelism)]
        table = table.sort_by([("subtask", "ascending"), ("idx", "ascending")])
        for s, v in zip(table.column("subtask").to_pylist(), table.column("value").to_pylist()):
            if s is None or not 0 <= s < len(out):
                raise CorruptSavepointError(
                    f"{self.path}: list state {name!r} of {meta.display_name} has an element of subtask {s}, but the "
                    f"operator has parallelism {meta.parallelism}. The savepoint is damaged; use another one."
                )
            out[s].append(v)
        return info, out


def decode_row(row: dict[str, Any], meta: OperatorMetadata, *, trusted: bool) -> dict[str, Any]:
    """The states of one keyed-table row as their handles hold them (`state_value_decoder`: maps are dicts)."""
    out = {}
    for s in meta.keyed_states:
        value = row[s.name]
        if value is not None and s.pickled and not trusted:
            raise UntrustedPicklePayloadError(
                f"state {s.name!r} of {meta.display_name} holds pickled values; unpickling runs arbitrary code. "
                "Open the savepoint with trust_pickled=True only if you trust its origin."
            )
        out[s.name] = state_value_decoder(s, trusted=trusted)(value)
    return out


def _rows_of_key(table: pa.Table, kg: int, key: Any, *, struct_key: bool) -> list[dict[str, Any]]:
    """The rows of `table` in key group `kg` whose key may equal `key`, as Python dicts.

    Found with numpy on the few row groups read, without pyarrow.compute (or the pandas that
    pyarrow's ``to_numpy`` loads): `get` stays a light process.
    """
    import numpy as np

    from statekit.format.keyed import column_values

    kgs = column_values(table.column("key_group")) if table.num_rows else None
    if kgs is None:
        return []
    hit = np.flatnonzero(kgs == kg)
    if not len(hit):
        return []
    lo, hi = int(hit[0]), int(hit[-1]) + 1  # a key group's rows are contiguous; `hit` still guards the order
    keys = table.column("key").slice(lo, hi - lo)
    values = None if struct_key else column_values(keys)
    if values is not None:
        try:
            same = np.asarray(values == key, dtype=bool)
        except (TypeError, ValueError, OverflowError):  # a key no value of the column can equal
            return []
        if same.shape != (hi - lo,):
            return []
    else:
        same = np.array([struct_key or v == key for v in keys.to_pylist()], dtype=bool)
    rows = hit[same[hit - lo]]
    return [table.slice(int(i), 1).to_pylist()[0] for i in rows]


def same_key(a: Any, b: Any) -> bool:
    """Whether a stored key `a` is the looked-up key `b` (a struct key may be looked up as a tuple of its fields)."""
    if isinstance(b, tuple) and isinstance(a, dict):
        return tuple(a.values()) == b
    return a == b


def same_namespace(stored: Any, wanted: Any) -> bool:
    """Whether a stored namespace is the wanted one (None: the void namespace; a window as ``(start, end)``)."""
    if wanted is None:
        return stored is None
    if isinstance(wanted, tuple) and isinstance(stored, dict):
        return (stored.get("start"), stored.get("end")) == wanted
    return stored == wanted
