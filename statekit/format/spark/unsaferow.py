"""Spark's UnsafeRow (catalyst/expressions/UnsafeRow.java) decoded into Python values of a state schema.

Layout: a null bitset of ``((n + 63) // 64) * 8`` bytes (bit i set = field i NULL, little-endian
64-bit words), then one 8-byte little-endian word per field. Fixed-width values sit in their
word; variable-width ones (strings, binary, nested structs) store ``offset << 32 | size`` with the
offset from the row's start.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any, Callable

from statekit.errors import CorruptSavepointError
from statekit.format.spark.types import Struct

_Q = struct.Struct("<q")
_I = struct.Struct("<i")
_H = struct.Struct("<h")
_B = struct.Struct("<b")
_F = struct.Struct("<f")
_D = struct.Struct("<d")

Reader = Callable[[bytes, int, int], Any]  # (buffer, row start, field word offset) -> value


def _var(buf: bytes, base: int, at: int) -> tuple[int, int]:
    (w,) = _Q.unpack_from(buf, at)
    return base + (w >> 32), w & 0xFFFFFFFF


def _reader(t: "str | Struct") -> Reader:
    if isinstance(t, Struct):
        inner = row_decoder(t)

        def nested(buf: bytes, base: int, at: int) -> Any:
            off, size = _var(buf, base, at)
            return inner(buf, off, size)
        return nested
    if t in ("long", "timestamp", "timestamp_ntz"):
        return lambda buf, base, at: _Q.unpack_from(buf, at)[0]
    if t in ("integer", "date"):
        return lambda buf, base, at: _I.unpack_from(buf, at)[0]
    if t == "short":
        return lambda buf, base, at: _H.unpack_from(buf, at)[0]
    if t == "byte":
        return lambda buf, base, at: _B.unpack_from(buf, at)[0]
    if t == "boolean":
        return lambda buf, base, at: buf[at] != 0
    if t == "float":
        return lambda buf, base, at: _F.unpack_from(buf, at)[0]
    if t == "double":
        return lambda buf, base, at: _D.unpack_from(buf, at)[0]
    if t in ("null", "void"):
        return lambda buf, base, at: None
    if t == "string":
        def string(buf: bytes, base: int, at: int) -> str:
            off, size = _var(buf, base, at)
            return bytes(buf[off:off + size]).decode("utf-8")
        return string
    if t == "binary":
        def binary(buf: bytes, base: int, at: int) -> bytes:
            off, size = _var(buf, base, at)
            return bytes(buf[off:off + size])
        return binary
    if t.startswith("decimal("):
        scale = int(t.split(",")[1].rstrip(")"))
        return lambda buf, base, at: Decimal(_Q.unpack_from(buf, at)[0]).scaleb(-scale)
    raise AssertionError(t)  # types.parse_struct admits only the types above


def row_decoder(schema: Struct) -> Callable[[bytes, int, int], dict[str, Any]]:
    """A function ``(buffer, start, size) -> {field: value}`` decoding one UnsafeRow of `schema`."""
    n = len(schema.fields)
    bitset = ((n + 63) // 64) * 8
    readers = [(f.name, _reader(f.type), bitset + 8 * i, i) for i, f in enumerate(schema.fields)]
    need = bitset + 8 * n

    def decode(buf: bytes, start: int, size: int) -> dict[str, Any]:
        if size < need:
            raise CorruptSavepointError(f"an UnsafeRow of {size} bytes is shorter than its schema's {need}")
        out: dict[str, Any] = {}
        for name, read, off, i in readers:
            if buf[start + (i >> 3)] >> (i & 7) & 1:
                out[name] = None
            else:
                out[name] = read(buf, start, start + off)
        return out
    return decode


def decode_rows(rows: list[bytes], schema: Struct, where: str) -> list[dict[str, Any]]:
    """Every row of `rows` as a dict of `schema`'s fields (`where` names their file in errors)."""
    dec = row_decoder(schema)
    try:
        return [dec(r, 0, len(r)) for r in rows]
    except (struct.error, UnicodeDecodeError, IndexError, CorruptSavepointError) as exc:
        raise CorruptSavepointError(
            f"{where}: a state row does not decode with its state schema ({exc}). The file is damaged or belongs to "
            "another query; restore it from a copy of the checkpoint."
        ) from None


def _fixed(t: str) -> Callable[[Any], bytes] | None:
    """The 8-byte word of a fixed-width value (zero-padded, as UnsafeRowWriter writes it), or None if variable."""
    if t in ("long", "timestamp", "timestamp_ntz"):
        return lambda v: _Q.pack(int(v))
    if t in ("integer", "date"):
        return lambda v: _I.pack(int(v)) + bytes(4)
    if t == "short":
        return lambda v: _H.pack(int(v)) + bytes(6)
    if t == "byte":
        return lambda v: _B.pack(int(v)) + bytes(7)
    if t == "boolean":
        return lambda v: (b"\x01" if v else b"\x00") + bytes(7)
    if t == "float":
        return lambda v: _F.pack(float(v)) + bytes(4)
    if t == "double":
        return lambda v: _D.pack(float(v))
    if t in ("null", "void"):
        return lambda v: bytes(8)
    if t.startswith("decimal("):
        scale = int(t.split(",")[1].rstrip(")"))
        return lambda v: _Q.pack(int(Decimal(v).scaleb(scale).to_integral_value()))
    return None


def row_encoder(schema: Struct) -> Callable[[dict[str, Any]], bytes]:
    """A function ``{field: value} -> bytes``: the UnsafeRow Spark's UnsafeRowWriter writes for those values.

    The bytes are Spark's exactly (NULL fields zeroed, variable-width data padded to 8 bytes with zeros),
    so an encoded key equals the key Spark looks up. Values are Python values of the fields' types:
    ints for longs and timestamps (microseconds), str, bytes, float, bool, Decimal, dicts for structs.
    """
    n = len(schema.fields)
    bitset = ((n + 63) // 64) * 8
    parts: list[tuple[str, Callable[[Any], bytes] | None, Callable[[Any], bytes] | None]] = []
    for f in schema.fields:
        if isinstance(f.type, Struct):
            parts.append((f.name, None, row_encoder(f.type)))
        elif f.type in ("string", "binary"):
            parts.append((f.name, None, (lambda v: v.encode("utf-8")) if f.type == "string" else bytes))
        else:
            parts.append((f.name, _fixed(f.type), None))

    def encode(values: dict[str, Any]) -> bytes:
        nulls = bytearray(bitset)
        words = bytearray(8 * n)
        tail = bytearray()
        for i, (name, fixed, var) in enumerate(parts):
            v = values.get(name)
            if v is None:
                nulls[i >> 3] |= 1 << (i & 7)
            elif fixed is not None:
                words[8 * i:8 * i + 8] = fixed(v)
            else:
                data = var(v)  # type: ignore[misc]
                words[8 * i:8 * i + 8] = _Q.pack((bitset + 8 * n + len(tail)) << 32 | len(data))
                tail += data + bytes(-len(data) % 8)
        return bytes(nulls + words + tail)
    return encode
