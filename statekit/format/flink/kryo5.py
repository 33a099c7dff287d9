"""A Kryo value tree (`statekit.format.flink.kryo`) written as Flink 2.x's KryoSerializer writes it (Kryo 5.6).

Boundary: encoding only, following Kryo 5's public sources (`Kryo.writeClassAndObject`, `writeReferenceOrNull`,
`DefaultClassResolver`, `FieldSerializer`, `CollectionSerializer`, `MapSerializer`, `Output`): fixed-width numbers
little-endian, collection and map sizes plus one (collections with a same-type flag), enums and boxed primitives
not tracked as references, class names once per value.
"""

from __future__ import annotations

import struct
from typing import Any

from statekit.format.flink.kryo import (
    BOXED,
    DEFAULT_IDS,
    FIXED_WIDTH,
    STRING,
    Box,
    Coll,
    Enum,
    JType,
    Layouts,
    MapN,
    Str,
    ascii_name,
)

_ID_OF = {c: i for i, c in DEFAULT_IDS.items()}
_PRIM_BOX = {d: c for c, d in BOXED.items()}


class Kryo5Writer:
    """Writes a value tree as Flink 2.x's KryoSerializer does (Kryo 5: `writeClassAndObject`, references on)."""

    def __init__(self, layouts: Layouts, registered: dict[int, str]) -> None:
        self.lay = layouts
        self.ids = {**_ID_OF, **{c: i for i, c in registered.items()}}
        self.out = bytearray()
        self.names: dict[str, int] = {}
        self.refs: dict[int, int] = {}

    def varint(self, v: int) -> None:
        while v > 0x7F:
            self.out.append(v & 0x7F | 0x80)
            v >>= 7
        self.out.append(v)

    def zigzag(self, v: int, bits: int) -> None:
        self.varint(((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1))

    def varint_flag(self, flag: bool, v: int) -> None:
        first = v & 0x3F | (0x80 if flag else 0)
        if v >> 6:
            self.out.append(first | 0x40)
            self.varint(v >> 6)
        else:
            self.out.append(first)

    def write_class(self, cls: str | None) -> None:
        if cls is None:
            self.out.append(0)
        elif cls in self.ids:
            self.varint(self.ids[cls] + 2)
        else:
            self.varint(1)
            if cls in self.names:
                self.varint(self.names[cls])
            else:
                self.names[cls] = len(self.names)
                self.varint(self.names[cls])
                self.out += ascii_name(cls)

    @staticmethod
    def class_of(v: Any) -> str:
        if isinstance(v, Str):
            return STRING
        if isinstance(v, Box):
            return _PRIM_BOX[v.kind]
        return str(v.cls)

    def marker(self, v: Any, cls: str, may_be_null: bool) -> bool:
        """Writes the reference marker; True when the value is complete (null or a back reference)."""
        if v is None:
            self.out.append(0)
            return True
        if cls in BOXED or isinstance(v, Enum):  # Kryo 5 tracks neither boxed primitives nor enums
            if may_be_null:
                self.out.append(1)
            return False
        if id(v) in self.refs:
            self.varint(self.refs[id(v)] + 2)
            return True
        self.refs[id(v)] = len(self.refs)
        self.out.append(1)
        return False

    def class_and_object(self, v: Any, args: tuple[JType, ...] = ()) -> None:
        if v is None:
            self.out.append(0)
            return
        cls = self.class_of(v)
        self.write_class(cls)
        self.object(v, cls, may_be_null=False, args=args)

    def object(self, v: Any, cls: str, *, may_be_null: bool, args: tuple[JType, ...] = ()) -> None:
        if type(v) is Str and id(v) not in self.refs:  # the common case, inlined: a new string
            self.refs[id(v)] = len(self.refs)
            self.out.append(1)
            self.out += v.raw
            return
        if not self.marker(v, cls, may_be_null):
            self.content(v, args)

    def content(self, v: Any, args: tuple[JType, ...]) -> None:
        if isinstance(v, Str):
            self.out += v.raw
        elif isinstance(v, Box):
            self.primitive(v.kind, v.value)
        elif isinstance(v, Enum):
            self.varint(v.ordinal + 1)
        elif isinstance(v, Coll):
            self.collection(v, args)
        elif isinstance(v, MapN):
            self.mapping(v, args)
        else:
            fields = v.fields
            for name, mode, t in self.lay.plan(v.cls):
                if mode == "p":
                    self.primitive(t.name, fields[name])
                elif mode == "f":
                    self.object(fields[name], t.name, may_be_null=True, args=t.args)
                else:
                    self.class_and_object(fields[name], t.args)

    def collection(self, v: Coll, args: tuple[JType, ...]) -> None:
        n = len(v.items)
        if n == 0:
            self.out.append(1)
            return
        elem = args[0].name if args and self.lay.is_final(args[0].name) else None
        has_null = any(x is None for x in v.items)
        if elem is not None:
            self.varint_flag(has_null, n + 1)
            for x in v.items:
                self.object(x, elem, may_be_null=has_null)
            return
        types = {self.class_of(x) for x in v.items if x is not None}
        if len(types) > 1:
            self.varint_flag(False, n + 1)
            for x in v.items:
                self.class_and_object(x)
            return
        self.varint_flag(True, n + 1)
        if not types:  # all null
            self.out.append(0)
            return
        (cls,) = types
        self.write_class(cls)
        self.out.append(1 if has_null else 0)
        for x in v.items:
            self.object(x, cls, may_be_null=has_null)

    def mapping(self, v: MapN, args: tuple[JType, ...]) -> None:
        n = len(v.entries)
        if n == 0:
            self.out.append(1)
            return
        self.varint(n + 1)
        k = args[0].name if len(args) > 0 and self.lay.is_final(args[0].name) else None
        val = args[1].name if len(args) > 1 and self.lay.is_final(args[1].name) else None
        for key, value in v.entries:
            self.object(key, k, may_be_null=True) if k else self.class_and_object(key)
            self.object(value, val, may_be_null=True) if val else self.class_and_object(value)

    def field(self, v: Any, t: JType) -> None:
        if len(t.name) == 1:
            self.primitive(t.name, v)
        elif self.lay.is_final(t.name):
            self.object(v, t.name, may_be_null=True, args=t.args)
        else:
            self.class_and_object(v, t.args)

    def primitive(self, d: str, v: Any) -> None:
        if d == "I":
            self.zigzag(v, 32)
        elif d == "J":
            self.zigzag(v, 64)
        elif d == "Z":
            self.out.append(1 if v else 0)
        elif d == "B":
            self.out += struct.pack("<b", v)
        else:
            self.out += struct.pack("<" + FIXED_WIDTH[d][0], v)


