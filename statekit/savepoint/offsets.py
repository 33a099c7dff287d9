"""Source offsets: where each Kafka and file source of a savepoint resumes (reader splits and enumerator), and moving it.

Boundary: the bytes are `statekit.format.flink.sources`'; this module finds the source operators, lays
their positions out as one Arrow table (`source_offsets`, `Savepoint.source_offsets`) and rewrites one
Kafka partition's position (`set_offsets`; a timestamp is resolved by `statekit.savepoint.kafka_times`) or one
file's (`set_file_offsets`: a reader's position, a file skipped or read again). The rewrite keeps the rule of
`statekit.savepoint.output` (Flink in, Flink out) in the only way that keeps the enumerator consistent: it splices
the source operator's new record into the original `_metadata`, every other byte and state file carried unchanged,
and writes the new savepoint atomically (`FlinkStaging`). statekit's own format keeps a Flink operator's coordinator
state in its manifest (``flink.coordinator``), so its savepoints show both, but they are not rewritten here (the
edits are of the Flink savepoint a job restores).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Literal

import pyarrow as pa

from statekit.errors import (
    BrokerRequiredError,
    CorruptSavepointError,
    InvalidArgumentError,
    NoSourceStateError,
    UnknownPartitionError,
    UnsupportedFormatError,
)
from statekit.format.flink.sources import (
    OFFSET_MARKERS,
    READER_STATE,
    FileEnumeratorState,
    FileSplit,
    KafkaEnumeratorState,
    KafkaSplit,
    byte_array_elements,
    check_record,
    decode_file_reader_split,
    decode_reader_split,
    encode_file_reader_split,
    encode_reader_split,
    file_enumerator,
    kafka_enumerator,
    operator_record,
)
from statekit.savepoint.kinds import is_flink_source, opened

if TYPE_CHECKING:
    from statekit.format.flink.metadata import OperatorStreamHandle, StreamHandle
    from statekit.format.manifest import OperatorMetadata
    from statekit.savepoint.flink import FlinkSavepoint
    from statekit.savepoint.reader import Savepoint

__all__ = ["OFFSETS_SCHEMA", "FileChange", "OffsetChange", "OffsetsPlan", "set_file_offsets", "set_offsets",
           "source_offsets"]

#: one row per split a reader subtask holds, per partition a Kafka enumerator knows, per split or path a file
#: enumerator keeps; the columns of the other kind are null
OFFSETS_SCHEMA = pa.schema([
    ("operator", pa.string()),        # uid, or the uid hash when the savepoint does not know the uid
    ("uid_hash", pa.string()),
    ("source", pa.string()),          # kafka | file | unknown (a Source whose splits statekit does not decode)
    ("holder", pa.string()),          # reader | enumerator
    ("subtask", pa.int32()),          # the reader subtask holding the split (null for the enumerator)
    ("topic", pa.string()),           # kafka
    ("partition", pa.int32()),        # kafka
    ("offset", pa.int64()),           # kafka: the next record to read; file: where the split starts (bytes)
    ("starting", pa.string()),        # kafka: offset | earliest | latest | committed (a marker, not an offset)
    ("stopping_offset", pa.int64()),  # kafka: null = unbounded
    ("path", pa.string()),            # file: the file (enumerator: a pending split's, or a processed path)
    ("length", pa.int64()),           # file: the split's length in bytes
    ("position", pa.int64()),         # file: the reader's checkpointed offset (-1: count records from the start)
    ("records_to_skip", pa.int64()),  # file: records the reader skips after `position`
    ("status", pa.string()),          # enumerator: assigned | unassigned (kafka), pending | processed (file)
])
_COLUMNS = OFFSETS_SCHEMA.names

SourceKind = Literal["kafka", "file", "unknown"]


@dataclass(frozen=True)
class _ReaderSplit:
    subtask: int
    split: KafkaSplit | FileSplit | None  # None: a split statekit does not decode
    payload_at: int  # where the element's payload starts in the subtask's operator stream


@dataclass(frozen=True)
class _SourceState:
    """One source operator's decoded state (Flink savepoints: with where each split lies, for a rewrite)."""

    meta: "OperatorMetadata"
    kind: SourceKind
    readers: tuple[_ReaderSplit, ...]
    enumerator: KafkaEnumeratorState | FileEnumeratorState | None


def _name(meta: "OperatorMetadata") -> str:
    return meta.uid or meta.uid_hash


def _decode_splits(elements: list[tuple[int, int, bytes]], where: str) -> tuple[SourceKind, list[_ReaderSplit]]:
    """(subtask, payload offset, element) each as Kafka splits, else as file splits, else undecoded."""
    decoders: list[tuple[SourceKind, Callable[[bytes, str], KafkaSplit | FileSplit]]] = [
        ("kafka", decode_reader_split), ("file", decode_file_reader_split)]
    for kind, decode in decoders:
        try:
            return kind, [_ReaderSplit(st, decode(e, f"{where}, subtask {st}"), at) for st, at, e in elements]
        except CorruptSavepointError:
            continue
    return "unknown", [_ReaderSplit(st, None, at) for st, at, _ in elements]


def _decode_enumerator(data: bytes, kind: SourceKind, where: str) -> KafkaEnumeratorState | FileEnumeratorState | None:
    decoders: list[tuple[SourceKind, Callable[[bytes, str], KafkaEnumeratorState | FileEnumeratorState]]] = [
        ("kafka", kafka_enumerator), ("file", file_enumerator)]
    for k, decode in decoders:
        if kind in (k, "unknown"):
            try:
                return decode(data, where)
            except CorruptSavepointError:
                continue
    return None  # a coordinator of another kind (another connector's source, or not a source)


def _state(meta: "OperatorMetadata", elements: list[tuple[int, int, bytes]], has_reader_state: bool,
           coordinator: bytes | None, where: str) -> _SourceState | None:
    kind, readers = _decode_splits(elements, where) if elements else ("unknown", [])
    enum = _decode_enumerator(coordinator, kind, f"{where}, coordinator state") if coordinator is not None else None
    if enum is not None:
        enum_kind: SourceKind = "kafka" if isinstance(enum, KafkaEnumeratorState) else "file"
        if readers and kind != enum_kind:
            raise CorruptSavepointError(f"{where}: the readers hold {kind} splits but the enumerator state is a "
                                        f"{enum_kind} source's; the savepoint is damaged.")
        kind = enum_kind
    if not has_reader_state and enum is None:
        return None
    return _SourceState(meta, kind, tuple(readers), enum)


def _flink_state(sp: "FlinkSavepoint", meta: "OperatorMetadata") -> _SourceState | None:
    fop = sp.flink.metadata.operator(meta.uid_hash)
    assert fop is not None
    where = f"{sp.path}/_metadata, operator {_name(meta)}"
    elements: list[tuple[int, int, bytes]] = []
    has_reader_state = False
    for st in fop.subtasks:
        h = st.managed_operator
        entry = next((s for s in h.states if s.name == READER_STATE), None) if h is not None else None
        if h is None or entry is None:
            continue
        has_reader_state = True
        if entry.offsets:
            stream = sp.flink.files.read(h.delegate)
            elements += [(st.index, at, e) for at, e in byte_array_elements(stream, entry.offsets, f"{where}, subtask {st.index}")]
    coordinator = sp.flink.files.read(fop.coordinator) if fop.coordinator is not None else None
    return _state(meta, elements, has_reader_state, coordinator, where)


def _statekit_state(sp: "Savepoint", meta: "OperatorMetadata") -> _SourceState | None:
    has_reader_state = any(s.name == READER_STATE for s in meta.operator_states)
    coordinator = meta.flink.coordinator if meta.flink is not None else None  # kept by `convert` from Flink
    if not has_reader_state and coordinator is None:
        return None
    rows = sp.list_state(meta.identifier, READER_STATE).to_pylist() if has_reader_state else []
    return _state(meta, [(r["subtask"], -1, r["value"]) for r in rows], has_reader_state, coordinator,
                  f"{sp.path}, operator {_name(meta)}")


def _sources(sp: "Savepoint", op: Any = None) -> list[_SourceState]:
    metas = [sp.operator(op)] if op is not None else sp.operators
    out = []
    for meta in metas:
        state = _flink_state(sp, meta) if is_flink_source(sp) else _statekit_state(sp, meta)
        if state is not None:
            out.append(state)
    return out


def source_offsets(savepoint: "str | os.PathLike[str] | Savepoint", op: Any = None) -> pa.Table:
    """Where every new-style source of `savepoint` (or only operator `op`) resumes, as a table (`OFFSETS_SCHEMA`).

    Reader rows are the splits each `SourceOperator` subtask holds. Kafka: `offset` is the next record the
    split reads, the offset after the last record emitted before the savepoint; file: the split's byte range
    and the reader's checkpointed position in it. Enumerator rows are what the source's `SplitEnumerator`
    keeps: Kafka's partitions (`assigned` to a reader, or discovered and `unassigned`; from enumerator state
    version 3, flink-connector-kafka 5.x, with the offset it would assign them from), the file source's
    `pending` splits and `processed` paths. A statekit savepoint converted from Flink shows both (its manifest
    keeps the coordinator state). A source whose splits statekit does not decode shows as `unknown`, one row per split.

    Examples
    --------
    >>> source_offsets("savepoint-1a2b3c").to_pylist()  # doctest: +SKIP
    [{'operator': 'kafka-source', 'holder': 'reader', 'subtask': 0, 'topic': 'events', 'partition': 1, 'offset': 7, ...}]
    """
    sp = opened(savepoint)
    rows: list[dict[str, Any]] = []
    for s in _sources(sp, op):
        base = {"operator": _name(s.meta), "uid_hash": s.meta.uid_hash, "source": s.kind}
        for r in sorted(s.readers, key=_reader_order):
            rows.append({**base, "holder": "reader", "subtask": r.subtask, **_split_row(r.split)})
        if isinstance(s.enumerator, KafkaEnumeratorState):
            for p in sorted(s.enumerator.partitions, key=lambda p: (p.topic, p.partition)):
                row = {**base, "holder": "enumerator", "status": p.status, "topic": p.topic, "partition": p.partition}
                rows.append({**row, **(_split_row(p.split) if p.split else {})})
        elif isinstance(s.enumerator, FileEnumeratorState):
            for f in s.enumerator.pending:
                rows.append({**base, "holder": "enumerator", **_split_row(f), "status": "pending"})
            for path in s.enumerator.processed:
                rows.append({**base, "holder": "enumerator", "path": path, "status": "processed"})
    if op is not None and not rows:
        raise NoSourceStateError(_no_source(sp, sp.operator(op)))
    return pa.table({c: pa.array([r.get(c) for r in rows], OFFSETS_SCHEMA.field(c).type) for c in _COLUMNS},
                    schema=OFFSETS_SCHEMA)


def _reader_order(r: _ReaderSplit) -> tuple:
    if isinstance(r.split, KafkaSplit):
        return (r.split.topic, r.split.partition, r.subtask)
    if isinstance(r.split, FileSplit):
        return (r.split.path, r.split.offset, r.subtask)
    return ("", 0, r.subtask)


def _split_row(split: KafkaSplit | FileSplit | None) -> dict[str, Any]:
    if isinstance(split, KafkaSplit):
        return {"topic": split.topic, "partition": split.partition, "offset": split.offset, "starting": split.starting,
                "stopping_offset": split.stopping_offset}
    if isinstance(split, FileSplit):
        pos = split.position
        return {"path": split.path, "offset": split.offset, "length": split.length,
                "position": pos[0] if pos else None, "records_to_skip": pos[1] if pos else None}
    return {}


def _no_source(sp: "Savepoint", meta: "OperatorMetadata") -> str:
    return (f"operator {meta.display_name} of {sp.path} holds no source state statekit decodes (no {READER_STATE} "
            "splits, no Kafka or file enumerator state); give the uid of the job's KafkaSource or FileSource "
            "(`statekit offsets` lists them).")


# -- set-offsets ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OffsetChange:
    """One stored position moved: a reader subtask's split or the enumerator's entry of the partition."""

    holder: str  # reader | enumerator
    subtask: int | None
    topic: str
    partition: int
    old: int
    new: int

    def __str__(self) -> str:
        who = f"reader subtask {self.subtask}" if self.holder == "reader" else "enumerator"
        return f"  {self.topic}/{self.partition} ({who}): {_show(self.old)} -> {self.new}"


def _show(offset: int) -> str:
    return OFFSET_MARKERS[offset] if offset < 0 and offset in OFFSET_MARKERS else str(offset)


@dataclass
class OffsetsPlan:
    """What `set_offsets` changes (and, unless it was a dry run, wrote)."""

    source: str
    target: str
    operator: str
    changes: "list[OffsetChange | FileChange]" = field(default_factory=list)
    written: bool = False
    #: how the new offset was found, when the broker resolved a timestamp
    resolved: str | None = None

    def __str__(self) -> str:
        head = (f"wrote {self.target} as a Flink savepoint from {self.source}:" if self.written
                else f"would write {self.target} as a Flink savepoint from {self.source}:")
        what = f"operator {self.operator}: source offsets" + (f" ({self.resolved})" if self.resolved else "")
        return "\n".join([head, what, *map(str, self.changes)])


def set_offsets(source: "str | os.PathLike[str]", target: "str | os.PathLike[str]", *, op: Any, topic: str,
                partition: int, offset: int | None = None, shift: int | None = None,
                timestamp: "str | int | datetime | None" = None, bootstrap_servers: str | None = None,
                kafka_config: Mapping[str, str] | None = None, dry_run: bool = True) -> OffsetsPlan:
    """Move where Kafka source `op` resumes reading `topic`/`partition`: to `offset`, by `shift` records from
    where it stands (``shift=1`` skips a poison record), or to the first record at or after `timestamp` (epoch ms
    or ISO-8601; the partition's end when there is none, as `OffsetsInitializer.timestamp` starts a job), which
    the broker at `bootstrap_servers` resolves (`kafka_config`: client properties such as ``security.protocol``).
    Both the reader split that holds the partition and the enumerator's entry of it are rewritten, so the restored
    job resumes there whichever of them it uses.

    Writes the new Flink savepoint `target` (only with ``dry_run=False``; the source is never modified): the
    source operator's record spliced into the original `_metadata`, everything else carried byte for byte.

    Raises
    ------
    NoSourceStateError
        `op` holds no Kafka source state.
    UnknownPartitionError
        Neither a reader nor the enumerator holds `topic`/`partition`.
    InvalidArgumentError
        Not exactly one of `offset`, `shift` and `timestamp`; a negative result; a shift from a marker
        (``earliest``...); a timestamp that is not one.
    BrokerRequiredError
        `timestamp` without `bootstrap_servers` (the split state holds offsets only).
    BrokerError
        The broker did not answer or refused (`statekit.savepoint.kafka_times`).
    UnsupportedFormatError
        `source` is a statekit savepoint (set-offsets edits the Flink savepoint a job restores).
    """
    from statekit.savepoint.kafka_times import BROKER_NEEDED, offsets_for_time, parse_timestamp

    if sum(x is not None for x in (offset, shift, timestamp)) != 1:
        raise InvalidArgumentError("give exactly one of --offset N (an absolute offset), --shift K (records to move) "
                                   "and --timestamp T (the first record at or after a time).")
    at_ms = parse_timestamp(timestamp) if timestamp is not None else None
    if at_ms is not None and not bootstrap_servers:
        raise BrokerRequiredError(
            f"--timestamp needs --bootstrap-servers: {BROKER_NEEDED}. Give the broker the job reads from, or find the "
            "offset yourself (kafka-get-offsets.sh --time T) and pass --offset N.")
    sp, meta, state = _flink_source(source, op)
    if state.kind != "kafka":
        raise UnsupportedFormatError(
            f"operator {_name(meta)} of {source} is a {state.kind} source, not a Kafka one; move its readers with "
            "--path P and --records N / --shift K, or --skip-file / --reread (`statekit offsets` shows where it stands).")
    kafka_enum = state.enumerator if isinstance(state.enumerator, KafkaEnumeratorState) else None
    readers = [r for r in state.readers if isinstance(r.split, KafkaSplit)
               and (r.split.topic, r.split.partition) == (topic, partition)]
    enum_idx = [i for i, p in enumerate(kafka_enum.partitions if kafka_enum else ())
                if (p.topic, p.partition) == (topic, partition)]
    if not readers and not enum_idx:
        known = sorted({(r.split.topic, r.split.partition) for r in state.readers if isinstance(r.split, KafkaSplit)}
                       | {(p.topic, p.partition) for p in (kafka_enum.partitions if kafka_enum else ())})
        raise UnknownPartitionError(
            f"operator {_name(meta)} of {source} holds no split of {topic}/{partition}; it holds "
            f"{', '.join(f'{t}/{p}' for t, p in known) or 'none'}. Give one of those (`statekit offsets` lists them).")
    if at_ms is not None:
        assert bootstrap_servers is not None
        new = offsets_for_time(bootstrap_servers, topic, [partition], at_ms, config=kafka_config)[partition]
    elif offset is None:
        assert shift is not None
        enum_splits = [kafka_enum.partitions[i].split for i in enum_idx] if kafka_enum else []
        bases = [_kafka(r).offset for r in readers] or [sp_.offset for sp_ in enum_splits if sp_ is not None]
        if not bases:
            raise InvalidArgumentError(f"the enumerator of {_name(meta)} stores no offset for {topic}/{partition} "
                                       "(enumerator state before version 3); give --offset N instead of --shift.")
        if any(b < 0 for b in bases):
            raise InvalidArgumentError(f"{topic}/{partition} starts at '{_show(min(bases))}', not at an offset; "
                                       "a shift needs one. Give --offset N instead.")
        if len(set(bases)) > 1:
            raise InvalidArgumentError(f"{topic}/{partition} is held at several offsets {sorted(set(bases))}; give --offset N.")
        new = bases[0] + shift
    else:
        new = offset
    if new < 0:
        raise InvalidArgumentError(f"the new offset of {topic}/{partition} would be {new}; offsets are >= 0.")
    plan = OffsetsPlan(str(source), str(target), _name(meta))
    if at_ms is not None:
        when = datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
        plan.resolved = f"timestamp {at_ms} ({when}) is offset {new}, resolved by the broker at {bootstrap_servers}"
    for r in readers:
        plan.changes.append(OffsetChange("reader", r.subtask, topic, partition, _kafka(r).offset, new))
    enum = kafka_enum
    if enum is not None and enum.version >= 3:
        parts = list(enum.partitions)
        for i in enum_idx:
            p = parts[i]
            assert p.split is not None
            plan.changes.append(OffsetChange("enumerator", None, topic, partition, p.split.offset, new))
            parts[i] = replace(p, split=replace(p.split, offset=new))
        enum = replace(enum, partitions=tuple(parts))
    if dry_run:
        return plan
    edits: dict[int, list[_Edit]] = {}
    for r in readers:
        edits.setdefault(r.subtask, []).append(
            (r.payload_at, encode_reader_split(_kafka(r)), encode_reader_split(replace(_kafka(r), offset=new))))
    _write(sp, state, edits, enum.encode() if enum is not None and enum.version >= 3 else None, target)
    plan.written = True
    return plan


def _flink_source(source: "str | os.PathLike[str]", op: Any) -> "tuple[FlinkSavepoint, OperatorMetadata, _SourceState]":
    """The Flink savepoint `source`, its operator `op` and that operator's decoded source state, or the typed error
    that says why there is none to edit."""
    sp = opened(source)
    if not is_flink_source(sp):
        raise UnsupportedFormatError(
            f"{source} is a statekit savepoint; set-offsets edits the Flink savepoint a job restores. Run it on the "
            "Flink savepoint the job wrote, or on `statekit convert --to flink` of this one.")
    meta = sp.operator(op)
    state = _flink_state(sp, meta)  # type: ignore[arg-type]
    if state is None or state.kind == "unknown":
        raise NoSourceStateError(_no_source(sp, meta))
    return sp, meta, state  # type: ignore[return-value]


# -- file sources ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileChange:
    """One stored position of a file source changed: a reader's or a pending split's position, or a path."""

    holder: str  # reader | enumerator
    subtask: int | None
    path: str
    old: str
    new: str

    def __str__(self) -> str:
        who = f"reader subtask {self.subtask}" if self.holder == "reader" else "enumerator"
        return f"  {self.path} ({who}): {self.old} -> {self.new}"


def _same_file(stored: str, path: str) -> bool:
    """Whether a stored path (a URI such as ``file:/data/in/a.txt``) is the file the user named (that URI, or a local
    path)."""
    if stored == path:
        return True
    local = stored.removeprefix("file://") if stored.startswith("file://") else stored.removeprefix("file:")
    return not path.startswith(("file:", "hdfs:", "s3:", "s3a:", "gs:")) and local == os.path.abspath(path)


def _position_text(pos: tuple[int, int] | None) -> str:
    if pos is None:
        return "the split's start"
    offset, skip = pos
    return (f"byte {offset} " if offset >= 0 else "the split's start ") + f"+{skip} records"


def set_file_offsets(source: "str | os.PathLike[str]", target: "str | os.PathLike[str]", *, op: Any, path: str,
                     records: int | None = None, shift: int | None = None, skip_file: bool = False,
                     reread: bool = False, dry_run: bool = True) -> OffsetsPlan:
    """Change where file source `op` stands with file `path` (as `source_offsets` shows it, or a local path): resume
    its split `records` records after the split's start, or `shift` records from where the reader stands
    (``shift=1`` skips a poison record); `skip_file` drops the file (the reader's split and a pending split; the
    enumerator counts it as processed, so a monitoring source never reads it again); `reread` takes a processed
    file off the enumerator's list, so a monitoring source discovers and reads it again from the start.

    A position is Flink's `CheckpointedPosition`: a byte offset where the format has one, then records to skip;
    statekit moves the records to skip (the byte offset stays), which every `StreamFormat` restores.
    Writes the new Flink savepoint `target` like `set_offsets` (only with ``dry_run=False``; the source untouched).

    Raises
    ------
    NoSourceStateError
        `op` holds no source state.
    UnsupportedFormatError
        `op` is not a file source, or `source` is a statekit savepoint.
    UnknownPartitionError
        No reader or pending split holds `path` (for `reread`: the enumerator has not processed it).
    InvalidArgumentError
        Not exactly one action; a position before the split's start; `reread` of a file still being read.
    """
    if sum([records is not None, shift is not None, skip_file, reread]) != 1:
        raise InvalidArgumentError("give exactly one of --records N, --shift K, --skip-file and --reread for --path.")
    if records is not None and records < 0:
        raise InvalidArgumentError(f"--records {records}: a position is a count of records >= 0.")
    sp, meta, state = _flink_source(source, op)
    if state.kind != "file":
        raise UnsupportedFormatError(
            f"operator {_name(meta)} of {source} is a {state.kind} source; --path edits file sources (a Kafka source "
            "moves with --topic and --partition).")
    enum = state.enumerator if isinstance(state.enumerator, FileEnumeratorState) else None
    readers = [r for r in state.readers if isinstance(r.split, FileSplit) and _same_file(r.split.path, path)]
    pending = [i for i, f in enumerate(enum.pending if enum else ()) if _same_file(f.path, path)]
    processed = [i for i, p in enumerate(enum.processed if enum else ()) if _same_file(p, path)]
    if reread:
        if not processed:
            raise UnknownPartitionError(
                f"the enumerator of {_name(meta)} has not processed {path} (it lists {_listing(enum)}); only a processed "
                "file is read again.")
        if readers or pending:
            raise InvalidArgumentError(f"{path} is still being read (a reader or a pending split holds it); use "
                                       "--records 0 to read it again from its start.")
    elif not readers and not pending:
        held = sorted({r.split.path for r in state.readers if isinstance(r.split, FileSplit)}
                      | {f.path for f in (enum.pending if enum else ())})
        raise UnknownPartitionError(
            f"operator {_name(meta)} of {source} holds no split of {path}; its readers and pending splits hold "
            f"{', '.join(held) or 'none'}" + (" (processed files: --reread)" if enum and enum.processed else "") + ".")

    plan = OffsetsPlan(str(source), str(target), _name(meta))
    edits: dict[int, list[_Edit]] = {}
    new_pending = list(enum.pending) if enum else []
    new_processed = list(enum.processed) if enum else []

    def moved(split: FileSplit) -> FileSplit:
        if records is not None:
            return replace(split, position=(-1, records))  # NO_OFFSET: count records from the split's start
        assert shift is not None
        offset, skip = split.position or (-1, 0)
        if skip + shift < 0:
            raise InvalidArgumentError(f"{split.path} would stand {skip + shift} records after "
                                       f"{'byte ' + str(offset) if offset >= 0 else 'the split start'}; it must be >= 0 "
                                       "(a shift moves within the records after the checkpointed byte offset).")
        return replace(split, position=(offset, skip + shift))

    for r in readers:
        split = r.split
        assert isinstance(split, FileSplit)
        old = encode_file_reader_split(split)
        if skip_file:
            edits.setdefault(r.subtask, []).append((r.payload_at, old, None))
            plan.changes.append(FileChange("reader", r.subtask, split.path, _position_text(split.position), "dropped"))
        else:
            new = moved(split)
            edits.setdefault(r.subtask, []).append((r.payload_at, old, encode_file_reader_split(new)))
            plan.changes.append(FileChange("reader", r.subtask, split.path, _position_text(split.position),
                                           _position_text(new.position)))
    for i in sorted(pending, reverse=True):
        split = new_pending[i]
        if skip_file:
            del new_pending[i]
            plan.changes.append(FileChange("enumerator", None, split.path, "pending", "dropped"))
        else:
            new_pending[i] = moved(split)
            plan.changes.append(FileChange("enumerator", None, split.path, _position_text(split.position),
                                           _position_text(new_pending[i].position)))
    if skip_file and enum is not None and not processed and (enum.processed or not enum.pending):
        # a monitoring enumerator lists every file it handed out: listed, the file is never discovered again
        stored = next((r.split.path for r in readers if isinstance(r.split, FileSplit)), None) or \
            next(enum.pending[i].path for i in pending)
        new_processed.append(stored)
        plan.changes.append(FileChange("enumerator", None, stored, "not processed", "processed"))
    if reread:
        for i in sorted(processed, reverse=True):
            plan.changes.append(FileChange("enumerator", None, new_processed.pop(i), "processed", "to discover again"))
    enumerator = FileEnumeratorState(tuple(new_pending), tuple(new_processed)).encode() if enum is not None else None
    if enumerator is not None and enum is not None and enumerator == enum.encode():
        enumerator = None
    if dry_run:
        return plan
    _write(sp, state, edits, enumerator, target)
    plan.written = True
    return plan


def _listing(enum: FileEnumeratorState | None) -> str:
    return ", ".join(enum.processed) if enum and enum.processed else "no processed file"


def _kafka(r: _ReaderSplit) -> KafkaSplit:
    assert isinstance(r.split, KafkaSplit)
    return r.split


#: one reader element to change: (where its payload starts in the subtask's stream, its payload as read, the new
#: payload or None to drop the element)
_Edit = tuple[int, bytes, "bytes | None"]


def _write(sp: "FlinkSavepoint", state: _SourceState, edits: dict[int, list[_Edit]], enumerator: bytes | None,
           target: "str | os.PathLike[str]") -> None:
    """Write `sp` at `target` with the source operator's reader elements edited per subtask and (unless None) its
    enumerator's bytes replaced: the operator's new record spliced into the original `_metadata`, everything else
    carried byte for byte, atomically."""
    from statekit.format.files import storage_errors
    from statekit.format.flink.metadata import METADATA_NAME
    from statekit.format.flink.sources import CoordinatorState
    from statekit.format.flink.writer import FlinkStaging

    md = sp.flink.metadata
    fop = md.operator(state.meta.uid_hash)
    assert fop is not None
    original = (sp.path / METADATA_NAME).read_bytes()
    where = f"{sp.path}/_metadata"
    check_record(fop, original, md.version, where)
    # straight to a store's target: carried files copied there server-side, the new streams written, _metadata last
    with FlinkStaging(target) as staging:
        with storage_errors(staging.target):
            new_files: dict[int, tuple[str, bytes]] = {}  # subtask -> (relative name, stream bytes)
            subtasks = []
            for st in fop.subtasks:
                h = st.managed_operator
                if st.index in edits and h is not None:
                    stream, h = _edit_stream(sp.flink.files.read(h.delegate), h, edits[st.index],
                                             f"{where}, subtask {st.index}")
                    st = replace(st, managed_operator=_with_stream(h, stream, staging, new_files, st.index))
                subtasks.append(st)
            coordinator = fop.coordinator
            if enumerator is not None and coordinator is not None:
                old_state = CoordinatorState.decode(sp.flink.files.read(coordinator), where)
                data = replace(old_state, enumerator=enumerator).encode()
                coordinator = _new_stream(coordinator, data, staging, new_files, -1)
            record = operator_record(replace(fop, subtasks=tuple(subtasks), coordinator=coordinator), md.version)
            start, end = fop.span
            metadata = original[:start] + record + original[end:]
            _copy_relative_files(sp, staging)  # a rewritten stream's old file too: it may be shared
            for name, data in new_files.values():
                staging.write_new(name, data)
        staging.commit(metadata)


def _edit_stream(stream: bytes, h: "OperatorStreamHandle", edits: list[_Edit],
                 where: str) -> "tuple[bytes, OperatorStreamHandle]":
    """An operator-state stream with `edits` applied to its ``i32 length | payload`` elements, and its handle with
    every state's element offsets moved to match (an element dropped loses its offset)."""
    out = bytearray()
    last = 0
    moves: list[tuple[int, int, bool]] = []  # (old element start, old element end, dropped)
    growth: list[int] = []  # per edit: new length - old length
    for at, old, data in sorted(edits, key=lambda e: e[0]):
        begin, n = at - 4, len(old)
        if begin < last or int.from_bytes(stream[begin:at], "big", signed=True) != n or stream[at:at + n] != old:
            raise CorruptSavepointError(f"{where}: a split is not where it was read.")
        out += stream[last:begin]
        if data is not None:
            out += len(data).to_bytes(4, "big", signed=True) + data
        moves.append((begin, at + n, data is None))
        growth.append((0 if data is None else 4 + len(data)) - (4 + n))
        last = at + n
    out += stream[last:]
    dropped = {b for b, _, gone in moves if gone}

    def moved(o: int) -> int:
        return o + sum(g for (_, e, _), g in zip(moves, growth) if e <= o)

    states = tuple(replace(e, offsets=tuple(moved(o) for o in e.offsets if o not in dropped)) for e in h.states)
    return bytes(out), replace(h, states=states)


def _new_stream(h: "StreamHandle", data: bytes, staging: Any, new_files: dict[int, tuple[str, bytes]],
                key: int) -> "StreamHandle":
    """`data` in place of stream `h`: inline stays inline, a file becomes a new file of the new savepoint."""
    from statekit.format.flink.metadata import StreamHandle

    if h.kind == "bytes":
        return replace(h, data=data, size=len(data))
    name, _ = staging.new_file()
    new_files[key] = (name, data)
    return StreamHandle("relative", name, len(data))


def _with_stream(h: "OperatorStreamHandle", data: bytes, staging: Any, new_files: dict[int, tuple[str, bytes]],
                 subtask: int) -> "OperatorStreamHandle":
    """`h` with its stream replaced by `data` (see `_new_stream`)."""
    return replace(h, delegate=_new_stream(h.delegate, data, staging, new_files, subtask))


def _relative_handles(sp: "FlinkSavepoint") -> list["StreamHandle"]:
    """Every stream of the savepoint stored as a file next to `_metadata` (which a new savepoint must carry)."""
    from statekit.format.flink.metadata import IncrementalKeyedHandle, KeyGroupsHandle

    out: list[StreamHandle] = []
    for op in sp.flink.metadata.operators:
        streams: list[StreamHandle | None] = [op.coordinator]
        for st in op.subtasks:
            for oh in (st.managed_operator, st.raw_operator):
                if oh is not None:
                    streams.append(oh.delegate)
            for kh in (st.managed_keyed, st.raw_keyed):
                if isinstance(kh, KeyGroupsHandle):
                    streams.append(kh.delegate)
                elif isinstance(kh, IncrementalKeyedHandle):
                    streams += [kh.meta, *(h for _, h in kh.shared), *(h for _, h in kh.private)]
        out += [h for h in streams if h is not None and h.kind == "relative"]
    return out


def _copy_relative_files(sp: "FlinkSavepoint", staging: Any) -> None:
    """Carry the savepoint's own files into the new one unchanged (`FlinkStaging.carry_file`: hard links on one
    local file system, server-side copies on one store)."""
    done: set[str] = set()
    for h in _relative_handles(sp):
        if h.path in done:
            continue
        done.add(h.path)
        staging.carry_file(sp.flink.files.path(h), h.path)
