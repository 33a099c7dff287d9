"""Canonical Flink savepoints written from Arrow tables: keyed and operator state streams, `_metadata` V4-V6, atomically.

Boundary: the write side of `statekit.format.flink`. Input per operator is a `KeyedLayoutOut`
(key serializer, states with their exact meta-info bytes, timer queues) with a keyed table
(``key_group``, ``key``, one column per state; or a statekit savepoint's `KeyedFiles`, read file
by file) and a timers table, and/or operator states; output is a directory the chosen Flink version
restores (section 7 of `../shared/flink/FORMAT.md`; `versions.FlinkVersion` picks the `_metadata` layout). Keyed entries are built column-wise (`values_out`), one
state run per key group, the 0x80 flag on each run's last entry; fixed-width layouts in bulk
(`regular_out`), with the same bytes. `write_keyed_file` is the unit a Spark task runs (one file
per key-group range); the driver only writes `_metadata` (`metadata_bytes`). Nothing is
compressed; every stream is a file.
"""

from __future__ import annotations

import os
import shutil
import struct
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Sequence, cast

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError, InvalidTargetError, SavepointExistsError, StateTypeError
from statekit.format.files import remove_tree, storage_errors
from statekit.format.flink.encoded import Encoded, concat, join_runs
from statekit.format.flink.metadata import (
    BYTE_STREAM_HANDLE,
    MAGIC,
    PARTITIONABLE_OPERATOR_STATE_HANDLE,
    RELATIVE_STREAM_HANDLE,
    SAVEPOINT_KEY_GROUPS_HANDLE,
)
from statekit.format.flink.proxy import PROXY_VERSION
from statekit.format.flink.regular_out import PRIMITIVE, entry_dtype, is_regular, write_regular_file
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.serializers_out import DataOutput, top_level
from statekit.format.flink.utf import check_metadata_texts
from statekit.format.flink.values_out import encode, nullable_values
from statekit.format.flink.versions import FlinkVersion, check_serializers
from statekit.format.keyed_stream import KeyedFiles
from statekit.format.storage import StoragePath, as_path
from statekit.keygroups import key_group_range

END_OF_KEY_GROUP = b"\xff\xff"
NULL_CHECKPOINT_PROPERTIES = b"\xac\xed\x00\x05\x70"  # Java serialization of null, as the SPA writes it
_MODE_ORDINAL = {"split": 0, "union": 1, "broadcast": 2}
COORDINATOR_HANDLE_NAME = "coordinator-state"  # the inline handle's name, which Flink ignores
_SIGN = np.uint64(1 << 63)


# -- layouts ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyedStateOut:
    """One keyed state: its kind, VALUE_SERIALIZER (ListSerializer / MapSerializer for list / map state),
    its exact `StateMetaInfoSnapshot` bytes and the keyed-table column holding it."""

    name: str
    kind: str
    value: FlinkType
    meta: bytes
    column: str


@dataclass(frozen=True)
class KeyedLayoutOut:
    """What an operator's keyed streams declare: the key serializer, states and timer queues (domain, meta bytes)."""

    key: FlinkType
    states: tuple[KeyedStateOut, ...]
    timers: tuple[tuple[str, bytes], ...]
    max_parallelism: int
    namespace: FlinkType | None = None  # None: VoidNamespace

    @property
    def prefix_bytes(self) -> int:
        return 1 if self.max_parallelism <= 128 else 2

    def proxy(self) -> bytes:
        """`KeyedBackendSerializationProxy` v6, uncompressed."""
        out = DataOutput().i32(PROXY_VERSION).bool(False).raw(top_level(self.key))
        out.i16(len(self.states) + len(self.timers))
        for s in self.states:
            out.raw(s.meta)
        for _, meta in self.timers:
            out.raw(meta)
        return bytes(out.buf)


@dataclass(frozen=True)
class OperatorStateOut:
    """An operator list/union state (per subtask its elements) or a broadcast state (one map, written by every subtask)."""

    name: str
    mode: str  # split | union | broadcast
    value: FlinkType  # element serializer, or the broadcast value serializer
    meta: bytes
    per_subtask: Sequence[pa.Array] = ()
    key: FlinkType | None = None  # broadcast
    entries: pa.Table | None = None  # broadcast: key, value


@dataclass
class SubtaskOut:
    """One subtask's handles: keyed (start, offsets, file, size) and operator state (states, file, size)."""

    index: int
    keyed: tuple[int, list[int], str, int] | None = None
    operator: tuple[list[tuple[str, str, list[int]]], str, int] | None = None


@dataclass
class OperatorOut:
    """One operator of a Flink savepoint being written: identity, parallelism and its subtasks."""
    uid: str | None
    uid_hash: str
    name: str
    parallelism: int
    max_parallelism: int
    subtasks: list[SubtaskOut] = field(default_factory=list)
    coordinator: bytes | None = None  # the operator coordinator's state (a source's enumerator), written inline


# -- keyed entries ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """Entries of one state id, sorted by key group: ``i32 klen | key | i32 vlen | value`` each."""

    sid: int
    key_groups: np.ndarray
    entries: Encoded


def _be32(values: np.ndarray) -> Encoded:
    return Encoded.fixed(values.astype(">i4").view(np.uint8).reshape(-1, 4))


def _prefix(kg: np.ndarray, nbytes: int) -> Encoded:
    if nbytes == 1:
        return Encoded.fixed(kg.astype(np.uint8).reshape(-1, 1))
    return Encoded.fixed(kg.astype(">u2").view(np.uint8).reshape(-1, 2))


def _length(e: Encoded) -> Encoded:
    """The ``i32`` length before each key / value (one constant when all have one width)."""
    if e.width is not None:
        return Encoded.constant(e.width.to_bytes(4, "big"), len(e))
    return _be32(e.lengths)


def _entries(key: Encoded, value: Encoded) -> Encoded:
    return concat([_length(key), key, _length(value), value])


def _sorted_by_key_group(table: pa.Table) -> tuple[pa.Table, np.ndarray]:
    kg = table.column("key_group").to_numpy().astype(np.int32, copy=False)
    if len(kg) > 1 and (kg[1:] < kg[:-1]).any():
        order = np.argsort(kg.astype(np.int16), kind="stable")  # key groups < 32768: numpy's radix sort
        return table.take(pa.array(order)), kg[order]
    return table, kg


def _lengths(col: pa.Array) -> np.ndarray:
    """Entries per list/map value, 0 where null (such rows hold no state)."""
    lengths = np.diff(col.offsets.to_numpy()).astype(np.int64)
    if col.null_count:
        lengths[~col.is_valid().to_numpy(zero_copy_only=False)] = 0
    return lengths


def _namespace(layout: KeyedLayoutOut, table: pa.Table, n: int) -> Encoded:
    if layout.namespace is None:
        return Encoded.constant(b"\x00", n)
    return encode(table.column("namespace"), layout.namespace, what="namespace")


PRIMITIVE_BLOCK = 1 << 20  # rows per block of a streamed regular layout (the Spark fragments')


def primitive_entries(kg: np.ndarray, nb: int, keys: np.ndarray, key_kind: str, values: np.ndarray,
                       value_kind: str, out: np.ndarray | None = None) -> np.ndarray:
    """``i32 klen | kg | key | 0x00 (void namespace) | i32 vlen | value`` for every row, in one structured fill
    (into `out` when it is large enough): numpy swaps the bytes to big-endian as it assigns each field, so no
    intermediate matrices are built. Returns the structured array (n entries)."""
    dt = entry_dtype(nb, key_kind, value_kind)
    n = len(keys)
    whole = out if out is not None and out.dtype == dt and len(out) >= n else np.empty(n, dt)
    out = whole[:n]
    out["kl"] = nb + dt["k"].itemsize + 1
    out["kg"] = kg
    out["k"] = keys
    out["ns"] = 0
    out["vl"] = dt["v"].itemsize
    out["v"] = values
    return out  # a view of `whole` (the buffer the next block reuses): out.base


def keyed_runs(layout: KeyedLayoutOut, keyed: pa.Table | None, timers: pa.Table | None) -> list[Run]:
    """Every keyed entry of `keyed` (and `timers`) as runs per state id, each sorted by key group."""
    runs: list[Run] = []
    nb = layout.prefix_bytes
    if keyed is not None and keyed.num_rows:
        keyed, kg = _sorted_by_key_group(keyed)
        n = keyed.num_rows
        if keyed.column("key").null_count:
            raise StateTypeError("the keyed table holds a null key; Flink forbids null keys.")
        # fixed-width primitive keys and values: each entry written in one typed pass (the regular layout)
        keys_np = keyed.column("key").to_numpy(zero_copy_only=False) if layout.key.kind in PRIMITIVE and layout.namespace is None else None
        lazy: list[Encoded] = []

        def base_of() -> Encoded:  # prefix | key | namespace, built once when a state needs it
            if not lazy:
                lazy.append(concat([_prefix(kg, nb), encode(keyed.column("key"), layout.key, what="a key"),
                                    _namespace(layout, keyed, n)]))
            return lazy[0]

        for sid, s in enumerate(layout.states):
            col = keyed.column(s.column)
            col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            what = f"state {s.name!r}"
            if keys_np is not None and s.kind != "list" and s.kind != "map" and s.value.kind in PRIMITIVE \
                    and not col.null_count:
                arr = primitive_entries(kg, nb, keys_np, layout.key.kind, col.to_numpy(zero_copy_only=False), s.value.kind)
                runs.append(Run(sid, kg, Encoded(arr.view(np.uint8).reshape(-1), None, arr.dtype.itemsize, n=n)))
                continue
            base = base_of()
            if s.kind == "map":
                lengths = _lengths(col)
                rows = np.flatnonzero(lengths > 0)
                if not len(rows):
                    continue
                col = col.take(pa.array(rows))
                counts = lengths[rows]
                expand = np.repeat(rows, counts)
                offs = col.offsets.to_numpy()
                lo, hi = int(offs[0]), int(offs[-1])
                ukeys = encode(col.keys.slice(lo, hi - lo), s.value.children[0], what=what)
                items = col.items.slice(lo, hi - lo)
                value = nullable_values(items, s.value.children[1], what)
                runs.append(Run(sid, kg[expand], _entries(concat([base.take(expand), ukeys]), value)))
                continue
            # a list state whose elements statekit cannot delimit (Kryo...) is read as its value's bytes: written back so
            opaque_list = s.kind == "list" and (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type))
            if s.kind == "list" and not opaque_list:
                lengths = _lengths(col)
                rows = np.flatnonzero(lengths > 0)
                if not len(rows):
                    continue
                col = col.take(pa.array(rows)) if len(rows) < n else col
                elem_t = s.value.children[0] if s.value.kind == "list" else s.value
                col = col.cast(pa.large_list(col.type.value_type))
                flat = col.flatten()
                if flat.null_count:
                    raise StateTypeError(f"{what} holds a null list element; Flink list state forbids nulls.")
                value = join_runs(encode(flat, elem_t, what=what), lengths[rows], b",", False)
            else:
                rows = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False)) if col.null_count else np.arange(n)
                if not len(rows):
                    continue
                if len(rows) < n:
                    col = col.take(pa.array(rows))
                value = encode(col, replace(s.value, kind="binary", children=()) if opaque_list else s.value, what=what)
            key = base if len(rows) == n else base.take(rows)
            runs.append(Run(sid, kg[rows] if len(rows) < n else kg, _entries(key, value)))
    if timers is not None and timers.num_rows and layout.timers:
        timers, tkg = _sorted_by_key_group(timers)
        domains = timers.column("domain").to_numpy(zero_copy_only=False)
        for j, (domain, _) in enumerate(layout.timers):
            rows = np.flatnonzero(domains == domain)
            if not len(rows):
                continue
            t = timers.take(pa.array(rows))
            ts = t.column("timestamp").to_numpy().astype(np.int64).view(np.uint64) ^ _SIGN
            key = concat([_prefix(tkg[rows], nb), Encoded.fixed(ts.astype(">u8").view(np.uint8).reshape(-1, 8)),
                          encode(t.column("key"), layout.key, what="a timer key"), _namespace(layout, t, len(rows))])
            runs.append(Run(len(layout.states) + j, tkg[rows], _entries(key, Encoded.constant(b"", len(rows)))))
    return runs


def write_key_groups(f: BinaryIO, runs: list[Run], start: int, end: int, pos: int) -> list[int]:
    """Write key groups [start, end] of `runs` at stream position `pos`; their offsets (0 = empty)."""
    n = end - start + 1
    offsets = [0] * n
    bounds = []
    for r in runs:
        b = np.searchsorted(r.key_groups, np.arange(start, end + 2))
        data = r.entries.data if r.entries.data.flags.writeable else r.entries.data.copy()
        ends = b[1:] - 1
        ends = ends[b[1:] > b[:-1]]
        data[r.entries.offsets[ends] + 4] |= 0x80  # the last entry of each state run: its first key byte
        bounds.append((r.sid.to_bytes(2, "big"), b.tolist(), r.entries.offsets, data.data))
    for i in range(n):
        first = True
        for sid, b, offs, mv in bounds:
            a, z = b[i], b[i + 1]
            if a == z:
                continue
            if first:
                offsets[i] = pos
                first = False
            lo, hi = int(offs[a]), int(offs[z])
            f.write(sid)
            f.write(mv[lo:hi])
            pos += 2 + hi - lo
        if not first:
            f.write(END_OF_KEY_GROUP)
            pos += 2
    return offsets


def _all_primitive(layout: KeyedLayoutOut, keyed: pa.Table | None, timers: pa.Table | None) -> bool:
    """The regular layout (`regular_out`): primitive key and value states, void namespace (timers too)."""
    has_timers = timers is not None and timers.num_rows > 0
    return (keyed is not None and keyed.num_rows > 0
            and is_regular(layout, keyed.schema, timers.schema if has_timers else None))  # type: ignore[union-attr]


def write_keyed_file(path: Path, layout: KeyedLayoutOut, keyed: pa.Table | None, timers: pa.Table | None,
                     start: int, end: int) -> tuple[list[int], int]:
    """One keyed state file for key groups [start, end]: the backend proxy, then the key groups.
    Returns the key-group offsets and the file size. The rows given must lie in that range."""
    if _all_primitive(layout, keyed, timers):
        assert keyed is not None
        sorted_timers = _sorted_by_key_group(timers)[0] if timers is not None and timers.num_rows else None
        return write_regular_file(path, layout, [_sorted_by_key_group(keyed)[0]], start, end, sorted_timers)
    if keyed is not None and keyed.num_rows and layout.key.form == "row":
        from statekit.format.flink import sqlfixed  # here: DataStream writes never load the SQL encoders

        if sqlfixed.fixed_layout(layout, keyed.schema, timers is not None and timers.num_rows > 0):
            done = sqlfixed.write_fixed_file(path, layout, _sorted_by_key_group(keyed)[0], start, end)
            if done is not None:
                return done
    runs = keyed_runs(layout, keyed, timers)
    for r in runs:
        if len(r.key_groups) and (r.key_groups[0] < start or r.key_groups[-1] > end):
            raise InvalidArgumentError(f"keyed rows outside key groups {start}..{end} were given for one file.")
    proxy = layout.proxy()
    with _new_file(path) as f:
        f.write(proxy)
        offsets = write_key_groups(f, runs, start, end, len(proxy))
        size = f.tell()
    return offsets, size


@contextmanager
def _new_file(path: "Path | StoragePath") -> Iterator[Any]:
    """A new local file (fsynced when the block ends) or a new object streamed to its store (completed then)."""
    if isinstance(path, StoragePath):
        with path.create() as obj:
            yield obj
            obj.close()
        return
    with open(path, "xb") as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def write_operator_file(path: Path, states: Sequence[OperatorStateOut], subtask: int) -> tuple[list[tuple[str, str, list[int]]], int]:
    """One subtask's operator state stream: the proxy, list/union elements, broadcast maps; per state its offsets."""
    lists = [s for s in states if s.mode != "broadcast"]
    bcast = [s for s in states if s.mode == "broadcast"]
    out = DataOutput().i32(PROXY_VERSION).bool(False).i16(len(lists))
    for s in lists:
        out.raw(s.meta)
    out.i16(len(bcast))
    for s in bcast:
        out.raw(s.meta)
    handle: list[tuple[str, str, list[int]]] = []
    for s in lists:
        items = s.per_subtask[subtask] if subtask < len(s.per_subtask) else pa.array([], pa.null())
        offsets: list[int] = []
        if len(items):
            if items.null_count:
                raise StateTypeError(f"list state {s.name!r} holds a null element; Flink list state forbids nulls.")
            enc = encode(items, s.value, what=f"list state {s.name!r}")
            base = len(out.buf)
            offsets = (enc.offsets[:-1] + base).tolist()
            out.raw(enc.data.tobytes())
        handle.append((s.name, s.mode, offsets))
    for s in bcast:
        assert s.entries is not None and s.key is not None
        at = len(out.buf)
        what = f"broadcast state {s.name!r}"
        kv = concat([encode(s.entries.column("key"), s.key, what=what),
                     encode(s.entries.column("value"), s.value, what=what)]) if s.entries.num_rows else None
        out.i32(s.entries.num_rows)
        if kv is not None:
            out.raw(kv.data.tobytes())
        handle.append((s.name, s.mode, [at]))
    with _new_file(path) as f:
        f.write(out.buf)
    return handle, len(out.buf)


# -- _metadata ----------------------------------------------------------------------------------------
def _relative(out: DataOutput, name: str, size: int) -> None:
    out.u8(RELATIVE_STREAM_HANDLE).utf(name).i64(size)


def metadata_bytes(checkpoint_id: int, operators: Sequence[OperatorOut], *,
                   flink_version: FlinkVersion | str | None = None) -> bytes:
    """`_metadata` for `flink_version` (default: the newest): magic, its metadata version, no master states,
    the operators, and a null CheckpointProperties (V4+).

    V5 (Flink 2.0) added each operator's name and uid; V6 (2.1) changed only how in-flight channel state
    is written, which a savepoint never holds. V4 (Flink 1.16-1.20) has neither name nor uid.
    """
    version = FlinkVersion.parse(flink_version) if flink_version is not None else FlinkVersion.newest()
    out = DataOutput().i32(MAGIC).i32(version.metadata_version).i64(checkpoint_id).i32(0).i32(len(operators))
    for op in operators:
        if version.metadata_version >= 5:
            out.utf(op.name or "").utf(op.uid or "")
        out.raw(bytes.fromhex(op.uid_hash))
        out.i32(op.parallelism).i32(op.max_parallelism)
        if op.coordinator is not None:  # as Flink stores it: a ByteStreamStateHandle inside _metadata
            out.u8(BYTE_STREAM_HANDLE).utf(COORDINATOR_HANDLE_NAME).i32(len(op.coordinator)).raw(op.coordinator)
        else:
            out.u8(0)  # no coordinator state
        out.i32(len(op.subtasks))
        for st in op.subtasks:
            out.i32(st.index)
            if st.operator is not None:
                states, name, size = st.operator
                out.i32(1).u8(PARTITIONABLE_OPERATOR_STATE_HANDLE).i32(len(states))
                for sname, mode, offsets in states:
                    out.utf(sname).u8(_MODE_ORDINAL[mode]).i32(len(offsets))
                    out.raw(struct.pack(f">{len(offsets)}q", *offsets))
                _relative(out, name, size)
            else:
                out.i32(0)
            out.i32(0)  # no raw operator state
            if st.keyed is not None:
                start, offsets, name, size = st.keyed
                out.u8(SAVEPOINT_KEY_GROUPS_HANDLE).i32(start).i32(len(offsets))
                out.raw(struct.pack(f">{len(offsets)}q", *offsets))
                _relative(out, name, size)
            else:
                out.u8(0)
            out.u8(0)  # no raw keyed state
            out.i32(0).i32(0)  # no in-flight data (savepoints are aligned)
    out.raw(NULL_CHECKPOINT_PROPERTIES)
    return bytes(out.buf)


# -- atomic output ------------------------------------------------------------------------------------
class FlinkStaging:
    """A hidden sibling directory that becomes the savepoint in one rename once `_metadata` is written.

    For a URI target there is no staging directory: ``dir`` is the target itself, each file is streamed under
    its prefix as written (`new_file` gives `StoragePath`s; `carry_file` copies existing files there on the
    server) and `_metadata` is written last; a failure deletes what is under the prefix.
    """

    def __init__(self, target: Any) -> None:  # a path, a URI or a StoragePath
        from statekit.format.publish import refuse_existing

        where = as_path(target)
        self.remote: StoragePath | None = None
        self._done = False
        if isinstance(where, StoragePath):
            refuse_existing(where)
            self.remote = where
            self.target = self.dir = cast(Path, where)  # a StoragePath offers the Path operations used here
            return
        self.target = where
        check_target(self.target)
        self.dir = self.target.parent / f".{self.target.name}.inprogress-{uuid.uuid4().hex[:12]}"
        with storage_errors(self.target):
            self.dir.mkdir(parents=False)

    @property
    def direct(self) -> bool:
        """Whether files go straight under the target (a URI) rather than into a local staging directory."""
        return self.remote is not None

    def new_file(self) -> tuple[str, Path]:
        """A fresh relative name (Flink writes random UUIDs) and its path in staging."""
        name = str(uuid.uuid4())
        return name, self.dir / name

    def carry_file(self, source: "Path | StoragePath", name: str) -> None:
        """The existing state file `source` as `name` in the new savepoint, unchanged: a server-side copy on the
        same store (S3 CopyObject: no byte through this process), uploaded or downloaded between a store and
        local disk, a hard link on one local file system (else a copy made by the kernel)."""
        out = self.dir / name
        if isinstance(out, StoragePath):
            if isinstance(source, StoragePath):
                out.copy_from(source)
            else:
                out.upload(source)
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, StoragePath):
            source.download(out)
            return
        try:
            os.link(source, out)  # never copied through Python: the same inode
        except OSError:
            shutil.copyfile(source, out)  # another file system: the kernel copies it

    def write_new(self, name: str, data: bytes) -> None:
        """A new file `name` of the savepoint holding `data` (streamed to the store, or written and synced)."""
        out = self.dir / name
        if isinstance(out, StoragePath):
            out.write_bytes(data)
            return
        with open(out, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def commit(self, metadata: bytes) -> Path:
        if self.direct:
            from statekit.format.publish import put_manifest

            assert self.remote is not None
            try:
                put_manifest(self.remote, "_metadata", metadata)
            except BaseException as exc:
                self._failed(exc)
                raise
            self._done = True
            return self.target
        with storage_errors(self.target):
            with open(self.dir / "_metadata", "xb") as f:
                f.write(metadata)
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(self.dir)
        if os.path.lexists(self.target):
            raise SavepointExistsError(f"{self.target} appeared while writing; not overwriting it.")
        try:
            os.rename(self.dir, self.target)
        except OSError:
            if os.path.lexists(self.target):
                raise SavepointExistsError(f"{self.target} appeared while writing; not overwriting it.") from None
            raise
        _fsync_dir(self.target.parent)
        self._done = True
        return self.target

    def abort(self) -> None:
        self._done = True
        if self.direct:
            from statekit.format.publish import remove_written

            assert self.remote is not None
            remove_written(self.remote)  # also what Spark tasks of a failed stage wrote
            return
        remove_tree(self.dir)  # also what Spark tasks of a failed stage write after the failure

    def _failed(self, exc: BaseException) -> None:
        """Remove what a direct write put under the target; raise `exc` with a note of it if it is a storage error."""
        from statekit.format.publish import remove_written

        self._done = True
        assert self.remote is not None
        noted = remove_written(self.remote, exc)
        if noted is not None and noted is not exc:
            raise noted from None

    def __enter__(self) -> "FlinkStaging":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._done:
            return
        if self.direct and exc is not None:
            self._failed(exc)
            return
        self.abort()


def check_target(path: Path) -> None:
    """Refuse an existing target (savepoints are never overwritten) or one without a parent directory."""
    if os.path.lexists(path):
        raise SavepointExistsError(f"{path} already exists; savepoints are never overwritten. Choose a new path.")
    if not path.parent.is_dir():
        raise InvalidTargetError(f"{path.parent} is not a directory; create it first or choose another path.")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- one operator, locally ----------------------------------------------------------------------------
@dataclass
class OperatorData:
    """Everything about one operator to write: identity, placement, keyed layout and tables, operator states."""

    uid: str | None
    uid_hash: str
    name: str
    parallelism: int
    max_parallelism: int
    layout: KeyedLayoutOut | None = None
    keyed: pa.Table | KeyedFiles | None = None  # key_group, key, [namespace], state columns (or files to read)
    timers: pa.Table | None = None  # key_group, key, [namespace], timestamp, domain
    operator_states: Sequence[OperatorStateOut] = ()
    #: the operator coordinator's state (a new-style source's split enumerator) as read, carried unchanged
    coordinator: bytes | None = None
    #: state carried as it is (`statekit.savepoint.flink_repair.carried`): given the `FlinkStaging`, the operator's
    #: subtask handles with its files placed there (`carry_file`: linked, or copied on the store); layout, tables and
    #: operator states unused
    carry: Any = None


def _by_key_group(table: pa.Table | None) -> tuple[pa.Table, np.ndarray] | None:
    """`table` sorted by key group (usually it already is) with its key groups, or None when empty."""
    if table is None or not table.num_rows:
        return None
    table, kg = _sorted_by_key_group(table)
    return table, kg


def _key_group_slice(t: tuple[pa.Table, np.ndarray] | None, rng: Any) -> pa.Table | None:
    if t is None:
        return None
    table, kg = t
    lo, hi = np.searchsorted(kg, [rng.start, rng.end + 1])
    return table.slice(int(lo), int(hi - lo))


def write_operator(staging: FlinkStaging, op: OperatorData) -> OperatorOut:
    """Write one operator's state files into `staging` (one keyed file per subtask range) and describe them."""
    out = OperatorOut(op.uid, op.uid_hash, op.name, op.parallelism, op.max_parallelism, coordinator=op.coordinator)
    if op.carry is not None:
        out.subtasks.extend(op.carry(staging))
        return out
    has_op_state = bool(op.operator_states)
    if op.layout is None and not has_op_state:
        return out  # stateless: listed, no subtask states
    files = op.keyed if isinstance(op.keyed, KeyedFiles) else None
    timer_schema = op.timers.schema if op.timers is not None and op.timers.num_rows else None
    if files is not None and (op.layout is None or not files.num_rows
                              or not is_regular(op.layout, files.schema, timer_schema)):
        files = None  # only the regular layout is written file by file
        op = replace(op, keyed=op.keyed.table())  # type: ignore[union-attr]
    keyed = _by_key_group(op.keyed) if files is None else None  # type: ignore[arg-type]
    timers = _by_key_group(op.timers)
    rows = files.num_rows if files is not None else len(keyed[1]) if keyed is not None else 0

    def subtask(i: int) -> SubtaskOut:
        st = SubtaskOut(i)
        if op.layout is not None:
            rng = key_group_range(op.max_parallelism, op.parallelism, i)
            name, path = staging.new_file()
            tpart = _key_group_slice(timers, rng)
            if files is not None:
                offsets, size = write_regular_file(path, op.layout, files.batches(rng.start, rng.end), rng.start,
                                                   rng.end, tpart)
            else:
                part = _key_group_slice(keyed, rng)
                offsets, size = write_keyed_file(path, op.layout, part, tpart, rng.start, rng.end)
            st.keyed = (rng.start, offsets, name, size)
        if has_op_state:
            name, path = staging.new_file()
            states, size = write_operator_file(path, op.operator_states, i)
            st.operator = (states, name, size)
        return st

    # subtask files in parallel: decoding, numpy's copies and the file writes release the GIL
    workers = min(op.parallelism, os.cpu_count() or 1, 4)
    if workers > 1 and rows >= 1 << 16:
        with ThreadPoolExecutor(workers) as pool:
            out.subtasks.extend(pool.map(subtask, range(op.parallelism)))
    else:
        out.subtasks.extend(subtask(i) for i in range(op.parallelism))
    return out


def serializers_of(who: str, layout: KeyedLayoutOut | None,
                   operator_states: Sequence[OperatorStateOut]) -> Iterator[tuple[str, FlinkType]]:
    """(what, serializer) for every serializer one operator's written state carries (`check_serializers`' input)."""
    if layout is not None:
        yield f"operator {who}, its key", layout.key
        if layout.namespace is not None:
            yield f"operator {who}, its window namespace", layout.namespace
        for ks in layout.states:
            yield f"operator {who}, keyed state {ks.name!r}", ks.value
    for s in operator_states:
        yield f"operator {who}, operator state {s.name!r}", s.value
        if s.key is not None:
            yield f"operator {who}, broadcast state {s.name!r} (its key)", s.key


def write_flink_savepoint(target: str | os.PathLike[str], operators: Sequence[OperatorData], *,
                          checkpoint_id: int = 0, flink_version: FlinkVersion | str | None = None) -> Path:
    """Write a canonical Flink savepoint at `target` atomically (nothing appears there unless it all succeeded),
    with the `_metadata` layout of `flink_version` (default: the newest)."""
    version = FlinkVersion.parse(flink_version) if flink_version is not None else FlinkVersion.newest()
    seen: set[str] = set()
    for op in operators:
        if op.uid_hash in seen:
            raise InvalidArgumentError(f"operator {op.uid or op.uid_hash} appears twice; each operator appears once.")
        seen.add(op.uid_hash)
        check_metadata_texts([("operator uid", op.uid), ("operator name", op.name)])  # before any file is written
    check_serializers(version, (p for op in operators
                                for p in serializers_of(op.uid or op.uid_hash, op.layout, op.operator_states)))
    # straight to the store for a URI target (carried files copied there by the server)
    with FlinkStaging(target) as staging:
        with storage_errors(staging.target):  # a full disk is a StorageFullError, the partial output removed
            outs = [write_operator(staging, op) for op in operators]
        return staging.commit(metadata_bytes(checkpoint_id, outs, flink_version=version))
