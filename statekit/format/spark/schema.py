"""Spark state schema files (state/SchemaHelper.scala): v2 per store, v3 per transformWithState column family.

Strings are Java ``writeUTF`` (u16 big-endian length + modified UTF-8); a JSON schema is chunked:
``int32 BE numChunks`` then that many ``writeUTF``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from statekit.format.spark.errors import TruncatedStateFileError, UnsupportedStateFormatError
from statekit.format.spark.types import Struct, parse_struct


class _In:
    def __init__(self, data: bytes, where: str) -> None:
        self.data, self.pos, self.where = data, 0, where

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise TruncatedStateFileError(f"{self.where}: the schema file is cut short at byte {self.pos}; "
                                          "restore it from a copy of the checkpoint.")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def utf(self) -> str:
        (n,) = struct.unpack(">H", self.take(2))
        # modified UTF-8 differs from UTF-8 only for NUL and supplementary characters, absent from schema JSON
        return self.take(n).decode("utf-8", "surrogatepass")

    def i32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def i16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def chunked(self) -> str:
        return "".join(self.utf() for _ in range(self.i32()))

    def json(self) -> Any:
        text = self.chunked()
        try:
            return json.loads(text)
        except ValueError:
            raise UnsupportedStateFormatError(f"{self.where}: a schema is not JSON: {text[:100]!r}") from None


def _out_utf(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack(">H", len(b)) + b


def _out_chunked(s: str) -> bytes:
    chunks = [s[i:i + 65535] for i in range(0, len(s), 65535)] or [""]
    return struct.pack(">i", len(chunks)) + b"".join(_out_utf(c) for c in chunks)


@dataclass(frozen=True)
class StoreSchema:
    """Key and value schema of one store (v2 file)."""

    key: Struct
    value: Struct


@dataclass(frozen=True)
class ColumnFamily:
    """One transformWithState column family of a v3 schema file."""

    name: str
    key: Struct
    value: Struct
    encoder: dict[str, Any]
    user_key: Struct | None

    @property
    def prefix_columns(self) -> int:
        return int(self.encoder.get("numColsPrefixKey", 0))

    @property
    def kind(self) -> str:
        return str(self.encoder.get("keyStateEncoderType", "NoPrefixKeyStateEncoderSpec"))


def read_v2(data: bytes, where: str) -> StoreSchema:
    """A v2 schema file (one store's key and value schema)."""
    r = _In(data, where)
    version = r.utf()
    if version != "v2":
        raise UnsupportedStateFormatError(
            f"{where}: state schema version {version!r}; statekit reads schema v2 (and v3 for transformWithState), "
            "as Spark 3.5-4.1 write them."
        )
    return StoreSchema(parse_struct(r.json(), where), parse_struct(r.json(), where))


def write_v2(key_json: Any, value_json: Any) -> bytes:
    """A v2 schema file of the given key and value schema JSON."""
    return _out_utf("v2") + _out_chunked(json.dumps(key_json, separators=(",", ":"))) + \
        _out_chunked(json.dumps(value_json, separators=(",", ":")))


def read_v3(data: bytes, where: str) -> list[ColumnFamily]:
    """The column families of a v3 schema file (transformWithState)."""
    r = _In(data, where)
    version = r.utf()
    if version != "v3":
        raise UnsupportedStateFormatError(
            f"{where}: state schema version {version!r}; statekit reads v3 for transformWithState column families."
        )
    out = []
    for _ in range(r.i32()):
        name = r.utf()
        r.i16()
        key = parse_struct(r.json(), where)
        r.i16()
        value = parse_struct(r.json(), where)
        encoder = r.json()
        user = r.json()
        out.append(ColumnFamily(name, key, value, encoder if isinstance(encoder, dict) else {},
                                parse_struct(user, where) if user else None))
    return out
