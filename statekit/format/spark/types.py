"""Spark SQL types of state schemas (Spark's ``StructType.json``) as Arrow types and DDL."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from statekit.format.spark.errors import UnsupportedStateFormatError

_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
_SIMPLE = {
    "boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "string": pa.string(), "binary": pa.binary(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
    "null": pa.null(), "void": pa.null(),
}
_DDL = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint", "null": "void"}


@dataclass(frozen=True)
class Field:
    """One field of a Spark struct: its name, Spark type (a JSON type name, or a nested `Struct`), nullability."""

    name: str
    type: "str | Struct"
    nullable: bool = True


@dataclass(frozen=True)
class Struct:
    """A Spark struct type: its fields in order."""

    fields: tuple[Field, ...]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]


def parse_struct(doc: Any, where: str) -> Struct:
    """A `Struct` from Spark's schema JSON (``{"type":"struct","fields":[...]}``)."""
    if not isinstance(doc, dict) or doc.get("type") != "struct" or not isinstance(doc.get("fields"), list):
        raise UnsupportedStateFormatError(f"{where}: the state schema is not a Spark struct: {str(doc)[:200]}")
    return Struct(tuple(Field(f["name"], _parse_type(f["type"], where), bool(f.get("nullable", True)))
                        for f in doc["fields"]))


def _parse_type(t: Any, where: str) -> "str | Struct":
    if isinstance(t, str):
        if t in _SIMPLE:
            return t
        m = _DECIMAL.fullmatch(t)
        if m and int(m.group(1)) <= 18:
            return t
    if isinstance(t, dict) and t.get("type") == "struct":
        return parse_struct(t, where)
    raise UnsupportedStateFormatError(
        f"{where}: a state column has Spark type {t if isinstance(t, str) else t.get('type')!r}; statekit decodes "
        "boolean, numeric, string, binary, date, timestamp, decimal up to 18 digits, null and nested structs. "
        "Read this operator with Spark's statestore source."
    )


def arrow_type(t: "str | Struct") -> pa.DataType:
    """The Arrow type statekit presents a Spark type as (timestamps as UTC microseconds)."""
    if isinstance(t, Struct):
        return pa.struct([pa.field(f.name, arrow_type(f.type)) for f in t.fields])
    if t in _SIMPLE:
        return _SIMPLE[t]
    m = _DECIMAL.fullmatch(t)
    assert m is not None
    return pa.decimal128(int(m.group(1)), int(m.group(2)))


def ddl(t: "str | Struct") -> str:
    """The Spark SQL DDL name of `t` (``bigint``, ``struct<start:timestamp,end:timestamp>``)."""
    if isinstance(t, Struct):
        return "struct<" + ",".join(f"{f.name}:{ddl(f.type)}" for f in t.fields) + ">"
    return _DDL.get(t, t)


def to_json(s: Struct) -> dict[str, Any]:
    """`s` back as Spark's schema JSON (for the fields it holds; metadata is empty)."""
    def one(t: "str | Struct") -> Any:
        return to_json(t) if isinstance(t, Struct) else t
    return {"type": "struct", "fields": [{"name": f.name, "type": one(f.type), "nullable": f.nullable, "metadata": {}}
                                         for f in s.fields]}
