"""Flink SQL `LogicalType`s, as parsed from the Java serialization inside SQL serializer snapshots, with their column types.

Boundary: `from_java` turns a `javaser.JavaObject` of a `org.apache.flink.table.types.logical.*`
class (or a `DataType` holding one) into a `LogicalType`; `LogicalType.ddl` gives the statekit
column type its values decode to (`rowdata`). Mapping, where Arrow and Flink differ: TIMESTAMP(p)
→ ``timestamp_ntz`` and TIMESTAMP_LTZ(p) → ``timestamp`` (microseconds; nanoseconds beyond are
dropped), TIME → ``int`` (milliseconds of the day), INTERVAL YEAR TO MONTH → ``int`` (months),
INTERVAL DAY TO SECOND → ``bigint`` (milliseconds), MULTISET<T> → ``map<T,int>`` (as Flink stores
it), RAW and SYMBOL → ``binary`` (the serialized bytes; the class is named in ``str()``). An unknown
class is an `UnsupportedFormatError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekit.errors import UnsupportedFormatError
from statekit.format.flink.javaser import JavaClass, JavaEnum, JavaObject

__all__ = ["LogicalType", "from_java"]

_PKG = "org.apache.flink.table.types.logical."
#: class -> type root, for the classes whose only parameters are nullability (and those below)
_ROOTS = {
    "BooleanType": "BOOLEAN", "TinyIntType": "TINYINT", "SmallIntType": "SMALLINT", "IntType": "INTEGER",
    "BigIntType": "BIGINT", "FloatType": "FLOAT", "DoubleType": "DOUBLE", "DateType": "DATE", "NullType": "NULL",
    "TimeType": "TIME_WITHOUT_TIME_ZONE", "TimestampType": "TIMESTAMP_WITHOUT_TIME_ZONE",
    "LocalZonedTimestampType": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "ZonedTimestampType": "TIMESTAMP_WITH_TIME_ZONE",
    "DecimalType": "DECIMAL", "CharType": "CHAR", "VarCharType": "VARCHAR", "BinaryType": "BINARY",
    "VarBinaryType": "VARBINARY", "ArrayType": "ARRAY", "MapType": "MAP", "MultisetType": "MULTISET", "RowType": "ROW",
    "RawType": "RAW", "YearMonthIntervalType": "INTERVAL_YEAR_MONTH", "DayTimeIntervalType": "INTERVAL_DAY_TIME",
    "SymbolType": "SYMBOL",
    # a structured type (an aggregate's accumulator class, e.g. MaxWithRetractAccumulator) is a RowData inside
    # rows: read as a ROW of its attributes, its class kept in ``raw_class``
    "StructuredType": "ROW",
}
_DDL = {"BOOLEAN": "boolean", "TINYINT": "tinyint", "SMALLINT": "smallint", "INTEGER": "int", "BIGINT": "bigint",
        "FLOAT": "float", "DOUBLE": "double", "DATE": "date", "TIME_WITHOUT_TIME_ZONE": "int",
        "TIMESTAMP_WITHOUT_TIME_ZONE": "timestamp_ntz", "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "timestamp",
        "TIMESTAMP_WITH_TIME_ZONE": "timestamp", "CHAR": "string", "VARCHAR": "string", "BINARY": "binary",
        "VARBINARY": "binary", "RAW": "binary", "SYMBOL": "binary", "INTERVAL_YEAR_MONTH": "int",
        "INTERVAL_DAY_TIME": "bigint", "NULL": "string"}
_NAMES = {"INTEGER": "INT", "TIME_WITHOUT_TIME_ZONE": "TIME", "TIMESTAMP_WITHOUT_TIME_ZONE": "TIMESTAMP",
          "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "TIMESTAMP_LTZ", "TIMESTAMP_WITH_TIME_ZONE": "TIMESTAMP_TZ",
          "INTERVAL_YEAR_MONTH": "INTERVAL YEAR TO MONTH", "INTERVAL_DAY_TIME": "INTERVAL DAY TO SECOND"}
MAX_VARCHAR = 0x7FFFFFFF


@dataclass(frozen=True)
class LogicalType:
    """One SQL type: its root (Flink's `LogicalTypeRoot` name), nullability and parameters.

    ``precision``/``scale``/``length`` where the type has them, ``time_kind`` (REGULAR, ROWTIME,
    PROCTIME) for timestamps, ``children`` for ARRAY/MULTISET (element), MAP (key, value) and ROW
    (fields, named ``field_names``), ``raw_class`` and ``raw_serializer`` for RAW.
    """

    root: str
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    time_kind: str | None = None
    children: tuple["LogicalType", ...] = ()
    field_names: tuple[str, ...] = ()
    raw_class: str | None = None
    raw_serializer: str | None = None

    def ddl(self) -> str:
        """The statekit (Spark DDL) column type of values of this type (see the module docstring)."""
        r = self.root
        if r in _DDL:
            return _DDL[r]
        if r == "DECIMAL":
            return f"decimal({self.precision},{self.scale})"
        if r == "ARRAY":
            return f"array<{self.children[0].ddl()}>"
        if r == "MULTISET":
            return f"map<{self.children[0].ddl()},int>"
        if r == "MAP":
            return f"map<{self.children[0].ddl()},{self.children[1].ddl()}>"
        if r == "ROW":
            return "struct<" + ",".join(f"`{n}`:{c.ddl()}" for n, c in zip(self.field_names, self.children)) + ">"
        raise UnsupportedFormatError(f"SQL type {self} has no statekit column type")

    @property
    def fixed(self) -> bool:
        """Whether a BinaryRowData slot holds the whole value (no variable-length part)."""
        r = self.root
        if r == "DECIMAL":
            return (self.precision or 0) <= 18
        if r in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
            return (self.precision or 0) <= 3
        return r in ("BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE", "DATE",
                     "TIME_WITHOUT_TIME_ZONE", "INTERVAL_YEAR_MONTH", "INTERVAL_DAY_TIME", "NULL")

    def __str__(self) -> str:
        r = self.root
        name = _NAMES.get(r, r)
        if r in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
            text = "STRING" if r == "VARCHAR" and self.length == MAX_VARCHAR else \
                "BYTES" if r == "VARBINARY" and self.length == MAX_VARCHAR else f"{name}({self.length})"
        elif r == "DECIMAL":
            text = f"DECIMAL({self.precision}, {self.scale})"
        elif r.startswith("TIMESTAMP") or r == "TIME_WITHOUT_TIME_ZONE":
            text = f"{name}({self.precision})"
            if self.time_kind in ("ROWTIME", "PROCTIME"):
                text += f" *{self.time_kind}*"
        elif r in ("ARRAY", "MULTISET"):
            text = f"{name}<{self.children[0]}>"
        elif r == "MAP":
            text = f"MAP<{self.children[0]}, {self.children[1]}>"
        elif r == "ROW":
            text = "ROW<" + ", ".join(f"{n} {c}" for n, c in zip(self.field_names, self.children)) + ">"
        elif r == "RAW":
            text = f"RAW('{self.raw_class}', {self.raw_serializer})"
        else:
            text = name
        return text if self.nullable else f"{text} NOT NULL"


def from_java(obj: Any, where: str) -> LogicalType:
    """The `LogicalType` a Java-serialized `LogicalType` or `DataType` object describes.

    Raises
    ------
    UnsupportedFormatError
        If the object is of a class statekit does not know (named in the message).
    """
    if isinstance(obj, JavaObject) and obj.is_a("org.apache.flink.table.types.DataType"):
        obj = obj.fields.get("logicalType")
    if not isinstance(obj, JavaObject) or not obj.class_name.startswith(_PKG) \
            or obj.class_name[len(_PKG):] not in _ROOTS:
        name = obj.class_name if isinstance(obj, JavaObject) else type(obj).__name__
        raise UnsupportedFormatError(
            f"{where}: the SQL type {name} is not one statekit decodes (it reads Flink's built-in LogicalTypes: "
            f"{', '.join(sorted(_ROOTS))}); this state's values stay raw bytes. Report the class to statekit."
        )
    cls = obj.class_name[len(_PKG):]
    f = obj.fields
    root = _ROOTS[cls]
    nullable = bool(f.get("isNullable", True))
    kind = f.get("kind")
    kw: dict[str, Any] = {}
    if cls in ("TimestampType", "LocalZonedTimestampType", "ZonedTimestampType", "TimeType"):
        kw["precision"] = int(f.get("precision", 0))
        kw["time_kind"] = kind.name if isinstance(kind, JavaEnum) else None
    elif cls == "DecimalType":
        kw["precision"], kw["scale"] = int(f["precision"]), int(f["scale"])
    elif cls in ("CharType", "VarCharType", "BinaryType", "VarBinaryType"):
        kw["length"] = int(f["length"])
    elif cls in ("ArrayType", "MultisetType"):
        kw["children"] = (from_java(f["elementType"], where),)
    elif cls == "MapType":
        kw["children"] = (from_java(f["keyType"], where), from_java(f["valueType"], where))
    elif cls == "RowType":
        fields = _list(f.get("fields"))
        kw["children"] = tuple(from_java(x.fields["type"], where) for x in fields)
        kw["field_names"] = tuple(str(x.fields["name"]) for x in fields)
    elif cls == "StructuredType":
        attrs = _list(f.get("attributes"))
        kw["children"] = tuple(from_java(x.fields["type"], where) for x in attrs)
        kw["field_names"] = tuple(str(x.fields["name"]) for x in attrs)
        kw["raw_class"] = str(f.get("className") or "")
    elif cls == "RawType":
        clazz = f.get("clazz")
        ser = f.get("serializer")
        kw["raw_class"] = clazz.name if isinstance(clazz, JavaClass) else str(clazz)
        kw["raw_serializer"] = ser.class_name.rsplit(".", 1)[-1] if isinstance(ser, JavaObject) else str(ser)
    elif cls in ("YearMonthIntervalType", "DayTimeIntervalType"):
        kw["precision"] = int(f.get("yearPrecision", f.get("dayPrecision", 0)))
        kw["scale"] = int(f["fractionalPrecision"]) if "fractionalPrecision" in f else None
    return LogicalType(root, nullable, **kw)


def _list(obj: Any) -> list[Any]:
    """The elements of a serialized `java.util` list (ArrayList keeps them in its writeObject data)."""
    if isinstance(obj, list):
        return obj
    if isinstance(obj, JavaObject):
        for name in ("list", "c"):  # Collections$Unmodifiable(RandomAccess)List wraps another list
            if isinstance(obj.fields.get(name), (JavaObject, list)):
                return _list(obj.fields[name])
        out: list[Any] = []
        for values in obj.annotations.values():
            out += [v for v in values if isinstance(v, JavaObject)]
        return out
    return []
