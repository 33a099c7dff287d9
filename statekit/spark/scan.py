"""Scan plans over one savepoint table: which files each Spark partition reads, and reading them.

Planning runs on the driver (or Spark's planning worker) from the manifest alone; `read_task`
runs on executors and gets every row through `statekit.savepoint.Savepoint`, which verifies each
file's size and checksum. Nothing here knows the file layout beyond the manifest's entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Iterator, Literal

import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import InvalidArgumentError, SchemaMismatchError
from statekit.format import keyed as K
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import KeyGroupRange, key_group_range
from statekit.savepoint import FileEntry, OperatorMetadata, Savepoint
from statekit.spark.filters import key_groups_of
from statekit.types import parse_ddl, to_ddl

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import StructType

__all__ = [
    "TableSpec", "ScanTask", "resolve_table", "table_schema", "plan_tasks", "read_task", "spark_ddl",
    "verified_keyed_paths",
]

TableKind = Literal["keyed", "timers", "split", "union", "broadcast", "logical"]


@dataclass(frozen=True)
class TableSpec:
    """One table of one operator, as the data source options name it (picklable, sent to workers)."""

    path: str
    uid_hash: str
    kind: TableKind
    state: str | None = None
    with_key_group: bool = False
    trust_pickled: bool = False
    plan: str | None = None  # a Flink SQL job's compiled plan (file), for named columns and ``logical``
    #: explicit storage options of a URI savepoint (credentials: never in a repr, a plan or a log; each task
    #: opens the store with them itself). Empty: the executors' own environment and profiles.
    storage: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    def open(self, *, plan: bool = True) -> Savepoint:
        """The savepoint this table is in, opened where this runs (driver or executor) with the spec's options."""
        return Savepoint.open(self.path, trust_pickled=self.trust_pickled, plan=self.plan if plan else None,
                              storage_options=dict(self.storage) or None)

    def sibling(self, kind: TableKind) -> "TableSpec":
        """The spec of the same operator's `kind` table, with ``key_group`` (what reader functions combine)."""
        return TableSpec(self.path, self.uid_hash, kind, with_key_group=True, storage=self.storage)

    @property
    def state_name(self) -> str:
        """The operator state a list, union or broadcast table shows."""
        if self.state is None:
            raise InvalidArgumentError(f"a {self.kind} table needs the name of its operator state (option 'state').")
        return self.state


@dataclass(frozen=True)
class ScanTask:
    """What one Spark partition reads.

    ``files`` are manifest entries (canonical Parquet); ``key_group_range`` is set instead for
    native RocksDB state, read through `Savepoint.keyed_table`. ``keys`` (with ``key_groups``)
    restrict the rows to a pruned key set.
    """

    files: tuple[FileEntry, ...] = ()
    key_group_range: tuple[int, int] | None = None
    key_groups: frozenset[int] | None = None
    keys: frozenset | None = None
    whole_table: bool = False  # operator state: read through the Savepoint in one piece


def resolve_table(meta: OperatorMetadata, table: str) -> tuple[TableKind, str | None]:
    """Map the ``table`` option (``keyed``, ``timers`` or a state name) to a table kind.

    Raises
    ------
    UnknownStateError
        For an operator state the operator does not have (the message lists what it has).
    """
    if table == "keyed":
        _require_keyed(meta, "keyed")
        return "keyed", None
    if table == "timers":
        _require_keyed(meta, "timers")
        return "timers", None
    if table == "logical":
        _require_keyed(meta, "logical")
        return "logical", None
    info = meta.operator_state(table)  # raises UnknownStateError naming the states there are
    return info.redistribution, info.name


def _require_keyed(meta: OperatorMetadata, what: str) -> None:
    if meta.key_type is None:
        raise InvalidArgumentError(
            f"operator {meta.display_name!r} is not keyed, so it has no {what} table; its operator states are "
            f"{[s.name for s in meta.operator_states] or 'none'}."
        )


def table_schema(meta: OperatorMetadata, spec: TableSpec) -> pa.Schema:
    """The Arrow schema of the table `spec` names (what `read_task` yields)."""
    if spec.kind == "logical":  # computed over no rows: the schema depends on the plan, not on the state
        sp = Savepoint.open(spec.path, plan=spec.plan, storage_options=dict(spec.storage) or None)
        return sp.logical_table(meta.identifier, rows=False).schema
    if spec.kind == "keyed":
        schema = K.keyed_schema(meta.keyed_key_type, meta.keyed_states, namespace_type=meta.namespace_type)
    elif spec.kind == "timers":
        schema = K.timers_schema(meta.keyed_key_type, namespace_type=meta.namespace_type)
    else:
        info = meta.operator_state(spec.state_name, redistribution=spec.kind)
        value = pa.field("value", parse_ddl(info.type))
        if spec.kind == "broadcast":
            return pa.schema([pa.field("key", parse_ddl(info.broadcast_key_type), nullable=False), value])
        if spec.kind == "union":
            return pa.schema([pa.field("idx", pa.int64()), value])
        return pa.schema([pa.field("subtask", pa.int32()), pa.field("idx", pa.int64()), value])
    return schema if spec.with_key_group else schema.remove(0)


def spark_ddl(schema: pa.Schema) -> str:
    """A Spark schema string for `schema`; every column nullable so Spark keeps ``IS NOT NULL`` filters.

    (Keeping that filter makes Spark push filters on every scan; see `statekit.spark.datasource`.)
    """
    return ", ".join(f"`{f.name}` {to_ddl(f.type)}" for f in schema)


def struct_type(ddl: str) -> StructType:
    """The Spark struct of a schema string (``"`a` int, `b` string"``)."""
    from pyspark.sql.types import StructType

    t = StructType.fromDDL(ddl)
    if not isinstance(t, StructType):
        raise InvalidArgumentError(f"schema {ddl!r} is not a list of columns (name type, ...).")
    return t


def _merged(files: list[FileEntry]) -> list[list[FileEntry]]:
    """Files grouped so that groups cover disjoint key-group ranges (a key group never spans groups)."""
    groups: list[list[FileEntry]] = []
    end = -1
    for f in sorted(files, key=lambda f: f.key_groups):
        start, last = f.key_groups
        if groups and start <= end:
            groups[-1].append(f)
            end = max(end, last)
        else:
            groups.append([f])
            end = last
    return groups


def plan_tasks(meta: OperatorMetadata, spec: TableSpec, keys: frozenset | None = None, *,
               key_groups: frozenset[int] | None = None) -> list[ScanTask]:
    """Partitions for `spec`: one per group of keyed files (or per native subtask), pruned to `keys`.

    With ``keys`` only files (or subtasks) covering those keys' key groups are read, and only rows
    with those keys are returned. ``key_groups`` (a Flink savepoint's keyed or logical table: the
    key groups of SQL key rows its filters fix) reads only those key groups, one task per subtask
    that holds any.
    """
    if key_groups is not None and spec.kind in ("keyed", "logical") and meta.keyed_format == "flink":
        tasks = []
        for i in range(meta.parallelism):
            rng = key_group_range(meta.max_parallelism, meta.parallelism, i)
            mine = sorted(kg for kg in key_groups if kg in rng)
            if mine:
                tasks.append(ScanTask(key_group_range=(mine[0], mine[-1]), key_groups=frozenset(mine), keys=keys))
        return tasks
    if spec.kind == "logical":  # per key: split by key-group ranges, every task a part of the table
        return [ScanTask(key_group_range=r) for r in _flink_ranges(meta)]
    if spec.kind in ("split", "union", "broadcast"):
        return [ScanTask(whole_table=True)]
    wanted = None
    if keys is not None and not meta.stored_key_groups:  # stored key groups come from user code: rows filtered only
        wanted = key_groups_of(keys, meta.max_parallelism, meta.keyed_key_type)
        keys = frozenset(k for ks in wanted.values() for k in ks)
    if spec.kind == "keyed" and meta.is_native or meta.keyed_format == "flink":
        # native RocksDB state and Flink savepoints: one task per subtask's key-group range (a Flink
        # subtask's handle is one file), read through `Savepoint.keyed_table` / `timers`
        tasks = []
        if wanted is None and meta.keyed_format == "flink":  # a Flink savepoint: key-group ranges read in parallel
            return [ScanTask(key_group_range=r, keys=keys) for r in _flink_ranges(meta)]
        for i in range(meta.parallelism):
            rng = key_group_range(meta.max_parallelism, meta.parallelism, i)
            if wanted is None:
                tasks.append(ScanTask(key_group_range=(rng.start, rng.end), keys=keys))
                continue
            mine = sorted(kg for kg in wanted if kg in rng)
            if mine:
                tasks.append(ScanTask(key_group_range=(mine[0], mine[-1]), key_groups=frozenset(mine), keys=keys))
        return tasks
    files = meta.files_of("keyed" if spec.kind == "keyed" else "timers")
    if wanted is not None:
        files = [f for f in files if any(f.covers(kg) for kg in wanted)]
    if spec.kind == "timers":  # timer files' rows are disjoint even when their ranges overlap
        groups = [[f] for f in files]
    else:
        groups = _merged(files)
    kgs = None if wanted is None else frozenset(wanted)
    return [ScanTask(files=tuple(g), key_groups=kgs, keys=keys) for g in groups]


#: a Flink savepoint's keyed and logical tables are read in this many tasks per subtask's key-group range, each
#: reading only its key groups' bytes: raise it for state far larger than a task should hold (each task costs a
#: Python worker's start; small state reads fastest in one task per subtask)
TASKS_PER_SUBTASK = 1


def _flink_ranges(meta: OperatorMetadata) -> list[tuple[int, int]]:
    """Key-group ranges of a Flink operator's tasks: each subtask's range cut into `TASKS_PER_SUBTASK` parts."""
    out = []
    for i in range(meta.parallelism):
        rng = key_group_range(meta.max_parallelism, meta.parallelism, i)
        n = rng.end - rng.start + 1
        parts = max(1, min(int(TASKS_PER_SUBTASK), n))
        bounds = [rng.start + n * j // parts for j in range(parts + 1)]
        out += [(bounds[j], bounds[j + 1] - 1) for j in range(parts)]
    return out


def task_range(task: ScanTask) -> tuple[int, int]:
    """The first and last key group a file or native task reads."""
    if task.key_group_range is not None:
        return task.key_group_range
    if task.key_groups:
        return min(task.key_groups), max(task.key_groups)
    return min(f.key_groups[0] for f in task.files), max(f.key_groups[1] for f in task.files)


def split_tasks(tasks: list[ScanTask], parts: int) -> list[ScanTask]:
    """Split the widest tasks in two by key group until there are `parts` of them.

    For Python work per row (reader functions) a core per task matters more than reading a file
    once: each half reads the same file(s) and keeps its own key groups. Tasks narrowed to keys
    are left as they are.
    """
    out = list(tasks)
    while len(out) < parts:
        splittable = [(hi - lo, i) for i, t in enumerate(out)
                      if t.keys is None and not t.whole_table for lo, hi in [task_range(t)] if hi > lo]  # fmt: skip
        if not splittable:
            break
        _, i = max(splittable)
        task = out[i]
        lo, hi = task_range(task)
        mid = (lo + hi) // 2
        halves = [(lo, mid), (mid + 1, hi)]
        if task.key_group_range is not None:
            new = [replace(task, key_group_range=h) for h in halves]
        else:
            new = [replace(task, key_groups=frozenset(range(a, b + 1)) & (task.key_groups or frozenset(range(a, b + 1))))
                   for a, b in halves]  # fmt: skip
        out[i : i + 1] = new
    return out


def _conform(sp: Savepoint, table: pa.Table, expected: pa.Schema, entry: FileEntry) -> pa.Table:
    if table.column_names != expected.names or not all(
        K.same_type(a.type, b.type) for a, b in zip(table.schema, expected)
    ):
        got = ", ".join(f"{f.name} {f.type}" for f in table.schema)
        raise SchemaMismatchError(
            f"{sp.path}: file {entry.path} has columns ({got}) but the manifest declares "
            f"({', '.join(f'{f.name} {f.type}' for f in expected)}). Restore the file or use another savepoint."
        )
    return table if table.schema == expected else table.cast(expected)


def _restrict(table: pa.Table, task: ScanTask) -> pa.Table:
    if task.key_groups is not None:
        table = table.filter(pc.is_in(table.column("key_group"), pa.array(sorted(task.key_groups), pa.int32())))
    if task.keys is not None and table.num_rows:
        key_type = table.schema.field("key").type
        values = list(task.keys)
        if any(isinstance(k, float) and k == 0 for k in values):
            values += [0.0, -0.0]  # is_in compares bits, SQL calls them equal (and sets keep only one)
        table = table.filter(pc.is_in(table.column("key"), pa.array(values, key_type)))
    return table


def read_task_table(sp: Savepoint, meta: OperatorMetadata, spec: TableSpec, task: ScanTask) -> pa.Table:
    """The rows of one task as one Arrow table (with ``key_group`` for keyed and timer tables)."""
    op = meta.identifier
    if task.whole_table:
        if spec.kind == "split":
            return sp.list_state(op, spec.state_name)
        if spec.kind == "union":
            return sp.union_state(op, spec.state_name)
        if spec.kind == "logical":
            return sp.logical_table(op)
        return sp.broadcast_state(op, spec.state_name)
    if task.key_group_range is not None and task.key_groups is not None and meta.keyed_format == "flink" \
            and spec.kind in ("keyed", "logical"):  # a few key groups: read each alone, not the span between them
        read = sp.logical_table if spec.kind == "logical" else partial(sp.keyed_table, with_key_group=True)
        parts = [read(op, key_groups=KeyGroupRange(kg, kg)) for kg in sorted(task.key_groups)]
        table = pa.concat_tables(parts)
        return table if spec.kind == "logical" else _restrict(table, task)
    if task.key_group_range is not None:
        rng = KeyGroupRange(*task.key_group_range)
        if spec.kind == "logical":
            return sp.logical_table(op, key_groups=rng)
        if spec.kind == "timers":
            timers = sp.timers(op)
            kg = timers.column("key_group")
            return _restrict(timers.filter(pc.and_(pc.greater_equal(kg, rng.start), pc.less_equal(kg, rng.end))), task)
        return _restrict(sp.keyed_table(op, with_key_group=True, key_groups=rng), task)
    full = spec.sibling(spec.kind)
    expected = table_schema(meta, full)
    parts = [_restrict(_conform(sp, sp.read_file(e), expected, e), task) for e in task.files]
    return pa.concat_tables(parts) if parts else expected.empty_table()


def verified_keyed_paths(sp: Savepoint, meta: OperatorMetadata, table: Literal["keyed", "timers"] = "keyed") -> list[str]:
    """Absolute paths of `meta`'s keyed (or timer) Parquet files, each checked against the manifest first.

    For engines that read the files themselves (Spark's Parquet reader): every file's existence,
    size and checksum are verified with `statekit.format.files.read_verified_bytes`, so a
    damaged savepoint raises its typed error here, on the driver, before Spark reads anything.
    """
    from concurrent.futures import ThreadPoolExecutor

    from statekit.format.files import read_verified_bytes

    if meta.keyed_format == "flink":
        raise InvalidArgumentError(
            f"operator {meta.display_name!r} is state of a Flink savepoint, which only statekit decodes; "
            "read it with engine='statekit'."
        )
    if meta.is_native:
        raise InvalidArgumentError(
            f"operator {meta.display_name!r} keeps native RocksDB state, which only statekit can decode; "
            "read it with engine='statekit'."
        )
    files = meta.files_of(table)
    with ThreadPoolExecutor(2) as pool:  # zlib's CRC-32 releases the GIL
        list(pool.map(lambda e: read_verified_bytes(sp.path, e), files))
    return [str((sp.path / e.path).resolve()) for e in files]


def read_task(spec: TableSpec, task: ScanTask, *, batch_rows: int = 131072) -> Iterator[pa.RecordBatch]:
    """Executor side: open the savepoint and yield the task's rows as Arrow record batches."""
    sp = spec.open()
    meta = sp.operator(OperatorIdentifier.for_uid_hash(spec.uid_hash))
    table = read_task_table(sp, meta, spec, task)
    if spec.kind in ("keyed", "timers") and not spec.with_key_group:
        table = table.drop_columns(["key_group"])
    yield from table.to_batches(max_chunksize=batch_rows)
