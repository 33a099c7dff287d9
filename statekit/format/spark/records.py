"""The record streams inside Spark state files: HDFS deltas/snapshots and RocksDB changelogs (after decompression).

v1 (HDFS delta and snapshot, changelog v1): ``int32 keyLen, key, int32 valueLen, value``; a delete
has ``valueLen == -1``; the stream ends with ``keyLen == -1``. v2 changelog (column families):
``writeUTF("v2")``, then ``byte type`` (0x01 put, 0x10 delete, 0x11 merge) before each record and
``0x00`` at the end. All integers are big-endian (java.io.DataOutputStream).
"""

from __future__ import annotations

import struct
from typing import Iterator

from statekit.format.spark.errors import TruncatedStateFileError, UnsupportedStateFormatError

PUT, DELETE, MERGE = 0x01, 0x10, 0x11
_I = struct.Struct(">i")


def _cut(where: str, pos: int) -> TruncatedStateFileError:
    return TruncatedStateFileError(f"{where}: the record stream ends at byte {pos} before its end marker; the file is "
                                   "cut short. Restore it from a copy of the checkpoint.")


def read_v1(data: bytes, where: str, *, floor_values: bool = False) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(type, key, value-or-None) of each record of a v1 stream, in file order."""
    pos, n = 0, len(data)
    while True:
        if pos + 4 > n:
            raise _cut(where, pos)
        (klen,) = _I.unpack_from(data, pos)
        pos += 4
        if klen == -1:
            if pos != n:
                raise TruncatedStateFileError(f"{where}: {n - pos} bytes follow the end marker; the file is damaged.")
            return
        if klen < 0 or pos + klen + 4 > n:
            raise _cut(where, pos)
        key = data[pos:pos + klen]
        pos += klen
        (vlen,) = _I.unpack_from(data, pos)
        pos += 4
        if vlen == -1:
            yield DELETE, key, None
            continue
        if vlen < 0 or pos + vlen > n:
            raise _cut(where, pos)
        value = data[pos:pos + (vlen - vlen % 8 if floor_values else vlen)]  # rows of Spark < 2.3 were 4 bytes long
        pos += vlen
        yield PUT, key, value


def read_v2(data: bytes, where: str) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(type, key, value-or-None) of each record of a v2 changelog."""
    if data[:4] != b"\x00\x02v2":
        raise UnsupportedStateFormatError(f"{where}: changelog version {data[2:8]!r}; statekit reads changelog v1 and "
                                          "v2 (checkpoint format v1, Spark's default).")
    pos, n = 4, len(data)
    while True:
        if pos >= n:
            raise _cut(where, pos)
        kind = data[pos]
        pos += 1
        if kind == 0:
            return
        if kind not in (PUT, DELETE, MERGE) or pos + 4 > n:
            raise _cut(where, pos) if pos + 4 > n else UnsupportedStateFormatError(
                f"{where}: unknown changelog record type {kind:#x} at byte {pos - 1}")
        (klen,) = _I.unpack_from(data, pos)
        pos += 4
        if klen < 0 or pos + klen + 4 > n:
            raise _cut(where, pos)
        key = data[pos:pos + klen]
        pos += klen
        (vlen,) = _I.unpack_from(data, pos)
        pos += 4
        if vlen == -1:
            yield kind, key, None
            continue
        if vlen < 0 or pos + vlen > n:
            raise _cut(where, pos)
        yield kind, key, data[pos:pos + vlen]
        pos += vlen


def apply(state: dict[bytes, bytes], records: Iterator[tuple[int, bytes, bytes | None]]) -> None:
    """Apply records to `state` in order (last wins; merge appends ``,`` + the operand, as RocksDB's string-append)."""
    for kind, key, value in records:
        if kind == DELETE or value is None:
            state.pop(key, None)
        elif kind == MERGE and key in state:
            state[key] = state[key] + b"," + value
        else:
            state[key] = value


def write_v1(entries: Iterator[tuple[bytes, bytes | None]]) -> bytes:
    """A v1 stream (an HDFS snapshot or delta, or a changelog v1) of `entries`; a None value is a delete."""
    out = bytearray()
    for k, v in entries:
        out += _I.pack(len(k)) + k + (_I.pack(-1) if v is None else _I.pack(len(v)) + v)
    out += _I.pack(-1)
    return bytes(out)


def write_v2(entries: Iterator[tuple[bytes, bytes]]) -> bytes:
    """A v2 changelog (column families) of puts."""
    out = bytearray(b"\x00\x02v2")
    for k, v in entries:
        out += bytes([PUT]) + _I.pack(len(k)) + k + _I.pack(len(v)) + v
    out += b"\x00"
    return bytes(out)
