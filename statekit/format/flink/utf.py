"""Flink's `DataOutput.writeUTF` text: modified UTF-8 behind a u16 length, so at most 65,535 bytes."""

from __future__ import annotations

import struct
from typing import Iterable

from statekit.errors import UnreadableOutputError

#: `writeUTF` stores the length in an unsigned short; Java throws `UTFDataFormatException` past it.
MAX_UTF_BYTES = 0xFFFF


def modified_utf8(text: str) -> bytes:
    """The bytes `writeUTF` writes after the length: per UTF-16 unit, NUL as ``c0 80``."""
    if text.isascii() and "\x00" not in text:
        return text.encode("ascii")
    units = text.encode("utf-16-be", "surrogatepass")
    out = bytearray()
    for (unit,) in struct.iter_unpack(">H", units):
        if 0 < unit < 0x80:
            out.append(unit)
        elif unit < 0x800:
            out += bytes((0xC0 | unit >> 6, 0x80 | unit & 0x3F))
        else:
            out += bytes((0xE0 | unit >> 12, 0x80 | unit >> 6 & 0x3F, 0x80 | unit & 0x3F))
    return bytes(out)


def write_utf(text: str, what: str = "a name") -> bytes:
    """`DataOutput.writeUTF(text)`: u16 length + modified UTF-8; longer text is an `UnreadableOutputError`."""
    b = modified_utf8(text)
    if len(b) > MAX_UTF_BYTES:
        shown = f"{text[:40]!r}..." if len(text) > 40 else repr(text)
        raise UnreadableOutputError(
            f"{what} {shown} is {len(b):,} bytes of modified UTF-8; Flink's metadata holds at most {MAX_UTF_BYTES:,} "
            "(DataOutput.writeUTF). Nothing was written; choose a shorter one.")
    return struct.pack(">H", len(b)) + b


def check_metadata_texts(texts: Iterable[tuple[str, str | None]]) -> None:
    """Refuse, before anything is written, any (what, text) pair that `_metadata` could not hold (uids, names,
    state names): the rule `write_utf` enforces when `_metadata` is finally written."""
    for what, text in texts:
        if text is not None:
            write_utf(text, what)


__all__ = ["MAX_UTF_BYTES", "check_metadata_texts", "modified_utf8", "write_utf"]
