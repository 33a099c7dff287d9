"""The savepoint manifest (`_metadata.json`): parsing, validation, serialisation and path safety."""

from __future__ import annotations

import base64
import binascii
import json
import os
import posixpath
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from statekit.errors import (
    CorruptSavepointError,
    NotASavepointError,
    StateTypeError,
    UnknownOperatorError,
    UnknownStateError,
    UnsafePathError,
    UnsupportedFormatError,
)
from statekit.identifiers import OperatorIdentifier
from statekit.state.descriptors import OperatorStateInfo, StateInfo

FORMAT = "statekit-savepoint"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
#: Optional features a reader must understand; unknown ones are refused.
SUPPORTED_FEATURES = frozenset({"rocksdb-native", "pickled"})
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
        return self.key_group_start is not None and self.key_group_start <= key_group <= self.key_group_end


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

    def without_key(self) -> "FlinkSerializers":
        """The same without what depends on the key type (after a re-key to another type)."""
        return FlinkSerializers(None, self.states, (), self.operator_states)

    def to_json(self) -> dict[str, Any]:
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
        return {"key": b64(self.key) if self.key is not None else None,
                "states": {n: b64(b) for n, b in self.states},
                "timers": [b64(b) for b in self.timers],
                "operator_states": {n: b64(b) for n, b in self.operator_states}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FlinkSerializers":
        dec = lambda v: base64.b64decode(v, validate=True)  # noqa: E731
        return cls(dec(d["key"]) if d.get("key") is not None else None,
                   tuple((n, dec(v)) for n, v in d.get("states", {}).items()),
                   tuple(dec(v) for v in d.get("timers", [])),
                   tuple((n, dec(v)) for n, v in d.get("operator_states", {}).items()))


@dataclass(frozen=True)
class OperatorMetadata:
    """Everything the manifest says about one operator."""

    uid: str | None
    uid_hash: str
    name: str
    parallelism: int
    max_parallelism: int
    key_type: str | None = None
    namespace_type: str | None = None
    keyed_states: tuple[StateInfo, ...] = ()
    operator_states: tuple[OperatorStateInfo, ...] = ()
    files: tuple[FileEntry, ...] = ()
    keyed_format: Literal["parquet", "rocksdb"] = "parquet"
    flink: FlinkSerializers | None = None  # serializers carried from a Flink savepoint

    @property
    def identifier(self) -> OperatorIdentifier:
        return OperatorIdentifier.for_uid(self.uid) if self.uid else OperatorIdentifier.for_uid_hash(self.uid_hash)

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def is_native(self) -> bool:
        return self.keyed_format == "rocksdb"

    @property
    def display_name(self) -> str:
        return self.uid or self.uid_hash

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
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OperatorMetadata":
        return cls(
            uid=d.get("uid"),
            uid_hash=d["uid_hash"],
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
        )


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
        """The operator with `op`'s uid hash; `UnknownOperatorError` lists what exists."""
        ident = OperatorIdentifier.coerce(op)
        for meta in self.operators:
            if meta.uid_hash == ident.uid_hash:
                return meta
        have = ", ".join(f"{m.uid or '<no uid>'} ({m.uid_hash})" for m in self.operators) or "no operators"
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
    full = (root / norm).resolve()
    base = root.resolve()
    if full != base and base not in full.parents:
        raise UnsafePathError(f"manifest path {rel!r} resolves outside the savepoint ({full}); refusing to read it.")
    return full


def _fail(path: Path, why: str) -> CorruptSavepointError:
    return CorruptSavepointError(
        f"{path / MANIFEST_NAME}: {why}. The savepoint is damaged; restore it from a copy or take a new one."
    )


def load_manifest(path: Path) -> Manifest:
    """Read and validate `<path>/_metadata.json`; every failure is a typed `SavepointError`."""
    mpath = path / MANIFEST_NAME
    if not path.is_dir():
        raise NotASavepointError(f"{path} is not a directory; a savepoint is a directory holding {MANIFEST_NAME}.")
    if not mpath.is_file():
        raise NotASavepointError(
            f"{path} is not a savepoint: it has no {MANIFEST_NAME}. An interrupted write leaves no manifest; "
            "point at a completed savepoint or checkpoint directory."
        )
    size = mpath.stat().st_size
    if size == 0:
        raise _fail(path, "the manifest is empty (truncated)")
    if size > MAX_MANIFEST_BYTES:
        raise _fail(path, f"the manifest is {size} bytes, larger than any valid manifest")
    try:
        raw = json.loads(mpath.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
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
        if not isinstance(raw["operators"], list) or not all(isinstance(op, dict) for op in raw["operators"]):
            raise TypeError("'operators' is not a list of objects")
        for op in raw["operators"]:
            for key in ("keyed_states", "operator_states", "files"):
                if not isinstance(op.get(key, []), list) or not all(isinstance(x, dict) for x in op.get(key, [])):
                    raise TypeError(f"operator {key!r} is not a list of objects")
        manifest = Manifest(
            checkpoint_id=int(raw["checkpoint_id"]),
            kind=raw.get("kind", "savepoint"),
            created_at=str(raw.get("created_at", "")),
            job_name=raw.get("job_name"),
            operators=tuple(OperatorMetadata.from_json(op) for op in raw["operators"]),
            features=tuple(features),
            format_version=version,
        )
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as exc:
        raise _fail(path, f"the manifest misses or mistypes a field ({type(exc).__name__}: {exc})") from None
    _validate(manifest, path)
    return manifest


_UID_HASH = re.compile(r"[0-9a-f]{32}")
_STATE_KINDS = frozenset({"value", "list", "map", "reducing", "aggregating"})
_REDISTRIBUTIONS = frozenset({"split", "union", "broadcast"})
_TABLES = frozenset({"keyed", "timers", "operator", "broadcast", "rocksdb"})


def _is_int(v: Any) -> bool:
    return type(v) is int


def _check_ddl(path: Path, ddl: Any, where: str) -> None:
    from statekit.types import parse_ddl  # a leaf module; imported here to keep manifest loading light

    try:
        parse_ddl(ddl)
    except StateTypeError as exc:
        raise _fail(path, f"{where} has an invalid type {ddl!r} ({exc})") from None


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
                if meta.name != name or name not in known:
                    raise _fail(path, f"{where}: carried Flink serializers of {name!r} match no state of the operator")
        for raw in fl.timers:
            if not read_meta_info(DataInput(raw, f"{path}: {where} flink timer serializers")).is_timer:
                raise _fail(path, f"{where}: carried Flink timer serializers are not a timer queue")
    except (CorruptSavepointError, UnsupportedFormatError) as exc:
        raise _fail(path, f"{where} carries Flink serializers that do not parse ({exc})") from None


def _validate(manifest: Manifest, path: Path) -> None:
    """Everything readers rely on, checked once when the manifest is loaded (no data file is read)."""
    if manifest.kind not in ("savepoint", "checkpoint"):
        raise _fail(path, f"kind {manifest.kind!r} is neither 'savepoint' nor 'checkpoint'")
    seen: set[str] = set()
    listed: set[str] = set()
    for op in manifest.operators:
        if not isinstance(op.uid_hash, str) or not _UID_HASH.fullmatch(op.uid_hash):
            raise _fail(path, f"operator uid hash {op.uid_hash!r} is not 32 lowercase hex characters")
        if op.uid is not None and not isinstance(op.uid, str):
            raise _fail(path, f"operator uid {op.uid!r} is not a string")
        if op.uid_hash in seen:
            raise _fail(path, f"operator {op.uid_hash} is listed twice")
        seen.add(op.uid_hash)
        if op.uid is not None and OperatorIdentifier.for_uid(op.uid).uid_hash != op.uid_hash:
            raise _fail(path, f"operator uid {op.uid!r} does not match its uid hash {op.uid_hash}")
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
            if st.kind not in _STATE_KINDS:
                raise _fail(path, f"{where}: keyed state {st.name!r} has unknown kind {st.kind!r}")
            _check_ddl(path, st.type, f"{where}: keyed state {st.name!r}")
        op_states: dict[str, str] = {}
        for st in op.operator_states:
            if not isinstance(st.name, str) or not st.name or st.name in op_states:
                raise _fail(path, f"{where} has an operator state named {st.name!r} (empty, not text or twice)")
            if st.redistribution not in _REDISTRIBUTIONS:
                raise _fail(path, f"{where}: operator state {st.name!r} has unknown redistribution {st.redistribution!r}")
            _check_ddl(path, st.type, f"{where}: operator state {st.name!r}")
            if st.redistribution == "broadcast":
                _check_ddl(path, st.key_type, f"{where}: the keys of broadcast state {st.name!r}")
            op_states[st.name] = st.redistribution
        if op.flink is not None:
            _check_flink(path, op, where, names, op_states)
        for f in op.files:
            safe_relative_path(path, f.path)
            if posixpath.normpath(f.path) in (".", MANIFEST_NAME):
                raise _fail(path, f"file entry {f.path!r} does not name a data file")
            if f.path in listed:
                raise _fail(path, f"file {f.path} is listed twice")
            listed.add(f.path)
            _validate_file(path, op, f, op_states)


def _validate_file(path: Path, op: OperatorMetadata, f: FileEntry, op_states: dict[str, str]) -> None:
    def bad(why: str) -> CorruptSavepointError:
        return _fail(path, f"file entry {f.path} of operator {op.display_name!r} {why}")

    if f.table not in _TABLES:
        raise bad(f"has unknown table {f.table!r}; known tables are {sorted(_TABLES)}")
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

