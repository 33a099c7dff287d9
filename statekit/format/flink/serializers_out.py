"""statekit DDL types to the Flink serializer snapshots a Java job's serializer writes, byte for byte (the write side of `serializers`).

Boundary: builds `FlinkType`s (kind, children, raw versioned-snapshot bytes) for new state and the
`StateMetaInfoSnapshot` bytes of keyed, timer and operator states. Defaults follow what Flink's
`Types` give a Java job: bigint -> Long, int -> Integer, smallint -> Short, tinyint -> Byte, double,
float, boolean, string -> String, binary -> byte[], array -> List, map -> Map, struct -> Row (with
RowKind). A struct becomes a Tuple or a POJO only when the user names the class (`FlinkTuple`,
`FlinkPojo`, which must give the POJO's field order). Encodings: section 3.3-3.4 of
`../shared/flink/FORMAT.md`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Mapping, Union

import pyarrow as pa

from statekit.errors import StateTypeError
from statekit.format.flink.serializers import (
    COMPOSITE_MAGIC,
    COMPOSITES,
    NESTED_MAGIC,
    OPTIONAL_MAP_HEADER,
    POJO_SNAPSHOT,
    SIMPLE,
    TOP_LEVEL_PROXY_VERSION,
    FlinkType,
)
from statekit.format.flink.utf import write_utf
from statekit.types import parse_ddl

_CLASS_OF = {kind: cls for cls, (kind, _) in SIMPLE.items()}
_COMPOSITE_CLASS = {kind: cls for cls, kind in COMPOSITES.items()}
_SIMPLE_VERSION = 3  # SimpleTypeSerializerSnapshot
_COMPOSITE_VERSION = 3  # CompositeTypeSerializerSnapshot
_OUTER_VERSION = {"list": 1, "map": 1, "tuple": 2, "row": 4, "timer": 2}
_POJO_VERSION = 2
_ARROW_KIND = [
    (pa.types.is_int64, "long"), (pa.types.is_int32, "int"), (pa.types.is_int16, "short"), (pa.types.is_int8, "byte"),
    (pa.types.is_float64, "double"), (pa.types.is_float32, "float"), (pa.types.is_boolean, "boolean"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "string"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "bytes"),
]


@dataclass(frozen=True)
class FlinkTuple:
    """Write a struct as a Flink `TupleN` (fields in struct order); `type_class` defaults to `org.apache.flink.api.java.tuple.TupleN`."""

    type_class: str | None = None


@dataclass(frozen=True)
class FlinkPojo:
    """Write a struct as the POJO `type_class`. `fields` is the PojoSerializer's field order (Flink sorts
    POJO fields by name); each entry is a field name, or ``(name, declaring_class)`` for inherited fields."""

    type_class: str
    fields: tuple[str | tuple[str, str], ...] | None = None


Hint = Union[FlinkTuple, FlinkPojo]


class DataOutput:
    """Java's big-endian `DataOutputStream` into a bytearray."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def u8(self, v: int) -> "DataOutput":
        self.buf.append(v & 0xFF)
        return self

    def i16(self, v: int) -> "DataOutput":
        self.buf += struct.pack(">h", v)
        return self

    def i32(self, v: int) -> "DataOutput":
        self.buf += struct.pack(">i", v)
        return self

    def i64(self, v: int) -> "DataOutput":
        self.buf += struct.pack(">q", v)
        return self

    def bool(self, v: bool) -> "DataOutput":
        return self.u8(1 if v else 0)

    def raw(self, b: bytes | bytearray | memoryview) -> "DataOutput":
        self.buf += b
        return self

    def utf(self, s: str) -> "DataOutput":
        self.buf += java_utf(s)
        return self


def java_utf(s: str) -> bytes:
    """`DataOutput.writeUTF`: u16 length + modified UTF-8 (per UTF-16 unit; NUL as ``c0 80``)."""
    return write_utf(s)


# -- snapshots ----------------------------------------------------------------------------------------
def _simple(kind: str) -> FlinkType:
    cls = _CLASS_OF[kind]
    return FlinkType(kind, cls, _SIMPLE_VERSION, bytes(DataOutput().utf(cls).i32(_SIMPLE_VERSION).buf))


def _composite(kind: str, children: tuple[FlinkType, ...], *, cls: str | None = None, outer: bytes = b"",
               names: tuple[str, ...] = (), type_class: str | None = None, row_kind: bool = False) -> FlinkType:
    cls = cls or _COMPOSITE_CLASS[kind]
    out = DataOutput().utf(cls).i32(_COMPOSITE_VERSION).i32(COMPOSITE_MAGIC).i32(_OUTER_VERSION[kind]).raw(outer)
    out.i32(NESTED_MAGIC).i32(1).i32(len(children))
    for c in children:
        out.raw(c.raw)
    return FlinkType(kind, cls, _COMPOSITE_VERSION, bytes(out.buf), children, names, type_class, row_kind)


def void_namespace() -> FlinkType:
    """The serializer snapshot of the VoidNamespace (state outside windows)."""
    return _simple("void")


def timer_type(key: FlinkType, namespace: FlinkType | None = None) -> FlinkType:
    """`TimerSerializerSnapshot<K, N>` of the timer queues."""
    return _composite("timer", (key, namespace or void_namespace()))


def list_of(elem: FlinkType) -> FlinkType:
    """The serializer snapshot of a list of elem."""
    return _composite("list", (elem,))


def map_of(key: FlinkType, value: FlinkType) -> FlinkType:
    """The serializer snapshot of a map of key and value."""
    return _composite("map", (key, value))


def flink_type(t: str | pa.DataType, hint: Hint | None = None, *, what: str = "a state") -> FlinkType:
    """The Flink serializer snapshot of values of DDL/Arrow type `t` (see the module docstring)."""
    arrow = parse_ddl(t) if isinstance(t, str) else t
    if hint is not None and not pa.types.is_struct(arrow):
        raise StateTypeError(f"{what}: {hint} applies to struct types only, not {t}.")
    for test, kind in _ARROW_KIND:
        if test(arrow):
            return _simple(kind)
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return list_of(flink_type(arrow.value_type, what=what))
    if pa.types.is_map(arrow):
        return map_of(flink_type(arrow.key_type, what=what), flink_type(arrow.item_type, what=what))
    if pa.types.is_struct(arrow):
        names = tuple(arrow.field(i).name for i in range(arrow.num_fields))
        children = tuple(flink_type(arrow.field(i).type, what=what) for i in range(arrow.num_fields))
        if isinstance(hint, FlinkPojo):
            return _pojo(hint, dict(zip(names, children)), what)
        if isinstance(hint, FlinkTuple):
            if not 1 <= len(children) <= 25:
                raise StateTypeError(f"{what}: a Flink Tuple has 1 to 25 fields, the struct has {len(children)}.")
            cls = hint.type_class or f"org.apache.flink.api.java.tuple.Tuple{len(children)}"
            return _composite("tuple", children, outer=java_utf(cls), names=names, type_class=cls)
        return _composite("row", children, outer=b"\x01", names=names, row_kind=True)
    raise StateTypeError(
        f"{what}: type {t} has no Flink serializer mapping; statekit writes bigint, int, smallint, tinyint, "
        "double, float, boolean, string, binary, array, map and struct (Row, Tuple or POJO) to Flink."
    )


def _pojo(hint: FlinkPojo, fields: dict[str, FlinkType], what: str) -> FlinkType:
    if not hint.fields:
        raise StateTypeError(
            f"{what}: POJO class {hint.type_class} needs its field order: FlinkPojo({hint.type_class!r}, "
            f"fields=[...]) listing the PojoSerializer's fields (Flink sorts them by name: {sorted(fields)})."
        )
    order = [(f, hint.type_class) if isinstance(f, str) else (f[0], f[1]) for f in hint.fields]
    names = [n for n, _ in order]
    if sorted(names) != sorted(fields) or len(set(names)) != len(names):
        raise StateTypeError(
            f"{what}: POJO {hint.type_class} field order {names} must list each struct field once: {sorted(fields)}."
        )
    out = DataOutput().utf(POJO_SNAPSHOT).i32(_POJO_VERSION).utf(hint.type_class)
    out.i64(OPTIONAL_MAP_HEADER).i32(len(order))
    for name, declaring in order:
        key = java_utf(declaring) + java_utf(name)
        out.utf(name).bool(True).i32(len(key)).raw(key)
        value = fields[name].raw
        out.bool(True).i32(len(value)).raw(value)
    for _ in range(2):  # registered and non-registered subclasses: none
        out.i64(OPTIONAL_MAP_HEADER).i32(0)
    return FlinkType("pojo", POJO_SNAPSHOT, _POJO_VERSION, bytes(out.buf), tuple(fields[n] for n in names),
                     tuple(names), hint.type_class)


def top_level(t: FlinkType) -> bytes:
    """A snapshot as written at top level (key serializer, meta-info serializers): ``i32 2`` + versioned snapshot."""
    return struct.pack(">i", TOP_LEVEL_PROXY_VERSION) + t.raw


# -- state meta infos ---------------------------------------------------------------------------------
_BACKEND_TYPE = {"KEY_VALUE": 0, "OPERATOR": 1, "BROADCAST": 2, "PRIORITY_QUEUE": 3}
_KEYED_KIND = {"value": "VALUE", "list": "LIST", "map": "MAP", "reducing": "REDUCING", "aggregating": "AGGREGATING"}
_MODE = {"split": "SPLIT_DISTRIBUTE", "union": "UNION", "broadcast": "BROADCAST"}


def meta_info(name: str, backend_type: str, options: Mapping[str, str], serializers: Mapping[str, FlinkType]) -> bytes:
    """`StateMetaInfoSnapshot` bytes (`CurrentWriterImpl`, version 7)."""
    out = DataOutput().utf(name).i32(_BACKEND_TYPE[backend_type]).i32(len(options))
    for k, v in options.items():
        out.utf(k).utf(v)
    out.i32(len(serializers))
    for k, t in serializers.items():
        out.utf(k).raw(top_level(t))
    return bytes(out.buf)


def keyed_meta_info(name: str, kind: str, value: FlinkType, namespace: FlinkType | None = None) -> bytes:
    """A keyed state's meta info; `value` is the state's VALUE_SERIALIZER (ListSerializer / MapSerializer for
    list / map state)."""
    return meta_info(name, "KEY_VALUE", {"KEYED_STATE_TYPE": _KEYED_KIND[kind]},
                     {"VALUE_SERIALIZER": value, "NAMESPACE_SERIALIZER": namespace or void_namespace()})


def timer_meta_info(domain: str, key: FlinkType, namespace: FlinkType | None = None, service: str = "user-timers") -> bytes:
    """The meta info of a timer queue (``_timer_state/event_user-timers`` ...)."""
    prefix = "_timer_state/event_" if domain == "event" else "_timer_state/processing_"
    return meta_info(prefix + service, "PRIORITY_QUEUE", {}, {"VALUE_SERIALIZER": timer_type(key, namespace)})


def operator_meta_info(name: str, mode: str, value: FlinkType, key: FlinkType | None = None) -> bytes:
    """An operator list/union state's (element serializer) or a broadcast state's (key and value) meta info."""
    if mode == "broadcast":
        assert key is not None
        return meta_info(name, "BROADCAST", {"OPERATOR_STATE_DISTRIBUTION_MODE": "BROADCAST"},
                         {"VALUE_SERIALIZER": value, "KEY_SERIALIZER": key})  # Flink's order
    return meta_info(name, "OPERATOR", {"OPERATOR_STATE_DISTRIBUTION_MODE": _MODE[mode]}, {"VALUE_SERIALIZER": value})


__all__ = ["DataOutput", "FlinkPojo", "FlinkTuple", "flink_type", "java_utf", "keyed_meta_info", "list_of", "map_of",
           "meta_info", "operator_meta_info", "timer_meta_info", "timer_type", "top_level", "void_namespace"]
