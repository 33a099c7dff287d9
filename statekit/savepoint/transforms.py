"""Savepoint transforms (change an operator's identifier, remove an operator, change max parallelism) as new savepoints.

One verb per operation, the same in `SavepointWriter` and (as noted) the CLI:
`change_operator_identifier` (Flink's name; CLI ``rename-uid``), `remove_operator` (Flink's;
CLI ``remove-operator``), `with_max_parallelism` (CLI ``set-max-parallelism``).

Each transform reads a source savepoint and writes a new one through `SavepointBuilder`; files
whose content does not change are hard-linked (copied across devices), so a transform costs
little more than the operators it really rewrites. The source is never modified. Every transform
first builds a `TransformPlan` describing what would change; ``dry_run=True`` returns it without
writing anything.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from statekit.errors import InvalidArgumentError, InvalidTargetError
from statekit.format.files import place_file, place_object, storage_errors
from statekit.format.manifest import FileEntry, FlinkSerializers, OperatorMetadata, safe_relative_path
from statekit.format.storage import StoragePath, as_path
from statekit.identifiers import OperatorIdentifier, OpLike
from statekit.keygroups import check_max_parallelism
from statekit.savepoint.reader import Savepoint
from statekit.savepoint.writer import OperatorWriter, SavepointBuilder


@dataclass
class TransformPlan:
    """What a transform changes: one human-readable line per change, and the target path."""

    source: Path
    target: Path
    changes: list[str] = field(default_factory=list)
    written: bool = False
    output: str = ""  # the format written, as `output.describe` names it ("statekit savepoint", "Flink savepoint for Flink 2.3 ...")

    def __str__(self) -> str:
        verb = "wrote" if self.written else "would write"
        what = f" as a {self.output}" if self.output else ""
        return "\n".join([f"{verb} {self.target}{what} from {self.source}:"] + [f"  - {c}" for c in self.changes])


#: Writes the replacement of one file: called with the staging directory and the file's path in the
#: target, it writes there (or nowhere) and returns the entries of what it wrote.
FileRewrite = Callable[[Path, str], "list[FileEntry]"]


def link_operator(builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata,
                   ident: OperatorIdentifier, *, name: str | None = None,
                   rewrite: dict[str, FileRewrite] | None = None) -> None:
    """Carry an operator over unchanged (possibly under a new identifier), its files hard-linked or copied.

    Every file is created new in the builder's staging directory (`place_file`), so nothing is ever
    written through a name shared with the source. A source directory keeps its file names in the
    target (a native RocksDB directory stays a RocksDB directory); source directories that would
    land on the same target directory get distinct ones. `rewrite` maps the paths of files that
    change (e.g. the one file of a key group a repair edits) to the function that writes their
    replacement under the same target name; every other file is linked.
    """
    refuse_target_inside(source.path, builder.path)
    if meta.keyed_format == "flink":
        if rewrite:
            raise InvalidArgumentError(f"operator {meta.display_name} holds Flink state; rewrite it as a whole.")
        # a Flink savepoint's state is not in statekit files: carrying it means writing it decoded
        # (linking its files would leave the operator empty in the target - silent data loss)
        from statekit.savepoint.convert import write_flink_operator

        write_flink_operator(builder, source, meta, ident, name=name)  # type: ignore[arg-type]
        return
    writer = builder.add_operator(
        ident, name=name or meta.name, parallelism=meta.parallelism, max_parallelism=meta.max_parallelism,
        key_type=meta.key_type, keyed_states=meta.keyed_states, namespace_type=meta.namespace_type,
        flink=meta.flink, key_groups=meta.key_groups,
    )
    entries = []
    with storage_errors(builder.path):
        staging = builder.staging
        for f, rel in zip(meta.files, _target_names(writer.dir, [f.path for f in meta.files])):
            if rewrite and f.path in rewrite:
                entries += rewrite[f.path](staging, rel)
                continue
            src = safe_relative_path(source.path, f.path)
            if isinstance(staging, StoragePath):  # a URI target: a server-side copy where the store can
                place_object(src, staging / rel, expected_size=f.bytes)
            else:
                dst = safe_relative_path(staging, rel)
                dst.parent.mkdir(parents=True, exist_ok=True)
                place_file(src, dst, expected_size=f.bytes)
            entries.append(FileEntry(rel, f.table, f.rows, f.bytes, f.checksum, f.state, f.key_group_start,
                                     f.key_group_end, f.subtask))
    writer.add_files(entries, operator_states=meta.operator_states, native=meta.is_native)


def _target_names(op_dir: str, paths: list[str]) -> list[str]:
    """The target paths of an operator's files: each source directory moves under `op_dir`
    (its first component replaced) with its file names kept; a directory whose target would clash
    (case-insensitively, as on macOS and Windows) with a name already given gets a numbered one."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for p in paths:
        directory, base = posixpath.split(posixpath.normpath(p))
        groups.setdefault(directory, []).append((p, base))
    files: set[str] = set()
    dirs: set[str] = set()

    def free(d: str, names: list[str]) -> bool:
        chain = [d, *_ancestors(d)]
        return not any(c.casefold() in files for c in chain) and not any(
            f"{d}/{n}".casefold() in files or f"{d}/{n}".casefold() in dirs for n in names)

    out: dict[str, str] = {}
    for directory, members in groups.items():
        tail = directory.split("/", 1)[1] if "/" in directory else ""
        names = [b for _, b in members]
        target, n = posixpath.join(op_dir, tail) if tail else op_dir, 0
        while not free(target, names):
            n += 1
            target = posixpath.join(f"{op_dir}/{n}", tail) if tail else f"{op_dir}/{n}"
        dirs.update(c.casefold() for c in [target, *_ancestors(target)])
        for p, base in members:
            files.add(f"{target}/{base}".casefold())
            out[p] = f"{target}/{base}"
    return [out[p] for p in paths]


def _ancestors(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def refuse_target_inside(source: "str | os.PathLike | StoragePath", target: "str | os.PathLike | StoragePath") -> None:
    """Refuse a write whose target is the source itself or inside it (symlinks resolved): it would
    write into the savepoint it reads."""
    a, b = as_path(source), as_path(target)
    if isinstance(a, StoragePath) or isinstance(b, StoragePath):
        if isinstance(a, StoragePath) and isinstance(b, StoragePath) and a.fs is b.fs and (
                b.resolve().path == a.resolve().path or b.resolve().path.startswith(a.resolve().path.rstrip("/") + "/")):
            raise InvalidTargetError(f"target {b} is the source {a} or inside it; a repair never writes into its "
                                     "source. Choose a target outside it.")
        return
    try:
        src, tgt = Path(a).resolve(), Path(b).resolve()
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise InvalidTargetError(f"cannot resolve {source} or {target} ({exc}); choose another target.") from None
    if tgt == src or src in tgt.parents:
        raise InvalidTargetError(
            f"target {target} is {'the source itself' if tgt == src else 'inside the source'} {source} "
            f"(resolved: {tgt}); a repair never writes into its source. Choose a target outside {src}."
        )


def carried_flink(source: Savepoint, meta: OperatorMetadata) -> "FlinkSerializers | None":
    """The Flink serializers that go along with `meta`'s state when it is rewritten: the manifest's, or the snapshots
    of the Flink savepoint it is read from (so the state can be written back to Flink)."""
    if meta.flink is not None or meta.keyed_format != "flink":
        return meta.flink
    from statekit.savepoint.convert import flink_serializers
    from statekit.savepoint.kinds import is_flink_source

    return flink_serializers(source, meta) if is_flink_source(source) else None


def require_hashed_key_groups(meta: OperatorMetadata, change: str) -> None:
    """Refuse `change` (a re-key, a new max parallelism, a new key) for keys whose key groups come from user code."""
    if meta.stored_key_groups:
        from statekit.errors import StateTypeError

        raise StateTypeError(
            f"operator {meta.display_name!r} has keys of type {meta.key_type} whose key groups come from the key "
            f"class's own hashCode() (a POJO or Row key read from Flink), which statekit cannot compute; {change} "
            "needs new key groups, so it is refused. Do it with the job's classes (Flink's State Processor API), or "
            "change only existing keys' state (set, delete-key, rm-state) and operators (rename-uid, remove-operator)."
        )


def rehash_operator(builder: SavepointBuilder, source: Savepoint, meta: OperatorMetadata,
                    ident: OperatorIdentifier, max_parallelism: int, *, name: str | None = None) -> None:
    """Rewrite an operator's keyed table and timers into `max_parallelism` key groups (parallelism capped at it)."""
    check_max_parallelism(max_parallelism)
    if meta.key_type is None:
        raise InvalidArgumentError(
            f"operator {meta.display_name} has no keyed state; max parallelism only matters for keyed state."
        )
    require_hashed_key_groups(meta, "a new max parallelism")
    writer = builder.add_operator(
        ident, name=name or meta.name, parallelism=min(meta.parallelism, max_parallelism),
        max_parallelism=max_parallelism, key_type=meta.key_type, keyed_states=meta.keyed_states,
        namespace_type=meta.namespace_type, flink=carried_flink(source, meta),
    )
    op = meta.identifier
    keyed = source.keyed_table(op)
    if keyed.num_rows:
        writer.write_keyed(keyed)
    timers = source.timers(op)
    if timers.num_rows:
        writer.write_timers(timers.drop_columns(["key_group"]))
    write_operator_states(writer, source, meta)


def write_operator_states(writer: OperatorWriter, source: Savepoint, meta: OperatorMetadata) -> None:
    """Carry `meta`'s list, union and broadcast state into `writer` (rewritten, as its parallelism may differ)."""
    op = meta.identifier
    for info in meta.operator_states:
        if info.redistribution == "broadcast":
            writer.write_broadcast_state(info, source.broadcast_state(op, info.name))
        else:
            writer.write_list_state(info, source.operator_state_lists(op, info.name)[1])


def _transform(source_path, target_path, *, dry_run: bool, plan_fn: Callable[[Savepoint, TransformPlan], Callable],
               to: str | None = None, renamed: dict[str, str] | None = None) -> TransformPlan:
    from statekit.savepoint.output import describe, output_format, write_as

    refuse_target_inside(source_path, target_path)
    source = Savepoint.open(as_path(source_path))
    plan = TransformPlan(as_path(source_path), as_path(target_path))  # type: ignore[arg-type]
    fmt = output_format(source, to)
    plan.output = describe(fmt, source)
    apply = plan_fn(source, plan)
    if dry_run:
        return plan

    def build(path: Path) -> None:
        with SavepointBuilder(path, checkpoint_id=source.checkpoint_id, job_name=source.job_name) as builder:
            apply(builder)

    write_as(fmt, source, target_path, build, renamed=renamed)  # `renamed`: filled by plan_fn
    plan.written = True
    return plan


def change_operator_identifier(source: str | os.PathLike, target: str | os.PathLike, old: OpLike, new: OpLike, *,
                               dry_run: bool = False, to: str | None = None) -> TransformPlan:
    """Give operator `old` the identifier `new` (Flink's ``changeOperatorIdentifier``).

    State is carried over byte for byte; only the manifest entry changes. `new` must not exist in
    the savepoint already. `to` ("statekit" or "flink") is the output format; by default the source's.
    """
    renamed: dict[str, str] = {}

    def plan_fn(sp: Savepoint, plan: TransformPlan):
        meta = sp.operator(old)
        new_ident = OperatorIdentifier.coerce(new)
        renamed[meta.uid_hash] = new_ident.uid_hash  # its coordinator state (a source's enumerator) follows it
        if any(m.uid_hash == new_ident.uid_hash for m in sp.operators):
            raise InvalidArgumentError(
                f"operator {new_ident} already exists in {sp.path}; remove it first or choose another uid."
            )
        plan.changes.append(f"rename operator {meta.display_name} ({meta.uid_hash}) to {new_ident} "
                            f"({new_ident.uid_hash}); {len(meta.files)} file(s) carried over unchanged")

        def apply(builder: SavepointBuilder) -> None:
            for m in sp.operators:
                if m.uid_hash == meta.uid_hash:
                    link_operator(builder, sp, m, new_ident, name=new_ident.uid or m.name)
                else:
                    link_operator(builder, sp, m, m.identifier)
        return apply

    return _transform(source, target, dry_run=dry_run, plan_fn=plan_fn, to=to, renamed=renamed)


def remove_operator(source: str | os.PathLike, target: str | os.PathLike, op: OpLike, *,
                    dry_run: bool = False, to: str | None = None) -> TransformPlan:
    """Drop operator `op` and all its state (Flink's ``removeOperator``); `to`: the output format (the source's)."""
    def plan_fn(sp: Savepoint, plan: TransformPlan):
        meta = sp.operator(op)
        plan.changes.append(f"remove operator {meta.display_name} ({meta.uid_hash}) with "
                            f"{len(meta.keyed_states)} keyed and {len(meta.operator_states)} operator state(s), "
                            f"{len(meta.files)} file(s)")

        def apply(builder: SavepointBuilder) -> None:
            for m in sp.operators:
                if m.uid_hash != meta.uid_hash:
                    link_operator(builder, sp, m, m.identifier)
        return apply

    return _transform(source, target, dry_run=dry_run, plan_fn=plan_fn, to=to)


def with_max_parallelism(source: str | os.PathLike, target: str | os.PathLike, op: OpLike,
                         max_parallelism: int, *, dry_run: bool = False, to: str | None = None) -> TransformPlan:
    """Re-hash `op`'s keyed state and timers into `max_parallelism` key groups.

    Flink cannot restore a savepoint into a different max parallelism; after this transform the
    job can run with the new one. The operator's parallelism is capped at the new max. `to`: the output
    format ("statekit" or "flink"; by default the source's).
    """
    check_max_parallelism(max_parallelism)

    def plan_fn(sp: Savepoint, plan: TransformPlan):
        meta = sp.operator(op)
        if meta.key_type is None:
            raise InvalidArgumentError(
                f"operator {meta.display_name} has no keyed state; max parallelism only matters for keyed state."
            )
        require_hashed_key_groups(meta, "a new max parallelism")
        parallelism = min(meta.parallelism, max_parallelism)
        plan.changes.append(f"operator {meta.display_name}: max parallelism {meta.max_parallelism} -> "
                            f"{max_parallelism}, parallelism {meta.parallelism} -> {parallelism}; keyed table and "
                            "timers re-hashed into the new key groups")

        def apply(builder: SavepointBuilder) -> None:
            for m in sp.operators:
                if m.uid_hash != meta.uid_hash:
                    link_operator(builder, sp, m, m.identifier)
                else:
                    rehash_operator(builder, sp, m, m.identifier, max_parallelism)
        return apply

    return _transform(source, target, dry_run=dry_run, plan_fn=plan_fn, to=to)
