"""`upgrade`: a Flink 1.x savepoint rewritten as a 2.x savepoint that the 2.x build of the same job restores.

Boundary: reads the 1.x savepoint, picks a migration per keyed state (`statekit.savepoint.upgrade_states`),
writes with the Flink writer for the 2.x line, and reports per state what was migrated, kept as it was
(built-in serializers, unchanged between the lines) or dropped on request. One state it cannot migrate
refuses the whole upgrade before anything is written, naming the state and the fix.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable, Mapping, Sequence

import pyarrow as pa

from statekit.errors import InvalidArgumentError
from statekit.format.flink.classfile import ClassPath
from statekit.format.flink.serializers_out import keyed_meta_info
from statekit.format.flink.versions import FlinkVersion
from statekit.format.flink.writer import KeyedStateOut, OperatorData, OperatorStateOut, write_flink_savepoint
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.reader import Savepoint
from statekit.savepoint.upgrade_states import Context, Migrated, UpgradeRefusedError, is_kryo, is_scala, kryo, scala


@dataclass(frozen=True)
class StateUpgrade:
    """What happened to one keyed state: migrated (with how), kept, or dropped."""

    operator: str
    state: str
    action: str  # migrated | kept | dropped
    serializer_from: str
    serializer_to: str
    values: int
    how: str = ""


@dataclass
class UpgradeReport:
    """The states of an upgrade and where it was written."""

    source: str
    target: str
    to_flink: str
    states: list[StateUpgrade] = field(default_factory=list)

    def count(self, action: str) -> int:
        return sum(1 for s in self.states if s.action == action)

    def summary(self) -> str:
        values = sum(s.values for s in self.states if s.action == "migrated")
        return (f"upgraded {self.source} -> {self.target} (Flink {self.to_flink}): {self.count('migrated')} state(s) "
                f"migrated ({values} values), {self.count('kept')} kept as they were, {self.count('dropped')} dropped")

    def to_json(self) -> str:
        return json.dumps({"source": self.source, "target": self.target, "to_flink": self.to_flink,
                           "states": [asdict(s) for s in self.states]}, indent=2)


def _check_target(version: FlinkVersion, source: Savepoint) -> None:
    if version.major < 2:
        raise InvalidArgumentError(f"upgrade writes Flink 2.x savepoints; {version.line} is a 1.x line. To write a "
                                   "savepoint for the same 1.x line, use convert --to flink --flink-version.")
    came = getattr(source, "flink_version", None)
    if came is not None and not str(came).startswith("1."):
        raise InvalidArgumentError(f"{source.path} is already a Flink {came} savepoint; upgrade reads 1.x savepoints.")


def upgrade(source: str | os.PathLike[str], target: str | os.PathLike[str], *, to_flink: str = "2.3",
            classpath: Iterable[str | os.PathLike[str]] = (), target_classpath: Iterable[str | os.PathLike[str]] = (),
            pojos: Mapping[str, str] | None = None, drop: Sequence[str] = (), keep: Sequence[str] = (),
            uids: Sequence[str] = ()) -> UpgradeReport:
    """Rewrite the Flink 1.x savepoint `source` as a Flink `to_flink` (2.x) savepoint at `target`.

    Kryo-2 values of classes on `classpath` (the 1.x job's jars) are re-encoded as Kryo 5; Kryo `List`/`Map`
    values become Flink 2.x's built-in (Nullable) List/Map serializers; Scala `Option[T]` state becomes `T`
    and case classes the POJO `pojos` names (``{"uid/state": "com.acme.Pojo"}``, found on `target_classpath`,
    the 2.x job's jars). `drop` (``"uid/state"``) leaves states out; `keep` carries states' bytes unchanged,
    unchecked (e.g. a state of the job's own Kryo serializer that the user knows reads the same under Kryo 5). `uids` name operators in the report (1.x
    savepoints store uid hashes only). A state that cannot be migrated raises
    `UpgradeRefusedError` (or `CustomKryoSerializerError`) naming it, and nothing is written. The source is
    never modified; `target` must not exist.
    """
    version = FlinkVersion.parse(to_flink)
    sp = Savepoint.open(source)
    _check_target(version, sp)
    from statekit.savepoint.flink_out import operator_data, target_version

    target_version(sp, version)
    pojo_of = {_by_hash(k): v for k, v in (pojos or {}).items()}
    ctx = Context(ClassPath(classpath), ClassPath(target_classpath), pojo_of)
    report = UpgradeReport(str(source), str(target), version.line)
    dropped = {_by_hash(k) for k in drop}
    kept = {_by_hash(k) for k in keep}
    if dropped & kept:
        raise InvalidArgumentError(f"state(s) {sorted(dropped & kept)} are both dropped and kept; choose one.")
    named = {_by_hash(k).split("/")[0]: k.split("/")[0] for k in [*(pojos or {}), *drop, *keep]}
    named.update({OperatorIdentifier.for_uid(u).uid_hash: u for u in uids})
    have = {f"{m.uid_hash}/{n}" for m in sp.operators
            for n in [*(st.name for st in m.keyed_states), *(st.name for st in m.operator_states)]}
    for opt, keys in (("--pojo", set(pojo_of)), ("--drop", dropped), ("--keep", kept)):
        if keys - have:
            raise InvalidArgumentError(f"{opt} names state(s) {sorted(keys - have)} not in {source} (give them as uid/state).")
    ops = []
    for meta in sp.operators:
        data = operator_data(sp, meta)
        name = meta.uid or named.get(meta.uid_hash, meta.uid_hash)
        data.operator_states = _operator_states(data.operator_states, meta.uid_hash, name, dropped, report)
        if data.layout is not None and isinstance(data.keyed, pa.Table):
            if is_kryo(data.layout.key) or is_scala(data.layout.key) or data.layout.key.kind == "binary":
                raise UpgradeRefusedError(
                    f"operator {name!r} is keyed by {data.layout.key.serializer}: such keys hash with the key class's "
                    "own hashCode() and statekit does not migrate keys. Nothing was written; re-key the state with the "
                    "1.x job (State Processor API).")
            _keyed(data, meta.uid_hash, name, ctx, dropped, kept, report)
        ops.append(data)
    path = write_flink_savepoint(target, ops, checkpoint_id=sp.checkpoint_id, flink_version=version)
    report.target = str(path)
    return report


def _keyed(data: OperatorData, uid_hash: str, name: str, ctx: Context, dropped: set[str], kept: set[str],
           report: UpgradeReport) -> None:
    """Migrate `data`'s keyed states in place (its layout and table), recording each in `report`."""
    assert data.layout is not None and isinstance(data.keyed, pa.Table)
    keyed = data.keyed
    states = []
    for s in data.layout.states:
        key = f"{uid_hash}/{s.name}"
        what = f"state {s.name!r} of operator {name!r}"
        col = keyed.column(s.column)
        n = col.length() - col.null_count
        if key in dropped:
            keyed = keyed.drop_columns([s.column])
            report.states.append(StateUpgrade(name, s.name, "dropped", s.value.serializer, "", n))
            continue
        if key in kept:
            states.append(s)
            report.states.append(StateUpgrade(name, s.name, "kept", s.value.serializer, s.value.serializer, n,
                                              "on request (keep): bytes unchanged, not checked"))
            continue
        got = _migrate(s, col, ctx, what, key)
        if got is None or got.values is None:
            states.append(s)
            report.states.append(StateUpgrade(name, s.name, "kept", s.value.serializer, s.value.serializer, n,
                                              got.how if got else "the same serializer in 2.x"))
            continue
        if s.kind == "map":  # the same map with each value's final bytes (the map serializer is kept)
            column, opaque = got.values, got.serializer
        elif s.kind == "list":  # the elements' final bytes; the writer joins them (the list serializer is kept)
            column, opaque = pa.array(got.values, pa.list_(pa.binary())), got.serializer
        else:  # the values' final bytes: the writer copies them (an opaque serializer, same snapshot)
            column = pa.array(got.values, pa.binary())
            opaque = replace(got.serializer, kind="binary", children=(), field_names=())
        keyed = keyed.set_column(keyed.schema.get_field_index(s.column), s.column, column)
        states.append(KeyedStateOut(s.name, s.kind, opaque, keyed_meta_info(s.name, s.kind, opaque, data.layout.namespace),
                                    s.column))
        report.states.append(StateUpgrade(name, s.name, "migrated", s.value.serializer, got.serializer.serializer, n,
                                          got.how))
    data.layout = replace(data.layout, states=tuple(states))
    data.keyed = keyed


def _operator_states(states: Sequence[OperatorStateOut], uid_hash: str, name: str, dropped: set[str],
                     report: UpgradeReport) -> list[OperatorStateOut]:
    """Operator (list, union, broadcast) states: kept when 2.x reads them as they are, else refused (or dropped)."""
    out = []
    for s in states:
        n = sum(len(a) for a in s.per_subtask) + (s.entries.num_rows if s.entries is not None else 0)
        if f"{uid_hash}/{s.name}" in dropped:
            report.states.append(StateUpgrade(name, s.name, "dropped", s.value.serializer, "", n))
            continue
        for t in (s.value, s.key):
            if t is not None and (is_kryo(t) or is_scala(t) or not (t.decodable or t.kind == "avro")):
                raise UpgradeRefusedError(
                    f"operator state {s.name!r} of operator {name!r} holds {t.serializer} values; statekit migrates "
                    "keyed value states only. Nothing was written; --drop it, or migrate it with the 1.x job.")
        out.append(s)
        report.states.append(StateUpgrade(name, s.name, "kept", s.value.serializer, s.value.serializer, n,
                                          "the same serializer in 2.x"))
    return out


def _by_hash(key: str) -> str:
    """A "uid/state" (or "uidhash/state") key with its operator as the uid hash (1.x savepoints store no uids)."""
    op, sep, state = key.rpartition("/")
    if not sep or not op or not state:
        raise InvalidArgumentError(f"{key!r} does not name a state; give it as uid/state (e.g. counter/count).")
    if len(op) == 32 and all(c in "0123456789abcdef" for c in op):
        return key
    return f"{OperatorIdentifier.for_uid(op).uid_hash}/{state}"


def _migrate(s: KeyedStateOut, col: pa.ChunkedArray, ctx: Context, what: str, key: str) -> Migrated | None:
    """The migration of one keyed state, or None when its serializer is the same in 2.x."""
    t = s.value
    if s.kind == "list" and t.kind == "list" and is_kryo(t.children[0]):  # ListState of Kryo elements
        got = kryo(t.children[0], col.to_pylist(), ctx, what, delimited=True)
        if got.values is not None and [None if v is None else b",".join(v) for v in got.values] == col.to_pylist():
            return replace(got, serializer=t, values=None, how="Kryo 2 -> Kryo 5 elements: the 2.x bytes are the same, "
                                                              "checked value by value")
        return replace(got, serializer=t, how=got.how.replace("Kryo 5", "Kryo 5 elements", 1))
    if s.kind == "map" and t.kind == "map" and is_kryo(t.children[1]):  # MapState of Kryo values, entry by entry
        arr = col.combine_chunks()
        items = arr.items.to_pylist()
        got = kryo(t.children[1], items, ctx, what)
        if got.values is None or got.values == items:
            return replace(got, serializer=t, values=None, how="Kryo 2 -> Kryo 5 map values: the 2.x bytes are the same, "
                                                                "checked value by value")
        column = pa.MapArray.from_arrays(arr.offsets, arr.keys, pa.array(got.values, pa.binary()), mask=arr.is_null())
        return replace(got, serializer=t, values=column, how=got.how.replace("Kryo 5", "Kryo 5 map values", 1))
    if not (is_kryo(t) or is_scala(t)):
        if t.decodable or t.kind == "avro":
            return None
        raise UpgradeRefusedError(f"{what}: serializer {t.serializer} is not one statekit migrates to Flink 2.x "
                                  "(Kryo, Scala case classes and Options are); --drop the state or migrate it with the 1.x job.")
    if s.kind != "value":
        raise UpgradeRefusedError(f"{what}: a {s.kind} state of {t.serializer} values; statekit migrates value states "
                                  "only. --drop it or migrate it with the 1.x job.")
    values = col.to_pylist()
    if is_kryo(t):
        got = kryo(t, values, ctx, what)
    else:
        got = scala(t, values, ctx, what, key)
    if got.values == values and got.serializer is t:
        return replace(got, values=None, how=f"{got.how.split(' (')[0]}: the 2.x bytes are the same, checked value by value")
    return got


__all__ = ["UpgradeReport", "StateUpgrade", "UpgradeRefusedError", "upgrade"]
