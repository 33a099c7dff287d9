"""Kryo 2.24 streams (Flink 1.x) decoded into a value tree (`statekit.format.flink.kryo5` writes it as Kryo 5).

Boundary: the regular layouts only - `FieldSerializer` objects of classes found on the job's classpath
(`statekit.format.flink.classfile`), enums, strings, boxed primitives, `ArrayList`/`LinkedList`/`HashSet`/
`LinkedHashSet` and `HashMap`, with Kryo's reference markers and class names - following Kryo's public
sources (`FieldSerializer`, `CollectionSerializer`, `MapSerializer`, `DefaultSerializers`, `Output`) of
2.24.0 and 5.6. What differs between the two: Kryo 5 writes fixed-width numbers little-endian, collection
and map sizes plus one (with a same-type flag), and does not track enums as references. Anything else
(a custom serializer, a class not on the classpath, an unknown registration) raises `KryoLayoutError` naming it.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

from statekit.errors import StatekitError
from statekit.format.flink.classfile import ClassPath, JavaClass

STRING = "java.lang.String"
#: boxed class -> (primitive descriptor, registration id of its primitive in both Kryo versions)
BOXED = {"java.lang.Integer": "I", "java.lang.Float": "F", "java.lang.Boolean": "Z", "java.lang.Byte": "B",
         "java.lang.Character": "C", "java.lang.Short": "S", "java.lang.Long": "J", "java.lang.Double": "D"}
#: Kryo's default registrations (ids 0-9 in 2.24 and 5.x): primitives share the id of their box
DEFAULT_IDS = {0: "java.lang.Integer", 1: STRING, 2: "java.lang.Float", 3: "java.lang.Boolean", 4: "java.lang.Byte",
               5: "java.lang.Character", 6: "java.lang.Short", 7: "java.lang.Long", 8: "java.lang.Double"}
COLLECTIONS = {"java.util.ArrayList", "java.util.LinkedList", "java.util.HashSet", "java.util.LinkedHashSet"}
MAPS = {"java.util.HashMap"}
FINAL_JAVA = {STRING, *BOXED}
_HIGH_BIT = re.compile(rb"[\x80-\xff]")
#: fixed-width primitives: struct format and size (big-endian in Kryo 2, little-endian in Kryo 5)
FIXED_WIDTH = {"S": ("h", 2), "C": ("H", 2), "F": ("f", 4), "D": ("d", 8)}


class KryoLayoutError(StatekitError):
    """A Kryo value whose layout statekit does not decode (custom serializer, unknown class or registration)."""


class CustomSerializerMet(KryoLayoutError):
    """A Kryo value holds a class the job registered with its own Kryo serializer (a layout only that serializer knows)."""


@dataclass(frozen=True)
class JType:
    """A declared Java type: class name (or primitive descriptor letter) and generic arguments."""

    name: str
    args: tuple["JType", ...] = ()


def parse_type(sig: str) -> JType:
    """A field descriptor or generic signature (``Ljava/util/Map<Ljava/lang/String;Ljava/lang/Long;>;``) as a `JType`."""
    t, rest = _one(sig)
    return t


def _one(s: str) -> tuple[JType, str]:
    c = s[0]
    if c in "IJZBCSFD":
        return JType(c), s[1:]
    if c == "[":
        inner, rest = _one(s[1:])
        return JType("[" + inner.name), rest
    if c in "T":  # a type variable: its class is unknown
        end = s.index(";")
        return JType("java.lang.Object"), s[end + 1:]
    if c in "+-":
        return _one(s[1:])
    if c == "*":
        return JType("java.lang.Object"), s[1:]
    assert c == "L", s
    i = 1
    while s[i] not in "<;":
        i += 1
    name = s[1:i].replace("/", ".")
    args: list[JType] = []
    if s[i] == "<":
        rest = s[i + 1:]
        while rest[0] != ">":
            a, rest = _one(rest)
            args.append(a)
        rest = rest[1:]
        assert rest[0] == ";", s
        return JType(name, tuple(args)), rest[1:]
    return JType(name), s[i + 1:]


@dataclass(eq=False)
class Obj:
    """An object written by FieldSerializer: its class and field values by name."""

    cls: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Enum:
    """An enum constant: its class, ordinal and name."""

    cls: str
    ordinal: int
    name: str


@dataclass(eq=False)
class Str:
    """A string: its text and Kryo's bytes for it (the same in both versions)."""

    text: str | None
    raw: bytes


@dataclass(eq=False)
class Box:
    """A boxed primitive (``Integer``...): its descriptor letter and value."""

    kind: str
    value: Any


@dataclass(eq=False)
class Coll:
    """A collection (CollectionSerializer): its class and elements."""

    cls: str
    items: list


@dataclass(eq=False)
class MapN:
    """A map (MapSerializer): its class and (key, value) entries in stream order."""

    cls: str
    entries: list


class Layouts:
    """What Kryo needs to know of a class: final or not, enum constants, its FieldSerializer fields (name order)."""

    def __init__(self, classpath: ClassPath, what: str) -> None:
        self.classpath = classpath
        self.what = what
        self._fields: dict[str, list[tuple[str, JType]]] = {}
        self._final: dict[str, bool] = {}
        self._kind: dict[str, str] = {}
        self._plan: dict[str, list[tuple[str, str, JType]]] = {}

    def user_class(self, name: str) -> JavaClass:
        c = self.classpath.find(name) if self.classpath else None
        if c is None:
            where = "on the classpath given" if self.classpath else "on a classpath (none was given)"
            raise KryoLayoutError(f"{self.what}: class {name} is not {where}, and its Kryo fields are not in the savepoint.")
        return c

    def is_final(self, name: str) -> bool:
        """Whether Kryo knows a field's class without writing it (a final class, as `Kryo.isFinal`)."""
        got = self._final.get(name)
        if got is None:
            got = self._final[name] = self._is_final(name)
        return got

    def _is_final(self, name: str) -> bool:
        if name in FINAL_JAVA:
            return True
        if name.startswith(("java.", "javax.", "scala.")) or name.startswith("["):
            return False
        return self.user_class(name).is_final

    def fields(self, name: str) -> list[tuple[str, JType]]:
        """FieldSerializer's fields of class `name`: non-static, non-transient, non-synthetic, class and supers, by name."""
        if name not in self._fields:
            out: list[tuple[str, JType]] = []
            c: JavaClass | None = self.user_class(name)
            while c is not None:
                for f in c.fields:
                    if not (f.is_static or f.is_transient or f.is_synthetic):
                        out.append((f.name, parse_type(f.signature or f.descriptor)))
                sup = c.super_name
                if sup in (None, "java.lang.Object"):
                    break
                if sup.startswith("java."):
                    raise KryoLayoutError(f"{self.what}: class {c.name} extends {sup}, whose fields statekit does not lay out.")
                c = self.user_class(sup)
            names = [n for n, _ in out]
            if len(set(names)) != len(names):
                raise KryoLayoutError(f"{self.what}: class {name} has fields of the same name in a superclass.")
            self._fields[name] = sorted(out, key=lambda x: x[0])
        return self._fields[name]

    def plan(self, name: str) -> list[tuple[str, str, JType]]:
        """The fields of class `name` with how each is written: "p" primitive, "f" a final class, "a" class first."""
        got = self._plan.get(name)
        if got is None:
            got = self._plan[name] = [(n, "p" if len(t.name) == 1 else "f" if self.is_final(t.name) else "a", t)
                                      for n, t in self.fields(name)]
        return got

    def kind(self, name: str) -> str:
        """How Kryo writes a class: string, boxed, enum, collection, map or fields."""
        got = self._kind.get(name)
        if got is None:
            got = self._kind[name] = self._kind_of(name)
        return got

    def _kind_of(self, name: str) -> str:
        if name == STRING:
            return "string"
        if name in BOXED:
            return "boxed"
        if name in COLLECTIONS:
            return "collection"
        if name in MAPS:
            return "map"
        if name.startswith(("java.", "javax.", "scala.")) or name.startswith("["):
            raise KryoLayoutError(f"{self.what}: values of class {name} have a Kryo serializer statekit does not decode.")
        return "enum" if self.user_class(name).is_enum else "fields"


class Kryo2Reader:
    """Reads one value written by Flink 1.x's KryoSerializer (`writeClassAndObject`, references on)."""

    def __init__(self, data: bytes, layouts: Layouts, registered: dict[int, str],
                 custom: dict[int, str] | None = None) -> None:
        self.custom = custom or {}
        self.d = data
        self.p = 0
        self.lay = layouts
        self.registered = {**DEFAULT_IDS, **registered}
        self.names: dict[int, str] = {}
        self.refs: list[Any] = []

    def fail(self, why: str) -> KryoLayoutError:
        return KryoLayoutError(f"{self.lay.what}: {why} at byte {self.p} of a Kryo value; it is not regular Kryo field serialization.")

    def varint(self) -> int:
        p = self.p
        if p < len(self.d) and self.d[p] < 0x80:  # the common one-byte case
            self.p = p + 1
            return self.d[p]
        r = s = 0
        while True:
            if self.p >= len(self.d):
                raise self.fail("truncated varint")
            b = self.d[self.p]
            self.p += 1
            r |= (b & 0x7F) << s
            if not b & 0x80:
                return r
            s += 7
            if s > 63:
                raise self.fail("varint too long")

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def take(self, n: int) -> bytes:
        if self.p + n > len(self.d):
            raise self.fail(f"truncated: {n} byte(s) needed")
        b = self.d[self.p : self.p + n]
        self.p += n
        return b

    def string(self) -> Str:
        start = self.p
        b = self.take(1)[0]
        if not b & 0x80:  # ASCII, the last char marked with bit 8
            m = _HIGH_BIT.search(self.d, start)
            if m is None:
                raise self.fail("an ASCII string without its last character")
            self.p = end = m.end()
            raw = bytes(self.d[start:end])
            return Str(raw[:-1].decode("ascii") + chr(raw[-1] & 0x7F), raw)
        n = b & 0x3F
        if b & 0x40:
            n |= self.varint() << 6
        if n == 0:
            return Str(None, bytes(self.d[start : self.p]))
        chars = []
        for _ in range(n - 1):
            c = self.take(1)[0]
            if c >> 4 in (12, 13):
                c = (c & 0x1F) << 6 | self.take(1)[0] & 0x3F
            elif c >> 4 == 14:
                c2, c3 = self.take(2)
                c = (c & 0x0F) << 12 | (c2 & 0x3F) << 6 | c3 & 0x3F
            chars.append(c)
        text = struct.pack(f">{len(chars)}H", *chars).decode("utf-16-be", "surrogatepass")
        return Str(text, bytes(self.d[start : self.p]))

    def read_class(self) -> str | None:
        i = self.varint()
        if i == 0:
            return None
        if i == 1:
            nid = self.varint()
            if nid not in self.names:
                s = self.string().text
                if s is None:
                    raise self.fail("a null class name")
                self.names[nid] = s
            return self.names[nid]
        if i - 2 in self.custom:
            raise CustomSerializerMet(f"{self.lay.what}: a value holds class {self.custom[i - 2]}, which the job registered "
                                      "with its own Kryo serializer")
        if i - 2 not in self.registered:
            raise self.fail(f"class registration id {i - 2}, which Flink registered for a class statekit does not know")
        return self.registered[i - 2]

    def tracked(self, cls: str) -> bool:
        return cls not in BOXED  # Kryo 2 tracks every class but the boxed primitives (enums too)

    def marker(self, cls: str, may_be_null: bool) -> tuple[str, Any]:
        """Kryo's reference marker: ("null", None), ("ref", object) or ("new", reserved slot or None)."""
        if not self.tracked(cls):
            if may_be_null and self.varint() == 0:
                return "null", None
            return "new", None
        i = self.varint()
        if i == 0:
            return "null", None
        if i == 1:
            self.refs.append(None)
            return "new", len(self.refs) - 1
        if i - 2 >= len(self.refs):
            raise self.fail(f"a reference to object {i - 2} of {len(self.refs)}")
        return "ref", self.refs[i - 2]

    def class_and_object(self, args: tuple[JType, ...] = ()) -> Any:
        cls = self.read_class()
        if cls is None:
            return None
        return self.object(cls, may_be_null=False, args=args)

    def object(self, cls: str, *, may_be_null: bool, args: tuple[JType, ...] = ()) -> Any:
        if cls == STRING and self.p < len(self.d) and self.d[self.p] < 2:  # the common case, inlined: null or new
            self.p += 1
            if self.d[self.p - 1] == 0:
                return None
            self.refs.append(None)
            slot = len(self.refs) - 1
            self.refs[slot] = got = self.string()
            return got
        state, got = self.marker(cls, may_be_null)
        if state != "new":
            return got
        value = self.content(cls, args, got)
        return value

    def content(self, cls: str, args: tuple[JType, ...], slot: int | None) -> Any:
        kind = self.lay.kind(cls)
        out: Any
        if kind == "string":
            out = self.string()
        elif kind == "boxed":
            out = Box(BOXED[cls], self.primitive(BOXED[cls]))
        elif kind == "enum":
            consts = self.lay.user_class(cls).enum_constants
            o = self.varint() - 1
            if not 0 <= o < len(consts):
                raise self.fail(f"enum {cls} ordinal {o}, beyond its {len(consts)} constants")
            out = Enum(cls, o, consts[o])
        elif kind == "collection":
            out = Coll(cls, [])
            self.set_ref(slot, out)
            elem = self.known(args[0]) if args else None
            for _ in range(self.varint()):
                out.items.append(self.object(elem, may_be_null=True) if elem else self.class_and_object())
        elif kind == "map":
            out = MapN(cls, [])
            self.set_ref(slot, out)
            k = self.known(args[0]) if len(args) > 0 else None
            v = self.known(args[1]) if len(args) > 1 else None
            for _ in range(self.varint()):
                key = self.object(k, may_be_null=True) if k else self.class_and_object()
                val = self.object(v, may_be_null=True) if v else self.class_and_object()
                out.entries.append((key, val))
        else:
            out = Obj(cls)
            self.set_ref(slot, out)
            fields = out.fields
            for name, mode, t in self.lay.plan(cls):
                if mode == "p":
                    fields[name] = self.primitive(t.name)
                elif mode == "f":
                    fields[name] = self.object(t.name, may_be_null=True, args=t.args)
                else:
                    fields[name] = self.class_and_object(t.args)
        self.set_ref(slot, out)
        return out

    def known(self, t: JType) -> str | None:
        """The class a generic argument fixes (final classes only, as Kryo), refusing nested generics."""
        if t.args:
            raise KryoLayoutError(f"{self.lay.what}: nested generic type {t.name}<...> inside a collection is not decoded.")
        return t.name if self.lay.is_final(t.name) else None

    def set_ref(self, slot: int | None, value: Any) -> None:
        if slot is not None:
            self.refs[slot] = value

    def field(self, t: JType) -> Any:
        if len(t.name) == 1:
            return self.primitive(t.name)
        if self.lay.is_final(t.name):
            return self.object(t.name, may_be_null=True, args=t.args)
        return self.class_and_object(t.args)

    def primitive(self, d: str) -> Any:
        if d in "IJ":
            return self.zigzag()
        if d == "Z":
            return self.take(1)[0] != 0
        if d == "B":
            return struct.unpack(">b", self.take(1))[0]
        fmt, n = FIXED_WIDTH[d]
        return struct.unpack(">" + fmt, self.take(n))[0]

    def read_delimited(self) -> list:
        """A list state's value: Kryo values (each its own stream, references reset) separated by ``,`` bytes."""
        out = []
        while True:
            self.refs, self.names = [], {}
            out.append(self.class_and_object())
            if self.p == len(self.d):
                return out
            if self.d[self.p] != 0x2C:
                raise self.fail("a list state element not followed by ','")
            self.p += 1

    def read(self) -> Any:
        """One value, which must fill the bytes."""
        v = self.class_and_object()
        if self.p != len(self.d):
            raise self.fail(f"{len(self.d) - self.p} byte(s) left after the value")
        return v


def ascii_name(s: str) -> bytes:
    """Kryo's ASCII string form (class names): the chars, the last one with bit 8 set."""
    b = bytearray(s.encode("ascii"))
    b[-1] |= 0x80
    return bytes(b)


def plain(v: Any) -> Any:
    """A decoded tree as plain Python: strings, numbers, lists, dicts (maps as key/value pairs), objects as dicts."""
    if v is None or isinstance(v, (int, float, bool)):
        return v
    if isinstance(v, Str):
        return v.text
    if isinstance(v, Box):
        return v.value
    if isinstance(v, Enum):
        return v.name
    if isinstance(v, Coll):
        return [plain(x) for x in v.items]
    if isinstance(v, MapN):
        return [(plain(k), plain(x)) for k, x in v.entries]
    return {k: plain(x) for k, x in v.fields.items()}
