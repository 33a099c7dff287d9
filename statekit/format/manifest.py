"""The savepoint manifest (`_metadata.json`): parsing, validation, serialisation and path safety."""

from __future__ import annotations

import base64
import binascii
import json
import os
import posixpath
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from statekit.errors import (
    CorruptSavepointError,
    NotASavepointError,
    StateTypeError,
    UnknownOperatorError,
    UnknownStateError,
    UnreadableOutputError,
    UnsafePathError,
    UnsupportedFormatError,
)
from statekit.format.manifest_schema import (
    MANIFEST_SCHEMA,
    REDISTRIBUTIONS,
    STATE_KINDS,
    TABLES,
    UID_HASH,
    SchemaViolation,
    check_schema,
    parse_int,
)
from statekit.identifiers import OperatorIdentifier
from statekit.state.descriptors import OperatorStateInfo, StateInfo

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT = "statekit-savepoint"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
#: Optional features a reader must understand; unknown ones are refused.
SUPPORTED_FEATURES = frozenset({"rocksdb-native", "pickled", "stored-key-groups"})
MANIFEST_NAME = "_metadata.json"
#: A manifest larger than this is refused before parsing (a damaged file, not a savepoint).
MAX_MANIFEST_BYTES = 256 * 1024 * 1024

TableName = Literal["keyed", "timers", "operator", "broadcast", "rocksdb"]
SavepointKind = Literal["savepoint", "checkpoint"]


@dataclass(frozen=True)
class FileEntry:
    """One data file listed by the manifest; `path` is relative to the savepoint root."""

    path: str
    table: TableName
    rows: int
    bytes: int
    checksum: str
    state: str | None = None
    key_group_start: int | None = None
    key_group_end: int | None = None
    subtask: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "table": self.table}
        if self.state is not None:
            out["state"] = self.state
        if self.key_group_start is not None:
            out["key_group_start"] = self.key_group_start
            out["key_group_end"] = self.key_group_end
        if self.subtask is not None:
            out["subtask"] = self.subtask
        out.update(rows=self.rows, bytes=self.bytes, checksum=self.checksum)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FileEntry":
        return cls(
            path=d["path"],
            table=d["table"],
            rows=int(d["rows"]),
            bytes=int(d["bytes"]),
            checksum=d["checksum"],
            state=d.get("state"),
            key_group_start=d.get("key_group_start"),
            key_group_end=d.get("key_group_end"),
            subtask=d.get("subtask"),
        )

    def covers(self, key_group: int) -> bool:
        start, end = self.key_group_start, self.key_group_end
        return start is not None and end is not None and start <= key_group <= end

    @property
    def key_groups(self) -> tuple[int, int]:
        """First and last key group of a keyed, timers or native file (the manifest check requires them)."""
        s, e = self.key_group_start, self.key_group_end
        if s is None or e is None:
            raise CorruptSavepointError(f"manifest entry {self.path} ({self.table}) has no key-group range.")
        return s, e

    def overlaps(self, start: int, end: int) -> bool:
        """Whether the file's key groups meet ``[start, end]`` (files without key groups meet none)."""
        s, e = self.key_group_start, self.key_group_end
        return s is not None and e is not None and s <= end and e >= start


@dataclass(frozen=True)
class FlinkSerializers:
    """Flink serializer snapshots of an operator read from a Flink savepoint, kept byte for byte (manifest
    field ``flink``), so that writing the state back to Flink (`statekit.savepoint.flink_out`) restores into
    the original job. `key` is the key serializer's versioned snapshot; the others are whole
    `StateMetaInfoSnapshot`s (name, kind, serializers) of keyed states, timer queues and operator states."""

    key: bytes | None = None
    states: tuple[tuple[str, bytes], ...] = ()
    timers: tuple[bytes, ...] = ()
    operator_states: tuple[tuple[str, bytes], ...] = ()
    #: the Flink version line the snapshots came from ("1.20"; `versions.FlinkVersion`), the default
    #: target when the state is written back to Flink; None in manifests written before it was recorded
    flink_version: str | None = None
    #: the operator coordinator's state as `_metadata` held it (a new-style source's split enumerator: Kafka's
    #: partitions, a file source's processed paths), written back with the operator (`flink_out.write_flink`):
    #: without it a restored source starts its enumerator afresh and reads its input again
    coordinator: bytes | None = None

    def without_key(self) -> "FlinkSerializers":
        """The same without what depends on the key type (after a re-key to another type)."""
        return FlinkSerializers(None, self.states, (), self.operator_states, self.flink_version, self.coordinator)

    def to_json(self) -> dict[str, Any]:
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
        out: dict[str, Any] = {"key": b64(self.key) if self.key is not None else None,
                               "states": {n: b64(b) for n, b in self.states},
                               "timers": [b64(b) for b in self.timers],
                               "operator_states": {n: b64(b) for n, b in self.operator_states}}
        if self.flink_version is not None:
            out["flink_version"] = self.flink_version
        if self.coordinator is not None:
            out["coordinator"] = b64(self.coordinator)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FlinkSerializers":
        dec = lambda v: base64.b64decode(v, validate=True)  # noqa: E731
        return cls(dec(d["key"]) if d.get("key") is not None else None,
                   tuple((n, dec(v)) for n, v in d.get("states", {}).items()),
                   tuple(dec(v) for v in d.get("timers", [])),
                   tuple((n, dec(v)) for n, v in d.get("operator_states", {}).items()),
                   d.get("flink_version"),
                   dec(d["coordinator"]) if d.get("coordinator") is not None else None)


@dataclass(frozen=True)
class OperatorMetadata:
    """Everything the manifest says about one operator; its identity is an `OperatorIdentifier`."""

    identifier: OperatorIdentifier
    name: str
    parallelism: int
    max_parallelism: int
    key_type: str | None = None
    namespace_type: str | None = None
    keyed_states: tuple[StateInfo, ...] = ()
    operator_states: tuple[OperatorStateInfo, ...] = ()
    files: tuple[FileEntry, ...] = ()
    keyed_format: Literal["parquet", "rocksdb", "flink"] = "parquet"  # flink: read in place from a Flink savepoint
    flink: FlinkSerializers | None = None  # serializers carried from a Flink savepoint
    #: "hashed": a key's group is Flink's hash of its declared type (statekit computes it); "stored": the key
    #: class's own hashCode() (POJO, Row keys read from Flink), so each row keeps the key group it was read with
    key_groups: Literal["hashed", "stored"] = "hashed"

    @property
    def stored_key_groups(self) -> bool:
        """Whether key groups come from user code and are kept as read (never recomputed from the key)."""
        return self.key_groups == "stored"

    @property
    def uid(self) -> str | None:
        """The uid, when the savepoint knows it (None for an operator identified by its hash only)."""
        return self.identifier.uid

    @property
    def uid_hash(self) -> str:
        return self.identifier.uid_hash

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def is_native(self) -> bool:
        return self.keyed_format == "rocksdb"

    @property
    def display_name(self) -> str:
        return self.uid or self.uid_hash

    @property
    def keyed_key_type(self) -> str:
        """The key type of a keyed operator; `UnknownStateError` for an operator without keyed state."""
        if self.key_type is None:
            raise UnknownStateError(
                f"operator {self.display_name!r} is not keyed (no key type): it has no keyed table or timers; "
                "read its operator state instead."
            )
        return self.key_type

    def files_of(self, table: TableName, state: str | None = None) -> list[FileEntry]:
        return [f for f in self.files if f.table == table and (state is None or f.state == state)]

    def keyed_state(self, name: str) -> StateInfo:
        for s in self.keyed_states:
            if s.name == name:
                return s
        raise UnknownStateError(
            f"operator {self.display_name!r} has no keyed state {name!r}; it has "
            f"{[s.name for s in self.keyed_states] or 'none'}."
        )

    def operator_state(self, name: str, *, redistribution: str | None = None) -> OperatorStateInfo:
        for s in self.operator_states:
            if s.name == name and (redistribution is None or s.redistribution == redistribution):
                return s
        have = [f"{s.name} ({s.redistribution})" for s in self.operator_states]
        what = f"{redistribution} state" if redistribution else "operator state"
        raise UnknownStateError(
            f"operator {self.display_name!r} has no {what} {name!r}; it has {have or 'no operator state'}."
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uid": self.uid,
            "uid_hash": self.uid_hash,
            "name": self.name,
            "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism,
            "key_type": self.key_type,
            "namespace_type": self.namespace_type,
            "keyed_format": self.keyed_format,
            "keyed_states": [s.to_json() for s in self.keyed_states],
            "operator_states": [s.to_json() for s in self.operator_states],
            "files": [f.to_json() for f in self.files],
        }
        if self.flink is not None:
            out["flink"] = self.flink.to_json()
        if self.key_groups != "hashed":
            out["key_groups"] = self.key_groups
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OperatorMetadata":
        return cls(
            identifier=_identifier(d.get("uid"), d["uid_hash"]),
            name=d.get("name") or d.get("uid") or d["uid_hash"],
            parallelism=int(d["parallelism"]),
            max_parallelism=int(d["max_parallelism"]),
            key_type=d.get("key_type"),
            namespace_type=d.get("namespace_type"),
            keyed_states=tuple(StateInfo.from_json(s) for s in d.get("keyed_states", [])),
            operator_states=tuple(OperatorStateInfo.from_json(s) for s in d.get("operator_states", [])),
            files=tuple(FileEntry.from_json(f) for f in d.get("files", [])),
            keyed_format=d.get("keyed_format", "parquet"),
            flink=FlinkSerializers.from_json(d["flink"]) if d.get("flink") is not None else None,
            key_groups=d.get("key_groups", "hashed"),
        )


class _ManifestFault(ValueError):
    """A manifest value that is well typed JSON but wrong; `parse_manifest` reports it as corrupt."""


def _identifier(uid: Any, uid_hash: Any) -> OperatorIdentifier:
    if not isinstance(uid_hash, str) or not UID_HASH.fullmatch(uid_hash):
        raise _ManifestFault(f"operator uid hash {uid_hash!r} is not 32 lowercase hex characters")
    if uid is not None and (not isinstance(uid, str) or not uid):
        raise _ManifestFault(f"operator uid {uid!r} is not a non-empty string")
    if uid is not None and OperatorIdentifier.for_uid(uid).uid_hash != uid_hash:
        raise _ManifestFault(f"operator uid {uid!r} does not match its uid hash {uid_hash}")
    return OperatorIdentifier(uid_hash=uid_hash, uid=uid)


@dataclass(frozen=True)
class Manifest:
    """The parsed `_metadata.json` of a savepoint or checkpoint."""

    checkpoint_id: int
    kind: SavepointKind
    created_at: str
    job_name: str | None
    operators: tuple[OperatorMetadata, ...]
    features: tuple[str, ...] = ()
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": self.format_version,
            "features": sorted(self.features),
            "checkpoint_id": self.checkpoint_id,
            "kind": self.kind,
            "created_at": self.created_at,
            "job_name": self.job_name,
            "operators": [op.to_json() for op in self.operators],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=False)

    def operator(self, op: OperatorIdentifier | str) -> OperatorMetadata:
        """The operator `op` names; `UnknownOperatorError` lists what exists.

        `op` is an `OperatorIdentifier`, or a str tried as a uid, then as a uid hash (32 hex digits), then
        as the operator's stored name (Flink SQL operators have no uid by default: ``GroupAggregate[51]``).
        """
        ident = OperatorIdentifier.coerce(op)
        for meta in self.operators:
            if meta.uid_hash == ident.uid_hash:
                return meta
        if isinstance(op, str):
            for meta in self.operators:
                if meta.uid_hash == op:
                    return meta
            named = [m for m in self.operators if m.name == op]
            if len(named) > 1:
                raise UnknownOperatorError(
                    f"{len(named)} operators are named {op!r} (uid hashes {', '.join(m.uid_hash for m in named)}); "
                    "name one by its uid hash instead."
                )
            if named:
                return named[0]
        have = ", ".join(f"{m.uid or m.name or '<no uid>'} ({m.uid_hash})" for m in self.operators) or "no operators"
        raise UnknownOperatorError(
            f"no operator {ident} (uid hash {ident.uid_hash}) in this savepoint; it contains: {have}."
        )

    def with_operators(self, operators: tuple[OperatorMetadata, ...]) -> "Manifest":
        return replace(self, operators=operators)


def safe_relative_path(root: Path, rel: str) -> Path:
    """Resolve a manifest path, refusing anything that could leave the savepoint directory."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise UnsafePathError(f"manifest path {rel!r} is empty or malformed; the manifest is damaged.")
    norm = posixpath.normpath(rel)
    if (
        rel.startswith(("/", "\\"))
        or os.path.isabs(rel)
        or norm == ".."
        or norm.startswith("../")
        or ".." in rel.replace("\\", "/").split("/")
        or (len(rel) > 1 and rel[1] == ":")
    ):
        raise UnsafePathError(
            f"manifest path {rel!r} points outside the savepoint; refusing to read it. "
            "Savepoint manifests may only name files inside their own directory."
        )
    try:
        full = (root / norm).resolve()
        base = root.resolve()
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise UnsafePathError(f"manifest path {rel!r} cannot be resolved ({exc}); the savepoint is damaged.") from None
    if full != base and base not in full.parents:
        raise UnsafePathError(f"manifest path {rel!r} resolves outside the savepoint ({full}); refusing to read it.")
    return full


DAMAGED = "The savepoint is damaged; restore it from a copy or take a new one."


def _fail(path: Path, why: str) -> CorruptSavepointError:
    return CorruptSavepointError(f"{path / MANIFEST_NAME}: {why}. {DAMAGED}")


def writable_manifest(manifest: Manifest, target: Path) -> str:
    """The text of `manifest`, checked by the reader itself before a writer writes it: every rule a reader
    enforces has one home, `parse_manifest`, and what it would refuse is never written (`UnreadableOutputError`,
    naming the field at fault; the caller publishes nothing)."""
    text = manifest.dumps()
    try:
        parse_manifest(json.loads(text, parse_int=parse_int), target)
    except (CorruptSavepointError, UnsafePathError, UnsupportedFormatError) as exc:
        why = str(exc).removesuffix(DAMAGED).rstrip(". ")
        raise UnreadableOutputError(f"not writing {target}: a reader would refuse its manifest ({why}). Nothing was "
                                    "written; change the input at fault (a uid, name or type too long or not "
                                    "plain text, for example).") from None
    return text


def load_manifest(path: Path) -> Manifest:
    """Read and validate `<path>/_metadata.json`; every failure is a typed `SavepointError`."""
    mpath = path / MANIFEST_NAME
    if hasattr(path, "fs"):  # a StoragePath: one GET; a missing manifest is no savepoint
        return _load_remote_manifest(path, mpath)
    if not path.is_dir():
        raise NotASavepointError(f"{path} is not a directory; a savepoint is a directory holding {MANIFEST_NAME}.")
    if not mpath.is_file():
        raise NotASavepointError(
            f"{path} is not a savepoint: it has no {MANIFEST_NAME}. An interrupted write leaves no manifest; "
            "point at a completed savepoint or checkpoint directory."
        )
    try:
        fd = os.open(mpath, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO swapped in must not block
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _fail(path, "the manifest is not a regular file")
            data = fh.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise _fail(path, f"the manifest cannot be read ({exc.strerror or exc})") from None
    return _parse_manifest_bytes(path, data)


def _load_remote_manifest(path: Any, mpath: Any) -> Manifest:
    """`load_manifest` of a savepoint on object storage (`statekit.format.storage.StoragePath`)."""
    from statekit.errors import StorageNotFoundError

    try:
        data = mpath.read_buffer(MAX_MANIFEST_BYTES).to_pybytes()
    except StorageNotFoundError:
        if not path.bucket_exists():
            raise NotASavepointError(f"{path}: the bucket does not exist. Correct the bucket name in the URI.") from None
        raise NotASavepointError(
            f"{path} is not a savepoint: it has no {MANIFEST_NAME}. An interrupted write leaves no manifest; "
            "point at a completed savepoint or checkpoint."
        ) from None
    return _parse_manifest_bytes(path, data)


def _parse_manifest_bytes(path: Any, data: bytes) -> Manifest:
    if not data:
        raise _fail(path, "the manifest is empty (truncated)")
    if len(data) > MAX_MANIFEST_BYTES:
        raise _fail(path, f"the manifest is larger than any valid manifest ({MAX_MANIFEST_BYTES} bytes)")
    try:
        raw = json.loads(data.decode("utf-8"), parse_int=parse_int)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise _fail(path, f"the manifest is not valid JSON ({exc})") from None
    return parse_manifest(raw, path)


def parse_manifest(raw: Any, path: Path) -> Manifest:
    """Validate a decoded manifest document."""
    if not isinstance(raw, dict):
        raise _fail(path, "the manifest is not a JSON object")
    if raw.get("format") != FORMAT:
        raise UnsupportedFormatError(
            f"{path / MANIFEST_NAME}: format {raw.get('format')!r} is not {FORMAT!r}; this is not a statekit savepoint."
        )
    version = raw.get("format_version")
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        raise UnsupportedFormatError(
            f"{path}: savepoint format version {version!r} is not supported; this statekit reads format "
            f"version(s) {', '.join(map(str, SUPPORTED_VERSIONS))}. Upgrade statekit, or migrate the savepoint."
        )
    features = raw.get("features", [])
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise _fail(path, "'features' is not a list of names")
    unknown = sorted(set(features) - SUPPORTED_FEATURES)
    if unknown:
        raise UnsupportedFormatError(
            f"{path}: savepoint uses feature(s) {unknown} that this statekit does not support; it supports "
            f"{sorted(SUPPORTED_FEATURES)}. Upgrade statekit to read it."
        )
    try:
        check_schema(raw, MANIFEST_SCHEMA, "")  # every field's JSON type and bounds, before any use
    except SchemaViolation as exc:
        raise _fail(path, str(exc)) from None
    for i, op in enumerate(raw["operators"]):
        if op.get("flink") is not None:
            _check_flink_json(op["flink"], f"operators[{i}].flink", path)
    try:
        operators = tuple(OperatorMetadata.from_json(op) for op in raw["operators"])
    except _ManifestFault as exc:
        raise _fail(path, str(exc)) from None
    manifest = Manifest(
        checkpoint_id=raw["checkpoint_id"],
        kind=raw.get("kind", "savepoint"),
        created_at=raw.get("created_at") or "",
        job_name=raw.get("job_name"),
        operators=operators,
        features=tuple(features),
        format_version=version,
    )
    _validate(manifest, path)
    return manifest


def _is_int(v: Any) -> TypeGuard[int]:
    return type(v) is int


def _check_ddl(path: Path, ddl: Any, where: str) -> "pa.DataType":
    from statekit.types import parse_ddl  # a leaf module; imported here to keep manifest loading light

    try:
        return parse_ddl(ddl)
    except StateTypeError as exc:
        raise _fail(path, f"{where} has an invalid type {ddl!r} ({exc})") from None


def _check_flink_json(d: Any, where: str, path: Path) -> None:
    """The manifest field ``flink``: base64 strings under ``key``, ``states``, ``timers``, ``operator_states``,
    ``coordinator``."""
    def b64(v: Any, at: str) -> None:
        try:
            if not isinstance(v, str):
                raise TypeError
            base64.b64decode(v, validate=True)
        except (TypeError, binascii.Error):
            raise _fail(path, f"field {at!r} is not base64 text (a Flink serializer snapshot)") from None

    if not isinstance(d, dict):
        raise _fail(path, f"field {where!r} is not an object")
    for name in ("key", "coordinator"):
        if d.get(name) is not None:
            b64(d[name], f"{where}.{name}")
    for name in ("states", "operator_states"):
        if not isinstance(d.get(name, {}), dict):
            raise _fail(path, f"field {where}.{name!r} is not an object")
        for k, v in d.get(name, {}).items():
            b64(v, f"{where}.{name}.{k}")
    if d.get("flink_version") is not None:
        from statekit.errors import InvalidArgumentError
        from statekit.format.flink.versions import FlinkVersion

        try:
            FlinkVersion.parse(d["flink_version"]) if isinstance(d["flink_version"], str) else None
        except InvalidArgumentError as e:
            raise _fail(path, f"field {where}.flink_version: {e}") from None
        if not isinstance(d["flink_version"], str):
            raise _fail(path, f"field {where}.flink_version is not a Flink version line such as \"1.20\"")
    if not isinstance(d.get("timers", []), list):
        raise _fail(path, f"field {where}.timers is not a list")
    for i, v in enumerate(d.get("timers", [])):
        b64(v, f"{where}.timers[{i}]")


def _check_flink(path: Path, op: OperatorMetadata, where: str, keyed: set[str], operator: dict[str, str]) -> None:
    """The carried Flink serializers parse, and name states the operator has."""
    from statekit.format.flink.binary import DataInput
    from statekit.format.flink.proxy import read_meta_info
    from statekit.format.flink.serializers import read_versioned

    fl = op.flink
    assert fl is not None
    try:
        if fl.key is not None:
            read_versioned(DataInput(fl.key, f"{path}: {where} flink key serializer"), "the key serializer")
        for group, known in ((fl.states, keyed), (fl.operator_states, set(operator))):
            for name, raw in group:
                meta = read_meta_info(DataInput(raw, f"{path}: {where} flink serializers of {name!r}"))
                # a PyFlink state is carried under its stored name, ``python-state-`` + the state's
                if meta.name != name or (name not in known and name.removeprefix("python-state-") not in known):
                    raise _fail(path, f"{where}: carried Flink serializers of {name!r} match no state of the operator")
        for raw in fl.timers:
            if not read_meta_info(DataInput(raw, f"{path}: {where} flink timer serializers")).is_timer:
                raise _fail(path, f"{where}: carried Flink timer serializers are not a timer queue")
    except (CorruptSavepointError, UnsupportedFormatError) as exc:
        raise _fail(path, f"{where} carries Flink serializers that do not parse ({exc})") from None


def _check_state_type(path: Path, t: "pa.DataType", kind: str, pickled: bool, what: str) -> None:
    """The column type a state of `kind` needs (list -> array, map -> map), with pickled values stored as binary."""
    import pyarrow as pa

    value = t
    if kind == "list":
        if not pa.types.is_list(t):
            raise _fail(path, f"{what} is list state but its type {t} is not an array; list state is stored as "
                              "array<T>")
        value = t.value_type
    elif kind == "map":
        if not pa.types.is_map(t):
            raise _fail(path, f"{what} is map state but its type {t} is not a map; map state is stored as map<K,V>")
        value = t.item_type
    if pickled and not pa.types.is_binary(value):
        raise _fail(path, f"{what} is marked pickled but its values are {value}, not binary; pickled values are "
                          "stored as binary")


def _validate(manifest: Manifest, path: Path) -> None:
    """Everything readers rely on, checked once when the manifest is loaded (no data file is read)."""
    if manifest.kind not in ("savepoint", "checkpoint"):
        raise _fail(path, f"kind {manifest.kind!r} is neither 'savepoint' nor 'checkpoint'")
    seen: set[str] = set()
    listed: set[str] = set()
    for op in manifest.operators:
        if op.uid_hash in seen:
            raise _fail(path, f"operator {op.uid_hash} is listed twice")
        seen.add(op.uid_hash)
        if not 1 <= op.max_parallelism <= 32768 or not 1 <= op.parallelism <= op.max_parallelism:
            raise _fail(
                path,
                f"operator {op.display_name!r} has parallelism {op.parallelism} / max parallelism "
                f"{op.max_parallelism} outside 1..max parallelism..32768",
            )
        if op.keyed_format not in ("parquet", "rocksdb"):
            raise _fail(path, f"operator {op.display_name!r} has unknown keyed_format {op.keyed_format!r}")
        where = f"operator {op.display_name!r}"
        if op.key_type is not None:
            _check_ddl(path, op.key_type, f"{where}: the key")
        elif op.keyed_states or op.namespace_type is not None:
            raise _fail(path, f"{where} declares keyed state but no key type")
        if op.namespace_type is not None:
            _check_ddl(path, op.namespace_type, f"{where}: the namespace")
        names: set[str] = set()
        for st in op.keyed_states:
            if not isinstance(st.name, str) or not st.name or st.name in ("key", "key_group", "namespace"):
                raise _fail(path, f"{where} has a keyed state named {st.name!r}")
            if st.name in names:
                raise _fail(path, f"{where} lists keyed state {st.name!r} twice")
            names.add(st.name)
            if st.kind not in STATE_KINDS:
                raise _fail(path, f"{where}: keyed state {st.name!r} has unknown kind {st.kind!r}")
            t = _check_ddl(path, st.type, f"{where}: keyed state {st.name!r}")
            _check_state_type(path, t, st.kind, st.pickled, f"{where}: keyed state {st.name!r}")
        op_states: dict[str, str] = {}
        for ost in op.operator_states:
            if not isinstance(ost.name, str) or not ost.name or ost.name in op_states:
                raise _fail(path, f"{where} has an operator state named {ost.name!r} (empty, not text or twice)")
            if ost.redistribution not in REDISTRIBUTIONS:
                raise _fail(path, f"{where}: operator state {ost.name!r} has unknown redistribution {ost.redistribution!r}")
            t = _check_ddl(path, ost.type, f"{where}: operator state {ost.name!r}")
            _check_state_type(path, t, "value", ost.pickled, f"{where}: operator state {ost.name!r}")
            if ost.redistribution == "broadcast":
                _check_ddl(path, ost.key_type, f"{where}: the keys of broadcast state {ost.name!r}")
            op_states[ost.name] = ost.redistribution
        if op.flink is not None:
            _check_flink(path, op, where, names, op_states)
        native_dirs: dict[int, str] = {}
        for f in op.files:
            safe_relative_path(path, f.path)
            norm = posixpath.normpath(f.path)
            if norm in (".", MANIFEST_NAME):
                raise _fail(path, f"file entry {f.path!r} does not name a data file")
            if norm in listed:
                raise _fail(path, f"file {f.path} is listed twice")
            listed.add(norm)
            _validate_file(path, op, f, op_states)
            # The files must be what keyed_format says: a reader looks for keyed state only in the tables
            # of that format, so a mismatch would make the state vanish without an error.
            if f.table in ("keyed", "rocksdb") and (f.table == "rocksdb") != op.is_native:
                raise _fail(path, f"file entry {f.path} of operator {op.display_name!r} is in the {f.table} table, "
                                  f"but the operator's keyed_format is {op.keyed_format!r}; the two must agree")
            if f.table == "rocksdb":
                if f.subtask is None:
                    raise _fail(path, f"native RocksDB file {f.path} of operator {op.display_name!r} names no subtask")
                directory = posixpath.dirname(norm)
                if native_dirs.setdefault(f.subtask, directory) != directory:
                    raise _fail(path, f"native RocksDB files of subtask {f.subtask} of operator {op.display_name!r} "
                                      "lie in more than one directory; one subtask's checkpoint is one directory")
        if len(set(native_dirs.values())) != len(native_dirs):
            raise _fail(path, f"two subtasks of operator {op.display_name!r} share one native RocksDB directory")
        if op.is_native and "rocksdb-native" not in manifest.features:
            raise _fail(path, f"operator {op.display_name!r} has keyed_format 'rocksdb' but the manifest does not "
                              "declare the 'rocksdb-native' feature")
        if op.stored_key_groups and "stored-key-groups" not in manifest.features:
            raise _fail(path, f"operator {op.display_name!r} keeps stored key groups but the manifest does not "
                              "declare the 'stored-key-groups' feature")
        if "pickled" not in manifest.features and (
                any(st.pickled for st in op.keyed_states) or any(st.pickled for st in op.operator_states)):
            raise _fail(path, f"operator {op.display_name!r} has pickled state but the manifest does not declare "
                              "the 'pickled' feature")


def _validate_file(path: Path, op: OperatorMetadata, f: FileEntry, op_states: dict[str, str]) -> None:
    def bad(why: str) -> CorruptSavepointError:
        return _fail(path, f"file entry {f.path} of operator {op.display_name!r} {why}")

    if f.table not in TABLES:
        raise bad(f"has unknown table {f.table!r}; known tables are {sorted(TABLES)}")
    if not (_is_int(f.rows) and _is_int(f.bytes) and f.rows >= 0 and f.bytes >= 0):
        raise bad("has a negative or non-integer row count or size")
    if not isinstance(f.checksum, str) or not f.checksum.startswith("crc32:"):
        raise bad(f"has checksum {f.checksum!r}; expected 'crc32:<8 hex digits>'")
    if f.table in ("keyed", "timers", "rocksdb"):
        if op.key_type is None:
            raise bad(f"belongs to the {f.table} table but the operator has no key type")
        s, e = f.key_group_start, f.key_group_end
        if not (_is_int(s) and _is_int(e) and 0 <= s <= e < op.max_parallelism):
            raise bad(
                f"has key-group range [{s!r}, {e!r}], not a range inside 0..{op.max_parallelism - 1}; readers use it "
                "to find a key's file"
            )
    if f.table in ("operator", "broadcast"):
        red = op_states.get(f.state)  # type: ignore[arg-type]
        if red is None or (red == "broadcast") != (f.table == "broadcast"):
            raise bad(f"belongs to operator state {f.state!r}, which the operator does not declare as {f.table} state")
    if f.subtask is not None and not (_is_int(f.subtask) and 0 <= f.subtask < op.parallelism):
        raise bad(f"has subtask {f.subtask!r} outside 0..{op.parallelism - 1}")


def iso_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "SUPPORTED_FEATURES",
    "SUPPORTED_VERSIONS",
    "FileEntry",
    "Manifest",
    "OperatorMetadata",
    "load_manifest",
    "parse_manifest",
    "safe_relative_path",
]

