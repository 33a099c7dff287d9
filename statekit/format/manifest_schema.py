"""The declared schema of the manifest: each field's JSON type, presence and bounds, checked before use.

A manifest is checked against it whole before anything is built from it, so a damaged or hostile
manifest fails with the name of the field at fault, never with an exception from deeper code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from statekit.limits import MAX_TEXT  # uids, names and type strings (re-exported: the schema's rule for texts)


class _HugeInt(str):
    """A JSON integer too long for any manifest field; kept as text so the schema names the field."""


def parse_int(text: str) -> int | _HugeInt:
    """`json.loads`'s ``parse_int``: an int, or the digits of one too long for any field."""
    # Python refuses to convert integers over 4300 digits (and is slow well before that); no manifest
    # field needs more than 19 digits, so longer ones are left for the schema to refuse by name.
    return int(text) if len(text) <= 24 else _HugeInt(text)


# Each field: its JSON type, whether it must be present, whether null is allowed, and its bounds. A
# manifest is checked against it whole before anything is built from it, so a damaged or hostile
# manifest fails with the name of the field at fault, never with an exception from deeper code.

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255  # one path component, as on every common file system
MAX_INT64 = 2**63 - 1


@dataclass(frozen=True)
class _Field:
    kind: Literal["int", "str", "bool", "enum", "path", "ddl", "objects", "strings"]
    required: bool = False
    nullable: bool = False
    lo: int = 0
    hi: int = MAX_INT64
    choices: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    nonempty: bool = False
    items: dict[str, "_Field"] | None = None  # the schema of each object of an "objects" list

    def describe(self) -> str:
        if self.kind == "int":
            return f"an integer in {self.lo}..{self.hi}"
        if self.kind == "enum":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "str":
            return f"a{' non-empty' if self.nonempty else ''} string" + (
                f" matching {self.pattern.pattern}" if self.pattern else "")
        return {"bool": "true or false", "path": "a relative path", "ddl": "a type string such as 'bigint'",
                "objects": "a list of objects", "strings": "a list of strings"}[self.kind]


UID_HASH = re.compile(r"[0-9a-f]{32}")
STATE_KINDS = ("value", "list", "map", "reducing", "aggregating")
REDISTRIBUTIONS = ("split", "union", "broadcast")
TABLES = ("keyed", "timers", "operator", "broadcast", "rocksdb")
_STATE_NAME = _Field("str", required=True, nonempty=True)

_FILE_SCHEMA = {
    "path": _Field("path", required=True),
    "table": _Field("enum", required=True, choices=TABLES),
    "rows": _Field("int", required=True),
    "bytes": _Field("int", required=True),
    "checksum": _Field("str", required=True, pattern=re.compile(r"crc32:[0-9a-f]{8}")),
    "state": _Field("str", nullable=True, nonempty=True),
    "key_group_start": _Field("int", nullable=True, hi=32767),
    "key_group_end": _Field("int", nullable=True, hi=32767),
    "subtask": _Field("int", nullable=True, hi=32767),
}
_KEYED_STATE_SCHEMA = {
    "name": _STATE_NAME,
    "kind": _Field("enum", required=True, choices=STATE_KINDS),
    "type": _Field("ddl", required=True),
    "pickled": _Field("bool"),
    "ttl_ms": _Field("int", nullable=True, lo=1),
}
_OPERATOR_STATE_SCHEMA = {
    "name": _STATE_NAME,
    "redistribution": _Field("enum", required=True, choices=REDISTRIBUTIONS),
    "type": _Field("ddl", required=True),
    "key_type": _Field("ddl", nullable=True),
    "pickled": _Field("bool"),
}
_OPERATOR_SCHEMA = {
    "uid": _Field("str", nullable=True, nonempty=True),
    "uid_hash": _Field("str", required=True, pattern=UID_HASH),
    "name": _Field("str", nullable=True),
    "parallelism": _Field("int", required=True, lo=1, hi=32768),
    "max_parallelism": _Field("int", required=True, lo=1, hi=32768),
    "key_type": _Field("ddl", nullable=True),
    "namespace_type": _Field("ddl", nullable=True),
    "keyed_format": _Field("enum", choices=("parquet", "rocksdb")),
    "key_groups": _Field("enum", choices=("hashed", "stored")),
    "keyed_states": _Field("objects", items=_KEYED_STATE_SCHEMA),
    "operator_states": _Field("objects", items=_OPERATOR_STATE_SCHEMA),
    "files": _Field("objects", items=_FILE_SCHEMA),
}
MANIFEST_SCHEMA = {
    "checkpoint_id": _Field("int", required=True),
    "kind": _Field("enum", choices=("savepoint", "checkpoint")),
    "created_at": _Field("str", nullable=True),
    "job_name": _Field("str", nullable=True),
    "features": _Field("strings"),
    "operators": _Field("objects", required=True, items=_OPERATOR_SCHEMA),
}


class SchemaViolation(ValueError):
    """A field that does not fit the schema; the manifest reader turns it into a `CorruptSavepointError`."""


def check_schema(obj: dict[str, Any], schema: dict[str, _Field], where: str) -> None:
    """Check `obj` against `schema` (recursively); `SchemaViolation` names the first field at fault."""
    for name, spec in schema.items():
        field_name = f"{where}.{name}" if where else name
        if name not in obj:
            if spec.required:
                raise SchemaViolation(f"field {field_name!r} is missing; it must be {spec.describe()}")
            continue
        value = obj[name]
        if value is None and spec.nullable:
            continue
        why = _field_problem(value, spec)
        if why:
            shown = repr(value) if not isinstance(value, (list, dict)) else type(value).__name__
            raise SchemaViolation(f"field {field_name!r} is {shown[:80]}{'...' if len(shown) > 80 else ''}: {why}; "
                                  f"it must be {spec.describe()}{' or null' if spec.nullable else ''}")
        if spec.kind == "objects":
            assert spec.items is not None
            for i, item in enumerate(value):
                check_schema(item, spec.items, f"{field_name}[{i}]")


def _field_problem(value: Any, spec: _Field) -> str | None:
    """Why `value` does not fit `spec`, or None."""
    kind = spec.kind
    if kind == "int":
        if isinstance(value, _HugeInt):
            return f"an integer of {len(value)} digits is out of range"
        if type(value) is not int:
            return "not an integer" if not isinstance(value, float) else "a number that is not an integer"
        return None if spec.lo <= value <= spec.hi else "out of range"
    if kind == "bool":
        return None if type(value) is bool else "not a boolean"
    if kind == "objects":
        return None if isinstance(value, list) and all(isinstance(x, dict) for x in value) else "not a list of objects"
    if kind == "strings":
        return None if isinstance(value, list) and all(text_problem(x) is None for x in value) else \
            "not a list of strings"
    text = text_problem(value, nul_ok=kind == "path")  # empty and NUL paths: `safe_relative_path` refuses them
    if text:
        return text
    if kind == "enum":
        return None if value in spec.choices else "not supported"
    if kind == "str":
        if spec.nonempty and not value:
            return "empty"
        return None if spec.pattern is None or spec.pattern.fullmatch(value) else "malformed"
    if kind == "ddl":
        return None if value.strip() else "empty"
    if kind == "path":
        if len(value.encode("utf-8")) > MAX_PATH_BYTES:
            return f"longer than {MAX_PATH_BYTES} bytes"
        if any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in value.replace("\\", "/").split("/")):
            return f"a path component is longer than {MAX_NAME_BYTES} bytes, which no file system stores"
        return None
    raise AssertionError(kind)


def text_problem(value: Any, *, nul_ok: bool = False) -> str | None:
    """Why `value` is not text a manifest holds (uids, names, type strings: at most `MAX_TEXT` characters,
    no NUL, no lone surrogate), or None. The one home of the rule: readers refuse such text and writers
    (`OperatorIdentifier`, `SavepointBuilder`) refuse it before anything is written."""
    if not isinstance(value, str) or isinstance(value, _HugeInt):
        return "not a string"
    if len(value) > MAX_TEXT:
        return f"longer than {MAX_TEXT} characters"
    if "\x00" in value and not nul_ok:
        return "holds a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8 text (a lone surrogate)"
    return None
