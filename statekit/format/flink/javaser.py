"""A parser of Java object serialization streams (`ObjectOutputStream`) into plain Python values; nothing Java is ever run.

Boundary: bytes in, `JavaObject` / `JavaEnum` / `JavaClass` / str / list values out, with the
stream's end so callers can read what follows (SQL serializer snapshots embed these streams without
a length prefix, `../shared/flink/sql/SQL-FORMAT.md` section 3). The subset is what Flink writes for
`LogicalType`s, `DataType`s and the serializers inside `RawType`s: objects with class descriptors
and their superclass chains, back references, strings, enums, classes, arrays and the block data of
`writeObject` methods. A truncated or malformed stream is a `CorruptSavepointError` naming the byte
at fault; an `Externalizable` class without block data, whose bytes only its own code can size, is
an `UnsupportedFormatError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from statekit.errors import UnsupportedFormatError
from statekit.format.flink.binary import DataInput

__all__ = ["JavaClass", "JavaEnum", "JavaObject", "MAGIC", "read_object"]

MAGIC = 0xACED0005
_NULL, _REFERENCE, _CLASSDESC, _OBJECT, _STRING, _ARRAY, _CLASS = 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76
_BLOCKDATA, _ENDBLOCKDATA, _RESET, _BLOCKDATALONG, _LONGSTRING, _PROXYCLASSDESC, _ENUM = (
    0x77, 0x78, 0x79, 0x7A, 0x7C, 0x7D, 0x7E)
_BASE_HANDLE = 0x7E0000
_SC_WRITE_METHOD, _SC_SERIALIZABLE, _SC_EXTERNALIZABLE, _SC_BLOCK_DATA = 0x01, 0x02, 0x04, 0x08
_PRIMITIVE = {"B": ("i8", 1), "C": ("u16", 2), "D": ("f64", 8), "F": ("f32", 4), "I": ("i32", 4),
              "J": ("i64", 8), "S": ("i16", 2), "Z": ("bool", 1)}
#: nesting bound: a stream of Flink types is a few levels deep; deeper means damage, not a type
_MAX_DEPTH = 64


@dataclass
class _ClassDesc:
    name: str
    flags: int
    fields: list[tuple[str, str]]  # (type code, name) in stream order: primitives first, as Java sorts them
    superclass: "_ClassDesc | None"


@dataclass
class JavaObject:
    """An object as its stream holds it: class name, every field of its class chain, and `writeObject` extras.

    ``annotations`` maps a class of the chain to what its `writeObject` wrote after its fields (block
    data as bytes, objects as values), e.g. an `ArrayList`'s elements.
    """

    class_name: str
    fields: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, list[Any]] = field(default_factory=dict)
    superclasses: tuple[str, ...] = ()

    def is_a(self, class_name: str) -> bool:
        return class_name == self.class_name or class_name in self.superclasses


@dataclass(frozen=True)
class JavaEnum:
    """An enum constant: its class and constant name."""

    class_name: str
    name: str


@dataclass(frozen=True)
class JavaClass:
    """A `Class` object written into the stream (e.g. a `RawType`'s class)."""

    name: str


def read_object(inp: DataInput, what: str) -> Any:
    """Read one serialization stream (magic, version, one top-level object) at the cursor; the cursor ends after it."""
    start = inp.pos
    if inp.remaining() >= 4 and int.from_bytes(inp.data[inp.pos : inp.pos + 4], "big") != MAGIC:
        raise inp.fail(f"{what} is not a Java serialization stream (no aced0005 magic)")
    inp.i32(f"the Java serialization magic of {what}")
    try:
        return _Stream(inp, what).content(0)
    except RecursionError:
        inp.pos = start
        raise inp.fail(f"{what} nests too deeply") from None


class _Stream:
    def __init__(self, inp: DataInput, what: str) -> None:
        self.inp = inp
        self.what = what
        self.handles: list[Any] = []

    def fail(self, why: str) -> Exception:
        return self.inp.fail(f"{self.what}: {why}")

    def new_handle(self, value: Any) -> int:
        self.handles.append(value)
        return len(self.handles) - 1

    def reference(self) -> Any:
        h = self.inp.i32("a Java back reference") - _BASE_HANDLE
        if not 0 <= h < len(self.handles):
            self.inp.pos -= 4
            raise self.fail(f"a back reference names handle {h:#x}, which the stream has not defined")
        return self.handles[h]

    def content(self, depth: int) -> Any:
        """One object-or-block in the stream."""
        if depth > _MAX_DEPTH:
            raise self.fail(f"objects nest deeper than {_MAX_DEPTH} levels")
        tc = self.inp.u8(f"a type code in {self.what}")
        if tc == _NULL:
            return None
        if tc == _REFERENCE:
            return self.reference()
        if tc in (_STRING, _LONGSTRING):
            return self.string(tc)
        if tc == _OBJECT:
            return self.object(depth)
        if tc == _ENUM:
            desc = self.class_desc(depth)
            slot = self.new_handle(None)
            name = self.content(depth + 1)
            if not isinstance(name, str):
                raise self.fail("an enum constant's name is not a string")
            constant = JavaEnum(desc.name if desc else "?", name)
            self.handles[slot] = constant
            return constant
        if tc == _CLASS:
            desc = self.class_desc(depth)
            clazz = JavaClass(desc.name if desc else "?")
            self.new_handle(clazz)
            return clazz
        if tc == _ARRAY:
            return self.array(depth)
        if tc in (_CLASSDESC, _PROXYCLASSDESC):
            self.inp.pos -= 1
            return self.class_desc(depth)
        if tc == _BLOCKDATA:
            return self.inp.bytes(self.inp.u8("a block-data length"), "block data")
        if tc == _BLOCKDATALONG:
            return self.inp.bytes(self.inp.count("a block-data length", limit=1 << 30), "block data")
        if tc == _RESET:
            self.handles.clear()
            return self.content(depth)
        self.inp.pos -= 1
        raise self.fail(f"unexpected type code {tc:#04x}")

    def string(self, tc: int) -> str:
        n = self.inp.i64("a long string length") if tc == _LONGSTRING else self.inp.u16("a string length")
        if not 0 <= n <= self.inp.remaining():
            raise self.fail(f"a string of {n} bytes is longer than what remains")
        raw = self.inp.bytes(n, "a Java string")
        s = _modified_utf8(raw)
        self.new_handle(s)
        return s

    def class_desc(self, depth: int) -> _ClassDesc | None:
        tc = self.inp.u8(f"a class descriptor in {self.what}")
        if tc == _NULL:
            return None
        if tc == _REFERENCE:
            ref = self.reference()
            if not isinstance(ref, _ClassDesc):
                raise self.fail("a back reference where a class descriptor belongs names something else")
            return ref
        if tc == _PROXYCLASSDESC:
            raise UnsupportedFormatError(f"{self.inp.where}: {self.what} holds a dynamic proxy class, which statekit does "
                                         "not read; such a type cannot be decoded from the savepoint.")
        if tc != _CLASSDESC:
            self.inp.pos -= 1
            raise self.fail(f"expected a class descriptor, found type code {tc:#04x}")
        name = _modified_utf8(self.inp.bytes(self.inp.u16("a class name length"), "a class name"))
        self.inp.i64("a serialVersionUID")
        desc = _ClassDesc(name, 0, [], None)
        self.new_handle(desc)
        desc.flags = self.inp.u8("class descriptor flags")
        for _ in range(self.inp.u16("a field count")):
            code = chr(self.inp.u8("a field type code"))
            fname = _modified_utf8(self.inp.bytes(self.inp.u16("a field name length"), "a field name"))
            if code in ("L", "["):
                if not isinstance(self.content(depth + 1), str):
                    raise self.fail(f"field {fname!r} of {name} has no type string")
            elif code not in _PRIMITIVE:
                raise self.fail(f"field {fname!r} of {name} has unknown type code {code!r}")
            desc.fields.append((code, fname))
        self.annotation(depth)
        desc.superclass = self.class_desc(depth + 1)
        return desc

    def annotation(self, depth: int) -> list[Any]:
        """Contents up to TC_ENDBLOCKDATA (class annotations, `writeObject` extras)."""
        out: list[Any] = []
        while True:
            if self.inp.remaining() and self.inp.data[self.inp.pos] == _ENDBLOCKDATA:
                self.inp.pos += 1
                return out
            out.append(self.content(depth + 1))

    def object(self, depth: int) -> JavaObject:
        desc = self.class_desc(depth)
        if desc is None:
            raise self.fail("an object without a class descriptor")
        chain = []
        d: _ClassDesc | None = desc
        while d is not None:
            chain.append(d)
            d = d.superclass
        obj = JavaObject(desc.name, superclasses=tuple(c.name for c in chain[1:]))
        self.new_handle(obj)
        for cd in reversed(chain):  # superclass data first
            if cd.flags & _SC_EXTERNALIZABLE:
                if not cd.flags & _SC_BLOCK_DATA:
                    raise UnsupportedFormatError(
                        f"{self.inp.where}: {self.what} holds an instance of {cd.name}, an Externalizable class "
                        "written without block data, whose bytes only its own code can read; statekit cannot "
                        "decode this type."
                    )
                obj.annotations[cd.name] = self.annotation(depth)
                continue
            for code, fname in cd.fields:
                obj.fields[fname] = self.value(code, depth)
            if cd.flags & _SC_WRITE_METHOD:
                obj.annotations[cd.name] = self.annotation(depth)
        return obj

    def value(self, code: str, depth: int) -> Any:
        if code in _PRIMITIVE:
            return getattr(self.inp, _PRIMITIVE[code][0])(f"a {code} field")
        return self.content(depth + 1)

    def array(self, depth: int) -> list[Any]:
        desc = self.class_desc(depth)
        if desc is None or not desc.name.startswith("["):
            raise self.fail("an array whose class is not an array class")
        out: list[Any] = []
        self.new_handle(out)
        n = self.inp.count("an array length", limit=1 << 24)
        code = desc.name[1]
        if code in _PRIMITIVE and n * _PRIMITIVE[code][1] > self.inp.remaining():
            raise self.fail(f"an array of {n} elements is longer than what remains")
        for _ in range(n):
            out.append(self.value(code, depth))
        return out


def _modified_utf8(raw: bytes) -> str:
    """Java's modified UTF-8 (NUL as c080, supplementary characters as surrogate pairs)."""
    try:
        return raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass").encode(
            "utf-16", "surrogatepass").decode("utf-16")
    except UnicodeError:
        return raw.decode("utf-8", "replace")
