"""`check(path)`: a read-only health report of a savepoint (files, checksums, schema, key groups, keys)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from statekit.errors import (
    DuplicateKeyError,
    InvalidArgumentError,
    SavepointError,
    StatekitError,
    UnsupportedFormatError,
)
from statekit.format import keyed as K
from statekit.format.files import read_parquet_verified, verify_file
from statekit.format.manifest import MANIFEST_NAME, FileEntry, OperatorMetadata, load_manifest
from statekit.savepoint.kinds import holds_flink_metadata
from statekit.savepoint.reader import Savepoint

ProblemKind = Literal[
    "manifest", "missing_file", "extra_file", "size_mismatch", "checksum_mismatch", "unreadable",
    "schema_mismatch", "wrong_key_group", "duplicate_key", "row_count", "invalid_row",
]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a savepoint."""

    kind: ProblemKind
    path: str
    message: str


@dataclass
class CheckReport:
    """What `check` found; ``ok`` when nothing is wrong."""

    path: Path
    problems: list[Problem] = field(default_factory=list)
    #: what statekit cannot decode (a limit of statekit, not damage): ``ok`` stays True
    unsupported: list[Problem] = field(default_factory=list)
    files_checked: int = 0
    rows_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, kind: ProblemKind, path: str, message: str) -> None:
        self.problems.append(Problem(kind, path, message))

    def __str__(self) -> str:
        head = f"{self.path}: {'OK' if self.ok else f'{len(self.problems)} problem(s)'} " \
               f"({self.files_checked} files, {self.rows_checked} rows checked)"
        return "\n".join([head] + [f"  [{p.kind}] {p.path}: {p.message}" for p in self.problems]
                         + [f"  [unsupported] {p.path}: {p.message}" for p in self.unsupported])


def check(path: Any, *, deep: bool = True, plan=None, storage_options: dict[str, Any] | None = None,
          filesystem: Any = None) -> CheckReport:
    """Verify a savepoint without modifying anything.

    Checks the manifest, that every listed file exists with the recorded size and checksum, that no
    unlisted files lie in the savepoint, and (``deep``) each table's schema against the manifest,
    that every keyed row sits in the key group of its key and inside its file's range, that keys
    (and broadcast keys) are unique, that list state belongs to existing subtasks and holds no
    nulls, and that row counts match. Each finding is a `Problem` whose ``kind`` is one of
    `ProblemKind`. ``plan`` (a Flink SQL savepoint's compiled plan) is matched against the savepoint
    first: one of another job raises `statekit.errors.PlanMismatchError` (a wrong argument, not damage).

    `path` is a path, a URI (``s3://...``, with ``storage_options``/``filesystem`` as for `Savepoint.open`) or an
    opened `Savepoint`.

    >>> import tempfile, os
    >>> check(os.path.join(tempfile.mkdtemp(), "nothing-here")).problems[0].kind
    'manifest'
    """
    from statekit.format.storage import StoragePath, locate

    where = locate(path.path if isinstance(path, Savepoint) else path, storage_options=storage_options,
                   filesystem=filesystem)
    root = cast(Path, where)  # a StoragePath offers the Path operations used here
    report = CheckReport(root)
    if not (root / MANIFEST_NAME).is_file() and holds_flink_metadata(root):
        return _check_flink(root, report, deep, plan)
    if plan is not None:
        raise InvalidArgumentError(f"{root} is a statekit savepoint; plan= names the state of Flink SQL jobs' savepoints.")
    try:
        manifest = load_manifest(root)
    except StatekitError as exc:
        report.add("manifest", MANIFEST_NAME, str(exc))
        return report
    listed: set[str] = set()
    for op in manifest.operators:
        before = len(report.problems)
        for entry in op.files:
            listed.add(os.path.normpath(entry.path))
            _check_file(report, root, op, entry, deep)
        if deep and op.key_type is not None and not op.is_native:
            _check_unique(report, root, op)
        if deep and op.is_native and len(report.problems) == before:
            _check_native(report, root, manifest, op)
    found = [f.relative_to(where) for f in where.iter_files()] if isinstance(where, StoragePath) else \
        [os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names]
    for rel in map(os.path.normpath, found):
        if rel != MANIFEST_NAME and rel not in listed:
            report.add("extra_file", rel, "file is not listed in the manifest; readers ignore it")
    return report


def _check_file(report: CheckReport, root: Path, op: OperatorMetadata, entry: FileEntry, deep: bool) -> None:
    report.files_checked += 1
    data, problem, message = verify_file(root, entry)
    if problem is not None:
        report.add(problem, entry.path, message)
        return
    if not deep or entry.table == "rocksdb":
        return
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        report.add("unreadable", entry.path, f"not readable Parquet ({exc})")
        return
    report.rows_checked += table.num_rows
    if table.num_rows != entry.rows:
        report.add("row_count", entry.path, f"{table.num_rows} rows but the manifest recorded {entry.rows}")
    expected = _expected_schema(op, entry)
    if expected is not None and (
        table.num_columns != len(expected)
        or any(a.name != b.name or not K.same_type(a.type, b.type) for a, b in zip(table.schema, expected))
    ):
        report.add("schema_mismatch", entry.path, f"columns {table.schema.names} with types "
                   f"{[str(t) for t in table.schema.types]} disagree with the manifest's "
                   f"{[f'{f.name} {f.type}' for f in expected]}")
        return
    if expected is not None:
        nulls = [f.name for f in expected if not f.nullable and table.column(f.name).null_count]
        if nulls:
            report.add("schema_mismatch", entry.path, f"required column(s) {nulls} hold nulls")
            return
    if entry.table == "broadcast":
        try:
            K.check_unique_keys(table, has_namespace=False, what=f"broadcast state {entry.state!r}")
        except DuplicateKeyError as exc:
            report.add("duplicate_key", entry.path, str(exc))
    if entry.table == "operator" and table.num_rows:
        subtask = np.asarray(table.column("subtask").to_numpy(zero_copy_only=False))
        outside = int(np.count_nonzero((subtask < 0) | (subtask >= op.parallelism)))
        if outside:
            report.add("invalid_row", entry.path, f"{outside} element(s) belong to a subtask outside "
                       f"0..{op.parallelism - 1} (the operator's parallelism is {op.parallelism})")
        if table.column("value").null_count:
            report.add("invalid_row", entry.path, "list state holds null elements, which Flink forbids")
    if entry.table == "timers" and table.num_rows:
        domains = set(table.column("domain").unique().to_pylist()) - {"event", "processing"}
        if domains:
            report.add("invalid_row", entry.path, f"timer domain(s) {sorted(map(str, domains))} are neither "
                       "'event' nor 'processing'")
    if entry.table in ("keyed", "timers") and table.num_rows:
        kg = np.asarray(table.column("key_group").to_numpy(), dtype=np.int32)
        try:  # stored key groups came from the key class's own hashCode(): only their placement is checked
            actual: np.ndarray = kg if op.stored_key_groups else K.compute_key_groups(table.column("key"), op.max_parallelism,
                                                                          op.keyed_key_type)
        except StatekitError as exc:
            report.add("unreadable", entry.path, f"key groups of its keys cannot be computed ({exc})")
            return
        wrong = int(np.count_nonzero(kg != actual))
        if wrong:
            report.add("wrong_key_group", entry.path, f"{wrong} row(s) carry a key group other than their key's")
        outside = int(np.count_nonzero((actual < entry.key_group_start) | (actual > entry.key_group_end)))
        if outside:
            report.add("wrong_key_group", entry.path, f"{outside} row(s) fall outside the file's key-group range "
                       f"[{entry.key_group_start}, {entry.key_group_end}]")
        if len(kg) > 1 and not bool(np.all(kg[1:] >= kg[:-1])):
            report.add("wrong_key_group", entry.path, "rows are not grouped by ascending key group")


def _expected_schema(op: OperatorMetadata, entry: FileEntry) -> pa.Schema | None:
    from statekit.types import parse_ddl

    if entry.table == "keyed":
        return K.keyed_schema(op.keyed_key_type, op.keyed_states, namespace_type=op.namespace_type)
    if entry.table == "timers":
        return K.timers_schema(op.keyed_key_type, namespace_type=op.namespace_type)
    info = next((s for s in op.operator_states if s.name == entry.state), None)
    if info is None:
        return None
    if entry.table == "broadcast":
        return pa.schema([("key", parse_ddl(info.broadcast_key_type)), ("value", parse_ddl(info.type))])
    return pa.schema([("subtask", pa.int32()), ("idx", pa.int64()), ("value", parse_ddl(info.type))])


def _check_unique(report: CheckReport, root: Path, op: OperatorMetadata) -> None:
    cols = ["key", "namespace"] if op.namespace_type else ["key"]
    parts = []
    for entry in op.files_of("keyed"):
        try:
            parts.append(read_parquet_verified(root, entry, columns=cols))
        except (StatekitError, pa.ArrowException):
            return  # already reported per file
    if not parts:
        return
    try:
        K.check_unique_keys(pa.concat_tables(parts), has_namespace=bool(op.namespace_type),
                            what=f"keyed table of {op.display_name}")
    except DuplicateKeyError as exc:
        report.add("duplicate_key", f"op-{op.uid_hash}/keyed", str(exc))
    except (pa.ArrowException, StatekitError, KeyError):  # KeyError: a namespace the files lack
        pass  # mismatched file schemas and null keys are reported per file


def _check_native(report: CheckReport, root: Path, manifest, op: OperatorMetadata) -> None:
    """A native RocksDB operator is checked by reading it as the keyed table every reader presents."""
    from statekit.savepoint.reader import Savepoint

    try:
        table = Savepoint(root, manifest).keyed_table(op.identifier)
    except StatekitError as exc:
        report.add("unreadable", f"op-{op.uid_hash}/rocksdb", f"the native RocksDB state cannot be read ({exc})")
        return
    report.rows_checked += table.num_rows


def _check_flink(root: Path, report: CheckReport, deep: bool, plan=None) -> CheckReport:
    """A Flink savepoint: `_metadata` parses, every state file is present and long enough, every state decodes."""
    from statekit.format.flink.metadata import StreamHandle
    from statekit.savepoint.flink import FlinkSavepoint

    try:
        sp = FlinkSavepoint.open(root, plan=plan)
    except SavepointError as exc:
        report.add("manifest", "_metadata", str(exc))
        return report
    handles: list[StreamHandle] = []
    for op in sp.flink.metadata.operators:
        for st in op.subtasks:
            for state in (st.managed_keyed, st.managed_operator):
                d: StreamHandle | None = getattr(state, "delegate", None)  # native RocksDB handles have none
                if d is not None and d.kind != "bytes":
                    handles.append(d)
    for h in handles:
        report.files_checked += 1
        try:
            sp.flink.files.size(h)
        except SavepointError as exc:
            report.add("missing_file" if "missing" in str(exc) else "size_mismatch", h.path, str(exc))
    if deep and report.ok:
        for where, message in sp.check_all():
            report.add("unreadable", where, message)
        for meta in sp.operators:
            for why in sp.unsupported(meta.identifier):
                report.unsupported.append(Problem("unreadable", meta.display_name, f"unsupported: {why}"))
        for meta in sp.operators:
            if meta.key_type is not None and report.ok:
                try:
                    table = sp.keyed_table(meta.identifier, with_key_group=True)
                except UnsupportedFormatError:
                    continue  # listed in report.unsupported above
                report.rows_checked += table.num_rows
                if sp.job_kind(meta.identifier) == "sql":  # BinaryRowData keys: their own key-group hash
                    wrong = sp.misplaced_keys(meta.identifier, table) or 0
                    if wrong:
                        report.add("wrong_key_group", meta.display_name,
                                   f"{wrong} key(s) are stored in a key group other than their key's")
                elif meta.key_type and not meta.key_type.startswith("struct") and table.num_rows:
                    actual = K.compute_key_groups(table.column("key"), meta.max_parallelism, meta.key_type)
                    kg = np.asarray(table.column("key_group").to_numpy(), dtype=np.int32)
                    wrong = int(np.count_nonzero(kg != actual))
                    if wrong:
                        report.add("wrong_key_group", meta.display_name,
                                   f"{wrong} key(s) are stored in a key group other than their key's")
    return report
