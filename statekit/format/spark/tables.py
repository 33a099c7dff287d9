"""Raw store entries decoded into rows: plain stores (one key row, one value row) and transformWithState variables.

RocksDB bytes (RocksDBStateEncoder.scala, ``unsaferow``): a value is ``0x00`` + UnsafeRow; a plain
key likewise. With column families (transformWithState) each key starts with the family's virtual
id as a little-endian int16; a PrefixKeyScan key (MapState, timers by key) is ``int32 LE len`` +
(``0x00`` + row of the prefix columns) + (``0x00`` + row of the rest); a ListState value is
elements ``int32 LE len`` + (``0x00`` + row) joined by ``,``. HDFS stores bare rows.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from statekit.errors import CorruptSavepointError
from statekit.format.spark.errors import UnsupportedStateFormatError
from statekit.format.spark.schema import ColumnFamily
from statekit.format.spark.types import Field, Struct
from statekit.format.spark.unsaferow import row_decoder

_I = struct.Struct("<i")
TIMERS = "$timers"


@dataclass(frozen=True)
class TableShape:
    """How a store's rows become columns: the key's fields, then the value's (names as Spark's reader shows them)."""

    key: Struct
    value: Struct

    @property
    def columns(self) -> list[Field]:
        seen = {f.name for f in self.key.fields} | {"partition_id"}
        out = list(self.key.fields)
        for f in self.value.fields:
            out.append(Field(f"value_{f.name}" if f.name in seen else f.name, f.type, f.nullable))
        return out


def _damaged(where: str, what: str) -> CorruptSavepointError:
    return CorruptSavepointError(f"{where}: {what}; the state file is damaged or belongs to another query. Restore it "
                                 "from a copy of the checkpoint.")


def _strip_version(b: bytes, where: str) -> bytes:
    if not b or b[0] != 0:
        raise _damaged(where, f"a RocksDB row starts with {b[:1].hex() or 'nothing'} instead of encoding version 0")
    return b[1:]


def plain_rows(entries: dict[bytes, bytes], shape: TableShape, *, rocksdb: bool, where: str) -> list[tuple[dict, dict]]:
    """(key, value) dicts of every entry of a store without column families."""
    kd, vd = row_decoder(shape.key), row_decoder(shape.value)
    out = []
    try:
        for k, v in entries.items():
            if rocksdb:
                k, v = _strip_version(k, where), _strip_version(v, where)
            out.append((kd(k, 0, len(k)), vd(v, 0, len(v))))
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise _damaged(where, f"a state row does not decode with its schema ({exc})") from None
    return out


def by_family(entries: dict[bytes, bytes], where: str) -> dict[int, list[tuple[bytes, bytes]]]:
    """Entries grouped by their little-endian virtual column family id (the prefix removed)."""
    out: dict[int, list[tuple[bytes, bytes]]] = {}
    for k, v in entries.items():
        if len(k) < 2:
            raise _damaged(where, "a key is shorter than its column family id")
        out.setdefault(int.from_bytes(k[:2], "little", signed=True), []).append((k[2:], v))
    return out


def _prefix_key(k: bytes, where: str) -> tuple[bytes, bytes]:
    (n,) = _I.unpack_from(k, 0)
    if n < 1 or 4 + n > len(k):
        raise _damaged(where, "a prefix-scan key's prefix length is out of range")
    return _strip_version(k[4:4 + n], where), _strip_version(k[4 + n:], where)


def list_elements(v: bytes, where: str) -> list[bytes]:
    """The rows (version byte removed) of a ListState value: ``int32 LE len`` + (``0x00`` + row), joined by ``,``."""
    out, pos = [], 0
    while pos < len(v):
        (n,) = _I.unpack_from(v, pos)
        if n < 1 or pos + 4 + n > len(v):
            raise _damaged(where, "a list element's length is out of range")
        out.append(_strip_version(v[pos + 4:pos + 4 + n], where))
        pos += 4 + n
        if pos < len(v):
            if v[pos] != 0x2C:
                raise _damaged(where, "list elements are not separated by ','")
            pos += 1
    return out


def variable_shape(kind: str, cf: ColumnFamily) -> TableShape:
    """The columns of a transformWithState variable: grouping key, [map user key], value (timers: the expiry)."""
    if kind == "MapState":
        key, user = sub_struct(cf.key, "key"), sub_struct(cf.key, "userKey")
        return TableShape(Struct(key.fields + user.fields), cf.value)
    if kind == "TimerState":
        return TableShape(sub_struct(cf.key, "key"), Struct((Field("expiration_timestamp_ms", "long", False),)))
    return TableShape(cf.key, cf.value)


def sub_struct(s: Struct, name: str) -> Struct:
    """The struct field `name` of `s` (a transformWithState composite key)."""
    for f in s.fields:
        if f.name == name and isinstance(f.type, Struct):
            return f.type
    raise UnsupportedStateFormatError(f"a transformWithState key schema lacks the struct field {name!r}: {s.names}")


def variable_rows(kind: str, cf: ColumnFamily, items: list[tuple[bytes, bytes]], where: str) -> list[tuple[dict, dict]]:
    """(key, value) dicts of one transformWithState variable (list and map: one row per element)."""
    out: list[tuple[dict, dict]] = []
    try:
        if kind == "ListState":
            kd, vd = row_decoder(cf.key), row_decoder(cf.value)
            for k, v in items:
                key = kd(b := _strip_version(k, where), 0, len(b))
                out += [(key, vd(e, 0, len(e))) for e in list_elements(v, where)]
        elif kind in ("MapState", "TimerState"):
            prefix_schema = Struct(cf.key.fields[:cf.prefix_columns])
            rest_schema = Struct(cf.key.fields[cf.prefix_columns:])
            pd, rd, vd = row_decoder(prefix_schema), row_decoder(rest_schema), row_decoder(cf.value)
            for k, v in items:
                p, r = _prefix_key(k, where)
                full = {**pd(p, 0, len(p)), **rd(r, 0, len(r))}
                if kind == "MapState":
                    val = _strip_version(v, where)
                    out.append(({**(full["key"] or {}), **(full["userKey"] or {})}, vd(val, 0, len(val))))
                else:
                    out.append((full["key"] or {}, {"expiration_timestamp_ms": full["expiryTimestampMs"]}))
        else:
            kd, vd = row_decoder(cf.key), row_decoder(cf.value)
            for k, v in items:
                kb, vb = _strip_version(k, where), _strip_version(v, where)
                out.append((kd(kb, 0, len(kb)), vd(vb, 0, len(vb))))
    except (struct.error, UnicodeDecodeError, IndexError, KeyError) as exc:
        raise _damaged(where, f"a {kind} entry does not decode with its schema ({exc})") from None
    return out


def to_rows(pairs: list[tuple[dict, dict]], shape: TableShape, partition: int) -> list[dict[str, Any]]:
    """(key, value) pairs as flat rows: ``partition_id``, the key's fields, the value's fields."""
    names = [c.name for c in shape.columns]
    nk = len(shape.key.fields)
    out = []
    for key, value in pairs:
        vals = [partition, *key.values(), *value.values()]
        out.append(dict(zip(["partition_id", *names[:nk], *names[nk:]], vals)))
    return out
