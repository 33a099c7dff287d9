"""Columns cut from strided runs of entries (`locate.Run`): 2-D strided views of the bytes written into Arrow memory.

Boundary: a byte buffer and runs in, Arrow arrays out; no per-entry position array and no gather.
Within a run every entry has one key size and one value size, so a field at a fixed offset of
every entry is a strided view, and a value of one width (a Long, or a `StringValue` of one length)
is a ``(count, width)`` view copied in one pass. `keyed` chooses when a table is cut this way.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from statekit.format.arrow_memory import allocate, arrow_type, primitive
from statekit.format.flink.locate import Run, field_view

__all__ = ["constant_column", "fixed_column", "fixed_columns", "same_bytes", "string_column"]

#: entries per block of `fixed_columns`: a block of each run it reads (~26 bytes an entry for Long keys and values)
#: stays in the core's cache (2 MB L2 on this machine kind) while every column takes its values from it
_BLOCK = 16384


def _block(buf: np.ndarray, r: Run, offset: int, width: int) -> np.ndarray:
    """The `width` bytes at `offset` of every entry of `r`, as a ``(count, width)`` strided view (no copy)."""
    return np.ndarray((r.count, width), np.uint8, buffer=buf.data, offset=r.pos + offset, strides=(r.stride, 1))


def fixed_column(buf: np.ndarray, runs: list[Run], offsets: list[int], dtype: str) -> pa.Array:
    """The `dtype` value at `offsets[i]` of every entry of `runs[i]`, in run order (one pass per run, byte swap included)."""
    n = sum(r.count for r in runs)
    out, data = allocate(n, dtype)
    at = 0
    for r, off in zip(runs, offsets):
        out[at : at + r.count] = r.field(buf, off, dtype)
        at += r.count
    return primitive(data, n, arrow_type(out.dtype))


def fixed_columns(buf: np.ndarray, columns: list[tuple[list[Run], list[int], str]],
                  same: list[list[Run]]) -> list[pa.Array] | None:
    """`fixed_column` of several columns whose `runs` pair up (same counts), in one walk over the runs; None when the
    field of a `same` run's entry at the first column's offsets differs in a byte from the first column's value.

    Why one walk: each value is a strided read that touches every cache line of its run, so a column at a
    time brought the same bytes from memory once per column and once more per comparison. Block by block,
    the columns and comparisons after the first read of a block find its bytes in cache.
    """
    runs0, offsets0, dtype0 = columns[0]
    outs = [allocate(sum(r.count for r in runs0), dtype) for _, _, dtype in columns]
    # compared as unsigned integers of the same width: equal exactly when the bytes are (a float's 0.0 and -0.0
    # are not, nor is a NaN unequal to itself)
    width = np.dtype(dtype0).itemsize
    word = np.dtype(f"u{width}").newbyteorder(np.dtype(dtype0).byteorder).str
    keys = outs[0][0].view(f"u{width}")
    at = 0
    for i, r0 in enumerate(runs0):
        for lo in range(0, r0.count, _BLOCK):
            m = min(_BLOCK, r0.count - lo)
            for (runs, offsets, dtype), (out, _) in zip(columns, outs):
                r = runs[i]
                out[at + lo : at + lo + m] = field_view(buf, r.pos + lo * r.stride + offsets[i], m, r.stride, dtype)
            for runs in same:
                r = runs[i]
                got = field_view(buf, r.pos + lo * r.stride + offsets0[i], m, r.stride, word)
                if not np.array_equal(keys[at + lo : at + lo + m], got):
                    return None
        at += r0.count
    return [primitive(data, len(out), arrow_type(out.dtype)) for out, data in outs]


def constant_column(runs: list[Run], per_run: list[int], dtype: type) -> pa.Array:
    """`per_run[i]` for every entry of `runs[i]` (e.g. each run's key group)."""
    n = sum(r.count for r in runs)
    out, data = allocate(n, dtype)
    at = 0
    for r, v in zip(runs, per_run):
        out[at : at + r.count] = v
        at += r.count
    return primitive(data, n, arrow_type(out.dtype))


def same_bytes(buf: np.ndarray, a: Run, b: Run, offset: int, length: int) -> bool:
    """Whether the `length` bytes at `offset` of every entry of run `a` equal those of run `b` (same count).

    Compared 8 bytes at a time: windows from the start every 8 bytes plus one ending at the end, each
    a strided view; fewer than 8 bytes as a 2-D byte view.
    """
    if a.count != b.count:
        return False
    if length < 8:
        return bool(np.array_equal(_block(buf, a, offset, length), _block(buf, b, offset, length)))
    for j in [*range(0, length - 8, 8), length - 8]:
        if not np.array_equal(a.field(buf, offset + j, "<u8"), b.field(buf, offset + j, "<u8")):
            return False
    return True


def string_column(buf: np.ndarray, runs: list[Run], offsets: list[int], widths: list[int],
                  keys: bool = False) -> pa.Array | None:
    """Flink `StringValue`s of `widths[i]` bytes at `offsets[i]` of every entry of `runs[i]`, when every one is ASCII.

    A string of one byte width per run: its header (varint of chars + 1, one or two bytes) must say
    so, and every char be below 0x80 (one byte: its UTF-8). None when any run's strings differ
    (another header, a null, a multi-byte char): `values.strings` decodes those entry by entry.
    `keys`: the strings are the runs' keys, whose one-byte headers `locate` checked where `Run.head` says so.
    """
    n = sum(r.count for r in runs)
    lengths: list[int] = []
    for r, off, w in zip(runs, offsets, widths):
        head = 1 if w <= 127 else 2  # varint(L + 1) with L = w - head chars: below 0x80 in one byte
        ln = w - head
        if ln < 0 or ln + 1 >= 1 << 14:
            return None
        if head == 1:
            ok = (keys and r.head) or (r.field(buf, off, "u1") == ln + 1).all()
        else:  # low 7 bits with the continuation bit, then the high bits (< 0x80)
            ok = (r.field(buf, off, "<u2") == ((ln + 1) & 0x7F | 0x80 | (ln + 1) >> 7 << 8)).all()
        if not ok:
            return None
        lengths.append(ln)
    total = sum(r.count * ln for r, ln in zip(runs, lengths))
    if total >= (1 << 31) - 1:
        return None  # past int32 offsets: the entry path makes the large array
    ends, ends_buf = allocate(n + 1, np.int32)
    data, data_buf = allocate(total, np.uint8)
    ends[0] = 0
    at = byte = 0
    for r, off, w, ln in zip(runs, offsets, widths, lengths):
        if ln:  # each string's bytes one item of `ln` bytes: a copy per item, not per byte
            data[byte : byte + r.count * ln].view(f"V{ln}")[:] = r.field(buf, off + w - ln, f"V{ln}")
        ends[at + 1 : at + r.count + 1] = np.arange(byte + ln, byte + r.count * ln + 1, ln, dtype=np.int32) if ln else byte
        at += r.count
        byte += r.count * ln
    if total and data.max() >= 0x80:
        return None  # a char of 0x80 or more is a multi-byte varint, not UTF-8
    return pa.Array.from_buffers(pa.string(), n, [None, ends_buf, data_buf])
