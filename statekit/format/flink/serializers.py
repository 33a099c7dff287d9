"""Flink `TypeSerializerSnapshot`s parsed into `FlinkType`, a small type model with DDL types and the raw snapshot bytes.

Boundary: this module reads snapshot bytes (section 3.4 of `../shared/flink/FORMAT.md`) and maps
them to statekit DDL; it never decodes state values (`statekit.format.flink.values` does) and
never runs Java deserialization. Serializers statekit cannot decode (Kryo, Avro, unknown
classes) become kind ``binary`` with their class named, so one opaque state never hides the
others. ``FlinkType.raw`` keeps the exact versioned-snapshot bytes so a writer can emit them
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from statekit.errors import UnsupportedFormatError
from statekit.format.flink.avro import parse_schema, read_snapshot_payload
from statekit.format.flink.binary import DataInput
from statekit.format.flink.javaser import read_object
from statekit.format.flink.logical import LogicalType, from_java
from statekit.types import ddl_name

TOP_LEVEL_PROXY_VERSION = 2  # TypeSerializerSnapshotSerializationUtil: i32 2 before a top-level snapshot
COMPOSITE_MAGIC = 911108  # CompositeTypeSerializerSnapshot
NESTED_MAGIC = 1333245  # NestedSerializersSnapshotDelegate
OPTIONAL_MAP_HEADER = 0x4F2C69A3D70  # LinkedOptionalMapSerializer

_BASE = "org.apache.flink.api.common.typeutils.base."
#: snapshot class -> (kind, fixed byte width or None)
SIMPLE: dict[str, tuple[str, int | None]] = {
    _BASE + "LongSerializer$LongSerializerSnapshot": ("long", 8),
    _BASE + "IntSerializer$IntSerializerSnapshot": ("int", 4),
    _BASE + "ShortSerializer$ShortSerializerSnapshot": ("short", 2),
    _BASE + "ByteSerializer$ByteSerializerSnapshot": ("byte", 1),
    _BASE + "DoubleSerializer$DoubleSerializerSnapshot": ("double", 8),
    _BASE + "FloatSerializer$FloatSerializerSnapshot": ("float", 4),
    _BASE + "BooleanSerializer$BooleanSerializerSnapshot": ("boolean", 1),
    _BASE + "CharSerializer$CharSerializerSnapshot": ("char", 2),
    _BASE + "StringSerializer$StringSerializerSnapshot": ("string", None),
    _BASE + "array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot": ("bytes", None),
    "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot": ("void", 1),
    "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot":
        ("window", 16),
}
COMPOSITES = {
    _BASE + "ListSerializerSnapshot": "list",
    _BASE + "MapSerializerSnapshot": "map",
    "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot": "tuple",
    "org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot": "row",
    "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot": "timer",
}
POJO_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot"
KRYO_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"
AVRO_SNAPSHOT = "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot"
ENUM_SNAPSHOT = _BASE + "EnumSerializer$EnumSerializerSnapshot"

# Flink SQL's serializers (`../shared/flink/sql/SQL-FORMAT.md` section 3)
_TR = "org.apache.flink.table.runtime.typeutils."
ROWDATA_SNAPSHOT = _TR + "RowDataSerializer$RowDataSerializerSnapshot"
_SQL_SIMPLE: dict[str, tuple[str, str | None]] = {  # snapshot class -> (kind, form)
    _TR + "StringDataSerializer$StringDataSerializerSnapshot": ("bytes", "string"),
    "org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot": ("byte", None),
    "org.apache.flink.table.runtime.operators.window.TimeWindow$Serializer$TimeWindowSerializerSnapshot":
        ("window", None),
    "org.apache.flink.table.runtime.operators.window.CountWindow$Serializer$CountWindowSerializerSnapshot":
        ("long", None),
}
_SQL_COMPOSITES = {
    _TR + "RawValueDataSerializer$RawValueDataSerializerSnapshot": "raw",
    _TR + "ExternalSerializer$ExternalSerializerSnapshot": "external",
    "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot": "ttl",
}
TIMESTAMP_SNAPSHOT = _TR + "TimestampDataSerializer$TimestampDataSerializerSnapshot"
DECIMAL_SNAPSHOT = _TR + "DecimalDataSerializer$DecimalSerializerSnapshot"
BINARY_ROW_SNAPSHOT = _TR + "BinaryRowDataSerializer$BinaryRowDataSerializerSnapshot"
#: ARRAY/MULTISET/MAP values' serializers: their snapshots are Java-serialized objects (the element type(s), then
#: the element serializer object(s), `InstantiationUtil.serializeObject`), parsed and passed, never run
_JAVA_OBJECT_SNAPSHOTS = {
    _TR + "ArrayDataSerializer$ArrayDataSerializerSnapshot": ("the element type", "the element serializer"),
    _TR + "MapDataSerializer$MapDataSerializerSnapshot": ("the key type", "the value type", "the key serializer",
                                                           "the value serializer"),
}

_WIDTH = {k: w for k, w in SIMPLE.values() if w is not None}
_WIDTH["enum"] = 4
_DDL = {"long": "bigint", "int": "int", "short": "smallint", "byte": "tinyint", "double": "double",
        "float": "float", "boolean": "boolean", "char": "string", "string": "string", "bytes": "binary",
        "enum": "string", "binary": "binary"}


@dataclass(frozen=True)
class FlinkType:
    """One serializer: its kind, nested types, field names (Tuple/Row/POJO) and raw snapshot bytes.

    kinds: long int short byte double float boolean char string bytes enum list map tuple row pojo
    void window timer avro binary. ``type_class`` is the Tuple/POJO/Kryo/Avro/enum class when stored;
    ``row_kind`` is whether a Row carries its RowKind bits (for a SQL row: whether its table shows it);
    ``avro`` the writer schema of an Avro serializer (a `statekit.format.flink.avro.AvroType`).
    Flink SQL's length-prefixed values are kind ``bytes`` with a ``form``: ``row`` (a BinaryRowData
    of the ``logical`` field types), ``string`` (UTF-8 StringData), ``raw`` (RawValueData bytes);
    ``logical`` also names the SQL type behind an ExternalSerializer.
    """

    kind: str
    snapshot_class: str
    version: int
    raw: bytes
    children: tuple["FlinkType", ...] = ()
    field_names: tuple[str, ...] = ()
    type_class: str | None = None
    row_kind: bool = False
    enum_values: tuple[str, ...] = ()
    form: str | None = None
    logical: tuple[LogicalType, ...] = ()
    avro: Any = None

    @property
    def fixed_size(self) -> int | None:
        if self.kind == "tuple":
            sizes = [c.fixed_size for c in self.children]
            return None if None in sizes else sum(sizes)  # type: ignore[arg-type]
        return _WIDTH.get(self.kind)

    @property
    def decodable(self) -> bool:
        """Whether statekit can find the end of a value of this type (no opaque part inside)."""
        return self.kind != "binary" and all(c.decodable for c in self.children)

    @property
    def serializer(self) -> str:
        """The serializer's name for people: the snapshot class, with the type class when there is one."""
        name = self.snapshot_class.rsplit(".", 1)[-1]
        return f"{name}({self.type_class})" if self.type_class else name

    def ddl(self) -> str:
        """The statekit DDL type of values of this serializer (``binary`` for what cannot be decoded)."""
        k = self.kind
        if self.form == "row":
            return "struct<" + ",".join([f"{ddl_name(n)}:{t.ddl()}" for n, t in zip(self.field_names, self.logical)]
                                        + (["row_kind:string"] if self.row_kind else [])) + ">"
        if self.form == "string":
            return "string"
        if k in _DDL:
            return _DDL[k]
        if k == "avro":
            return str(self.avro.ddl())
        if not self.decodable:
            return "binary"
        if k == "list":
            return f"array<{self.children[0].ddl()}>"
        if k == "map":
            return f"map<{self.children[0].ddl()},{self.children[1].ddl()}>"
        if k in ("tuple", "row", "pojo"):
            return "struct<" + ",".join(f"{ddl_name(n)}:{c.ddl()}" for n, c in zip(self.field_names, self.children)) + ">"
        if k == "window":
            return "struct<start:bigint,end:bigint>"
        raise UnsupportedFormatError(f"serializer {self.serializer} has no statekit column type")


def read_top_level(inp: DataInput, what: str) -> FlinkType:
    """A top-level snapshot: ``i32 2`` then a versioned snapshot."""
    v = inp.i32(f"the snapshot proxy version of {what}")
    if v != TOP_LEVEL_PROXY_VERSION:
        inp.pos -= 4
        raise inp.fail(f"{what} has snapshot proxy version {v}; Flink writes {TOP_LEVEL_PROXY_VERSION}")
    return read_versioned(inp, what)


def read_versioned(inp: DataInput, what: str) -> FlinkType:
    """`TypeSerializerSnapshot.writeVersionedSnapshot`: utf class, i32 version, payload."""
    start = inp.pos
    cls = inp.utf(f"the snapshot class of {what}")
    version = inp.i32(f"the snapshot version of {cls}")
    if cls in SIMPLE:
        return FlinkType(SIMPLE[cls][0], cls, version, bytes(inp.data[start : inp.pos]))
    if cls in _SQL_SIMPLE:
        kind, form = _SQL_SIMPLE[cls]
        return FlinkType(kind, cls, version, bytes(inp.data[start : inp.pos]), form=form)
    if cls == ROWDATA_SNAPSHOT:
        return _rowdata(inp, start, cls, version)
    if cls in _SQL_COMPOSITES:
        return _sql_composite(inp, start, cls, version, _SQL_COMPOSITES[cls])
    if cls == TIMESTAMP_SNAPSHOT:  # millis; with precision > 3 also the nanos of the millisecond
        p = inp.i32("the precision of a timestamp serializer")
        raw = bytes(inp.data[start : inp.pos])
        if p <= 3:
            return FlinkType("long", cls, version, raw)
        return FlinkType("tuple", cls, version, raw, (FlinkType("long", cls, version, b""),
                                                      FlinkType("int", cls, version, b"")), ("millis", "nanos"))
    if cls == DECIMAL_SNAPSHOT:  # the unscaled value: a long up to precision 18, else length-prefixed bytes
        p = inp.i32("the precision of a decimal serializer")
        inp.i32("the scale of a decimal serializer")
        return FlinkType("long" if p <= 18 else "bytes", cls, version, bytes(inp.data[start : inp.pos]))
    if cls in _JAVA_OBJECT_SNAPSHOTS:  # only inside rows, whose own LogicalTypes say how values decode
        for part in _JAVA_OBJECT_SNAPSHOTS[cls]:
            read_object(inp, f"{part} of {cls}")
        return FlinkType("bytes", cls, version, bytes(inp.data[start : inp.pos]))
    if cls == BINARY_ROW_SNAPSHOT:  # a row without field types: its bytes
        inp.i32("the arity of a binary row serializer")
        return FlinkType("bytes", cls, version, bytes(inp.data[start : inp.pos]))
    if cls in COMPOSITES:
        return _composite(inp, start, cls, version, COMPOSITES[cls])
    if cls == POJO_SNAPSHOT:
        return _pojo(inp, start, cls, version)
    if cls == KRYO_SNAPSHOT:
        type_class = inp.utf("the Kryo type class")
        for part in ("registrations", "default serializers", "default serializer classes"):
            _optional_map(inp, f"Kryo {part}")
        return FlinkType("binary", cls, version, bytes(inp.data[start : inp.pos]), type_class=type_class)
    if cls == AVRO_SNAPSHOT:
        type_class, schema_json = read_snapshot_payload(inp, version)
        raw = bytes(inp.data[start : inp.pos])
        try:
            schema = parse_schema(schema_json)
            schema.ddl()
        except UnsupportedFormatError as exc:  # kept as raw bytes, the reason named
            return FlinkType("binary", cls, version, raw, type_class=f"{type_class}; unsupported Avro schema: {exc}")
        return FlinkType("avro", cls, version, raw, type_class=type_class, avro=schema)
    if cls == ENUM_SNAPSHOT:
        type_class = inp.utf("the enum class")
        values = tuple(inp.utf("an enum constant") for _ in range(inp.count("the number of enum constants")))
        return FlinkType("enum", cls, version, bytes(inp.data[start : inp.pos]), type_class=type_class,
                         enum_values=values)
    if inp.remaining() >= 4 and int.from_bytes(inp.data[inp.pos : inp.pos + 4], "big") == COMPOSITE_MAGIC:
        return _composite(inp, start, cls, version, "binary")
    # An unknown serializer: assume a SimpleTypeSerializerSnapshot (empty payload), the common case for
    # user serializers; the caller reports the class if the bytes after it do not parse.
    return FlinkType("binary", cls, version, bytes(inp.data[start : inp.pos]), type_class=None)


def _composite(inp: DataInput, start: int, cls: str, version: int, kind: str) -> FlinkType:
    if inp.i32(f"the composite magic of {cls}") != COMPOSITE_MAGIC:
        inp.pos -= 4
        raise inp.fail(f"snapshot {cls} lacks the composite-snapshot magic number")
    outer = inp.i32(f"the outer version of {cls}")
    type_class = None
    row_kind = False
    if kind == "tuple" and outer >= 2:
        type_class = inp.utf("the tuple class")
    elif kind == "row" and outer >= 4:
        row_kind = inp.bool("the row-kind flag")
    elif kind == "binary" or (kind == "tuple" and outer < 2):
        # an unknown outer payload: find the nested-snapshots magic that follows it
        marker = NESTED_MAGIC.to_bytes(4, "big") + (1).to_bytes(4, "big")
        at = bytes(inp.data[inp.pos : inp.end]).find(marker)
        if at < 0:
            raise inp.fail(f"snapshot {cls} has no nested serializers")
        inp.pos += at
    if inp.i32(f"the nested magic of {cls}") != NESTED_MAGIC:
        inp.pos -= 4
        raise inp.fail(f"snapshot {cls} lacks the nested-serializers magic number")
    inp.i32(f"the nested version of {cls}")
    children = tuple(read_versioned(inp, f"a nested serializer of {cls}")
                     for _ in range(inp.count(f"the nested count of {cls}", limit=1 << 16)))
    names: tuple[str, ...] = ()
    if kind in ("tuple", "row"):
        names = tuple(f"f{i}" for i in range(len(children)))
    want = {"list": 1, "map": 2, "timer": 2}.get(kind)
    if want is not None and len(children) != want:
        raise inp.fail(f"snapshot {cls} has {len(children)} nested serializers, expected {want}")
    return FlinkType(kind, cls, version, bytes(inp.data[start : inp.pos]), children, names, type_class, row_kind)


def _logical(inp: DataInput, what: str) -> LogicalType | None:
    """One Java-serialized `LogicalType`/`DataType`; None for a class statekit does not know (the stream is still passed)."""
    obj = read_object(inp, what)
    try:
        return from_java(obj, inp.where)
    except UnsupportedFormatError:
        return None


def _rowdata(inp: DataInput, start: int, cls: str, version: int) -> FlinkType:
    """`RowDataSerializerSnapshot`: i32 n, n Java-serialized LogicalTypes, then n nested field serializers."""
    n = inp.count("the field count of a RowData serializer", limit=1 << 16)
    types = [_logical(inp, f"the type of field {i} of a RowData serializer") for i in range(n)]
    if inp.i32(f"the nested magic of {cls}") != NESTED_MAGIC:
        inp.pos -= 4
        raise inp.fail(f"snapshot {cls} lacks the nested-serializers magic number")
    inp.i32(f"the nested version of {cls}")
    for _ in range(inp.count(f"the nested count of {cls}", limit=1 << 16)):
        read_versioned(inp, f"a field serializer of {cls}")
    raw = bytes(inp.data[start : inp.pos])
    if any(t is None for t in types):  # a type statekit does not know: the rows stay bytes, named as such
        return FlinkType("bytes", cls, version, raw, type_class="a SQL row with a type statekit does not decode")
    if n == 0:  # the key of a global aggregate (no GROUP BY): one empty row, shown as its bytes
        return FlinkType("bytes", cls, version, raw, form="empty_row")
    known = tuple(t for t in types if t is not None)
    return FlinkType("bytes", cls, version, raw, field_names=tuple(f"f{i}" for i in range(n)), row_kind=True,
                     form="row", logical=known)


def _sql_composite(inp: DataInput, start: int, cls: str, version: int, kind: str) -> FlinkType:
    """RawValueData (i32 length + the inner serializer's bytes), External (its internal serializer's bytes), TTL."""
    if inp.i32(f"the composite magic of {cls}") != COMPOSITE_MAGIC:
        inp.pos -= 4
        raise inp.fail(f"snapshot {cls} lacks the composite-snapshot magic number")
    inp.i32(f"the outer version of {cls}")
    logical: tuple[LogicalType, ...] = ()
    if kind == "external":  # outer snapshot: the Java-serialized DataType, then isInternalInput
        t = _logical(inp, f"the data type of {cls}")
        logical = (t,) if t is not None else ()
        inp.bool(f"the internal-input flag of {cls}")
    if inp.i32(f"the nested magic of {cls}") != NESTED_MAGIC:
        inp.pos -= 4
        raise inp.fail(f"snapshot {cls} lacks the nested-serializers magic number")
    inp.i32(f"the nested version of {cls}")
    children = tuple(read_versioned(inp, f"a nested serializer of {cls}")
                     for _ in range(inp.count(f"the nested count of {cls}", limit=1 << 16)))
    raw = bytes(inp.data[start : inp.pos])
    want = {"raw": 1, "external": 1, "ttl": 2}[kind]
    if len(children) != want:
        raise inp.fail(f"snapshot {cls} has {len(children)} nested serializers, expected {want}")
    if kind == "raw":
        return FlinkType("bytes", cls, version, raw, children, form="raw", type_class=children[0].serializer)
    if kind == "external":
        return replace(children[0], snapshot_class=cls, version=version, raw=raw, logical=logical or children[0].logical)
    return FlinkType("tuple", cls, version, raw, children, ("last_access", "value"), form="ttl")


def is_ttl_bytes(t: FlinkType | None) -> bool:
    """Whether `t` is a TTL-wrapped value shown as its bytes (`without_ttl`): the last access time's 8 big-endian
    bytes, then the value's (`TtlSerializer`)."""
    return t is not None and t.form is None and t.kind == "binary" and _SQL_COMPOSITES.get(t.snapshot_class) == "ttl"


def without_ttl(t: FlinkType) -> FlinkType:
    """`t` with TTL-wrapped parts as opaque bytes: how DataStream and PyFlink TTL state is presented (only SQL
    state shows its last-access times, `keyed.layout`)."""
    if t.form == "ttl":
        return replace(t, kind="binary", field_names=(), form=None)
    if t.children and any(c.form == "ttl" or c.children for c in t.children):
        return replace(t, children=tuple(without_ttl(c) for c in t.children))
    return t


def _pojo(inp: DataInput, start: int, cls: str, version: int) -> FlinkType:
    type_class = inp.utf("the POJO class")
    fields: list[tuple[str, FlinkType | None]] = []
    _optional_map(inp, "POJO fields", fields)
    _optional_map(inp, "POJO registered subclasses")
    _optional_map(inp, "POJO non-registered subclasses")
    names = tuple(n for n, _ in fields)
    if any(t is None for _, t in fields):
        missing = [n for n, t in fields if t is None]
        raw = bytes(inp.data[start : inp.pos])
        return FlinkType("binary", cls, version, raw, type_class=f"{type_class} (fields {missing} absent)")
    return FlinkType("pojo", cls, version, bytes(inp.data[start : inp.pos]), tuple(t for _, t in fields if t is not None), names,
                     type_class)


def _optional_map(inp: DataInput, what: str, fields: list | None = None) -> None:
    """`LinkedOptionalMapSerializer`: header, n x (utf name, [i32 len key frame], [i32 len value frame])."""
    if inp.i64(f"the {what} header") != OPTIONAL_MAP_HEADER:
        inp.pos -= 8
        raise inp.fail(f"the {what} map lacks its header")
    for _ in range(inp.count(f"the number of {what}")):
        name = inp.utf(f"a name in {what}")
        field_name = name
        if inp.bool(f"a key flag in {what}"):
            n = inp.count(f"a key frame length in {what}")
            frame = DataInput(inp.data, inp.where, pos=inp.pos, end=inp.pos + n)
            if fields is not None:
                frame.utf("a declaring class")
                field_name = frame.utf("a field name")
            inp.skip(n, f"a key frame in {what}")
        value: FlinkType | None = None
        if inp.bool(f"a value flag in {what}"):
            n = inp.count(f"a value frame length in {what}")
            if fields is not None:
                frame = DataInput(inp.data, inp.where, pos=inp.pos, end=inp.pos + n)
                value = read_versioned(frame, f"POJO field {field_name!r}")
            inp.skip(n, f"a value frame in {what}")
        if fields is not None:
            fields.append((field_name, value))
