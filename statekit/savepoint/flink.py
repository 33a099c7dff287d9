"""`FlinkSavepoint`: a real Flink savepoint (binary `_metadata`) presented through the `Savepoint` API.

Boundary: statekit's view (manifest-shaped operator metadata, keyed/timer/operator tables, `get`,
`check`) over `statekit.format.flink.FlinkStateReader`, which does all parsing and decoding.
Flink stores operator ids (uid hashes); a uid string given by the user is matched through its
hash, and Flink 2.x's stored uid is shown when it hashes to the id.
"""

from __future__ import annotations

import os
from itertools import islice
from pathlib import Path
from typing import Any, Iterator, Literal

import pyarrow as pa

from statekit.errors import InvalidArgumentError, StatekitError, StateTypeError, UnsupportedFormatError
from statekit.format.flink import pyflink
from statekit.format.flink.keyed import DecodeStats, KeyedResult, state_ddl
from statekit.format.flink.lookup import lookup
from statekit.format.flink.metadata import KeyGroupsHandle, OperatorState
from statekit.format.flink.reader import BATCH_BYTES, FlinkStateReader
from statekit.format.flink.values import encode_key
from statekit.format.manifest import Manifest, OperatorMetadata
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import KeyGroupRange, assign_to_key_group
from statekit.savepoint.reader import OpLike, Savepoint, _same_key, _same_ns, decode_row
from statekit.state.descriptors import OperatorStateInfo, Redistribution, StateInfo, as_state_kind
from statekit.types import parse_ddl


def _operator_metadata(reader: FlinkStateReader, op: OperatorState,
                       pyflink_types: dict[str, str] | None = None) -> OperatorMetadata:
    uid = op.verified_uid
    lay = reader.layout(op)
    keyed: tuple[StateInfo, ...] = ()
    key_type = ns_type = None
    if lay is not None:
        key_type = lay.key_type.ddl()
        ns_type = lay.namespace_type.ddl() if lay.namespace_type is not None else None
        keyed = tuple(StateInfo(s.name, s.keyed_kind or "value", state_ddl(s)) for s in lay.states)
        if pyflink.is_pyflink(lay, declared=pyflink_types is not None):  # key unwrapped, Python states decoded
            key_type = pyflink.key_ddl(lay)
            keyed = tuple(StateInfo(n, as_state_kind(k), t, pickled=p)
                          for n, k, t, p in pyflink.states(lay, pyflink_types or {}))
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
    )


def _uid_hash(op: str) -> str:
    return op if len(op) == 32 and all(c in "0123456789abcdef" for c in op) else OperatorIdentifier.for_uid(op).uid_hash


class FlinkSavepoint(Savepoint):
    """A Flink savepoint or retained checkpoint, read in place (nothing is converted or written).

    ``stats`` after a read tells which decoding path each state took (see
    `statekit.format.flink.keyed.DecodeStats`).
    """

    def __init__(self, path: Path, reader: FlinkStateReader, manifest: Manifest, *, trust_pickled: bool = False):
        super().__init__(path, manifest, trust_pickled=trust_pickled)
        self.flink = reader
        self.stats = DecodeStats()
        self._cache: dict[str, KeyedResult] = {}
        self._pyflink: dict[str, dict[str, str]] = {}

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, trust_pickled: bool = False,
             pyflink_types: dict[str, dict[str, str]] | None = None) -> "FlinkSavepoint":
        """``pyflink_types``: per operator (uid or uid hash) the PyFlink type of each Python state, e.g.
        ``{"counter": {"count": "LONG", "recent": "LIST(STRING)", "per_kind": "MAP(STRING, LONG)"}}``
        (`statekit.format.flink.pyflink.parse_type`); PyFlink keeps them in the job, not the savepoint."""
        reader = FlinkStateReader(Path(path))
        md = reader.metadata
        by_hash = {_uid_hash(op): types for op, types in (pyflink_types or {}).items()}
        unknown = set(by_hash) - {op.operator_id for op in md.operators}
        if unknown:
            raise InvalidArgumentError(f"pyflink_types names operators {sorted(unknown)} the savepoint does not have")
        ops = tuple(_operator_metadata(reader, op, by_hash.get(op.operator_id)) for op in md.operators)
        kind: Literal["checkpoint", "savepoint"] = "checkpoint" if md.path.name.startswith("chk-") else "savepoint"
        manifest = Manifest(checkpoint_id=md.checkpoint_id, kind=kind, created_at="", job_name=None, operators=ops)
        sp = cls(Path(path), reader, manifest, trust_pickled=trust_pickled)
        sp._pyflink = by_hash
        return sp

    @property
    def format(self) -> str:
        return f"flink-metadata-v{self.flink.metadata.version}"

    def __repr__(self) -> str:
        return f"FlinkSavepoint({str(self.path)!r}, checkpoint_id={self.checkpoint_id}, operators={len(self.operators)})"

    def flink_operator(self, op: OpLike) -> OperatorState:
        meta = self.operator(op)
        found = self.flink.metadata.operator(meta.uid_hash)
        assert found is not None
        return found

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
        table = table.cast(self.keyed_schema(op))
        return table if with_key_group else table.drop_columns(["key_group"])

    def keyed_batches(self, op: OpLike, *, batch_bytes: int = BATCH_BYTES) -> Iterator[pa.Table] | None:
        """The keyed table (with ``key_group``) in batches of consecutive key groups of about `batch_bytes` of
        state each, decoded one batch at a time; None when the operator's state is not all canonical
        key-group streams without timers (then `keyed_table` reads it whole).

        `convert` writes each batch while the next is decoded, holding only a few batches in memory.
        """
        meta = self.operator(op)
        if meta.key_type is None or self.is_pyflink(op):
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
            # previous ones meanwhile.
            todo = iter(ranges)
            with ThreadPoolExecutor(2, thread_name_prefix="statekit-flink-batches") as pool:
                pending = [pool.submit(decode, r) for r in islice(todo, 2)]
                while pending:
                    table, own = pending.pop(0).result()
                    for r in islice(todo, 1):
                        pending.append(pool.submit(decode, r))
                    self.stats.merge(own)
                    yield table.cast(schema)
        return batches()

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
        lay = self.flink.layout(fop)
        rng = None
        if lay is not None and pyflink.is_pyflink(lay, declared=meta.uid_hash in self._pyflink):
            kg = pyflink.key_group(key, lay, meta.max_parallelism)
            rng = (kg, kg)
        elif lay is not None and lay.key_type.kind == "avro":
            from statekit.format.flink import avro_out  # here: only Avro keys need it

            try:  # Avro's own record hash, as the key class computes it
                kg = int(avro_out.key_groups([key], lay.key_type.avro, lay.key_type.type_class, meta.max_parallelism)[0])
                rng = (kg, kg)
            except (UnsupportedFormatError, StateTypeError, AttributeError, TypeError, ValueError):
                rng = None  # a hash statekit cannot compute (or a key of the wrong shape): every key group
        elif lay is not None and lay.key_type.kind not in ("pojo", "row", "binary"):  # their hashCode is user code
            kg = assign_to_key_group(key, meta.max_parallelism, meta.key_type)
            rng = (kg, kg)
            key_bytes = encode_key(lay.key_type, key) if namespace is None else None
            if key_bytes is not None:  # the one-key path: key bytes matched in the key group, no table built
                found = lookup(self.flink, fop, key_bytes, kg, self.stats)
                if found is not NotImplemented:
                    if found is None:
                        return None
                    row = {s.name: found.get(s.name) for s in meta.keyed_states}
                    return decode_row(row, meta, trusted=self.trust_pickled)
        table = self._read_keyed(op, rng).table
        ktype = table.schema.field("key").type
        if not (pa.types.is_struct(ktype) or pa.types.is_nested(ktype)):  # narrow in Arrow before making Python rows
            import pyarrow.compute as pc  # here: the one-key path above starts without it

            try:
                table = table.filter(pc.equal(table.column("key"), pa.scalar(key, ktype)))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, OverflowError):
                pass  # compared in Python below
        rows = [r for r in table.to_pylist() if _same_key(r["key"], key) and _same_ns(r.get("namespace"), namespace)]
        if not rows:
            return None
        return decode_row(rows[0], meta, trusted=self.trust_pickled)

    def is_pyflink(self, op: OpLike) -> bool:
        """Whether `op` is a PyFlink operator whose Row key is shown unwrapped (see `statekit.format.flink.pyflink`)."""
        meta = self.operator(op)
        lay = self.flink.layout(self.flink_operator(op)) if meta.key_type is not None else None
        return lay is not None and pyflink.is_pyflink(lay, declared=meta.uid_hash in self._pyflink)

    def pyflink_types(self, op: OpLike) -> dict[str, str]:
        """The PyFlink types this savepoint was opened with for `op` (``pyflink_types=``), empty when none."""
        return dict(self._pyflink.get(self.operator(op).uid_hash, {}))

    def _read_keyed(self, op: OpLike, key_groups: tuple[int, int] | None = None) -> KeyedResult:
        """Keyed and timer tables as stored, then (PyFlink operators) the key unwrapped and values decoded."""
        meta = self.operator(op)
        fop = self.flink_operator(op)
        result = self.flink.read_keyed(fop, key_groups=key_groups, stats=self.stats)
        lay = self.flink.layout(fop)
        if lay is not None and pyflink.is_pyflink(lay, declared=meta.uid_hash in self._pyflink):
            result = pyflink.decode(result, lay, self._pyflink.get(meta.uid_hash, {}), f"{self.path} {meta.display_name}")
        return result

    def timers(self, op: OpLike) -> pa.Table:
        meta = self.operator(op)
        if meta.key_type is None:
            return pa.table({})
        from statekit.format import keyed as K

        return self._keyed(op).timers.cast(K.timers_schema(meta.key_type, namespace_type=meta.namespace_type))  # type: ignore[union-attr]

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
        """Decode every state of every operator; (where, message) for each failure (used by `check`)."""
        problems = []
        for meta in self.operators:
            try:
                if meta.key_type is not None:
                    self.keyed_table(meta.identifier)
                    self.timers(meta.identifier)
                for s in meta.operator_states:
                    self._operator_state_table(meta.identifier, s.name, None)
            except StatekitError as exc:
                problems.append((meta.display_name, str(exc)))
        return problems


def is_flink_savepoint(path: str | os.PathLike[str]) -> bool:
    """Whether path is a Flink savepoint (a directory with Flink's binary _metadata)."""
    from statekit.format.flink.metadata import is_flink_metadata

    return is_flink_metadata(Path(path))


__all__ = ["FlinkSavepoint", "is_flink_savepoint"]
