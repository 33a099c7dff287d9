"""Flink's binary `_metadata` (MetadataV3-V6): operators, subtasks and every state-handle type, parsed or refused by name.

Boundary: this module only parses `_metadata` into plain frozen dataclasses (no state file is
opened). Resolving a handle to bytes on disk lives in `statekit.format.flink.files`; the backend
proxies in the state files in `proxy`; decoding keyed data in `keyed`. Layout as in
`../shared/flink/FORMAT.md` section 2 (`MetadataV2V3SerializerBase`, `MetadataV3..V6Serializer`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Union

from statekit.errors import CorruptSavepointError, NotASavepointError, UnsupportedFormatError
from statekit.format.flink.binary import DataInput

METADATA_NAME = "_metadata"
MAGIC = 0x4960672D
SUPPORTED_VERSIONS = (3, 4, 5, 6)
_MASTER_STATE_MAGIC = 0xC96B1696 - (1 << 32)

# handle type bytes (MetadataV2V3SerializerBase)
NULL_HANDLE = 0
BYTE_STREAM_HANDLE = 1
FILE_STREAM_HANDLE = 2
KEY_GROUPS_HANDLE = 3
PARTITIONABLE_OPERATOR_STATE_HANDLE = 4
INCREMENTAL_KEY_GROUPS_HANDLE = 5
RELATIVE_STREAM_HANDLE = 6
SAVEPOINT_KEY_GROUPS_HANDLE = 7
CHANGELOG_HANDLE = 8
CHANGELOG_BYTE_INCREMENT_HANDLE = 9
CHANGELOG_FILE_INCREMENT_HANDLE = 10
INCREMENTAL_KEY_GROUPS_HANDLE_V2 = 11
KEY_GROUPS_HANDLE_V2 = 12
CHANGELOG_HANDLE_V2 = 13
CHANGELOG_BYTE_INCREMENT_HANDLE_V2 = 14
SEGMENT_FILE_HANDLE = 15
EMPTY_SEGMENT_FILE_HANDLE = 16
SEGMENT_PARTITIONABLE_OPERATOR_STATE_HANDLE = 17

_UNSUPPORTED = {
    INCREMENTAL_KEY_GROUPS_HANDLE: ("INCREMENTAL_KEY_GROUPS_HANDLE (Flink 1.x incremental RocksDB)",
                                    "take a canonical savepoint with Flink 2.x"),
    CHANGELOG_HANDLE: ("CHANGELOG_HANDLE (changelog state backend)", "take a canonical savepoint"),
    CHANGELOG_BYTE_INCREMENT_HANDLE: ("CHANGELOG_BYTE_INCREMENT_HANDLE (changelog state backend)",
                                      "take a canonical savepoint"),
    CHANGELOG_FILE_INCREMENT_HANDLE: ("CHANGELOG_FILE_INCREMENT_HANDLE (changelog state backend)",
                                      "take a canonical savepoint"),
    CHANGELOG_HANDLE_V2: ("CHANGELOG_HANDLE_V2 (changelog state backend)", "take a canonical savepoint"),
    CHANGELOG_BYTE_INCREMENT_HANDLE_V2: ("CHANGELOG_BYTE_INCREMENT_HANDLE_V2 (changelog state backend)",
                                         "take a canonical savepoint"),
    SEGMENT_FILE_HANDLE: ("SEGMENT_FILE_HANDLE (file-merging checkpoint)", "take a canonical savepoint"),
    EMPTY_SEGMENT_FILE_HANDLE: ("EMPTY_SEGMENT_FILE_HANDLE (file-merging checkpoint)", "take a canonical savepoint"),
    SEGMENT_PARTITIONABLE_OPERATOR_STATE_HANDLE: (
        "SEGMENT_PARTITIONABLE_OPERATOR_STATE_HANDLE (file-merging checkpoint)", "take a canonical savepoint"),
}

Mode = Literal["split", "union", "broadcast"]
_MODES: tuple[Mode, ...] = ("split", "union", "broadcast")  # OperatorStateHandle.Mode ordinals


@dataclass(frozen=True)
class StreamHandle:
    """A stream of bytes: a file relative to `_metadata` (6), an absolute file (2), or inline bytes (1)."""

    kind: Literal["relative", "file", "bytes"]
    path: str  # relative path, absolute path/URI, or (inline) the handle's name, which Flink ignores
    size: int
    data: bytes | None = None


@dataclass(frozen=True)
class KeyGroupsHandle:
    """Canonical keyed state (type 7 savepoint, 12 checkpoint, 3 legacy): one offset per key group, 0 = empty."""

    type: int
    start: int
    offsets: tuple[int, ...]
    delegate: StreamHandle
    handle_id: str | None = None

    @property
    def end(self) -> int:
        """Last key group (inclusive); ``start - 1`` when the range is empty."""
        return self.start + len(self.offsets) - 1


@dataclass(frozen=True)
class IncrementalKeyedHandle:
    """Native RocksDB state (type 11): the backend's own files, shared and private, plus a meta stream."""

    checkpoint_id: int
    backend_id: str
    start: int
    count: int
    checkpointed_size: int
    meta: StreamHandle
    shared: tuple[tuple[str, StreamHandle], ...]
    private: tuple[tuple[str, StreamHandle], ...]
    handle_id: str

    @property
    def end(self) -> int:
        return self.start + self.count - 1


KeyedHandle = Union[KeyGroupsHandle, IncrementalKeyedHandle]


@dataclass(frozen=True)
class OperatorStateEntry:
    """One named operator state inside an operator-state stream, with its element offsets."""

    name: str
    mode: Mode
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class OperatorStreamHandle:
    """Operator state (type 4): named list/union/broadcast states at offsets of one stream."""

    states: tuple[OperatorStateEntry, ...]
    delegate: StreamHandle


@dataclass(frozen=True)
class SubtaskState:
    """The state handles of one subtask of an operator: managed/raw operator and keyed streams."""
    index: int
    managed_operator: OperatorStreamHandle | None = None
    raw_operator: OperatorStreamHandle | None = None
    managed_keyed: KeyedHandle | None = None
    raw_keyed: KeyedHandle | None = None
    finished: bool = False


@dataclass(frozen=True)
class OperatorState:
    """One operator of the checkpoint; `operator_id` is the 32-hex uid hash."""

    name: str
    uid: str
    operator_id: str
    parallelism: int
    max_parallelism: int
    coordinator: StreamHandle | None
    subtasks: tuple[SubtaskState, ...]
    fully_finished: bool = False
    #: where this operator's record lies in `_metadata` (start, end): a rewrite of one operator splices it there
    span: tuple[int, int] = (0, 0)

    @property
    def verified_uid(self) -> str | None:
        """The uid, when it is the one the operator id was hashed from (else None: a name in the uid field)."""
        from statekit.identifiers import OperatorIdentifier

        return self.uid if self.uid and OperatorIdentifier.for_uid(self.uid).uid_hash == self.operator_id else None


@dataclass(frozen=True)
class CheckpointMetadata:
    """A parsed `_metadata`: `path` is the directory holding it."""

    path: Path
    version: int
    checkpoint_id: int
    operators: tuple[OperatorState, ...]

    def operator(self, operator_id: str) -> OperatorState | None:
        for op in self.operators:
            if op.operator_id == operator_id:
                return op
        return None


def is_flink_metadata(path: Path) -> bool:
    """Whether `path/_metadata` starts with Flink's magic number (cheap: reads 4 bytes)."""
    try:
        with (path / METADATA_NAME).open("rb") as f:
            return f.read(4) == MAGIC.to_bytes(4, "big")
    except OSError:  # also a StorageNotFoundError (a FileNotFoundError) of an object store
        return False


def read_metadata(path: Any) -> CheckpointMetadata:
    """Parse `path/_metadata` (a savepoint or retained-checkpoint directory)."""
    root: Path = path if isinstance(path, Path) or hasattr(path, "fs") else Path(path)  # a StoragePath stays one
    mpath = root / METADATA_NAME
    if not mpath.is_file():
        raise NotASavepointError(f"{root} has no {METADATA_NAME}; point at a Flink savepoint or chk-N directory.")
    return parse_metadata(mpath.read_bytes(), root)


def parse_metadata(data: bytes, root: Path) -> CheckpointMetadata:
    """Parse a Flink checkpoint _metadata file (the bytes of root/_metadata)."""
    inp = DataInput(data, f"{root / METADATA_NAME}")
    if len(data) < 8 or int.from_bytes(data[:4], "big") != MAGIC:
        raise NotASavepointError(
            f"{root / METADATA_NAME} does not start with Flink's metadata magic 0x4960672d; it is not a Flink "
            "savepoint or checkpoint (a statekit savepoint has _metadata.json)."
        )
    inp.pos = 4
    version = inp.i32("the metadata version")
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedFormatError(
            f"{root / METADATA_NAME}: Flink metadata version {version} is not supported; statekit reads versions "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))} (Flink 1.11 to 2.3). Take the savepoint with a Flink of that range."
        )
    checkpoint_id = inp.i64("the checkpoint id")
    for _ in range(inp.count("the number of master states")):
        if inp.i32("a master state's magic") != _MASTER_STATE_MAGIC:
            inp.pos -= 4
            raise inp.fail("a master state does not start with its magic number")
        inp.skip(inp.count("a master state's length"), "a master state")
    ops = []
    for _ in range(inp.count("the number of operators")):
        start = inp.pos
        op = _operator(inp, version)
        ops.append(replace(op, span=(start, inp.pos)))
    # V4+ append Java-serialized CheckpointProperties; nothing after the operators is needed.
    return CheckpointMetadata(root, version, checkpoint_id, tuple(ops))


def _operator(inp: DataInput, version: int) -> OperatorState:
    name = uid = ""
    if version >= 5:
        name = inp.utf("an operator name")
        uid = inp.utf("an operator uid")
    operator_id = inp.bytes(16, "an operator id").hex()
    parallelism = inp.i32("a parallelism")
    max_parallelism = inp.i32("a max parallelism")
    if not 1 <= max_parallelism <= 32768 or not 0 <= parallelism <= 32768:
        inp.pos -= 8
        raise inp.fail(f"operator {operator_id} has parallelism {parallelism} / max parallelism {max_parallelism}")
    coordinator = _stream(inp)
    n = inp.i32("a subtask count")
    if n == -1:
        return OperatorState(name, uid, operator_id, parallelism, max_parallelism, coordinator, (), True)
    if n < 0 or n > 32768:
        inp.pos -= 4
        raise inp.fail(f"operator {operator_id} has {n} subtask states")
    subtasks = []
    for _ in range(n):
        idx = inp.i32("a subtask index")
        if idx < 0:  # -(i+1): a finished subtask, no state follows
            subtasks.append(SubtaskState(-idx - 1, finished=True))
            continue
        subtasks.append(_subtask(inp, idx))
    return OperatorState(name, uid, operator_id, parallelism, max_parallelism, coordinator, tuple(subtasks))


def _subtask(inp: DataInput, idx: int) -> SubtaskState:
    managed_op = _operator_handle(inp) if inp.i32("a managed operator-state flag") else None
    raw_op = _operator_handle(inp) if inp.i32("a raw operator-state flag") else None
    managed_keyed = _keyed_handle(inp)
    raw_keyed = _keyed_handle(inp)
    if inp.count("the number of input-channel handles"):
        raise UnsupportedFormatError(
            f"{inp.where}: subtask {idx} holds in-flight data of an unaligned checkpoint (input-channel state); "
            "statekit does not read it. Take a savepoint (savepoints are always aligned)."
        )
    if inp.count("the number of result-subpartition handles"):
        raise UnsupportedFormatError(
            f"{inp.where}: subtask {idx} holds in-flight data of an unaligned checkpoint (result-subpartition "
            "state); statekit does not read it. Take a savepoint (savepoints are always aligned)."
        )
    return SubtaskState(idx, managed_op, raw_op, managed_keyed, raw_keyed)


def _refuse(inp: DataInput, t: int) -> UnsupportedFormatError:
    name, fix = _UNSUPPORTED[t]
    return UnsupportedFormatError(
        f"{inp.where}: state handle type {t} {name} at offset {inp.pos - 1} is not supported by statekit; {fix} "
        "(`flink stop --type canonical` or `flink savepoint --type canonical`)."
    )


def _unknown(inp: DataInput, t: int, what: str) -> CorruptSavepointError:
    inp.pos -= 1
    return inp.fail(f"unknown {what} handle type {t}")


def _stream(inp: DataInput) -> StreamHandle | None:
    t = inp.u8("a stream handle type")
    if t == NULL_HANDLE:
        return None
    if t == RELATIVE_STREAM_HANDLE:
        path = inp.utf("a relative state path")
        return StreamHandle("relative", path, inp.i64("a state file size"))
    if t == BYTE_STREAM_HANDLE:
        name = inp.utf("an inline handle name")
        n = inp.count("an inline state length", limit=(1 << 31) - 1)
        return StreamHandle("bytes", name, n, inp.bytes(n, "inline state bytes"))
    if t == FILE_STREAM_HANDLE:
        size = inp.i64("a state file size")
        return StreamHandle("file", inp.utf("a state file path"), size)
    if t in _UNSUPPORTED:
        raise _refuse(inp, t)
    raise _unknown(inp, t, "stream")


def _required_stream(inp: DataInput, what: str) -> StreamHandle:
    h = _stream(inp)
    if h is None:
        raise inp.fail(f"{what} has no stream")
    return h


def _keyed_handle(inp: DataInput) -> KeyedHandle | None:
    t = inp.u8("a keyed state handle type")
    if t == NULL_HANDLE:
        return None
    if t in (KEY_GROUPS_HANDLE, SAVEPOINT_KEY_GROUPS_HANDLE, KEY_GROUPS_HANDLE_V2):
        start = inp.i32("a key-group range start")
        n = inp.count("a key-group count", limit=32768)
        if start < 0 or start + n > 32768:
            raise inp.fail(f"key-group range {start}+{n} is outside 0..32767")
        offsets = tuple(inp.i64("a key-group offset") for _ in range(n))
        delegate = _required_stream(inp, "a key-groups handle")
        handle_id = inp.utf("a state handle id") if t == KEY_GROUPS_HANDLE_V2 else None
        if any(o < 0 for o in offsets):
            raise inp.fail("a key-group offset is negative")
        return KeyGroupsHandle(t, start, offsets, delegate, handle_id)
    if t == INCREMENTAL_KEY_GROUPS_HANDLE_V2:
        checkpoint_id = inp.i64("a checkpoint id")
        backend_id = inp.utf("a backend identifier")
        start = inp.i32("a key-group range start")
        n = inp.count("a key-group count", limit=32768)
        size = inp.i64("a checkpointed size")
        meta = _required_stream(inp, "an incremental handle's meta stream")
        shared = _file_list(inp, "shared")
        private = _file_list(inp, "private")
        handle_id = inp.utf("a state handle id")
        return IncrementalKeyedHandle(checkpoint_id, backend_id, start, n, size, meta, shared, private, handle_id)
    if t in _UNSUPPORTED:
        raise _refuse(inp, t)
    raise _unknown(inp, t, "keyed state")


def _file_list(inp: DataInput, what: str) -> tuple[tuple[str, StreamHandle], ...]:
    out = []
    for _ in range(inp.count(f"the number of {what} files")):
        name = inp.utf(f"a {what} file name")
        out.append((name, _required_stream(inp, f"{what} file {name!r}")))
    return tuple(out)


def _operator_handle(inp: DataInput) -> OperatorStreamHandle | None:
    t = inp.u8("an operator state handle type")
    if t == NULL_HANDLE:
        return None
    if t != PARTITIONABLE_OPERATOR_STATE_HANDLE:
        if t in _UNSUPPORTED:
            raise _refuse(inp, t)
        raise _unknown(inp, t, "operator state")
    states = []
    for _ in range(inp.count("the number of operator states")):
        name = inp.utf("an operator state name")
        mode = inp.u8("a distribution mode")
        if mode >= len(_MODES):
            inp.pos -= 1
            raise inp.fail(f"operator state {name!r} has unknown distribution mode {mode}")
        offsets = tuple(inp.i64("an element offset") for _ in range(inp.count("an offset count")))
        states.append(OperatorStateEntry(name, _MODES[mode], offsets))
    return OperatorStreamHandle(tuple(states), _required_stream(inp, "an operator state handle"))
