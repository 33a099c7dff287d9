"""Avro schemas of flink-avro's `AvroSerializerSnapshot`: the snapshot payload parsed, the writer schema as an `AvroType` tree with its DDL.

Boundary: snapshot bytes and schema JSON in, an `AvroType` out; values are decoded by
`avro_values` and written by `avro_out`. Flink 2.x (snapshot version 3) stores the runtime class and
the writer schema (`Schema.toString(false)`) as Flink `StringValue`s (`StringUtils.writeString`);
versions 2 and 1 (Flink 1.x) used `writeUTF` (class + schema, or the schema alone). A schema statekit
cannot model (a recursive record, a union with clashing branch names, a decimal wider than 38 digits)
makes the serializer *unsupported* with the reason named, never a damaged savepoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from statekit.errors import UnsupportedFormatError
from statekit.format.flink.binary import DataInput, java_string

__all__ = ["AvroField", "AvroType", "parse_schema", "read_snapshot_payload"]

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_DDL = {"boolean": "boolean", "int": "int", "long": "bigint", "float": "float", "double": "double",
        "bytes": "binary", "string": "string", "fixed": "binary", "enum": "string"}
#: logical types with their own column type (other logical types read as their underlying type, as Avro does)
_LOGICAL_DDL = {("int", "date"): "date", ("long", "timestamp-millis"): "timestamp",
                ("long", "timestamp-micros"): "timestamp", ("long", "local-timestamp-millis"): "timestamp_ntz",
                ("long", "local-timestamp-micros"): "timestamp_ntz"}


@dataclass(frozen=True)
class AvroField:
    """One record field: its name, type and whether `"order": "ignore"` leaves it out of the record's hashCode."""

    name: str
    type: "AvroType"
    ignored: bool = False


@dataclass(frozen=True)
class AvroType:
    """An Avro schema node.

    `kind` is a primitive name or record / enum / array / map / fixed / union; `name` is the full name
    of a named type; `items` the element (array) or value (map) type; `logical` the logical type
    statekit decodes (date, timestamp-millis/micros, local-timestamp-millis/micros, decimal, uuid).
    """

    kind: str
    name: str | None = None
    fields: tuple[AvroField, ...] = ()
    items: "AvroType | None" = None
    branches: tuple["AvroType", ...] = ()
    symbols: tuple[str, ...] = ()
    size: int = 0
    logical: str | None = None
    precision: int = 0
    scale: int = 0

    @property
    def nullable_branch(self) -> int | None:
        """For a union of null and one other type, the index of the other branch; else None."""
        if self.kind != "union" or len(self.branches) != 2:
            return None
        kinds = [b.kind for b in self.branches]
        if kinds.count("null") != 1:
            return None
        return 1 - kinds.index("null")

    @property
    def null_branch(self) -> int | None:
        kinds = [b.kind for b in self.branches]
        return kinds.index("null") if "null" in kinds else None

    def branch_name(self) -> str:
        """The struct field a union branch becomes (unions of two or more non-null types): its simple name or kind."""
        return self.name.rsplit(".", 1)[-1] if self.name else self.kind

    def ddl(self) -> str:
        """The statekit DDL type of values of this schema."""
        k = self.kind
        if self.logical == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.logical is not None and (k, self.logical) in _LOGICAL_DDL:
            return _LOGICAL_DDL[(k, self.logical)]
        if k in _DDL:
            return _DDL[k]
        if k == "array":
            assert self.items is not None
            return f"array<{self.items.ddl()}>"
        if k == "map":
            assert self.items is not None
            return f"map<string,{self.items.ddl()}>"
        if k == "record":
            return "struct<" + ",".join(f"{f.name}:{f.type.ddl()}" for f in self.fields) + ">"
        if k == "union":
            nb = self.nullable_branch
            if nb is not None:
                return self.branches[nb].ddl()
            return "struct<" + ",".join(f"{b.branch_name()}:{b.ddl()}" for b in self.branches if b.kind != "null") + ">"
        raise UnsupportedFormatError(f"an Avro {k} value has no statekit column type")


def read_snapshot_payload(inp: DataInput, version: int) -> tuple[str, str]:
    """(runtime class, writer schema JSON) of an `AvroSerializerSnapshot` payload of `version`.

    Version 3 (Flink 2.x): two `StringValue`s; version 2: two `writeUTF`s; version 1: the schema
    alone (the class is the schema's full name).
    """
    if not 1 <= version <= 3:
        raise UnsupportedFormatError(f"AvroSerializerSnapshot version {version} is newer than statekit reads (1-3, "
                                     "as Flink 1.x-2.3 write them); read this savepoint with a newer statekit")
    if version == 3:
        cls = java_string(inp, "the Avro runtime class")
        schema = java_string(inp, "the Avro schema")
        if cls is None or schema is None:
            raise inp.fail("the Avro serializer snapshot has a null class or schema")
        return cls, schema
    if version == 2:
        cls = inp.utf("the Avro runtime class")
        return cls, inp.utf("the Avro schema")
    schema = inp.utf("the Avro schema")
    try:
        doc = json.loads(schema)
        name = doc.get("name", "?") if isinstance(doc, dict) else "?"
        ns = doc.get("namespace") if isinstance(doc, dict) else None
    except ValueError:
        name, ns = "?", None
    return (f"{ns}.{name}" if ns and "." not in name else name), schema


def parse_schema(text: str) -> AvroType:
    """The `AvroType` of schema JSON `text`; UnsupportedFormatError (naming why) when statekit cannot model it."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UnsupportedFormatError(f"the Avro schema is not JSON ({exc})") from None
    return _Parser().parse(doc, None)


class _Parser:
    """Avro's schema resolution: named types defined once, referenced by (namespace-relative) name later."""

    def __init__(self) -> None:
        self.named: dict[str, AvroType] = {}
        self.open: set[str] = set()  # records being defined: a reference to one is recursion

    def _full(self, name: str, ns: str | None) -> str:
        return name if "." in name or not ns else f"{ns}.{name}"

    def parse(self, doc: Any, ns: str | None) -> AvroType:
        if isinstance(doc, str):
            if doc in PRIMITIVES:
                return AvroType(doc)
            full = self._full(doc, ns)
            for cand in (full, doc):
                if cand in self.open:
                    raise UnsupportedFormatError(f"the Avro record {cand} is recursive; statekit reads "
                                                 "non-recursive Avro schemas")
                if cand in self.named:
                    return self.named[cand]
            raise UnsupportedFormatError(f"the Avro schema names type {doc!r} without defining it")
        if isinstance(doc, list):
            branches = tuple(self.parse(b, ns) for b in doc)
            u = AvroType("union", branches=branches)
            names = [b.branch_name() for b in branches if b.kind != "null"]
            if not names or len(set(names)) != len(names):
                raise UnsupportedFormatError(f"the Avro union {[b.branch_name() for b in branches]} has no or "
                                             "clashing branch names")
            return u
        if not isinstance(doc, dict) or "type" not in doc:
            raise UnsupportedFormatError(f"the Avro schema node {str(doc)[:80]!r} is not a type")
        t = doc["type"]
        if not isinstance(t, str):
            return self.parse(t, ns)
        logical = doc.get("logicalType")
        if t in PRIMITIVES:
            return self._logical(AvroType(t), logical, doc)
        if t in ("record", "error", "enum", "fixed"):
            name = doc.get("name")
            if not isinstance(name, str):
                raise UnsupportedFormatError(f"an Avro {t} has no name")
            inner_ns = doc.get("namespace") or ns
            full = name if "." in name else (f"{inner_ns}.{name}" if inner_ns else name)
            child_ns = full.rsplit(".", 1)[0] if "." in full else None
            if t == "enum":
                node = AvroType("enum", full, symbols=tuple(doc.get("symbols", ())))
            elif t == "fixed":
                node = self._logical(AvroType("fixed", full, size=int(doc.get("size", 0))), logical, doc)
            else:
                self.open.add(full)
                fields = tuple(
                    AvroField(f["name"], self.parse(f["type"], child_ns), f.get("order") == "ignore")
                    for f in doc.get("fields", ())
                )
                self.open.discard(full)
                node = AvroType("record", full, fields=fields)
            self.named[full] = node
            return node
        if t == "array":
            return AvroType("array", items=self.parse(doc["items"], ns))
        if t == "map":
            return AvroType("map", items=self.parse(doc["values"], ns))
        return self.parse(t, ns)  # a named type given as {"type": "Name"}

    @staticmethod
    def _logical(node: AvroType, logical: Any, doc: dict) -> AvroType:
        k = node.kind
        if logical == "decimal" and k in ("bytes", "fixed"):
            precision, scale = int(doc.get("precision", 0)), int(doc.get("scale", 0))
            if not 0 < precision or not 0 <= scale <= precision:
                return node  # Avro ignores an invalid decimal: the bytes are read as they are
            if precision > 38:
                raise UnsupportedFormatError(f"the Avro decimal({precision},{scale}) is wider than the 38 digits "
                                             "of a statekit decimal column")
            return AvroType(k, node.name, size=node.size, logical="decimal", precision=precision, scale=scale)
        if isinstance(logical, str) and ((k, logical) in _LOGICAL_DDL or (k == "string" and logical == "uuid")):
            return AvroType(k, node.name, size=node.size, logical=logical)
        return node
