"""`compat`: will the new job version restore the old state? Two savepoints compared operator by operator, state by state.

Boundary: OLD is the state to restore; NEW is a savepoint or checkpoint the new job version wrote (e.g. its first
checkpoint, taken with no input): what it registers - operators, keyed and operator states with their
serializer snapshots, key serializer, max parallelism - is what the new job will ask of OLD's state. Serializers
are compared with `compat_rules` (Flink's rules, offline); statekit savepoints without Flink serializers are
compared by their declared types. Each finding says whether Flink's restore fails and the statekit command that
fixes it. The rules Flink applies on restore, in the order it applies them:

* an operator of OLD that holds state and is missing from NEW fails the restore (unless the job is started with
  `allowNonRestoredState`); a stateless one is skipped
* a different max parallelism of a keyed operator fails
* a key serializer that is not the same fails (Flink never migrates keys), as does a changed window namespace
* a keyed or operator state whose kind changed (value/list/map/reducing/aggregating, split/union/broadcast) fails
* a state whose serializer is incompatible fails; one Flink can migrate (a POJO field added) restores
* states only in NEW start empty; states only in OLD are dropped: neither fails
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from statekit.format.flink.serializers import FlinkType
from statekit.format.manifest import OperatorMetadata
from statekit.savepoint.compat_rules import Compatibility, resolve
from statekit.savepoint.reader import Savepoint

Change = Literal["operator-missing", "operator-added", "max-parallelism-changed", "key-type-changed",
                 "namespace-changed", "kind-changed", "serializer-incompatible", "serializer-migrated",
                 "state-added", "state-removed"]

__all__ = ["CompatReport", "Finding", "compat"]


@dataclass(frozen=True)
class Finding:
    """One difference between what OLD holds and what NEW registers; `fails`: Flink's restore would fail."""

    operator: str
    uid_hash: str
    state: str | None
    change: Change
    fails: bool
    detail: str
    fix: str | None = None


@dataclass
class CompatReport:
    """Every finding; the restore succeeds when none fails."""

    old: str
    new: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def restores(self) -> bool:
        return not any(f.fails for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "restores": self.restores, "findings": [vars(f) for f in self.findings]}


@dataclass(frozen=True)
class _State:
    name: str
    kind: str  # value | list | map | reducing | aggregating | split | union | broadcast
    type: FlinkType | str  # the value serializer (map: the map's value), or a DDL type without Flink serializers
    key_type: FlinkType | str | None = None  # a map state's user key, a broadcast state's key


@dataclass(frozen=True)
class _Operator:
    meta: OperatorMetadata
    key: FlinkType | str | None
    namespace: FlinkType | str | None
    keyed: dict[str, _State]
    operator: dict[str, _State]

    @property
    def stateful(self) -> bool:
        return bool(self.keyed or self.operator)


def _schema(sp: Savepoint, meta: OperatorMetadata) -> _Operator:
    """What `meta` registers: Flink serializers where the savepoint has them, else statekit's declared types."""
    from statekit.savepoint.flink_out import carried_serializers

    carried = carried_serializers(sp, meta)
    keyed: dict[str, _State] = {}
    operator: dict[str, _State] = {}
    key: FlinkType | str | None = meta.key_type
    namespace: FlinkType | str | None = meta.namespace_type
    if carried is not None and carried.key is not None:
        key = carried.key
        namespace = carried.namespace if carried.namespace is not None else meta.namespace_type
    for s in meta.keyed_states:
        got = carried.states.get(s.name) if carried is not None else None
        if got is not None:
            v = got.value_type
            if (got.keyed_kind or s.kind) == "map" and v.kind == "map":
                keyed[s.name] = _State(s.name, "map", v.children[1], v.children[0])
            elif (got.keyed_kind or s.kind) == "list" and v.kind == "list":
                keyed[s.name] = _State(s.name, "list", v.children[0])
            else:
                keyed[s.name] = _State(s.name, got.keyed_kind or s.kind, v)
        else:
            keyed[s.name] = _State(s.name, s.kind, s.type)
    for info in meta.operator_states:
        got = carried.operator_states.get(info.name) if carried is not None else None
        if got is not None:
            bkey = got.serializers.get("KEY_SERIALIZER") if info.redistribution == "broadcast" else None
            vt = got.value_type
            if info.redistribution != "broadcast" and vt.kind == "list" and vt.children:
                vt = vt.children[0]
            operator[info.name] = _State(info.name, info.redistribution, vt, bkey)
        else:
            operator[info.name] = _State(info.name, info.redistribution, info.type, info.key_type)
    return _Operator(meta, key, namespace, keyed, operator)


def _compare(old: FlinkType | str | None, new: FlinkType | str | None, where: str) -> Compatibility:
    if old is None and new is None:
        return Compatibility("same")
    if isinstance(old, FlinkType) and isinstance(new, FlinkType):
        return resolve(old, new, where)
    o = old.ddl() if isinstance(old, FlinkType) else old
    n = new.ddl() if isinstance(new, FlinkType) else new
    if o == n:
        return Compatibility("same")
    return Compatibility("incompatible", f"{where}: {o} -> {n}")


def _name(meta: OperatorMetadata) -> str:
    return meta.uid or meta.uid_hash


def _op_flag(meta: OperatorMetadata) -> str:
    return f"--uid {meta.uid}" if meta.uid else f"--hash {meta.uid_hash}"


def compat(old: str | os.PathLike[str] | Savepoint, new: str | os.PathLike[str] | Savepoint) -> CompatReport:
    """Whether the job that wrote `new` restores the state of `old`: one `Finding` per difference (see the module)."""
    a = old if isinstance(old, Savepoint) else Savepoint.open(old)
    b = new if isinstance(new, Savepoint) else Savepoint.open(new)
    report = CompatReport(str(a.path), str(b.path))
    src, out = _shell(str(a.path)), _shell(str(a.path).rstrip("/") + "-fixed")
    olds = {m.uid_hash: _schema(a, m) for m in a.operators}
    news = {m.uid_hash: _schema(b, m) for m in b.operators}
    add = report.findings.append
    for h, o in olds.items():
        n = news.get(h)
        name = _name(o.meta)
        if n is None:
            if not o.stateful:
                continue  # Flink skips a savepoint's operator without state
            twin = _renamed(o, olds, news)
            fix = (f"statekit rename-uid {src} {out} {_op_flag(o.meta)} --new-hash {twin} --apply" if twin else
                   f"statekit remove-operator {src} {out} {_op_flag(o.meta)} --apply")
            add(Finding(name, h, None, "operator-missing", True,
                        f"operator {name} holds state but the new job has no operator with uid hash {h}; Flink refuses "
                        "the restore unless it is started with allowNonRestoredState (the state is then dropped)"
                        + (f"; the new operator {twin} registers the same states: a renamed uid?" if twin else ""), fix))
            continue
        _compare_operator(o, n, add, src, out)
    for h, n in news.items():
        if h not in olds and n.stateful:
            add(Finding(_name(n.meta), h, None, "operator-added", False,
                        f"operator {_name(n.meta)} is new: its state starts empty"))
    return report


def _renamed(o: _Operator, olds: dict[str, _Operator], news: dict[str, _Operator]) -> str | None:
    """The uid hash of a new operator (absent from OLD) that registers exactly `o`'s states, if there is one."""
    same = [h for h, n in news.items() if h not in olds and set(n.keyed) == set(o.keyed)
            and set(n.operator) == set(o.operator) and (n.key is None) == (o.key is None)]
    return same[0] if len(same) == 1 else None


def _compare_operator(o: _Operator, n: _Operator, add, src: str, out: str) -> None:
    h, name, flag = o.meta.uid_hash, _name(o.meta), _op_flag(o.meta)
    keyed_old = o.meta.key_type is not None and bool(o.keyed)
    if keyed_old and n.meta.key_type is not None and o.meta.max_parallelism != n.meta.max_parallelism:
        add(Finding(name, h, None, "max-parallelism-changed", True,
                    f"max parallelism {o.meta.max_parallelism} -> {n.meta.max_parallelism}: Flink restores keyed "
                    "state only into the max parallelism it was written with",
                    f"statekit set-max-parallelism {src} {out} {flag} --max {n.meta.max_parallelism} --apply"))
    if keyed_old and n.key is not None:
        c = _compare(o.key, n.key, "key")
        if c.verdict != "same":
            add(Finding(name, h, None, "key-type-changed", True,
                        f"key serializer changed ({c.why}); Flink never migrates keys",
                        f"statekit rekey {src} {out} {flag} --expr \"CAST(key AS <new key type>)\" --apply"))
        c = _compare(o.namespace, n.namespace, "namespace")
        if c.verdict != "same":
            add(Finding(name, h, None, "namespace-changed", True, f"window namespace changed ({c.why})",
                        f"statekit rm-state {src} {out} {flag} " + " ".join(f"--state {s}" for s in o.keyed) + " --apply"))
    for states_old, states_new in ((o.keyed, n.keyed), (o.operator, n.operator)):
        for s, st in states_old.items():
            nt = states_new.get(s)
            if nt is None:
                add(Finding(name, h, s, "state-removed", False,
                            f"state {s!r} is not registered by the new job: Flink drops it on the next snapshot",
                            f"statekit rm-state {src} {out} {flag} --state {s} --apply"))
                continue
            rm = f"statekit rm-state {src} {out} {flag} --state {s} --apply"
            if st.kind != nt.kind:
                add(Finding(name, h, s, "kind-changed", True, f"state {s!r} changed kind: {st.kind} -> {nt.kind}",
                            rm + " (or a state transform: SavepointWriter.with_state_transform to the new kind)"))
                continue
            parts = [_compare(st.type, nt.type, f"{s}"), _compare(st.key_type, nt.key_type, f"{s} (key)")]
            worst = max(parts, key=lambda c: ("same", "migrate", "incompatible").index(c.verdict))
            if worst.verdict == "incompatible":
                add(Finding(name, h, s, "serializer-incompatible", True,
                            f"state {s!r}: serializer incompatible ({worst.why}); Flink cannot migrate it",
                            rm + " (or a state transform to the new type: SavepointWriter.with_state_transform)"))
            elif worst.verdict == "migrate":
                add(Finding(name, h, s, "serializer-migrated", False,
                            f"state {s!r}: serializer changed and Flink migrates it on restore ({worst.why})"))
        for s in states_new:
            if s not in states_old:
                add(Finding(name, h, s, "state-added", False, f"state {s!r} is new: it starts empty"))


def _shell(path: str) -> str:
    import shlex

    return shlex.quote(path)
