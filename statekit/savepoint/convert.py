"""`convert_to_statekit`: a Flink savepoint rewritten as a statekit savepoint (same state; every statekit writer then applies).

Boundary: reads through `statekit.savepoint.flink.FlinkSavepoint` (bulk decoding) and writes with
`SavepointBuilder` (atomic: nothing appears at `out` unless the whole conversion succeeds). The
Flink savepoint is only read. Uids are carried when the user names them (matched by hash) or
when Flink 2.x stored them; other operators keep their uid hash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from statekit.errors import InvalidArgumentError, NotASavepointError, StateTypeError
from statekit.format.flink import pyflink
from statekit.format.manifest import FlinkSerializers, OperatorMetadata
from statekit.format.storage import as_path
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.flink import FlinkSavepoint, is_flink_savepoint
from statekit.savepoint.writer import SavepointBuilder


def convert_to_statekit(
    source: Any,  # a path, a URI (s3://...) or a statekit.format.storage.StoragePath
    out: Any,
    *,
    uids: Iterable[str] = (),
    include_stateless: bool = False,
    pyflink_types: dict[str, dict[str, str]] | None = None,
) -> Path:
    """Write the state of the Flink savepoint (or retained checkpoint) `source` as a statekit savepoint at `out`.

    Parameters
    ----------
    source
        A Flink savepoint or ``chk-N`` directory (binary ``_metadata``).
    out
        The new savepoint; must not exist (savepoints are never overwritten).
    uids
        Operator uids to carry into the new savepoint; each must match an operator of `source`
        through its hash (Flink stores only the hash before 2.x).
    include_stateless
        Also list operators that hold no state (they are dropped by default).
    pyflink_types
        For PyFlink jobs: the Python type of each state per operator (see `FlinkSavepoint.open`); the
        key is unwrapped, values decoded, and key groups assigned anew for the unwrapped key.

    Returns the path of the written savepoint.
    """
    src = as_path(source)
    if not is_flink_savepoint(src):
        raise NotASavepointError(
            f"{src} is not a Flink savepoint (no binary _metadata); `convert` reads Flink savepoints and checkpoints."
        )
    sp = FlinkSavepoint.open(src, pyflink_types=pyflink_types)
    named = {OperatorIdentifier.for_uid(u).uid_hash: u for u in uids}
    have = {m.uid_hash for m in sp.operators}
    unknown = [u for h, u in named.items() if h not in have]
    if unknown:
        listing = ", ".join(f"{m.uid or '<no uid>'} ({m.uid_hash})" for m in sp.operators)
        raise InvalidArgumentError(
            f"uid(s) {unknown} match no operator of {src} (compared by uid hash); it contains: {listing}."
        )
    with SavepointBuilder(as_path(out), checkpoint_id=sp.checkpoint_id, job_name=f"converted from {src.name}") as b:
        for meta in sp.operators:
            stateful = meta.key_type is not None or meta.operator_states
            if not stateful and not include_stateless:
                continue
            uid = named.get(meta.uid_hash) or meta.uid
            ident = OperatorIdentifier.for_uid(uid) if uid else OperatorIdentifier.for_uid_hash(meta.uid_hash)
            write_flink_operator(b, sp, meta, ident)
    return b.remote if b.remote is not None else Path(out)  # type: ignore[return-value]


def write_flink_operator(b: SavepointBuilder, sp: FlinkSavepoint, meta: OperatorMetadata,
                         ident: OperatorIdentifier, *, name: str | None = None) -> None:
    """Add the operator `meta` of the Flink savepoint `sp` to `b` under `ident`, with all its decoded state.

    The one place a Flink operator becomes statekit tables: `convert_to_statekit` and every repair
    that carries a Flink operator over unchanged (`transforms.link_operator`) use it.
    """
    if meta.key_type is not None:
        _check_key_type(meta)
    w = b.add_operator(ident, name=name or meta.name, parallelism=meta.parallelism,
                       max_parallelism=meta.max_parallelism, key_type=meta.key_type,
                       keyed_states=meta.keyed_states, namespace_type=meta.namespace_type,
                       flink=flink_serializers(sp, meta), key_groups=meta.key_groups)
    if meta.key_type is not None:
        # a PyFlink key group belongs to the Row-wrapped key: the unwrapped key gets statekit's own; keys hashed by
        # user code (POJO, Row) keep the key groups Flink stored them in
        keep = meta.stored_key_groups or (_keeps_key_groups(meta.key_type) and not sp.is_pyflink(meta.identifier))
        # Canonical state without timers is decoded a batch of key groups at a time and each batch
        # written while the next is decoded (at commit): the two overlap, and memory holds a few batches.
        batches = sp.keyed_batches(meta.identifier) if keep else None
        if batches is not None:
            w.write_keyed_batches(batches)
        else:
            w.write_keyed(sp.keyed_table(meta.identifier, with_key_group=keep))
            timers = sp.timers(meta.identifier)
            if timers.num_rows:
                w.write_timers(timers if keep else timers.drop_columns(["key_group"]))
    for info in meta.operator_states:
        if info.redistribution == "broadcast":
            w.write_broadcast_state(info, sp.broadcast_state(meta.identifier, info.name))
        else:
            _, per_subtask = sp.operator_state_lists(meta.identifier, info.name)
            w.write_list_state(info, per_subtask)


def flink_serializers(sp: FlinkSavepoint, meta: OperatorMetadata) -> FlinkSerializers:
    """The operator's Flink serializer snapshots and its coordinator's state, byte for byte, for the manifest
    (`write_flink` reuses them)."""
    fop = sp.flink_operator(meta.identifier)
    lay = sp.flink.layout(fop)
    known = {s.name for s in meta.operator_states}
    ops = tuple((n, m.raw) for n, m in sp.flink.operator_states(fop).items() if n in known)
    version = str(sp.flink_version)
    coordinator = sp.flink.files.read(fop.coordinator) if fop.coordinator is not None else None
    if lay is None:
        return FlinkSerializers(operator_states=ops, flink_version=version, coordinator=coordinator)
    # only states statekit lists, under their stored names (PyFlink's python-state-<name>: `write_flink` writes
    # them back in PyFlink's layout)
    names = {s.name for s in meta.keyed_states}
    if sp.is_pyflink(meta.identifier):
        names = {pyflink.PREFIX + n for n in names} | names
    return FlinkSerializers(lay.key_type.raw, tuple((s.name, s.raw) for s in lay.states if s.name in names),
                            tuple(t.raw for t in lay.timers), ops, version, coordinator)


def _check_key_type(meta: OperatorMetadata) -> None:
    """Refuse, naming the operator and the way out, a key statekit's format cannot hash (an Avro key holding
    dates, timestamps, bytes or arrays): its tables place keys by statekit's own hash of the key type."""
    import pyarrow as pa

    from statekit.keyhash import java_hash_array
    from statekit.types import parse_ddl

    assert meta.key_type is not None
    try:
        java_hash_array(pa.array([], parse_ddl(meta.key_type)), meta.key_type)
    except StateTypeError as exc:
        raise StateTypeError(
            f"operator {meta.display_name!r} has keys of type {meta.key_type}, which statekit's format cannot hold "
            f"({exc}). Write Flink savepoints from the Flink one directly (write_flink or `statekit convert --to "
            "flink`, with uids=/remove=/max_parallelism=), or convert the other operators only (uids= / --uid)."
        ) from None


def _keeps_key_groups(key_type: str) -> bool:
    # Flink's key groups equal statekit's for scalar and Tuple keys; other struct keys (SQL rows, PyFlink rows
    # unwrapped) get statekit's own (consistent with its runtime); POJO/Row keys are stored (`stored_key_groups`).
    return not key_type.startswith("struct")
