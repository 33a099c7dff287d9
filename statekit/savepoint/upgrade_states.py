"""How each 1.x state becomes what the 2.x job declares: Kryo 2 -> Kryo 5, Kryo collections -> built-in, Scala -> POJO.

Boundary: one migration per kind of 1.x serializer, each taking the state's serializer and its values'
bytes and returning the 2.x serializer and bytes (or raising `UpgradeRefusedError` with the reason and the
fix). `statekit.savepoint.upgrade` picks a migration per state and writes the savepoint.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable

from statekit.errors import StatekitError
from statekit.format.flink.binary import DataInput, java_string
from statekit.format.flink.classfile import ClassPath
from statekit.format.flink.kryo import (
    DEFAULT_IDS,
    Box,
    CustomSerializerMet,
    Kryo2Reader,
    KryoLayoutError,
    Layouts,
    Str,
    plain,
)
from statekit.format.flink.kryo5 import Kryo5Writer
from statekit.format.flink.serializers import (
    COMPOSITE_MAGIC,
    KRYO_SNAPSHOT,
    NESTED_MAGIC,
    OPTIONAL_MAP_HEADER,
    FlinkType,
)
from statekit.format.flink.serializers_out import DataOutput, FlinkPojo, flink_type, list_of, map_of
from statekit.format.flink.values_out import java_string_bytes

SCALA_CASE = "org.apache.flink.api.scala.typeutils.ScalaCaseClassSerializerSnapshot"
SCALA_OPTION = "org.apache.flink.api.scala.typeutils.ScalaOptionSerializerSnapshot"
NULLABLE = "org.apache.flink.api.java.typeutils.runtime.NullableSerializer$NullableSerializerSnapshot"
_LISTS = {"java.util.List", "java.util.ArrayList", "java.util.Collection", "java.util.LinkedList"}
_MAPS = {"java.util.Map", "java.util.HashMap"}
_REGISTRATION_KINDS = {0: "UNSPECIFIED", 1: "a serializer class", 2: "a serializer instance"}


class UpgradeRefusedError(StatekitError):
    """A 1.x state statekit cannot migrate to what the 2.x job declares; the message names the state and what to do."""


class CustomKryoSerializerError(UpgradeRefusedError):
    """A 1.x state written by a user's own Kryo serializer, whose byte layout only that serializer knows."""


@dataclass(frozen=True)
class Migrated:
    """A state's 2.x serializer and its values re-encoded (None where the state is not set)."""

    serializer: FlinkType
    values: Any  # bytes per value (list states: per element; map states: the map column); None: unchanged
    how: str


@dataclass(frozen=True)
class Context:
    """What a migration may use: the 1.x job's classpath, the 2.x job's classpath and declared POJO classes."""

    classpath: ClassPath
    target_classpath: ClassPath
    pojos: dict[str, str]  # "uid/state" -> the 2.x POJO class


def _registrations(t: FlinkType, what: str) -> list[tuple[str, int, str | None]]:
    """A KryoSerializerSnapshot's registrations: class -> (kind ordinal, serializer class); refuses default serializers."""
    inp = DataInput(t.raw, what)
    inp.utf("the snapshot class")
    inp.i32("the snapshot version")
    inp.utf("the Kryo type class")
    regs: list[tuple[str, int, str | None]] = []
    for part in ("registrations", "default serializers", "default serializer classes"):
        if inp.i64(f"the Kryo {part} header") != OPTIONAL_MAP_HEADER:
            raise inp.fail(f"the Kryo {part} map lacks its header")
        for _ in range(inp.count(f"the number of Kryo {part}")):
            name = inp.utf(f"a name in the Kryo {part}")
            if inp.bool("a key flag"):
                inp.skip(inp.count("a key frame length"), "a key frame")
            if not inp.bool("a value flag"):
                continue
            n = inp.count("a value frame length")
            frame = DataInput(inp.data, what, pos=inp.pos, end=inp.pos + n)
            inp.skip(n, "a value frame")
            if part != "registrations":
                raise CustomKryoSerializerError(
                    f"{what}: the 1.x job registered a default Kryo serializer for {name}; statekit cannot know its byte "
                    "layout. Migrate this state with the 1.x job (State Processor API) or drop it (--drop).")
            frame.utf("the registered class")
            kind = frame.i32("the registration kind")
            ser = frame.utf("the serializer class") if kind == 1 else None
            regs.append((name, kind, ser))
    return regs


def _kryo_ids(values: list[bytes | None], regs: list[tuple[str, int, str | None]],
              type_class: str, what: str) -> tuple[dict[int, str], dict[int, str]]:
    """Registration ids of the job's registered classes (plain, and with their own serializer).

    Flink registers Kryo's defaults and its own classes before the job's registrations, in the snapshot's
    order; the first value's class id (the state's own class) tells where the job's registrations start.
    """
    names = [c for c, _, _ in regs]
    for v in values:
        if v:
            i = Kryo2Reader(v, Layouts(ClassPath(), what), {}).varint() - 2
            if type_class not in names or i < len(DEFAULT_IDS) + 1:
                return {}, {}
            base = i - names.index(type_class)
            plain_ids = {base + n: c for n, (c, k, _) in enumerate(regs) if k == 0}
            return plain_ids, {base + n: c for n, (c, k, _) in enumerate(regs) if k != 0}
    return {}, {}


def kryo(t: FlinkType, values: list[bytes | None], ctx: Context, what: str, *, delimited: bool = False) -> Migrated:
    """A Kryo 2 state: a collection becomes Flink 2.x's built-in List/Map serializer; a class becomes Kryo 5 bytes.

    `delimited`: the values are list states' (Kryo elements separated by ``,``), kept as lists of Kryo 5 elements.
    """
    regs = _registrations(t, what)
    assert t.type_class is not None
    for c, k, ser in regs:
        if c == t.type_class and k != 0:
            raise CustomKryoSerializerError(_custom(what, f"class {c} is registered with {_REGISTRATION_KINDS.get(k, k)} "
                                                          f"{ser or ''}".rstrip()))
    ids, custom = _kryo_ids(values, regs, t.type_class, what)
    lay = Layouts(ctx.classpath, what)
    # a value's Kryo stream stands alone (references reset per value): equal bytes decode and encode once
    trees: dict[bytes, Any] = {}
    try:
        for v in values:
            if v is not None and v not in trees:
                r = Kryo2Reader(v, lay, ids, custom)
                trees[v] = r.read_delimited() if delimited else r.read()
        if delimited and t.type_class in _LISTS | _MAPS:
            raise UpgradeRefusedError(f"{what}: a list state of Kryo {t.type_class} values; statekit migrates list states "
                                      "of Kryo classes. --drop it or migrate it with the 1.x job.")
        if t.type_class in _LISTS | _MAPS:
            return _builtin(t.type_class, values, trees, what)
        encoded: dict[bytes, bytes] = {}
        for v, tree in trees.items():
            parts = []
            for one in (tree if delimited else [tree]):
                w = Kryo5Writer(lay, ids)
                w.class_and_object(one)
                parts.append(bytes(w.out))
            encoded[v] = parts if delimited else parts[0]  # type: ignore[assignment]
        out: list[bytes | None] = [None if v is None else encoded[v] for v in values]
    except CustomSerializerMet as exc:
        raise CustomKryoSerializerError(_custom(what, str(exc).split(": ", 1)[1])) from exc
    except KryoLayoutError as exc:
        raise UpgradeRefusedError(f"{str(exc).rstrip('.')}. Nothing was written; pass the 1.x job's jar (--classpath) or --drop the "
                                  "state.") from exc
    same = out == values
    return Migrated(t, out, "Kryo 2 -> Kryo 5 (bytes unchanged)" if same else "Kryo 2 -> Kryo 5 (re-encoded)")


def _custom(what: str, why: str) -> str:
    return (f"{what}: {why}; its bytes are that serializer's own layout, which statekit cannot decode. Nothing was "
            "written. Migrate this state with the 1.x job (State Processor API), leave it out (--drop) and rebuild it, or "
            "carry its bytes unchanged (--keep) if your serializer reads them the same under Kryo 5.")


_ELEM = {"string": (lambda v: java_string_bytes(v)), "int": lambda v: struct.pack(">i", v),
         "bigint": lambda v: struct.pack(">q", v), "double": lambda v: struct.pack(">d", v),
         "boolean": lambda v: b"\x01" if v else b"\x00", "float": lambda v: struct.pack(">f", v)}
_BOX_DDL = {"I": "int", "J": "bigint", "D": "double", "Z": "boolean", "F": "float"}


def _ddl_of(items: list, what: str) -> str:
    kinds = set()
    for x in items:
        if isinstance(x, Str):
            kinds.add("string")
        elif isinstance(x, Box) and x.kind in _BOX_DDL:
            kinds.add(_BOX_DDL[x.kind])
        elif x is not None:
            raise UpgradeRefusedError(f"{what}: a collection element of class {getattr(x, 'cls', type(x).__name__)} "
                                      "has no Flink 2.x built-in serializer statekit writes; --drop the state.")
    if len(kinds) != 1:
        raise UpgradeRefusedError(f"{what}: collection elements of {len(kinds) or 'no'} classes {sorted(kinds)}; Flink 2.x "
                                  "declares one element type. --drop the state or migrate it with the 1.x job.")
    return kinds.pop()


def nullable(inner: FlinkType) -> FlinkType:
    """Flink 2.x's NullableSerializer around `inner` (no padding), as `NullableList`/`NullableMap` type infos declare."""
    out = DataOutput().utf(NULLABLE).i32(3).i32(COMPOSITE_MAGIC).i32(2).i32(0).i32(NESTED_MAGIC).i32(1).i32(1)
    raw = bytes(out.buf) + inner.raw
    return FlinkType("binary", NULLABLE, 3, raw, (inner,))


def _builtin(type_class: str, values: list[bytes | None], trees: dict[bytes, Any], what: str) -> Migrated:
    """A Kryo List/Map value as Flink 2.x's NullableSerializer(List(Nullable(E))) / NullableSerializer(Map(Nullable(K), V))."""
    present = list(trees.values())
    encoded: dict[bytes, bytes] = {}
    if type_class in _LISTS:
        ddl = _ddl_of([i for x in present for i in x.items], what)
        enc = _ELEM[ddl]
        for raw, x in trees.items():
            encoded[raw] = b"\x00" + struct.pack(">i", len(x.items)) + b"".join(
                b"\x01" if i is None else b"\x00" + enc(plain(i)) for i in x.items)
        ser = nullable(list_of(nullable(flink_type(ddl))))
        how = f"Kryo {type_class} -> NullableSerializer(List<{ddl}>)"
    else:
        kd = _ddl_of([k for x in present for k, _ in x.entries], what)
        vd = _ddl_of([v for x in present for _, v in x.entries], what)
        ke, ve = _ELEM[kd], _ELEM[vd]
        for raw, x in trees.items():
            encoded[raw] = b"\x00" + struct.pack(">i", len(x.entries)) + b"".join(
                (b"\x01" if k is None else b"\x00" + ke(plain(k))) + (b"\x01" if v is None else b"\x00" + ve(plain(v)))
                for k, v in x.entries)
        ser = nullable(map_of(nullable(flink_type(kd)), flink_type(vd)))
        how = f"Kryo {type_class} -> NullableSerializer(Map<{kd},{vd}>)"
    return Migrated(ser, [None if v is None else encoded[v] for v in values], how)


# --- the Scala API ----------------------------------------------------------------------------------------
_SCALA_KIND = {"string": "string", "long": "bigint", "int": "int", "double": "double", "boolean": "boolean",
               "float": "float", "short": "smallint", "byte": "tinyint"}
_DESC_DDL = {"D": "double", "J": "bigint", "I": "int", "Z": "boolean", "F": "float", "S": "smallint", "B": "tinyint",
             "Ljava/lang/String;": "string", "Ljava/lang/Double;": "double", "Ljava/lang/Long;": "bigint",
             "Ljava/lang/Integer;": "int", "Ljava/lang/Boolean;": "boolean"}


def _scala_reader(t: FlinkType, what: str) -> Callable[[DataInput], Any]:
    """A reader of one value of a Scala-API serializer (Option, case class of simple fields, built-in types)."""
    if t.snapshot_class == SCALA_OPTION:
        inner = _scala_reader(t.children[0], what)
        return lambda inp: inner(inp) if inp.bool("an Option's flag") else None
    if t.snapshot_class == SCALA_CASE:
        fields = [_scala_reader(c, what) for c in t.children]
        return lambda inp: [f(inp) for f in fields]
    readers: dict[str, Callable[[DataInput], Any]] = {
        "string": lambda inp: java_string(inp),
        "long": lambda inp: inp.i64("a long"), "int": lambda inp: inp.i32("an int"),
        "double": lambda inp: struct.unpack(">d", struct.pack(">q", inp.i64("a double")))[0],
        "boolean": lambda inp: inp.bool("a boolean"),
    }
    if t.kind not in readers:
        raise UpgradeRefusedError(f"{what}: Scala field serializer {t.serializer} is not one statekit migrates "
                                  "(String, Long, Int, Double, Boolean, Option, case classes of those).")
    return readers[t.kind]


def _option_inner(t: FlinkType) -> FlinkType:
    return t.children[0] if t.snapshot_class == SCALA_OPTION else t


def scala(t: FlinkType, values: list[bytes | None], ctx: Context, what: str, key: str) -> Migrated:
    """A Scala-API state: Option[T] -> T (None: not set); a case class -> the 2.x job's POJO (named with --pojo)."""
    read = _scala_reader(t, what)
    decoded = [None if v is None else read(DataInput(v, what)) for v in values]
    if t.snapshot_class == SCALA_OPTION:
        inner = t.children[0]
        if inner.kind not in _SCALA_KIND:
            raise UpgradeRefusedError(f"{what}: Option[{inner.serializer}] is not one statekit migrates; --drop it.")
        ddl = _SCALA_KIND[inner.kind]
        return Migrated(flink_type(ddl), [None if d is None else _ELEM[ddl](d) for d in decoded],
                        f"Scala Option[{ddl}] -> {ddl} (None: not set)")
    pojo = ctx.pojos.get(key)
    if pojo is None:
        raise UpgradeRefusedError(
            f"{what}: a Scala case class ({_case_class_name(t)}); the Scala API "
            "is gone in Flink 2.x, so name the class the 2.x job declares for it: --pojo UID/STATE=com.acme.YourPojo "
            "(with --target-classpath the 2.x job's jar).")
    src_class = _case_class_name(t)
    case = ctx.classpath.find(src_class) if ctx.classpath else None
    if case is None:
        raise UpgradeRefusedError(f"{what}: case class {src_class} is not on --classpath (the 1.x job's jar); its field "
                                  "names are not in the savepoint.")
    names = [f.name for f in case.fields if not f.is_static]
    if len(names) != len(t.children):
        raise UpgradeRefusedError(f"{what}: case class {src_class} declares {len(names)} fields, the savepoint {len(t.children)}.")
    target = ctx.target_classpath.find(pojo) if ctx.target_classpath else None
    if target is None:
        raise UpgradeRefusedError(f"{what}: POJO {pojo} is not on --target-classpath (the 2.x job's jar).")
    tfields = {f.name: f for f in target.fields if not (f.is_static or f.is_transient)}
    if sorted(tfields) != sorted(names):
        raise UpgradeRefusedError(f"{what}: POJO {pojo} has fields {sorted(tfields)}, case class {src_class} {names}; "
                                  "statekit maps them by name only.")
    order = sorted(names)
    ddls = {}
    for n, c in zip(names, t.children):
        d = _DESC_DDL.get(tfields[n].descriptor)
        src = _SCALA_KIND.get(_option_inner(c).kind)
        if d is None or d != src:
            raise UpgradeRefusedError(f"{what}: field {n!r} is {c.serializer} in 1.x and {tfields[n].descriptor} in {pojo}.")
        ddls[n] = d
    ser = flink_type("struct<" + ",".join(f"{n}:{ddls[n]}" for n in order) + ">", FlinkPojo(pojo, tuple(order)), what=what)
    out: list[bytes | None] = []
    for d in decoded:
        if d is None:
            out.append(None)
            continue
        row = dict(zip(names, d))
        b = bytearray(b"\x02")  # PojoSerializer: the value's class is the POJO itself (no subclass)
        for n in order:
            v = row[n]  # every field, primitive or not, behind its null flag
            b += b"\x01" if v is None else b"\x00" + _ELEM[ddls[n]](v)
        out.append(bytes(b))
    return Migrated(ser, out, f"Scala case class {src_class} -> POJO {pojo}")


def _case_class_name(t: FlinkType) -> str:
    inp = DataInput(t.raw, "a case class snapshot")
    inp.utf("the snapshot class")
    inp.i32("the version")
    inp.i32("the composite magic")
    inp.i32("the outer version")
    return inp.utf("the case class")


def is_kryo(t: FlinkType) -> bool:
    """Whether `t` is Flink's Kryo serializer (Kryo 2 in a 1.x savepoint)."""
    return t.snapshot_class == KRYO_SNAPSHOT


def is_scala(t: FlinkType) -> bool:
    """Whether `t` is a serializer of the 1.x Scala API (case class or Option)."""
    return t.snapshot_class in (SCALA_CASE, SCALA_OPTION)
