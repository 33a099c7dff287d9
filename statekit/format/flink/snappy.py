"""Snappy's framing format, as Flink writes key groups and operator state with snapshot compression."""

from __future__ import annotations

from statekit.format.flink.binary import DataInput

__all__ = ["unframe_snappy"]


def unframe_snappy(data: bytes | memoryview, where: str) -> tuple[bytes, dict[int, int]]:
    """Decode a Snappy framing-format stream; also map each chunk's offset to its offset in the output."""
    import cramjam  # Snappy is only needed for savepoints taken with snapshot compression

    inp = DataInput(data, where)
    out = bytearray()
    at: dict[int, int] = {}
    while inp.remaining():
        start = inp.pos
        t = inp.u8("a Snappy chunk type")
        n = int.from_bytes(inp.bytes(3, "a Snappy chunk length"), "little")
        body = inp.bytes(n, "a Snappy chunk")
        at[start] = len(out)
        if t == 0x00:
            try:
                out += bytes(cramjam.snappy.decompress_raw(body[4:]))
            except Exception as exc:  # cramjam raises its own DecompressionError
                inp.pos = start
                raise inp.fail(f"a Snappy chunk does not decompress ({exc})") from None
        elif t == 0x01:
            out += body[4:]
        elif t == 0xFF:
            if body != b"sNaPpY":
                inp.pos = start
                raise inp.fail("a Snappy stream identifier is malformed")
        elif t < 0x80:
            inp.pos = start
            raise inp.fail(f"unknown Snappy chunk type {t:#x}")
    at[inp.pos] = len(out)
    return bytes(out), at
