"""`DataInput`: Java's big-endian `DataInputStream` over bytes, failing with a typed error at the first short read.

Every Flink structure statekit parses (`_metadata`, backend proxies, serializer snapshots, state
values) is read through this one class, so a truncated or damaged file always ends in a
`CorruptSavepointError` naming the file, the offset and the field being read.
"""

from __future__ import annotations

import struct

from statekit.errors import CorruptSavepointError

_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")


class DataInput:
    """A cursor over `data`; `where` names the file (or stream) in error messages."""

    __slots__ = ("data", "pos", "end", "where")

    def __init__(self, data: bytes | memoryview, where: str, *, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.where = where

    def fail(self, why: str) -> CorruptSavepointError:
        return CorruptSavepointError(
            f"{self.where}: {why} at offset {self.pos}. The savepoint is damaged or truncated; "
            "take a new savepoint or restore this one from a copy."
        )

    def _need(self, n: int, what: str) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise self.fail(f"truncated: {what} needs {n} byte(s) but only {max(self.end - p, 0)} remain")
        self.pos = p + n
        return p

    def remaining(self) -> int:
        return self.end - self.pos

    def u8(self, what: str = "a byte") -> int:
        return self.data[self._need(1, what)]

    def i8(self, what: str = "a byte") -> int:
        b = self.data[self._need(1, what)]
        return b - 256 if b > 127 else b

    def bool(self, what: str = "a boolean") -> bool:
        return self.data[self._need(1, what)] != 0

    def i16(self, what: str = "a short") -> int:
        return _I16.unpack_from(self.data, self._need(2, what))[0]

    def u16(self, what: str = "an unsigned short") -> int:
        return _U16.unpack_from(self.data, self._need(2, what))[0]

    def i32(self, what: str = "an int") -> int:
        return _I32.unpack_from(self.data, self._need(4, what))[0]

    def i64(self, what: str = "a long") -> int:
        return _I64.unpack_from(self.data, self._need(8, what))[0]

    def f32(self, what: str = "a float") -> float:
        return _F32.unpack_from(self.data, self._need(4, what))[0]

    def f64(self, what: str = "a double") -> float:
        return _F64.unpack_from(self.data, self._need(8, what))[0]

    def bytes(self, n: int, what: str = "bytes") -> bytes:
        p = self._need(n, what)
        return bytes(self.data[p : p + n])

    def skip(self, n: int, what: str = "bytes") -> None:
        self._need(n, what)

    def count(self, what: str, *, limit: int = 1 << 28) -> int:
        """An i32 element count, refused when negative or absurdly large (a damaged length field)."""
        n = self.i32(what)
        if n < 0 or n > limit:
            self.pos -= 4
            raise self.fail(f"{what} is {n}, not a valid count")
        return n

    def utf(self, what: str = "a string") -> str:
        """`DataInput.readUTF`: u16 length + modified UTF-8 (NUL as c0 80, supplementary chars as surrogates)."""
        n = self.u16(f"the length of {what}")
        raw = self.bytes(n, what)
        try:
            if b"\xc0\x80" in raw:
                raw = raw.replace(b"\xc0\x80", b"\x00")
            text = raw.decode("utf-8", "surrogatepass")
            if any("\ud800" <= c <= "\udfff" for c in text):
                text = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be")
            return text
        except UnicodeError:
            self.pos -= n
            raise self.fail(f"{what} is not modified UTF-8") from None


def java_string(inp: DataInput, what: str = "a string") -> str | None:
    """`StringValue.readString`: varint(len + 1) (0 = null), then each UTF-16 char as a varint."""
    n = _varint(inp, what)
    if n == 0:
        return None
    n -= 1
    data, p, end = inp.data, inp.pos, inp.end
    if p + n <= end and all(b < 0x80 for b in data[p : p + n]):  # plain ASCII: one byte per char
        inp.pos = p + n
        return bytes(data[p : p + n]).decode("ascii")
    chars = []
    for _ in range(n):
        chars.append(_varint(inp, what))
    try:
        return struct.pack(f">{n}H", *chars).decode("utf-16-be", "surrogatepass")
    except (struct.error, UnicodeError):
        raise inp.fail(f"{what} holds a character outside UTF-16") from None


def _varint(inp: DataInput, what: str) -> int:
    shift = result = 0
    while True:
        b = inp.u8(what)
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        shift += 7
        if shift > 35:
            raise inp.fail(f"{what} has a malformed length")
