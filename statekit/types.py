"""State value types: Spark SQL DDL strings, pyarrow types and Python types mapped onto one another."""

from __future__ import annotations

import datetime as _dt
import re
import typing
from typing import Any, Union

import pyarrow as pa

from statekit.errors import StateTypeError

__all__ = [
    "PICKLED",
    "PickledType",
    "TypeLike",
    "Types",
    "is_pickled",
    "parse_ddl",
    "to_arrow",
    "to_ddl",
    "to_arrow_array",
]


class PickledType:
    """Marker for values stored as pickled ``binary``; only used when the user opts in.

    Pickled state is never unpickled unless the reader is told to trust it.
    """

    _instance: "PickledType | None" = None

    def __new__(cls) -> "PickledType":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "PICKLED"

    def __reduce__(self):
        return (PickledType, ())


PICKLED = PickledType()

TypeLike = Union[str, pa.DataType, type, PickledType, Any]

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}

_PYTHON_TYPES: dict[type, pa.DataType] = {
    bool: pa.bool_(),
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bytes: pa.binary(),
    _dt.date: pa.date32(),
    _dt.datetime: pa.timestamp("us", tz="UTC"),
}

_TOKEN = re.compile(r"\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


#: The deepest nesting of array/map/struct a type may have (a damaged manifest must not exhaust the stack).
MAX_TYPE_DEPTH = 64


class _DdlParser:
    """Recursive-descent parser for Spark SQL DDL type strings."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                self.fail(f"unexpected character {text[pos]!r} at position {pos}")
            self.tokens.append(m.group(1))
            pos = m.end()
        self.i = 0

    def fail(self, why: str) -> typing.NoReturn:
        raise StateTypeError(
            f"cannot parse type {self.text!r}: {why}. Use Spark SQL DDL, e.g. 'bigint', 'array<string>', "
            "'map<string,double>' or 'struct<count:bigint,sum:bigint>'."
        )

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            self.fail("unexpected end of type")
        if expected is not None and tok != expected:
            self.fail(f"expected {expected!r} but found {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> pa.DataType:
        t = self.type_()
        if self.peek() is not None:
            self.fail(f"unexpected {self.peek()!r} after the type")
        return t

    def type_(self, depth: int = 0) -> pa.DataType:
        if depth > MAX_TYPE_DEPTH:  # a bound, not Python's recursion limit, decides (and names the fault)
            self.fail(f"types nest deeper than {MAX_TYPE_DEPTH} levels")
        depth += 1
        name = self.take().lower()
        if name == "array":
            self.take("<")
            elem = self.type_(depth)
            self.take(">")
            return pa.list_(elem)
        if name == "map":
            self.take("<")
            key = self.type_(depth)
            self.take(",")
            value = self.type_(depth)
            self.take(">")
            return pa.map_(key, value)
        if name == "struct":
            self.take("<")
            fields: list[pa.Field] = []
            if self.peek() != ">":
                while True:
                    fname = self.take().strip("`")
                    if self.peek() == ":":
                        self.take(":")
                    if any(f.name == fname for f in fields):
                        self.fail(f"field {fname!r} appears twice in the struct")
                    fields.append(pa.field(fname, self.type_(depth)))
                    if self.peek() == ",":
                        self.take(",")
                        continue
                    break
            self.take(">")
            if not fields:  # Parquet cannot store a struct without fields
                self.fail("a struct needs at least one field")
            return pa.struct(fields)
        if name in ("decimal", "numeric", "dec"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = int(self.take())
                if self.peek() == ",":
                    self.take(",")
                    scale = int(self.take())
                self.take(")")
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                self.fail(f"decimal({precision},{scale}) needs 1 <= precision <= 38 and 0 <= scale <= precision")
            return pa.decimal128(precision, scale)
        if name in _PRIMITIVES:
            return _PRIMITIVES[name]
        self.fail(f"unknown type name {name!r}")


def parse_ddl(text: str) -> pa.DataType:
    """Parse a Spark SQL DDL type string into a pyarrow type.

    >>> parse_ddl("struct<count:bigint,sum:bigint>")
    StructType(struct<count: int64, sum: int64>)
    >>> parse_ddl("map<string,array<double>>")
    MapType(map<string, list<item: double>>)
    """
    if not isinstance(text, str) or not text.strip():
        raise StateTypeError(f"type {text!r} is not a DDL type string; use e.g. 'bigint' or 'array<string>'.")
    return _DdlParser(text).parse()


def _python_annotation_to_arrow(t: Any) -> pa.DataType | None:
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin in (list, typing.List) and len(args) == 1:
        return pa.list_(to_arrow(args[0]))
    if origin in (dict, typing.Dict) and len(args) == 2:
        return pa.map_(to_arrow(args[0]), to_arrow(args[1]))
    return None


def to_arrow(t: TypeLike) -> pa.DataType:
    """Normalise a type declaration (DDL string, pyarrow type, Python type) to a pyarrow type.

    `PICKLED` maps to ``binary``. Large Arrow variants map to their plain forms so every
    engine reads the same schema.

    >>> to_arrow(int), to_arrow("array<string>"), to_arrow(str)
    (DataType(int64), ListType(list<item: string>), DataType(string))
    """
    if isinstance(t, PickledType):
        return pa.binary()
    if isinstance(t, pa.DataType):
        return _normalise_arrow(t)
    if isinstance(t, str):
        return parse_ddl(t)
    if isinstance(t, type) and t in _PYTHON_TYPES:
        return _PYTHON_TYPES[t]
    annotated = _python_annotation_to_arrow(t)
    if annotated is not None:
        return annotated
    raise StateTypeError(
        f"unsupported state type {t!r}. Declare a DDL string ('bigint', 'array<string>', "
        "'struct<a:int,b:string>'), a pyarrow type, int/float/str/bool/bytes, or opt in to "
        "pickling with statekit.types.PICKLED."
    )


def _normalise_arrow(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(_normalise_arrow(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(_normalise_arrow(t.key_type), _normalise_arrow(t.item_type))
    if pa.types.is_list(t):
        return pa.list_(_normalise_arrow(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _normalise_arrow(f.type)) for f in t])
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_dictionary(t):
        return _normalise_arrow(t.value_type)
    return t


_ARROW_TO_DDL = {
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.date32(): "date",
}


def to_ddl(t: TypeLike) -> str:
    """Render a type as a Spark SQL DDL string (the notation the manifest uses).

    >>> to_ddl(dict[str, float])
    'map<string,double>'
    """
    a = to_arrow(t)
    if a in _ARROW_TO_DDL:
        return _ARROW_TO_DDL[a]
    if pa.types.is_list(a):
        return f"array<{to_ddl(a.value_type)}>"
    if pa.types.is_map(a):
        return f"map<{to_ddl(a.key_type)},{to_ddl(a.item_type)}>"
    if pa.types.is_struct(a):
        return "struct<" + ",".join(f"{ddl_name(f.name)}:{to_ddl(f.type)}" for f in a) + ">"
    if pa.types.is_decimal(a):
        return f"decimal({a.precision},{a.scale})"
    if pa.types.is_timestamp(a):
        return "timestamp" if a.tz else "timestamp_ntz"
    raise StateTypeError(f"arrow type {a} has no Spark SQL equivalent; declare one of the DDL types instead.")


def ddl_name(name: str) -> str:
    """A field name as DDL writes it: backticks around one that is not a plain identifier."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def is_pickled(t: TypeLike) -> bool:
    """True when `t` is the opt-in pickled marker."""
    return isinstance(t, PickledType)


def to_arrow_array(values: typing.Sequence[Any], t: TypeLike, *, what: str = "value") -> pa.Array:
    """Convert Python values to an Arrow array of type `t`, with a `StateTypeError` naming the culprit."""
    arrow_type = to_arrow(t)
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        bad = _first_bad_value(values, arrow_type)
        raise StateTypeError(
            f"{what} {bad!r} does not fit declared type {to_ddl(arrow_type)} ({exc}). "
            "Convert it, or declare a type that holds it."
        ) from None


def _first_bad_value(values: typing.Sequence[Any], arrow_type: pa.DataType) -> Any:
    for v in values:
        try:
            pa.array([v], type=arrow_type)
        except Exception:  # noqa: BLE001 - we only look for the culprit to name it
            return v
    return "<unknown>"


class Types:
    """PyFlink's type helpers (``Types.LONG()``, ``Types.ROW_NAMED(...)``, ...) mapped onto statekit types."""

    @staticmethod
    def BOOLEAN() -> pa.DataType:
        return pa.bool_()

    @staticmethod
    def BYTE() -> pa.DataType:
        return pa.int8()

    @staticmethod
    def SHORT() -> pa.DataType:
        return pa.int16()

    @staticmethod
    def INT() -> pa.DataType:
        return pa.int32()

    @staticmethod
    def LONG() -> pa.DataType:
        return pa.int64()

    @staticmethod
    def FLOAT() -> pa.DataType:
        return pa.float32()

    @staticmethod
    def DOUBLE() -> pa.DataType:
        return pa.float64()

    @staticmethod
    def STRING() -> pa.DataType:
        return pa.string()

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeLike) -> pa.DataType:
        if to_arrow(element_type) == pa.int8():
            return pa.binary()
        return pa.list_(to_arrow(element_type))

    @staticmethod
    def BASIC_ARRAY(element_type: TypeLike) -> pa.DataType:
        return pa.list_(to_arrow(element_type))

    @staticmethod
    def LIST(element_type: TypeLike) -> pa.DataType:
        return pa.list_(to_arrow(element_type))

    @staticmethod
    def MAP(key_type: TypeLike, value_type: TypeLike) -> pa.DataType:
        return pa.map_(to_arrow(key_type), to_arrow(value_type))

    @staticmethod
    def ROW_NAMED(field_names: typing.Sequence[str], field_types: typing.Sequence[TypeLike]) -> pa.DataType:
        if len(field_names) != len(field_types):
            raise StateTypeError(
                f"ROW_NAMED got {len(field_names)} names and {len(field_types)} types; give one type per name."
            )
        return pa.struct([pa.field(n, to_arrow(t)) for n, t in zip(field_names, field_types)])

    @staticmethod
    def ROW(field_types: typing.Sequence[TypeLike]) -> pa.DataType:
        return pa.struct([pa.field(f"f{i}", to_arrow(t)) for i, t in enumerate(field_types)])

    @staticmethod
    def TUPLE(field_types: typing.Sequence[TypeLike]) -> pa.DataType:
        return Types.ROW(field_types)

    @staticmethod
    def SQL_DATE() -> pa.DataType:
        return pa.date32()

    @staticmethod
    def SQL_TIMESTAMP() -> pa.DataType:
        return pa.timestamp("us", tz="UTC")

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> PickledType:
        return PICKLED
