"""`SavepointBuilder`: writes a savepoint from Arrow tables, atomically (manifest last, then one rename)."""

from __future__ import annotations

import os
import uuid
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Sequence, cast

import numpy as np
import pyarrow as pa

from statekit.errors import (
    InvalidArgumentError,
    InvalidTargetError,
    SavepointError,
    SavepointExistsError,
    StateTypeError,
)
from statekit.format import keyed as K
from statekit.format.files import (
    CHECKSUM_ALGORITHM,
    checksum,
    fsync_dir,
    place_file,
    remove_tree,
    storage_errors,
    write_parquet,
)
from statekit.format.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    FileEntry,
    FlinkSerializers,
    Manifest,
    OperatorMetadata,
    iso_now,
    safe_relative_path,
    writable_manifest,
)
from statekit.format.manifest_schema import text_problem
from statekit.format.publish import put_manifest, refuse_existing, remove_written
from statekit.format.storage import StoragePath, as_path
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import KeyGroupRange, check_max_parallelism, check_parallelism
from statekit.savepoint.staging import StagingLock, remove_abandoned_staging
from statekit.state.descriptors import KeyedStateDescriptor, OperatorStateInfo, StateInfo
from statekit.types import TypeLike, parse_ddl, to_ddl

DEFAULT_ROWS_PER_FILE = 1_000_000
_REMOTE_WORKERS = 4  # files written at once to object storage


def _state_info(s: StateInfo | KeyedStateDescriptor) -> StateInfo:
    return s if isinstance(s, StateInfo) else s.info()


class OperatorWriter:
    """Collects one operator's tables; files are written when the savepoint commits."""

    def __init__(
        self,
        builder: "SavepointBuilder",
        ident: OperatorIdentifier,
        *,
        name: str,
        parallelism: int,
        max_parallelism: int,
        key_type: str | None,
        keyed_states: tuple[StateInfo, ...],
        namespace_type: str | None,
        flink: FlinkSerializers | None = None,
        key_groups: Literal["hashed", "stored"] = "hashed",
    ) -> None:
        self._builder = builder
        self.key_groups = key_groups  # "stored": rows keep the key_group they are given (user-code hashCode keys)
        self.identifier = ident
        self.name = name
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.key_type = key_type
        self.keyed_states = keyed_states
        self.namespace_type = namespace_type
        self.flink = flink  # Flink serializers carried from a Flink savepoint (manifest field `flink`)
        self.dir = f"op-{ident.uid_hash}"
        self._keyed: list[pa.Table] = []
        self._keyed_batches: Iterable[pa.Table] | None = None
        self._timers: list[pa.Table] = []
        self._operator_states: list[tuple[OperatorStateInfo, pa.Table]] = []
        self._native: list[tuple[int, Path, KeyGroupRange, list[str]]] = []
        self._preset_files: list[FileEntry] = []
        self._linked_states: list[OperatorStateInfo] = []
        self._linked_native = False

    # -- keyed -------------------------------------------------------------------------------------
    def _require_keyed(self, what: str) -> str:
        self._builder._check_open()
        if self.key_type is None:
            raise InvalidArgumentError(
                f"operator {self.identifier}: {what} needs a keyed operator; pass key_type= to add_operator()."
            )
        return self.key_type

    def write_keyed(self, table: pa.Table) -> None:
        """Add rows of the keyed table (``key``, optional ``key_group``/``namespace``, state columns)."""
        self._require_keyed("keyed state")
        if not isinstance(table, pa.Table):
            raise InvalidArgumentError(f"write_keyed() takes a pyarrow.Table, got {type(table).__name__}.")
        self._keyed.append(table)

    def write_keyed_batches(self, batches: Iterable[pa.Table]) -> None:
        """Add the keyed table as batches (pyarrow Tables laid out as for `write_keyed`) in ascending, disjoint key-group ranges.

        The batches are consumed at commit: each one's files are written on the builder's workers while
        the next batch is produced, and at most two batches are held at a time. So a table larger than
        memory can be written, and producing it (e.g. decoding a Flink savepoint) overlaps the writing.
        Batches whose key groups overlap an earlier batch's raise `InvalidArgumentError`; nothing is published.
        """
        self._require_keyed("keyed state")
        if self._keyed_batches is not None:
            raise InvalidArgumentError(f"operator {self.identifier}: write_keyed_batches() was already called.")
        self._keyed_batches = batches

    def declare_keyed_states(self, states: Sequence[StateInfo]) -> None:
        """Declare the keyed states once they are known, when user code registers them while the
        tables are written (a bootstrap function's ``open`` run in Spark tasks); before the commit."""
        self._require_keyed("keyed state")
        infos = tuple(states)
        for s in infos:
            parse_ddl(s.type)
        if len({s.name for s in infos}) != len(infos):
            raise InvalidArgumentError(f"operator {self.identifier}: two keyed states share a name in {[s.name for s in infos]}.")
        self.keyed_states = infos

    def write_timers(self, table: pa.Table) -> None:
        """Add timers: ``key``, optional ``key_group``/``namespace``, ``timestamp``, ``domain``."""
        self._require_keyed("timers")
        domains = set(table.column("domain").unique().to_pylist()) if "domain" in table.column_names else set()
        if not domains <= {"event", "processing"}:
            raise InvalidArgumentError(
                f"operator {self.identifier}: timer domain(s) {sorted(map(str, domains - {'event', 'processing'}))} "
                "are invalid; use 'event' or 'processing'."
            )
        self._timers.append(table)

    # -- operator state ----------------------------------------------------------------------------
    def write_list_state(self, info: OperatorStateInfo, per_subtask: Sequence[Sequence[Any] | pa.Array]) -> None:
        """Operator list state (`split` or `union`): one list of elements per subtask."""
        self._builder._check_open()
        if info.redistribution not in ("split", "union"):
            raise InvalidArgumentError(
                f"list state {info.name!r}: redistribution must be 'split' or 'union', not {info.redistribution!r}."
            )
        value_type = _parse_type(info.type, f"list state {info.name!r}")
        if len(per_subtask) > self.parallelism:
            raise InvalidArgumentError(
                f"list state {info.name!r}: {len(per_subtask)} subtask lists given but operator {self.identifier} "
                f"has parallelism {self.parallelism}; pass one list per subtask."
            )
        subtasks, idx, values = [], [], []
        for s, items in enumerate(per_subtask):
            if isinstance(items, pa.ChunkedArray):
                items = items.combine_chunks()
            arr = items if isinstance(items, pa.Array) else _to_array(list(items), value_type, info.name)
            subtasks.append(np.full(len(arr), s, dtype=np.int32))
            idx.append(np.arange(len(arr), dtype=np.int64))
            values.append(_cast_array(arr, value_type, info.name))
        if any(v.null_count for v in values):
            raise InvalidArgumentError(f"list state {info.name!r} holds null elements; Flink list state forbids nulls.")
        table = pa.table(
            {
                "subtask": pa.array(np.concatenate(subtasks) if subtasks else [], pa.int32()),
                "idx": pa.array(np.concatenate(idx) if idx else [], pa.int64()),
                "value": pa.concat_arrays(values) if values else pa.array([], value_type),
            }
        )
        self._add_operator_state(info, table)

    def write_broadcast_state(self, info: OperatorStateInfo, table: pa.Table | dict) -> None:
        """Broadcast state: one copy of its ``key``/``value`` map."""
        self._builder._check_open()
        if info.redistribution != "broadcast" or info.key_type is None:
            raise InvalidArgumentError(
                f"broadcast state {info.name!r} needs redistribution='broadcast' and a key_type."
            )
        what = f"broadcast state {info.name!r}"
        schema = pa.schema([pa.field("key", _parse_type(info.key_type, what), nullable=False),
                            pa.field("value", _parse_type(info.type, what))])
        if isinstance(table, dict):
            table = pa.table(
                {"key": _to_array(list(table), schema.field("key").type, info.name),
                 "value": _to_array(list(table.values()), schema.field("value").type, info.name)}
            )
        table = K.conform(table, schema, what=what)
        K.check_unique_keys(table, has_namespace=False, what=what)
        self._add_operator_state(info, table)

    def _add_operator_state(self, info: OperatorStateInfo, table: pa.Table) -> None:
        if any(i.name == info.name for i, _ in self._operator_states):
            raise InvalidArgumentError(f"operator {self.identifier}: operator state {info.name!r} written twice.")
        self._operator_states.append((info, table))

    # -- native RocksDB ----------------------------------------------------------------------------
    def write_native_keyed(
        self, subtask: int, directory: Path, key_group_range: KeyGroupRange, files: Iterable[str]
    ) -> None:
        """Add one subtask's RocksDB checkpoint files; they are hard-linked (or copied) into the savepoint."""
        self._require_keyed("native keyed state")
        self._native.append((subtask, Path(directory), key_group_range, list(files)))

    def add_files(
        self,
        entries: Iterable[FileEntry],
        *,
        operator_states: Iterable[OperatorStateInfo] = (),
        native: bool = False,
    ) -> None:
        """Register files already placed in the staging directory (linked from another savepoint, or
        written by Spark executors), with the operator states they hold and whether the keyed files
        are a native RocksDB checkpoint."""
        self._preset_files.extend(entries)
        self._linked_states.extend(operator_states)
        self._linked_native = self._linked_native or native

    # -- commit ------------------------------------------------------------------------------------
    def _finish(self, root: Path, pool: ThreadPoolExecutor) -> tuple[OperatorMetadata, set[str]]:
        futures: list[Future[FileEntry]] = []
        features: set[str] = set()
        if (self._keyed or self._keyed_batches is not None) and self._native:
            raise InvalidArgumentError(
                f"operator {self.identifier}: keyed state was written both as tables and as native RocksDB files."
            )
        if self._keyed and self._keyed_batches is not None:
            raise InvalidArgumentError(
                f"operator {self.identifier}: keyed state was written both as one table and as batches; use one way."
            )
        if self._keyed:
            futures += self._write_keyed_files(root, pool)
        if self._keyed_batches is not None:
            futures += self._write_keyed_batches(root, pool)
        if self._timers:
            futures += self._write_timer_files(root, pool)
        used: set[str] = set()
        for info, table in self._operator_states:
            sub = "broadcast" if info.redistribution == "broadcast" else "operator"
            if table.num_rows:
                name = _safe_name(info.name)
                while name.casefold() in used:  # "Rules" and "rules" would share a directory on macOS/Windows
                    name += "_"
                used.add(name.casefold())
                rel = f"{self.dir}/{sub}/{name}/part-00000.parquet"
                futures.append(pool.submit(_write_file, root, rel, table, sub, info.name, None, None, None))
        if self._native or self._linked_native:
            features.add("rocksdb-native")
            futures += [pool.submit(_link_file, root, f"{self.dir}/rocksdb/subtask-{s}", d, f, s, r)
                        for s, d, r, names in self._native for f in names]
        entries = [f.result() for f in futures] + self._preset_files
        infos = self.keyed_states
        op_infos = [i for i, _ in self._operator_states] + self._linked_states
        if any(s.pickled for s in infos) or any(i.pickled for i in op_infos):
            features.add("pickled")
        if self.key_groups == "stored":
            features.add("stored-key-groups")
        meta = OperatorMetadata(
            identifier=self.identifier,
            name=self.name,
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
            key_type=self.key_type,
            namespace_type=self.namespace_type,
            keyed_states=infos,
            operator_states=tuple(i for i, _ in self._operator_states) + tuple(self._linked_states),
            files=tuple(sorted(entries, key=lambda e: e.path)),
            keyed_format="rocksdb" if self._native or self._linked_native else "parquet",
            flink=self.flink,
            key_groups=self.key_groups,
        )
        return meta, features

    def _prepared(self, tables: list[pa.Table], schema: pa.Schema,
                  what: str) -> list[tuple[pa.Table, np.ndarray, np.ndarray]]:
        """Conform and key-group each table (key groups and the keys' Java hashCodes); merge them if their key
        groups overlap."""
        key_type = self.key_type
        assert key_type is not None
        out = []
        for t in tables:
            given_kg = t.column("key_group") if "key_group" in t.column_names else None
            t = K.conform(t.drop_columns(["key_group"]) if given_kg is not None else t, schema, what=what)
            kg, hashes = K.key_groups_and_hashes(t.column("key"), self.max_parallelism, key_type)
            if self.key_groups == "stored":
                kg = self._stored(given_kg, what)
            elif given_kg is not None and not np.array_equal(np.asarray(given_kg.to_numpy(), dtype=np.int32), kg):
                raise InvalidArgumentError(
                    f"{what}: the given key_group column disagrees with the key groups of the keys at max "
                    f"parallelism {self.max_parallelism}; drop the column and let statekit compute it."
                )
            out.append((t, kg, hashes))
        out = [part for part in out if len(part[1])]
        if len(out) > 1:
            # Inputs (e.g. one per subtask) are written in key-group order, whatever order they came
            # in; if their key-group ranges interleave they become one table, so that the files of
            # the operator cover ascending, disjoint ranges and each key group stays contiguous.
            bounds = [(int(kg.min()), int(kg.max())) for _, kg, _ in out]
            order = sorted(range(len(out)), key=lambda i: bounds[i])
            if all(bounds[a][1] < bounds[b][0] for a, b in zip(order, order[1:])):
                out = [out[i] for i in order]
            else:
                out = [(pa.concat_tables([t for t, _, _ in out]), np.concatenate([kg for _, kg, _ in out]),
                        np.concatenate([h for _, _, h in out]))]
        return out

    def _stored(self, given_kg: pa.ChunkedArray | None, what: str) -> np.ndarray:
        """The given key groups of an operator whose keys hash with user code (checked against the range only)."""
        if given_kg is None:
            raise InvalidArgumentError(
                f"{what}: the operator keeps stored key groups (its keys hash with the key class's own hashCode(), "
                "which statekit cannot compute), so every row needs its key_group column; pass the key groups the "
                "rows were read with."
            )
        kg = np.asarray(given_kg.to_numpy(), dtype=np.int32)
        if given_kg.null_count or (len(kg) and (int(kg.min()) < 0 or int(kg.max()) >= self.max_parallelism)):
            raise InvalidArgumentError(f"{what}: a stored key_group is null or outside 0..{self.max_parallelism - 1}.")
        return kg

    def _keyed_schema(self) -> tuple[str, pa.Schema]:
        what = f"keyed table of operator {self.identifier}"
        return what, K.keyed_schema(
            self._require_keyed("a keyed table"), self.keyed_states, namespace_type=self.namespace_type, with_key_group=False
        )

    def _write_keyed_files(self, root: Path, pool: ThreadPoolExecutor) -> list[Future[FileEntry]]:
        what, schema = self._keyed_schema()
        futures: list[Future[FileEntry]] = []
        for table, kg, hashes in self._prepared(self._keyed, schema, what):
            futures += self._submit_keyed(root, pool, table, kg, hashes, len(futures), what)
        return futures

    def _write_keyed_batches(self, root: Path, pool: ThreadPoolExecutor) -> list[Future[FileEntry]]:
        what, schema = self._keyed_schema()
        assert self._keyed_batches is not None
        batches = iter(self._keyed_batches)
        try:
            return self._consume_keyed_batches(root, pool, batches, schema, what)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:  # a generator stops producing now (its own workers end), not when collected
                close()

    def _consume_keyed_batches(self, root: Path, pool: ThreadPoolExecutor, batches: Iterator[pa.Table],
                               schema: pa.Schema, what: str) -> list[Future[FileEntry]]:
        futures: list[Future[FileEntry]] = []
        in_flight: list[list[Future[FileEntry]]] = []
        last_kg = -1
        for batch in batches:
            if not isinstance(batch, pa.Table):
                raise InvalidArgumentError(f"{what}: write_keyed_batches() takes pyarrow.Tables, got {type(batch).__name__}.")
            for table, kg, hashes in self._prepared([batch], schema, what):
                if int(kg.min()) <= last_kg:
                    raise InvalidArgumentError(
                        f"{what}: a batch holds key group {int(kg.min())}, at or before key group {last_kg} of an "
                        "earlier batch; batches must cover ascending, disjoint key-group ranges (or write one table)."
                    )
                last_kg = int(kg.max())
                submitted = self._submit_keyed(root, pool, table, kg, hashes, len(futures), what)
                futures += submitted
                in_flight.append(submitted)
            while len(in_flight) > 1:  # the batch before this one is written before another is produced
                for f in in_flight.pop(0):
                    f.result()
        return futures

    def _submit_keyed(self, root: Path, pool: ThreadPoolExecutor, table: pa.Table, kg: np.ndarray,
                      hashes: np.ndarray | None, part: int, what: str) -> list[Future[FileEntry]]:
        """Write one key-grouped table as files ``part-NNNNN`` from number `part` on (on the workers)."""
        names = [s.name for s in self.keyed_states]
        rows_before = len(kg)
        table, kg = K.drop_unset_rows(table, kg, names)
        if len(kg) != rows_before:
            hashes = None  # rows were dropped: uniqueness is checked with fingerprints of its own
        # One stable radix sort of the key groups (cheaper in total than selecting per file); the
        # workers gather their files' rows from it.
        order = K.key_group_order(kg)
        futures = []
        for split in K.split_by_key_group(kg, self._builder.rows_per_file):
            rel = f"{self.dir}/keyed/part-{part:05d}-kg{split.kg_start:05d}-{split.kg_end:05d}.parquet"
            part += 1
            rows = None if order is None else order[split.row_start : split.row_end]
            futures.append(pool.submit(
                _write_keyed_chunk, root, rel, table, kg, hashes, rows, split, self.namespace_type is not None, what))
        return futures

    def _write_timer_files(self, root: Path, pool: ThreadPoolExecutor) -> list[Future[FileEntry]]:
        what = f"timers of operator {self.identifier}"
        schema = K.timers_schema(self._require_keyed("timers"), namespace_type=self.namespace_type)
        schema = schema.remove(0)
        futures = []
        for i, (table, kg, _) in enumerate(self._prepared(self._timers, schema, what)):
            table, kg = K.sort_by_key_group(table, kg)
            if table.num_rows:
                rel = f"{self.dir}/timers/part-{i:05d}.parquet"
                futures.append(pool.submit(_write_file, root, rel, table, "timers", None, int(kg[0]), int(kg[-1]), None))
        return futures


def _write_keyed_chunk(root, rel, table, kg, hashes, rows, split, has_namespace, what) -> FileEntry:
    # Gathering rows and checking key uniqueness per file inside the workers lets both cores share
    # the work; a key's duplicates share its key group, so they always land in the same file.
    if rows is None:  # already grouped by key group
        chunk, chunk_kg = table.slice(split.row_start, split.rows), kg[split.row_start : split.row_end]
        chunk_hashes = None if hashes is None else hashes[split.row_start : split.row_end]
    else:
        chunk, chunk_kg = K.take_rows(table, rows), kg[rows]
        chunk_hashes = None if hashes is None else hashes[rows]
    K.check_unique_keys(chunk, has_namespace=has_namespace, what=what, key_hashes=chunk_hashes)
    return _write_file(root, rel, K.with_key_group_column(chunk, chunk_kg), "keyed", None, split.kg_start,
                       split.kg_end, None)


def _parse_type(ddl: str | None, what: str) -> pa.DataType:
    if ddl is None:
        raise InvalidArgumentError(f"{what}: a type is required (a DDL string such as 'bigint').")
    return parse_ddl(ddl)


def _cast_array(arr: pa.Array, arrow_type: pa.DataType, name: str) -> pa.Array:
    if arr.type == arrow_type:
        return arr
    if not K.same_type(arr.type, arrow_type) and not K.castable(arr.type, arrow_type):
        raise StateTypeError(
            f"state {name!r}: values of type {arr.type} do not fit declared type {to_ddl(arrow_type)}; "
            "statekit does not convert between type families. Convert the values or change the declaration."
        )
    try:
        return arr.cast(arrow_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise StateTypeError(f"state {name!r}: values do not fit declared type {to_ddl(arrow_type)} ({exc}).") from None


def _to_array(values: list, arrow_type: pa.DataType, name: str) -> pa.Array:
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise StateTypeError(f"state {name!r}: values do not fit declared type {to_ddl(arrow_type)} ({exc}).") from None


def _safe_name(name: str) -> str:
    """A state name as a directory name: percent-encoded UTF-8 except ASCII letters, digits, ``-``, ``_``.

    Distinct names give distinct results (so no ``.``/``..``, no separators, no escaping the
    savepoint); the manifest, not the name, is what readers follow.

    >>> _safe_name("offsets"), _safe_name("../a b"), _safe_name("😀")
    ('offsets', '%2E%2E%2Fa%20b', '%F0%9F%98%80')
    """
    return "".join(
        c if (c.isascii() and c.isalnum()) or c in "-_" else "".join(f"%{b:02X}" for b in c.encode("utf-8"))
        for c in name
    ) or "%"


def _write_file(root, rel, table, table_name, state, kg_start, kg_end, subtask) -> FileEntry:
    nbytes, digest = write_parquet(table, root / rel)
    return FileEntry(rel, table_name, table.num_rows, nbytes, digest, state, kg_start, kg_end, subtask)


def _link_file(root: Path, rel_dir: str, src_dir: Path, name: str, subtask: int, kg_range: KeyGroupRange) -> FileEntry:
    src = src_dir / name
    rel = f"{rel_dir}/{name}"
    if isinstance(root, StoragePath):  # streamed into the new object, checksummed on the way
        with open(src, "rb") as fh, (root / rel).create() as obj:
            crc = 0
            while chunk := fh.read(8 << 20):
                crc = zlib.crc32(chunk, crc)
                obj.write(chunk)
            size = obj.close()
        return FileEntry(rel, "rocksdb", 0, size, f"{CHECKSUM_ALGORITHM}:{crc & 0xFFFFFFFF:08x}", None,
                         kg_range.start, kg_range.end, subtask)
    dst = safe_relative_path(root, rel)
    dst.parent.mkdir(parents=True, exist_ok=True)
    place_file(src, dst)  # a hard link where possible: shared SST files cost nothing in the next checkpoint
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)  # a linked file shares its inode's durability; a copy needs its own
    finally:
        os.close(fd)
    data = dst.read_bytes()
    return FileEntry(rel, "rocksdb", 0, len(data), checksum(data), None, kg_range.start, kg_range.end, subtask)


class SavepointBuilder:
    """Writes a new savepoint directory; nothing appears at `path` unless `commit()` succeeds.

    Files are written into a hidden sibling directory, the manifest last (temp file + rename), and
    the directory is then renamed to `path` in one step. An existing `path` is never overwritten.
    A URI `path` (``s3://...``) gets each file streamed under its prefix and the manifest last; a failure
    deletes what is under the prefix (`statekit.format.publish`).

    Examples
    --------
    >>> import pyarrow as pa, tempfile, os
    >>> from statekit.state import ValueStateDescriptor
    >>> out = os.path.join(tempfile.mkdtemp(), "sp")
    >>> with SavepointBuilder(out, checkpoint_id=1) as b:
    ...     op = b.add_operator("counter", parallelism=1, max_parallelism=128, key_type="bigint",
    ...                         keyed_states=[ValueStateDescriptor("count", "bigint")])
    ...     op.write_keyed(pa.table({"key": [1, 2], "count": [10, 20]}))
    >>> from statekit.savepoint import Savepoint
    >>> Savepoint.open(out).get("counter", 2)
    {'count': 20}
    """

    def __init__(
        self,
        path: "str | os.PathLike[str] | StoragePath",
        *,
        checkpoint_id: int = 0,
        kind: Literal["savepoint", "checkpoint"] = "savepoint",
        job_name: str | None = None,
        rows_per_file: int = DEFAULT_ROWS_PER_FILE,
        max_workers: int = 2,
    ) -> None:
        # A URI target (s3://...) has no staging directory: object stores cannot rename, so every file is
        # streamed straight under the new prefix as it is written (by this process or by Spark tasks) and the
        # manifest is written last (`statekit.format.publish`); a failure deletes what is under the prefix.
        target = as_path(path)
        self.remote: StoragePath | None = None
        if isinstance(target, StoragePath):
            refuse_existing(target)
            self.remote = target
        self.path = cast(Path, target)  # a StoragePath offers the Path operations used on it
        if self.remote is None:
            _check_target(self.path)
        if kind not in ("savepoint", "checkpoint"):
            raise InvalidArgumentError(f"kind must be 'savepoint' or 'checkpoint', not {kind!r}.")
        if rows_per_file < 1:
            raise InvalidArgumentError(f"rows_per_file must be positive, got {rows_per_file}.")
        self.checkpoint_id = int(checkpoint_id)
        self.kind = kind
        self.job_name = job_name
        self.rows_per_file = rows_per_file
        self.max_workers = max_workers
        # Where files are written until the commit renames it to `path`; created when first needed,
        # so a builder that is never committed leaves nothing behind.
        self._staging = self.path.parent / f".{self.path.name}.inprogress-{uuid.uuid4().hex[:12]}"
        self._created_dirs: list[Path] = []
        self._lock: StagingLock | None = None  # held while the staging directory exists
        self._operators: dict[str, OperatorWriter] = {}
        self._done = False

    @property
    def staging(self) -> Path:
        """The hidden sibling directory files are written to before the commit (created on first use); for a URI
        target, the target itself (files are written under its prefix, the manifest last)."""
        self._check_open()
        if self.remote is not None:
            return cast(Path, self.remote)
        if not self._staging.is_dir():
            _check_target(self.path)
            with storage_errors(self.path):
                for parent in reversed(self._staging.parents):
                    if not parent.exists():
                        parent.mkdir()  # one at a time, so that an abort removes exactly the ones made here
                        self._created_dirs.append(parent)
                remove_abandoned_staging(self._staging.parent)  # what killed writers left here
                self._lock = StagingLock(self._staging)
                self._staging.mkdir()
        return self._staging

    def add_operator(
        self,
        op: OperatorIdentifier | str,
        *,
        name: str | None = None,
        parallelism: int = 1,
        max_parallelism: int = 128,
        key_type: TypeLike | None = None,
        keyed_states: Sequence[StateInfo | KeyedStateDescriptor] = (),
        namespace_type: TypeLike | None = None,
        flink: FlinkSerializers | None = None,
        key_groups: Literal["hashed", "stored"] = "hashed",
    ) -> OperatorWriter:
        """Declare an operator and return the writer for its tables (`flink`: serializers carried from a
        Flink savepoint, reused when the savepoint is written back as a Flink savepoint; `key_groups="stored"`:
        keys whose hashCode is user code, each row written with the ``key_group`` it was read with)."""
        self._check_open()
        ident = OperatorIdentifier.coerce(op)
        for what, text in (("uid", ident.uid), ("name", name)):  # the manifest's rule for text, checked now
            why = text_problem(text) if text is not None else None  # rather than when the savepoint commits
            if why and text is not None:
                raise InvalidArgumentError(f"operator {ident.uid_hash}: its {what} {text[:40]!r} cannot be stored in a "
                                           f"savepoint: {why}. Choose a {what} of plain text.")
        check_max_parallelism(max_parallelism)
        check_parallelism(parallelism, max_parallelism)
        if ident.uid_hash in self._operators:
            raise InvalidArgumentError(f"operator {ident} was added twice; each operator appears once.")
        infos = tuple(_state_info(s) for s in keyed_states)
        for s in infos:  # refuse a bad declaration now, not when the savepoint commits
            parse_ddl(s.type)
            why = text_problem(s.name)
            if why:
                raise InvalidArgumentError(f"operator {ident}: keyed state name {s.name[:40]!r} cannot be stored in a "
                                           f"savepoint: {why}.")
        if len({s.name for s in infos}) != len(infos):
            raise InvalidArgumentError(f"operator {ident}: two keyed states share a name in {[s.name for s in infos]}.")
        if infos and key_type is None:
            raise InvalidArgumentError(f"operator {ident}: keyed states need key_type= (e.g. 'bigint').")
        writer = OperatorWriter(
            self,
            ident,
            name=name or ident.uid or ident.uid_hash,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            key_type=to_ddl(key_type) if key_type is not None else None,
            keyed_states=infos,
            namespace_type=to_ddl(namespace_type) if namespace_type is not None else None,
            flink=flink,
            key_groups=key_groups,
        )
        self._operators[ident.uid_hash] = writer
        return writer

    def _check_open(self) -> None:
        if self._done:
            raise SavepointError(f"the builder for {self.path} is already committed or aborted.")

    def commit(self) -> Path:
        """Write every file and the manifest, then publish the savepoint at `path` in one rename."""
        self._check_open()
        try:
            with storage_errors(self.path):
                return self._commit()
        except BaseException as exc:
            if self.remote is not None:
                self._done = True
                noted = remove_written(self.remote, exc)
                if noted is not exc and noted is not None:
                    raise noted from None
                raise
            self.abort()
            raise

    def _commit(self) -> Path:
        features: set[str] = set()
        metas = []
        staging = self.staging
        # to object storage, more workers: each one mostly waits for its uploads
        workers = self.max_workers if self.remote is None else max(self.max_workers, _REMOTE_WORKERS)
        with ThreadPoolExecutor(workers) as pool:
            for writer in self._operators.values():
                meta, f = writer._finish(staging, pool)
                metas.append(meta)
                features |= f
        text = writable_manifest(self._manifest(metas, features), self.path)  # what the reader would refuse is never published
        if self.remote is not None:  # every data file is under the prefix: the manifest, last
            put_manifest(self.remote, MANIFEST_NAME, text.encode("utf-8"))
            self._done = True
            return cast(Path, self.remote)
        for dirpath, _, _ in os.walk(staging):  # the data files' directory entries, before the manifest
            fsync_dir(Path(dirpath))
        write_manifest(staging, text)
        if os.path.lexists(self.path):
            raise SavepointExistsError(f"{self.path} appeared while writing; not overwriting it.")
        try:
            os.rename(staging, self.path)
        except OSError:
            if os.path.lexists(self.path):  # another writer won the race (rename only replaces an empty dir)
                raise SavepointExistsError(f"{self.path} appeared while writing; not overwriting it.") from None
            raise
        fsync_dir(self.path.parent)
        self._release_lock()
        self._done = True
        return self.path

    def _manifest(self, metas: list[OperatorMetadata], features: set[str]) -> Manifest:
        return Manifest(
            checkpoint_id=self.checkpoint_id,
            kind=self.kind,
            created_at=iso_now(),
            job_name=self.job_name,
            operators=tuple(metas),
            features=tuple(sorted(features)),
            format_version=FORMAT_VERSION,
        )

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def abort(self) -> None:
        """Remove everything written so far, and parent directories the builder created; `path` is left untouched."""
        self._done = True
        if self.remote is not None:  # what this process and the Spark tasks wrote under the new prefix
            remove_written(self.remote)
            return
        remove_tree(self._staging)  # also what Spark tasks of a failed stage write after the failure
        self._release_lock()
        for d in reversed(self._created_dirs):  # deepest first; only if still empty
            try:
                d.rmdir()
            except OSError:
                break
        self._created_dirs.clear()

    def __enter__(self) -> "SavepointBuilder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _check_target(path: Path) -> None:
    """Refuse a target that exists (even as a dangling symlink) or whose parent is not a directory."""
    if os.path.lexists(path):
        if path.is_symlink() and not path.exists():
            raise InvalidTargetError(
                f"{path} is a dangling symbolic link; a savepoint is never written through a link. Remove it or "
                "choose another path."
            )
        raise SavepointExistsError(
            f"{path} already exists; savepoints are immutable and never overwritten. Choose a new path."
        )
    for parent in path.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise InvalidTargetError(
                    f"cannot write {path}: {parent} is not a directory (a file or a dangling link); choose a "
                    "target under a directory."
                )
            break


def write_manifest(directory: Path, text: str) -> None:
    """Write `_metadata.json` (the text of `writable_manifest`) atomically: a temp file, fsync, rename."""
    tmp = directory / f".{MANIFEST_NAME}.tmp"
    with open(tmp, "x", encoding="utf-8") as fh:  # new, never through an existing name
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, directory / MANIFEST_NAME)
    fsync_dir(directory)

