"""`FlinkSavepoint`: a real Flink savepoint (binary `_metadata`) presented through the `Savepoint` API.

Boundary: statekit's view (manifest-shaped operator metadata, keyed/timer/operator tables, `get`,
`check`) over `statekit.format.flink.FlinkStateReader`, which does all parsing and decoding.
Flink stores operator ids (uid hashes); a uid string given by the user is matched through its
hash, and Flink 2.x's stored uid is shown when it hashes to the id.
"""

from __future__ import annotations

import os
from dataclasses import replace
from itertools import islice
from typing import Any, Iterator, Literal

import pyarrow as pa

from statekit.errors import InvalidArgumentError, StatekitError, UnsupportedFormatError
from statekit.format.arrow_memory import as_schema
from statekit.format.flink.keyed import DecodeStats, KeyedLayout, KeyedResult
from statekit.format.flink.kinds import JobKind, choose
from statekit.format.flink.lookup import lookup
from statekit.format.flink.metadata import KeyGroupsHandle, OperatorState
from statekit.format.flink.reader import BATCH_BYTES, FlinkStateReader
from statekit.format.flink.versions import FlinkVersion
from statekit.format.manifest import Manifest, OperatorMetadata
from statekit.identifiers import OperatorIdentifier, OpLike
from statekit.keygroups import KeyGroupRange
from statekit.savepoint.reader import Savepoint, decode_row, same_key, same_namespace
from statekit.state.descriptors import OperatorStateInfo, Redistribution, StateInfo
from statekit.types import parse_ddl


def _operator_metadata(reader: FlinkStateReader, op: OperatorState, kind: JobKind, lay: KeyedLayout | None,
                       pyflink_types: dict[str, str] | None = None) -> OperatorMetadata:
    uid = op.verified_uid
    keyed: tuple[StateInfo, ...] = ()
    key_type = ns_type = None
    if lay is not None:
        key_type = kind.key_ddl(lay)
        ns_type = lay.namespace_type.ddl() if lay.namespace_type is not None else None
        keyed = kind.states(lay, pyflink_types or {})
    op_states = []
    for name, meta in reader.operator_states(op).items():
        mode = (meta.options.get("OPERATOR_STATE_DISTRIBUTION_MODE") or "").upper()
        red: Redistribution = "broadcast" if meta.backend_type == "BROADCAST" or mode == "BROADCAST" else \
            "union" if mode == "UNION" else "split"
        if red == "broadcast":
            op_states.append(OperatorStateInfo(name, red, meta.value_type.ddl(),
                                               meta.serializers["KEY_SERIALIZER"].ddl()))
        else:
            op_states.append(OperatorStateInfo(name, red, meta.value_type.ddl()))
    return OperatorMetadata(
        identifier=OperatorIdentifier(uid_hash=op.operator_id, uid=uid),
        name=op.name or uid or op.operator_id,
        parallelism=max(op.parallelism, 1),
        max_parallelism=op.max_parallelism,
        key_type=key_type,
        namespace_type=ns_type,
        keyed_states=keyed,
        operator_states=tuple(op_states),
        keyed_format="flink",
        key_groups="stored" if lay is not None and stores_key_groups(kind, lay) else "hashed",
    )


def stores_key_groups(kind: JobKind, lay: KeyedLayout) -> bool:
    """Whether a Flink operator's keys hash with user code (a DataStream POJO, Row or raw-bytes key), so their key
    groups can only be kept as read."""
    return kind.name == "datastream" and lay.key_type.kind in ("pojo", "row", "binary")


def _uid_hash(op: str) -> str:
    return op if len(op) == 32 and all(c in "0123456789abcdef" for c in op) else OperatorIdentifier.for_uid(op).uid_hash


class FlinkSavepoint(Savepoint):
    """A Flink savepoint or retained checkpoint, read in place (nothing is converted or written).

    ``stats`` after a read tells which decoding path each state took (see
    `statekit.format.flink.keyed.DecodeStats`).
    """

    def __init__(self, path: Any, reader: FlinkStateReader, manifest: Manifest, *, trust_pickled: bool = False):
        super().__init__(path, manifest, trust_pickled=trust_pickled)
        self.flink = reader
        self.stats = DecodeStats()
        self._cache: dict[str, KeyedResult] = {}
        self._pyflink: dict[str, dict[str, str]] = {}
        self._kinds: dict[str, JobKind] = {}  # per operator id: the kind of job, chosen once in `open`
        self._unsupported: dict[str, str] = {}  # per operator id: why its keyed state cannot be read at all

    @classmethod
    def open(cls, path: Any, *, trust_pickled: bool = False,  # a path, URI or StoragePath
             pyflink_types: dict[str, dict[str, str]] | None = None,
             plan: str | os.PathLike[str] | dict | None = None, storage_options: dict[str, Any] | None = None,
             filesystem: Any = None, sql: str | os.PathLike[str] | None = None) -> "FlinkSavepoint":
        """``pyflink_types``: per operator (uid or uid hash) the PyFlink type of each Python state, e.g.
        ``{"counter": {"count": "LONG", "recent": "LIST(STRING)", "per_kind": "MAP(STRING, LONG)"}}``
        (`statekit.format.flink.pyflink.parse_type`); PyFlink keeps them in the job, not the savepoint.

        ``plan``: a Flink SQL job's compiled plan (``COMPILE PLAN``'s JSON file, or its parsed JSON): key
        columns and stored rows take the query's names, and `logical_table` gives each aggregate,
        window, deduplication and join in the query's terms; a plan of another job is refused
        (`statekit.errors.PlanMismatchError`) naming the first mismatch. ``sql``: the job's statements
        instead, compiled to its plan by Flink's planner (`statekit.format.flink.sqlcompile`)."""
        from statekit.format.storage import locate

        if sql is not None:
            if plan is not None:
                raise InvalidArgumentError("give the SQL job's plan= or its sql=, not both (sql= is compiled to the plan).")
            from statekit.format.flink.sqlcompile import compiled_plan_path

            plan = compiled_plan_path(sql)
        where = locate(path, storage_options=storage_options, filesystem=filesystem)
        reader = FlinkStateReader(where)
        md = reader.metadata
        by_hash = {_uid_hash(op): types for op, types in (pyflink_types or {}).items()}
        unknown = set(by_hash) - {op.operator_id for op in md.operators}
        if unknown:
            raise InvalidArgumentError(f"pyflink_types names operators {sorted(unknown)} the savepoint does not have")
        kinds: dict[str, JobKind] = {}
        unsupported: dict[str, str] = {}
        layouts = []
        for op in md.operators:
            try:
                lay = reader.layout(op)
            except UnsupportedFormatError as exc:  # this operator's keyed state only; the others stay readable
                lay = None
                unsupported[op.operator_id] = str(exc)
            layouts.append((op, lay))
        named = {}
        if plan is not None:
            from statekit.format.flink.sqlnames import NamedSqlKind, match
            from statekit.format.flink.sqlplan import load_plan

            named = {h: NamedSqlKind(n) for h, n in match(load_plan(plan), layouts).items()}
        ops = []
        for op, lay in layouts:
            kinds[op.operator_id] = named.get(op.operator_id) or choose(lay, declared=op.operator_id in by_hash)
            ops.append(_operator_metadata(reader, op, kinds[op.operator_id], lay, by_hash.get(op.operator_id)))
            if op.operator_id in unsupported:
                ops[-1] = replace(ops[-1], key_type="binary")
        kind: Literal["checkpoint", "savepoint"] = "checkpoint" if md.path.name.startswith("chk-") else "savepoint"
        manifest = Manifest(checkpoint_id=md.checkpoint_id, kind=kind, created_at="", job_name=None,
                            operators=tuple(ops))
        sp = cls(where, reader, manifest, trust_pickled=trust_pickled)
        sp._pyflink = by_hash
        sp._kinds = kinds
        sp._unsupported = unsupported
        return sp

    @property
    def format(self) -> str:
        return f"flink-metadata-v{self.flink.metadata.version}"

    @property
    def flink_version(self) -> FlinkVersion:
        """The newest Flink line writing this savepoint's `_metadata` version (v4: 1.20, v5: 2.0, v6: 2.3);
        what its state is written back as by default."""
        return FlinkVersion.for_metadata_version(self.flink.metadata.version)

    def __repr__(self) -> str:
        return f"FlinkSavepoint({str(self.path)!r}, checkpoint_id={self.checkpoint_id}, operators={len(self.operators)})"

    def flink_operator(self, op: OpLike) -> OperatorState:
        meta = self.operator(op)
        found = self.flink.metadata.operator(meta.uid_hash)
        assert found is not None
        return found

    def job_kind(self, op: OpLike) -> str:
        """The kind of Flink job `op` belongs to: ``datastream``, ``pyflink`` or ``sql`` (`statekit.format.flink.kinds`)."""
        return self._kinds[self.operator(op).uid_hash].name

    def operator_kind(self, op: OpLike) -> str | None:
        """What `op` is in its job kind's terms (SQL: ``group aggregate``, ``window TVF aggregate``, ``legacy group
        window aggregate``, ``deduplication keep-first (proctime|rowtime)``, ``deduplication keep-last``, ``regular
        join``, ``other``), None where the kind does not say (DataStream, PyFlink) or the operator keeps no keyed state."""
        meta = self.operator(op)
        if meta.key_type is None:
            return None
        return self._kinds[meta.uid_hash].operator_kind(meta.name, self._layout(meta))

    @property
    def plan(self) -> Any:
        """The compiled plan this savepoint was opened with (`statekit.format.flink.sqlplan.Plan`), or None."""
        from statekit.format.flink.sqlnames import NamedSqlKind

        return next((k.names.plan for k in self._kinds.values() if isinstance(k, NamedSqlKind)), None)

    def plan_names(self, op: OpLike) -> Any:
        """What the compiled plan says about SQL operator `op` (`statekit.format.flink.sqlnames.OperatorNames`: its
        node, key columns, accumulator layout), or None when the savepoint was opened without a plan."""
        from statekit.format.flink.sqlnames import NamedSqlKind

        kind = self._kinds.get(self.operator(op).uid_hash)
        return kind.names if isinstance(kind, NamedSqlKind) else None

    def has_logical_table(self, op: OpLike) -> bool:
        from statekit.format.flink.sqlnames import NamedSqlKind

        return isinstance(self._kinds.get(self.operator(op).uid_hash), NamedSqlKind)

    def logical_table(self, op: OpLike, *, rows: bool = True, key_groups: KeyGroupRange | None = None) -> pa.Table:
        """`op`'s state in the query's terms (needs ``plan=``): key columns first, then per kind of operator a group
        aggregate's results per key, a window aggregate's pending windows, a deduplication's kept row, a join's rows
        per input side (`statekit.format.flink.sqllogical`). ``rows=False``: no rows, only the schema (reads nothing).
        ``key_groups``: only the keys of those key groups (every logical row belongs to one key, so the tables of
        disjoint ranges add up to the whole: how Spark reads it in parallel)."""
        from statekit.format.flink.sqllogical import logical_table
        from statekit.format.flink.sqlnames import NamedSqlKind

        meta = self.operator(op)
        kind = self._kinds.get(meta.uid_hash)
        if not isinstance(kind, NamedSqlKind):
            raise InvalidArgumentError(
                f"operator {meta.display_name!r} has no logical table: "
                + ("open the savepoint with the job's compiled plan (plan='plan.json', CLI --plan) to get one."
                   if self.plan is None else "the compiled plan has no stateful ExecNode for it.")
            )
        where = f"{self.path} {meta.display_name}"
        if not rows:
            keyed = self.keyed_schema(op, with_key_group=False).empty_table()
            return logical_table(kind.names, keyed, keyed.slice(0, 0), where)
        marks = [v for v in (self.union_state(op, "watermark").column("value").to_pylist()
                             if any(s.name == "watermark" for s in meta.operator_states) else []) if v is not None]
        timers = self.timers(op)
        if key_groups is not None and "key_group" in timers.column_names and timers.num_rows:
            import pyarrow.compute as pc

            kg = timers.column("key_group")
            timers = timers.filter(pc.and_(pc.greater_equal(kg, key_groups.start), pc.less_equal(kg, key_groups.end)))
        return logical_table(kind.names, self.keyed_table(op, key_groups=key_groups), timers, where,
                             watermark=min(marks) if marks else None)

    def unsupported(self, op: OpLike) -> list[str]:
        """Why parts of `op`'s state cannot be decoded (kept as bytes or not read), one sentence each; empty when
        everything decodes. These are limits of statekit, not damage (`check` reports them apart)."""
        meta = self.operator(op)
        if meta.uid_hash in self._unsupported:
            return [self._unsupported[meta.uid_hash]]
        lay = self._layout(meta)
        return self._kinds[meta.uid_hash].unsupported(lay) if lay is not None else []

    def misplaced_keys(self, op: OpLike, table: pa.Table) -> int | None:
        """How many rows of `op`'s keyed table (with ``key_group``) lie in a key group other than their key's, by
        the key-group hash of the operator's job kind; None where statekit cannot compute it (used by `check`)."""
        meta = self.operator(op)
        lay = self._layout(meta)
        kind = self._kinds[meta.uid_hash]
        actual = kind.key_groups(table.column("key").to_pylist(), lay, meta.max_parallelism) if lay is not None else None
        if actual is None:
            return None
        return sum(a != b for a, b in zip(actual, table.column("key_group").to_pylist()))

    def _layout(self, meta: OperatorMetadata) -> KeyedLayout | None:
        if meta.key_type is None:
            return None
        self._refuse_unsupported(meta)
        return self.flink.layout(self.flink_operator(meta.identifier))

    def _refuse_unsupported(self, meta: OperatorMetadata) -> None:
        if meta.uid_hash in self._unsupported:
            raise UnsupportedFormatError(self._unsupported[meta.uid_hash])

    def _keyed(self, op: OpLike) -> KeyedResult | None:
        meta = self.operator(op)
        if meta.key_type is None:
            return None
        if meta.uid_hash not in self._cache:
            self._cache[meta.uid_hash] = self._read_keyed(op)
        return self._cache[meta.uid_hash]

    # -- the Savepoint API -----------------------------------------------------------------------
    def keyed_files(self, op: OpLike, *, key_groups: KeyGroupRange | None = None) -> list:
        return []

    def keyed_table(self, op: OpLike, *, with_key_group: bool = False,
                    key_groups: KeyGroupRange | None = None) -> pa.Table:
        meta = self.operator(op)
        if meta.key_type is None:
            return pa.table({"key": pa.array([], pa.null())}).slice(0, 0)
        if key_groups is not None:
            table = self._read_keyed(op, (key_groups.start, key_groups.end)).table
        else:
            table = self._keyed(op).table  # type: ignore[union-attr]
        table = as_schema(table, self.keyed_schema(op))
        return table if with_key_group else table.drop_columns(["key_group"])

    def keyed_batches(self, op: OpLike, *, batch_bytes: int = BATCH_BYTES) -> Iterator[pa.Table] | None:
        """The keyed table (with ``key_group``) in batches of consecutive key groups of about `batch_bytes` of
        state each, decoded one batch at a time; None when the operator's state is not all canonical
        key-group streams without timers (then `keyed_table` reads it whole).

        `convert` writes each batch while the next is decoded, holding only a few batches in memory.
        """
        meta = self.operator(op)
        if meta.key_type is None or self._kinds[meta.uid_hash].name != "datastream":
            return None
        fop = self.flink_operator(op)
        lay = self.flink.layout(fop)
        every = self.flink.keyed_handles(fop)
        handles = [h for h in every if isinstance(h, KeyGroupsHandle) and self.flink.handle_layout(h) == "canonical"]
        if lay is None or lay.timers or not handles or len(handles) != len(every):
            return None
        ranges = self.flink.key_group_batches(fop, batch_bytes)
        schema = self.keyed_schema(op)

        def decode(key_groups: tuple[int, int]) -> tuple[pa.Table, DecodeStats]:
            own = DecodeStats()
            return self.flink.read_keyed(fop, key_groups=key_groups, stats=own).table, own

        def batches() -> Iterator[pa.Table]:
            from concurrent.futures import ThreadPoolExecutor  # here: a one-key read loads this module without it

            # Two batches are decoded at once (one core each), in order; the consumer writes the
            # previous ones meanwhile. From a store each batch first waits for its ranged request: four at
            # once, so that two fetch while two decode (memory: four batches in flight).
            todo = iter(ranges)
            ahead = 4 if self.flink.files.remote else 2
            with ThreadPoolExecutor(ahead, thread_name_prefix="statekit-flink-batches") as pool:
                pending = [pool.submit(decode, r) for r in islice(todo, ahead)]
                while pending:
                    table, own = pending.pop(0).result()
                    for r in islice(todo, 1):
                        pending.append(pool.submit(decode, r))
                    self.stats.merge(own)
                    yield as_schema(table, schema)
        return batches()

    def key_group_of(self, op: OpLike, key: Any) -> int | None:
        """The key group of `key` in `op` by its job kind's hash (a SQL key row's BinaryRowData hash); None where
        it cannot be computed from the value (e.g. a SQL key with a TIMESTAMP(7..9) field)."""
        meta = self.operator(op)
        lay = self._layout(meta)
        if lay is None:
            return None
        return self._kinds[meta.uid_hash].key_group(key, lay, meta.max_parallelism)

    def get(self, op: OpLike, key: Any, *, namespace: Any = None) -> dict[str, Any] | None:
        """The states of one key, reading only its key group's bytes (POJO and Row keys: every key group)."""
        meta = self.operator(op)
        if meta.key_type is None:
            return None
        if namespace is not None and meta.namespace_type is None:
            raise InvalidArgumentError(
                f"operator {meta.display_name!r} keeps no namespaces (it is not a window operator); "
                "call get() without namespace=."
            )
        fop = self.flink_operator(op)
        lay = self._layout(meta)
        kind = self._kinds[meta.uid_hash]
        rng = None
        if lay is not None:
            kg = kind.key_group(key, lay, meta.max_parallelism)
            rng = (kg, kg) if kg is not None else None
            key_bytes = kind.key_bytes(key, lay) if namespace is None and kg is not None else None
            if key_bytes is not None and kg is not None:  # the one-key path: key bytes matched in the key group, no table built
                named = kind.named_layout(lay) if hasattr(kind, "named_layout") else None
                found = lookup(self.flink, fop, key_bytes, kg, self.stats, named)
                if found is not NotImplemented:
                    if found is None:
                        return None
                    row = {s.name: found.get(s.name) for s in meta.keyed_states}
                    return decode_row(row, meta, trusted=self.trust_pickled)
            key = kind.key_value(key, lay)
        table = self._read_keyed(op, rng).table
        ktype = table.schema.field("key").type
        if not (pa.types.is_struct(ktype) or pa.types.is_nested(ktype)):  # narrow in Arrow before making Python rows
            import pyarrow.compute as pc  # here: the one-key path above starts without it

            try:
                table = table.filter(pc.equal(table.column("key"), pa.scalar(key, ktype)))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, OverflowError):
                pass  # compared in Python below
        rows = [r for r in table.to_pylist() if same_key(r["key"], key) and same_namespace(r.get("namespace"), namespace)]
        if not rows:
            return None
        return decode_row(rows[0], meta, trusted=self.trust_pickled)

    def is_pyflink(self, op: OpLike) -> bool:
        """Whether `op` is a PyFlink operator whose Row key is shown unwrapped (see `statekit.format.flink.pyflink`)."""
        return self.job_kind(op) == "pyflink"

    def pyflink_types(self, op: OpLike) -> dict[str, str]:
        """The PyFlink types this savepoint was opened with for `op` (``pyflink_types=``), empty when none."""
        return dict(self._pyflink.get(self.operator(op).uid_hash, {}))

    def _read_keyed(self, op: OpLike, key_groups: tuple[int, int] | None = None) -> KeyedResult:
        """Keyed and timer tables as stored, then as the operator's job kind presents them (PyFlink: key unwrapped)."""
        meta = self.operator(op)
        fop = self.flink_operator(op)
        lay = self._layout(meta)
        result = self.flink.read_keyed(fop, key_groups=key_groups, stats=self.stats)
        assert lay is not None
        return self._kinds[meta.uid_hash].decode(result, lay, self._pyflink.get(meta.uid_hash, {}),
                                                 f"{self.path} {meta.display_name}")

    def timers(self, op: OpLike, *, key_groups: KeyGroupRange | None = None) -> pa.Table:
        """`op`'s timers (``key_groups``: only those of that range, reading only its bytes)."""
        meta = self.operator(op)
        if meta.key_type is None:
            return pa.table({})
        from statekit.format import keyed as K

        got = self._keyed(op) if key_groups is None else self._read_keyed(op, (key_groups.start, key_groups.end))
        return got.timers.cast(K.timers_schema(meta.key_type, namespace_type=meta.namespace_type))  # type: ignore[union-attr]

    def _operator_state_table(self, op: OpLike, name: str, redistribution: str | None):
        meta = self.operator(op)
        info = meta.operator_state(name, redistribution=redistribution)
        value = self.flink.read_operator_state(self.flink_operator(op), name)
        vtype = parse_ddl(info.type)
        if info.redistribution == "broadcast":
            entries = value.entries or []
            table = pa.table({"key": pa.array([k for k, _ in entries], parse_ddl(info.broadcast_key_type)),
                              "value": pa.array([v for _, v in entries], vtype)})
            return info, table
        subtask, idx, vals = [], [], []
        for s, items in enumerate(value.per_subtask):
            for i, v in enumerate(items):
                subtask.append(s)
                idx.append(i)
                vals.append(v)
        table = pa.table({"subtask": pa.array(subtask, pa.int32()), "idx": pa.array(idx, pa.int64()),
                          "value": pa.array(vals, vtype)})
        return info, table

    def check_all(self) -> list[tuple[str, str]]:
        """Decode every state of every operator; (where, message) for each failure (used by `check`).

        What statekit cannot decode is not a failure here: see `unsupported` (`check` lists it apart).
        """
        problems = []
        for meta in self.operators:
            if meta.uid_hash in self._unsupported:
                continue
            try:
                if meta.key_type is not None:
                    self.keyed_table(meta.identifier)
                    self.timers(meta.identifier)
                for s in meta.operator_states:
                    self._operator_state_table(meta.identifier, s.name, None)
            except StatekitError as exc:
                problems.append((meta.display_name, str(exc)))
        return problems


def is_flink_savepoint(path: Any) -> bool:
    """Whether path (a path, URI or `StoragePath`) is a Flink savepoint (a directory with Flink's binary _metadata)."""
    from statekit.format.flink.metadata import is_flink_metadata
    from statekit.format.storage import as_path

    return is_flink_metadata(as_path(path))  # type: ignore[arg-type]


__all__ = ["FlinkSavepoint", "is_flink_savepoint"]
