"""Flink's new-style Source state: reader splits (`SourceReaderState`) and the enumerator's coordinator state, Kafka's decoded.

Boundary: bytes in, plain values out, and back - no file is opened here. A `SourceOperator` keeps its
reader's splits in the operator list state `SourceReaderState` (element serializer
`BytePrimitiveArraySerializer`): each element is `SimpleVersionedSerialization` of one split
(``i32 version | i32 length | split bytes``). The `SourceCoordinator` keeps its enumerator's checkpoint
as the operator's coordinator state in `_metadata` (``i32 coordinator serde version (1) | i32 enumerator
serializer version | i32 length | enumerator bytes``). The connector defines the split and enumerator
bytes; statekit decodes `flink-connector-kafka`'s (`KafkaPartitionSplitSerializer` version 0:
``writeUTF topic | i32 partition | i64 starting offset | i64 stopping offset``; `KafkaSourceEnumState`
versions 1-3, version 3 holding each partition's split) and `flink-connector-files`' (`FileSourceSplit`
version 1: id, path, byte range, reader position; `PendingSplitsCheckpoint` version 1: pending splits and
processed paths). `operator_record` writes one operator's record
of `_metadata` back, so a rewrite of a source operator splices it into the original bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Literal

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.flink.binary import DataInput, java_string
from statekit.format.flink.metadata import (
    BYTE_STREAM_HANDLE,
    FILE_STREAM_HANDLE,
    PARTITIONABLE_OPERATOR_STATE_HANDLE,
    RELATIVE_STREAM_HANDLE,
    OperatorState,
    OperatorStreamHandle,
    StreamHandle,
)
from statekit.format.flink.serializers_out import DataOutput

READER_STATE = "SourceReaderState"
#: KafkaPartitionSplit's stored markers instead of an offset (LATEST_OFFSET is only in old state)
OFFSET_MARKERS = {-1: "latest", -2: "earliest", -3: "committed"}
NO_STOPPING_OFFSET = -(1 << 63)  # Long.MIN_VALUE: the split is unbounded
_SPLIT_TAIL = struct.Struct(">iqq")  # partition, starting offset, stopping offset
_COORDINATOR_SERDE_VERSION = 1
_KAFKA_SPLIT_VERSION = 0
_STATUS = {0: "assigned", 1: "unassigned"}  # AssignmentStatus codes (UNASSIGNED_INITIAL = 1)
_STATUS_CODE = {v: k for k, v in _STATUS.items()}
_MODE_ORDINAL = {"split": 0, "union": 1, "broadcast": 2}


@dataclass(frozen=True)
class KafkaSplit:
    """One `KafkaPartitionSplit`: the next offset to read (or a marker, `OFFSET_MARKERS`) and where to stop."""

    topic: str
    partition: int
    offset: int
    stopping: int = NO_STOPPING_OFFSET

    @property
    def starting(self) -> str:
        """``offset`` for a real offset, else the marker's name (``earliest``, ``latest``, ``committed``)."""
        return OFFSET_MARKERS.get(self.offset, "offset") if self.offset < 0 else "offset"

    @property
    def stopping_offset(self) -> int | None:
        """The stopping offset, None for an unbounded split."""
        return None if self.stopping == NO_STOPPING_OFFSET else self.stopping

    def encode(self) -> bytes:
        return bytes(DataOutput().utf(self.topic).i32(self.partition).i64(self.offset).i64(self.stopping).buf)

    @staticmethod
    def decode(data: bytes, where: str) -> "KafkaSplit":
        """A split from its serializer's bytes; every byte must be used (else it is not a Kafka split)."""
        n = int.from_bytes(data[:2], "big")
        if len(data) == n + 22 and data[2:2 + n].isascii():  # the usual: an ASCII topic (one struct unpack)
            partition, offset, stopping = _SPLIT_TAIL.unpack_from(data, 2 + n)
            if partition >= 0 and (offset >= 0 or offset in OFFSET_MARKERS):
                return KafkaSplit(data[2:2 + n].decode("ascii"), partition, offset, stopping)
        inp = DataInput(data, where)
        split = KafkaSplit(inp.utf("a topic"), inp.i32("a partition"), inp.i64("a starting offset"),
                           inp.i64("a stopping offset"))
        if inp.remaining():
            raise inp.fail(f"{inp.remaining()} byte(s) follow a Kafka split")
        if split.partition < 0 or (split.offset < 0 and split.offset not in OFFSET_MARKERS):
            raise inp.fail(f"partition {split.partition} / starting offset {split.offset} is not a Kafka split's")
        return split


def decode_versioned(data: bytes, where: str) -> tuple[int, bytes]:
    """`SimpleVersionedSerialization.readVersionAndDeSerialize`'s input: (serializer version, payload)."""
    inp = DataInput(data, where)
    version = inp.i32("a serializer version")
    payload = inp.bytes(inp.count("a payload length"), "a payload")
    if inp.remaining():
        raise inp.fail(f"{inp.remaining()} byte(s) follow a versioned payload")
    return version, payload


def encode_versioned(version: int, payload: bytes) -> bytes:
    """`SimpleVersionedSerialization.writeVersionAndSerialize`'s output for an already serialized payload."""
    return bytes(DataOutput().i32(version).i32(len(payload)).raw(payload).buf)


def decode_reader_split(element: bytes, where: str) -> KafkaSplit:
    """One `SourceReaderState` element as a Kafka split; `CorruptSavepointError` when it is none."""
    version, payload = decode_versioned(element, where)
    if version != _KAFKA_SPLIT_VERSION:
        raise CorruptSavepointError(f"{where}: split serializer version {version} is not KafkaPartitionSplitSerializer's "
                                    f"({_KAFKA_SPLIT_VERSION}).")
    return KafkaSplit.decode(payload, where)


def encode_reader_split(split: KafkaSplit) -> bytes:
    """One `SourceReaderState` element holding `split`."""
    return encode_versioned(_KAFKA_SPLIT_VERSION, split.encode())


# -- file source splits (flink-connector-files) --------------------------------------------------------
_FILE_SPLIT_VERSION = 1
NO_POSITION_OFFSET = -1  # CheckpointedPosition.NO_OFFSET: the position counts records from the split's start


@dataclass(frozen=True)
class FileSplit:
    """One `FileSourceSplit` (`FileSourceSplitSerializer` version 1): a byte range of a file, and where its reader
    stands in it (`position`: the checkpointed offset, `records_to_skip` records after it; None: at the start)."""

    split_id: str
    path: str
    offset: int
    length: int
    modification_time: int
    file_size: int
    hosts: tuple[str, ...]
    position: tuple[int, int] | None
    #: the split's bytes up to its position (id, path, range, file, hosts), kept as read: `encode` writes them back
    #: unchanged (a `Path` is not rebuilt from its URI text), followed by the position
    head: bytes = field(default=b"", repr=False, compare=False)

    @staticmethod
    def decode(data: bytes, where: str) -> "FileSplit":
        inp = DataInput(data, where)
        split_id = inp.utf("a split id")
        path = _flink_path(inp)
        offset, length = inp.i64("a split offset"), inp.i64("a split length")
        mtime, size = inp.i64("a modification time"), inp.i64("a file size")
        hosts = tuple(inp.utf("a host name") for _ in range(inp.count("the number of hosts", limit=1 << 16)))
        head = data[:inp.pos]
        position = (inp.i64("a reader offset"), inp.i64("records to skip")) if inp.bool("a position flag") else None
        if inp.remaining():
            raise inp.fail(f"{inp.remaining()} byte(s) follow a file split")
        if offset < 0 or length < 0:
            raise inp.fail(f"offset {offset} / length {length} is not a file split's")
        return FileSplit(split_id, path, offset, length, mtime, size, hosts, position, head)

    def encode(self) -> bytes:
        """`FileSourceSplitSerializer` version 1's bytes (of a decoded split: `head` as read, then the position)."""
        if not self.head:
            raise ValueError("only a decoded file split is encoded (its path is kept as Flink wrote it)")
        out = DataOutput().raw(self.head).bool(self.position is not None)
        if self.position is not None:
            out.i64(self.position[0]).i64(self.position[1])
        return bytes(out.buf)


def _flink_path(inp: DataInput) -> str:
    """`Path.serializeToDataOutputView`: a URI's scheme, user info, host, port, path, query and fragment, joined
    back into the URI text (`StringValue` strings, each behind a null flag)."""
    if not inp.bool("a path flag"):
        raise inp.fail("a file split has no path")

    def part() -> str | None:
        return java_string(inp, "a path part") if inp.bool("a path part flag") else None

    scheme, user, host = part(), part(), part()
    port = inp.i32("a port")
    path, query, fragment = part(), part(), part()
    text = f"{scheme}:" if scheme else ""
    if host is not None:
        text += "//" + (f"{user}@" if user else "") + host + (f":{port}" if port != -1 else "")
    text += path or ""
    text += f"?{query}" if query is not None else ""
    return text + (f"#{fragment}" if fragment is not None else "")


def encode_file_reader_split(split: FileSplit) -> bytes:
    """One `SourceReaderState` element holding the file split `split`."""
    return encode_versioned(_FILE_SPLIT_VERSION, split.encode())


def decode_file_reader_split(element: bytes, where: str) -> FileSplit:
    """One `SourceReaderState` element as a file split; `CorruptSavepointError` when it is none."""
    version, payload = decode_versioned(element, where)
    if version != _FILE_SPLIT_VERSION:
        raise CorruptSavepointError(f"{where}: split serializer version {version} is not FileSourceSplitSerializer's "
                                    f"({_FILE_SPLIT_VERSION}).")
    return FileSplit.decode(payload, where)


@dataclass(frozen=True)
class FileEnumeratorState:
    """`PendingSplitsCheckpoint` (serializer version 1, little-endian): splits not assigned yet and the paths a
    continuously monitoring enumerator has already processed (it never reads them again)."""

    pending: tuple[FileSplit, ...]
    processed: tuple[str, ...]

    @staticmethod
    def decode(version: int, data: bytes, where: str) -> "FileEnumeratorState":
        if version != 1:
            raise UnsupportedFormatError(f"{where}: file enumerator state version {version} is not supported "
                                         "(statekit reads version 1).")
        inp = DataInput(data, where)

        def le32(what: str) -> int:
            return int.from_bytes(inp.bytes(4, what), "little", signed=True)

        if le32("the magic number") != 0xDEADBEEF - (1 << 32):
            inp.pos -= 4
            raise inp.fail("the file enumerator state does not start with its magic number 0xDEADBEEF")
        split_version = le32("the split serializer version")
        n_splits, n_paths = le32("the number of splits"), le32("the number of paths")
        if split_version != _FILE_SPLIT_VERSION or n_splits < 0 or n_paths < 0:
            raise inp.fail(f"split version {split_version}, {n_splits} splits, {n_paths} paths")
        pending = tuple(FileSplit.decode(inp.bytes(le32("a split length"), "a split"), where) for _ in range(n_splits))
        processed = []
        for _ in range(n_paths):
            raw = inp.bytes(le32("a path length"), "a path")
            try:
                processed.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise inp.fail("a processed path is not UTF-8") from None
        if inp.remaining():
            raise inp.fail(f"{inp.remaining()} byte(s) follow the file enumerator state")
        return FileEnumeratorState(pending, tuple(processed))

    def encode(self) -> bytes:
        """Version 1's bytes (`PendingSplitsCheckpointSerializer`: little-endian counts and lengths)."""
        def le32(v: int) -> bytes:
            return v.to_bytes(4, "little", signed=True)

        parts = [le32(0xDEADBEEF - (1 << 32)), le32(_FILE_SPLIT_VERSION), le32(len(self.pending)),
                 le32(len(self.processed))]
        for split in self.pending:
            b = split.encode()
            parts += [le32(len(b)), b]
        for path in self.processed:
            b = path.encode("utf-8")
            parts += [le32(len(b)), b]
        return b"".join(parts)


def file_enumerator(coordinator: bytes, where: str) -> FileEnumeratorState:
    """A coordinator state's bytes as a file source's enumerator state (`CorruptSavepointError` when not one)."""
    state = CoordinatorState.decode(coordinator, where)
    return FileEnumeratorState.decode(state.enumerator_version, state.enumerator, where)


# -- the coordinator (enumerator) state ---------------------------------------------------------------
@dataclass(frozen=True)
class CoordinatorState:
    """A `SourceCoordinator` checkpoint: the enumerator serializer's version and the enumerator's bytes."""

    enumerator_version: int
    enumerator: bytes

    @staticmethod
    def decode(data: bytes, where: str) -> "CoordinatorState":
        inp = DataInput(data, where)
        serde = inp.i32("the coordinator serde version")
        if serde != _COORDINATOR_SERDE_VERSION:
            raise UnsupportedFormatError(
                f"{where}: source coordinator serde version {serde} is not supported (statekit reads version "
                f"{_COORDINATOR_SERDE_VERSION}, Flink 1.13 and later); take the savepoint with a newer Flink.")
        version = inp.i32("the enumerator serializer version")
        enum = inp.bytes(inp.count("the enumerator state length"), "the enumerator state")
        if inp.remaining():
            raise inp.fail(f"{inp.remaining()} byte(s) follow the enumerator state")
        return CoordinatorState(version, enum)

    def encode(self) -> bytes:
        return bytes(DataOutput().i32(_COORDINATOR_SERDE_VERSION).i32(self.enumerator_version)
                     .i32(len(self.enumerator)).raw(self.enumerator).buf)


@dataclass(frozen=True)
class EnumeratorPartition:
    """A partition the Kafka enumerator knows: assigned to a reader, or discovered and not assigned yet.
    `split` (with the offset the enumerator would assign from) exists from enumerator state version 3 on."""

    topic: str
    partition: int
    status: Literal["assigned", "unassigned"]
    split: KafkaSplit | None = None


@dataclass(frozen=True)
class KafkaEnumeratorState:
    """`KafkaSourceEnumState` (serializer versions 1-3); `version` is the one it was written with."""

    version: int
    partitions: tuple[EnumeratorPartition, ...]
    initial_discovery_finished: bool

    @staticmethod
    def decode(version: int, data: bytes, where: str) -> "KafkaEnumeratorState":
        inp = DataInput(data, where)
        parts: list[EnumeratorPartition] = []
        finished = True
        if version == 3:
            n = inp.count("the number of splits")
            split_version = inp.i32("the split serializer version")
            if split_version != _KAFKA_SPLIT_VERSION:
                raise inp.fail(f"split serializer version {split_version} is not KafkaPartitionSplitSerializer's")
            for _ in range(n):
                split = KafkaSplit.decode(inp.bytes(inp.count("a split length"), "a split"), where)
                parts.append(EnumeratorPartition(split.topic, split.partition, _status(inp), split))
            finished = inp.bool("the initial-discovery flag")
        elif version in (1, 2):
            for _ in range(inp.count("the number of partitions")):
                topic, partition = inp.utf("a topic"), inp.i32("a partition")
                parts.append(EnumeratorPartition(topic, partition, _status(inp) if version == 2 else "assigned"))
            if version == 2:
                finished = inp.bool("the initial-discovery flag")
        else:
            raise UnsupportedFormatError(
                f"{where}: Kafka enumerator state version {version} is not supported (statekit reads versions 1-3, "
                "flink-connector-kafka 3.x to 5.x); take the savepoint with a newer connector.")
        if inp.remaining():
            raise inp.fail(f"{inp.remaining()} byte(s) follow the Kafka enumerator state")
        return KafkaEnumeratorState(version, tuple(parts), finished)

    def encode(self) -> bytes:
        """The same version's bytes (partitions in this order)."""
        out = DataOutput().i32(len(self.partitions))
        if self.version == 3:
            out.i32(_KAFKA_SPLIT_VERSION)
            for p in self.partitions:
                assert p.split is not None
                b = p.split.encode()
                out.i32(len(b)).raw(b).i32(_STATUS_CODE[p.status])
        else:
            for p in self.partitions:
                out.utf(p.topic).i32(p.partition)
                if self.version == 2:
                    out.i32(_STATUS_CODE[p.status])
        if self.version >= 2:
            out.bool(self.initial_discovery_finished)
        return bytes(out.buf)


def _status(inp: DataInput) -> Literal["assigned", "unassigned"]:
    code = inp.i32("an assignment status")
    if code not in _STATUS:
        inp.pos -= 4
        raise inp.fail(f"assignment status {code} is not a Kafka enumerator's (0 assigned, 1 unassigned)")
    return _STATUS[code]  # type: ignore[return-value]


def kafka_enumerator(coordinator: bytes, where: str) -> KafkaEnumeratorState:
    """A coordinator state's bytes as a Kafka enumerator state (`CorruptSavepointError` when they are not one)."""
    state = CoordinatorState.decode(coordinator, where)
    return KafkaEnumeratorState.decode(state.enumerator_version, state.enumerator, where)


# -- list-state elements of BytePrimitiveArraySerializer ------------------------------------------------
def byte_array_elements(stream: bytes, offsets: tuple[int, ...], where: str) -> list[tuple[int, bytes]]:
    """The elements at `offsets` of an operator state stream whose element serializer writes ``i32 length |
    bytes``: (offset of the payload, payload) each."""
    out = []
    for off in offsets:
        inp = DataInput(stream, where, pos=off)
        n = inp.count("a split element's length")
        start = inp.pos
        out.append((start, inp.bytes(n, "a split element")))
    return out


# -- one operator's `_metadata` record, written back ----------------------------------------------------
def _stream(out: DataOutput, h: StreamHandle | None) -> None:
    if h is None:
        out.u8(0)
    elif h.kind == "bytes":
        out.u8(BYTE_STREAM_HANDLE).utf(h.path).i32(len(h.data or b"")).raw(h.data or b"")
    elif h.kind == "relative":
        out.u8(RELATIVE_STREAM_HANDLE).utf(h.path).i64(h.size)
    else:
        out.u8(FILE_STREAM_HANDLE).i64(h.size).utf(h.path)


def _operator_handle(out: DataOutput, h: OperatorStreamHandle | None) -> None:
    if h is None:
        out.i32(0)
        return
    out.i32(1).u8(PARTITIONABLE_OPERATOR_STATE_HANDLE).i32(len(h.states))
    for s in h.states:
        out.utf(s.name).u8(_MODE_ORDINAL[s.mode]).i32(len(s.offsets))
        for o in s.offsets:
            out.i64(o)
    _stream(out, h.delegate)


def operator_record(op: OperatorState, metadata_version: int) -> bytes:
    """`op`'s record in `_metadata` of `metadata_version` (a source operator: operator state and a coordinator,
    no keyed state). Callers check it against the original bytes first (`check_record`)."""
    out = DataOutput()
    if metadata_version >= 5:
        out.utf(op.name).utf(op.uid)
    out.raw(bytes.fromhex(op.operator_id)).i32(op.parallelism).i32(op.max_parallelism)
    _stream(out, op.coordinator)
    if op.fully_finished:
        return bytes(out.i32(-1).buf)
    out.i32(len(op.subtasks))
    for st in op.subtasks:
        if st.finished:
            out.i32(-st.index - 1)
            continue
        if st.managed_keyed is not None or st.raw_keyed is not None:
            raise UnsupportedFormatError(f"operator {op.operator_id} holds keyed state; a source operator holds none.")
        out.i32(st.index)
        _operator_handle(out, st.managed_operator)
        _operator_handle(out, st.raw_operator)
        out.u8(0).u8(0).i32(0).i32(0)  # no keyed state, no in-flight data (savepoints are aligned)
    return bytes(out.buf)


def check_record(op: OperatorState, metadata: bytes, metadata_version: int, where: str) -> None:
    """Refuse to rewrite `op` unless writing its record back unchanged gives exactly its original bytes."""
    start, end = op.span
    if operator_record(op, metadata_version) != metadata[start:end]:
        raise UnsupportedFormatError(
            f"{where}: operator {op.operator_id}'s record in _metadata holds something statekit does not write back "
            "byte for byte; it is left alone. Take a canonical savepoint of the job and try again.")
