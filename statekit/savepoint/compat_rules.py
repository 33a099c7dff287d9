"""Flink's serializer compatibility, decided offline from two serializer snapshots: the same, migrated, or incompatible.

Boundary: `FlinkType` trees in (as `statekit.format.flink.serializers` reads them from snapshots), a verdict out.
The rules follow Flink's `TypeSerializerSchemaCompatibility` as its snapshots resolve it: primitive serializers
of one kind are compatible as they are, of two kinds incompatible; composite serializers (List, Map, Tuple, Row)
combine their nested verdicts and are incompatible when their arity changes; a POJO of the same class migrates
when fields are added or removed and fails when a field's type becomes incompatible; Kryo (generic types) is
compatible only with Kryo of the same class (so Kryo -> POJO and POJO -> Kryo fail); an enum loses constants
only by failing; Avro schemas of the same record migrate (Avro's schema evolution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from statekit.format.flink.serializers import FlinkType

Verdict = Literal["same", "migrate", "incompatible"]

__all__ = ["Compatibility", "Verdict", "resolve"]

_ORDER = {"same": 0, "migrate": 1, "incompatible": 2}


@dataclass(frozen=True)
class Compatibility:
    """A verdict and, unless the serializers are the same, why."""

    verdict: Verdict
    why: str = ""


def _worst(parts: list[Compatibility]) -> Compatibility:
    worst = max(parts, key=lambda c: _ORDER[c.verdict], default=Compatibility("same"))
    return worst


def resolve(old: FlinkType, new: FlinkType, where: str = "value") -> Compatibility:
    """Whether state written with `old` restores under `new`: as is, after Flink migrates it, or not at all."""
    if old.raw == new.raw:
        return Compatibility("same")
    if old.kind != new.kind:
        return Compatibility("incompatible", f"{where}: {old.serializer} -> {new.serializer}")
    k = old.kind
    if k in ("pojo", "binary", "avro", "enum", "tuple", "row") and old.type_class != new.type_class and \
            old.type_class and new.type_class:
        return Compatibility("incompatible", f"{where}: class {old.type_class} -> {new.type_class}")
    if k == "binary":
        if old.snapshot_class != new.snapshot_class:
            return Compatibility("incompatible", f"{where}: {old.serializer} -> {new.serializer}")
        return Compatibility("same")  # the same Kryo class: Flink reconfigures its registrations
    if k == "pojo":
        return _pojo(old, new, where)
    if k == "enum":
        gone = [v for v in old.enum_values if v not in new.enum_values]
        if gone:
            return Compatibility("incompatible", f"{where}: enum constants removed: {gone}")
        return Compatibility("same")
    if k == "avro":
        return Compatibility("migrate", f"{where}: Avro schema changed (Flink migrates it by Avro's schema evolution)")
    if k in ("tuple", "row", "list", "map", "timer", "window") or old.children or new.children:
        if len(old.children) != len(new.children):
            return Compatibility("incompatible",
                                 f"{where}: {old.serializer} arity {len(old.children)} -> {len(new.children)}")
        names = old.field_names or tuple(f"f{i}" for i in range(len(old.children)))
        return _worst([resolve(a, b, f"{where}.{n}") for a, b, n in zip(old.children, new.children, names)])
    if old.snapshot_class != new.snapshot_class:
        return Compatibility("incompatible", f"{where}: {old.serializer} -> {new.serializer}")
    return Compatibility("same")  # one primitive serializer, another snapshot version


def _pojo(old: FlinkType, new: FlinkType, where: str) -> Compatibility:
    before = dict(zip(old.field_names, old.children))
    after = dict(zip(new.field_names, new.children))
    parts = [resolve(before[n], after[n], f"{where}.{n}") for n in before if n in after]
    worst = _worst(parts)
    if worst.verdict == "incompatible":
        return worst
    added = [n for n in after if n not in before]
    removed = [n for n in before if n not in after]
    if added or removed:
        what = ", ".join([*(f"field {n} added" for n in added), *(f"field {n} removed" for n in removed)])
        return Compatibility("migrate", f"{where}: POJO {old.type_class}: {what} (Flink migrates it)")
    return worst
