"""RocksDB SST files read directly with numpy: every live entry of a Spark RocksDB checkpoint without opening RocksDB.

A block-based table (RocksDB table/block_based/, format_version 2-5): a footer (the last 53 bytes:
checksum type, metaindex and index block handles, format version, magic) points at the index block,
whose entries are the data blocks' handles (offset, size as varints; delta-encoded sizes when the
properties block says ``rocksdb.index.value.is.delta.encoded``). A block is followed by a 5-byte trailer
(compression type, checksum); an LZ4 or Snappy block starts with its uncompressed size as a varint. A
data block holds entries ``shared, non_shared, value_length`` (varints), the key's non-shared bytes and
the value, then the restart offsets (uint32) and their count: the key of an entry after a restart point
shares ``shared`` leading bytes with the key before it. A key is the user key + 8 bytes ``seq << 8 |
type`` (little-endian). Entries are parsed for every restart segment of every block at once (the j-th
entry of all segments in one numpy step), so no Python object is made per entry.

Across the SSTs of one checkpoint the newest entry (highest sequence number) of a user key wins and a
deletion hides it: resolved by sorting a 64-bit hash of the user keys, unless the SSTs' properties and the
checkpoint's count of live keys prove every entry a distinct live key (`_distinct`). The blocks' own checksums (XXH3)
are not verified here; the SST's Hadoop ``.crc`` side file is, and an SST without one is left to RocksDB.
Anything this reader does not handle exactly (merge operands, range deletions, a hash index in data
blocks, lengths of 128 bytes or more, other compressions, a hash collision, no checksum side file)
raises `Unsupported`, and the caller opens the checkpoint with RocksDB instead
(`statekit.format.spark.providers`): never a wrong answer.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from statekit.errors import CorruptSavepointError
from statekit.format.spark.layout import hadoop_checked

_MAGIC = 0x88E241B785F4CFF7  # kBlockBasedTableMagicNumber
_FOOTER = 53
_TRAILER = 5
_NONE, _SNAPPY, _LZ4 = 0, 1, 4
_PUT, _DELETE, _SINGLE_DELETE = 1, 0, 7


class Unsupported(Exception):
    """This SST (or set of SSTs) uses a feature the direct reader leaves to RocksDB."""


@dataclass
class Entries:
    """Entries as two byte buffers with row bounds: ``keys[key_starts[i]:key_ends[i]]`` is entry i's user key.

    Both buffers hold at least 8 bytes after the last row (the column decoder reads whole words).
    """

    keys: np.ndarray
    key_starts: np.ndarray
    key_ends: np.ndarray
    values: np.ndarray
    value_starts: np.ndarray
    value_ends: np.ndarray
    key_stride: int = 0  # when not 0: ``key_starts[i] == key_starts[0] + i * key_stride``

    def __len__(self) -> int:
        return len(self.key_starts)

    def where(self, mask: np.ndarray | None) -> Entries:
        """The entries where `mask` is True (all when None)."""
        if mask is None:
            return self
        return Entries(self.keys, self.key_starts[mask], self.key_ends[mask], self.values, self.value_starts[mask],
                       self.value_ends[mask])


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += 7


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _block(data: bytes | mmap.mmap, offset: int, size: int, where: str) -> bytes:
    """The contents of the block at (offset, size), decompressed."""
    if offset + size + _TRAILER > len(data):
        raise CorruptSavepointError(f"{where}: a block handle points past the end of the file; the SST is damaged.")
    raw = data[offset:offset + size]
    kind = data[offset + size]
    if kind == _NONE:
        return raw
    import cramjam  # a core dependency (also Spark's lz4-java blocks)

    try:
        if kind == _LZ4:
            n, pos = _varint(raw, 0)
            return bytes(cramjam.lz4.decompress_block(raw[pos:], output_len=n))
        if kind == _SNAPPY:
            return bytes(cramjam.snappy.decompress_raw(raw))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise CorruptSavepointError(f"{where}: a block does not decompress ({exc}); the SST is damaged.") from None
    raise Unsupported(f"compression type {kind}")


def _plain_entries(block: bytes) -> list[tuple[bytes, bytes]]:
    """(key, value) of a small block with value lengths (metaindex, properties)."""
    (nr,) = np.frombuffer(block[-4:], "<u4")
    end = len(block) - 4 - 4 * int(nr & 0x7FFFFFFF)
    out, pos, last = [], 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        non_shared, pos = _varint(block, pos)
        vlen, pos = _varint(block, pos)
        last = last[:shared] + block[pos:pos + non_shared]
        pos += non_shared
        out.append((last, block[pos:pos + vlen]))
        pos += vlen
    return out


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each position of `pos` in `buf` (padded with 10 bytes), and the position after it."""
    byte = buf[pos].astype(np.int64)
    value, more, size = byte & 0x7F, byte >= 0x80, np.ones(len(pos), np.int64)
    for k in range(1, 10):  # byte k of the varints not yet ended
        if not more.any():
            return value, pos + size
        byte = buf[pos + k].astype(np.int64)
        value |= np.where(more, (byte & 0x7F) << (7 * k), 0)
        size += more
        more &= byte >= 0x80
    if more.any():
        raise CorruptSavepointError("an SST index holds a varint longer than 10 bytes; the SST is damaged.")
    return value, pos + size


def _handles(block: bytes, delta: bool) -> tuple[np.ndarray, np.ndarray]:
    """The data block handles of an index block (kBinarySearch): offsets and sizes."""
    fast = _restart_handles(block, delta)
    if fast is not None:
        return fast
    (nr,) = np.frombuffer(block[-4:], "<u4")
    restarts = set(np.frombuffer(block[-4 - 4 * int(nr):-4], "<u4").tolist())
    end = len(block) - 4 - 4 * int(nr)
    out: list[tuple[int, int]] = []
    pos = 0
    while pos < end:
        at = pos
        _, pos = _varint(block, pos)
        non_shared, pos = _varint(block, pos)
        if not delta:
            _, pos = _varint(block, pos)  # value length
        pos += non_shared
        if not delta or at in restarts:
            off, pos = _varint(block, pos)
            size, pos = _varint(block, pos)
        else:
            d, pos = _varint(block, pos)
            off, size = out[-1][0] + out[-1][1] + _TRAILER, out[-1][1] + _zigzag(d)
        out.append((off, size))
    return np.array([o for o, _ in out], np.int64), np.array([s for _, s in out], np.int64)


def _restart_handles(block: bytes, delta: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """`_handles` at once with numpy when every index entry is a restart point (index_block_restart_interval 1,
    Spark's setting): each entry then holds its whole handle. None when the entries do not tile the block so."""
    (nr,) = np.frombuffer(block[-4:], "<u4")
    end = len(block) - 4 - 4 * int(nr)
    if nr == 0 or end < 0:
        return None
    buf = np.frombuffer(block + b"\0" * 10, np.uint8)
    at = np.frombuffer(block[end:end + 4 * int(nr)], "<u4").astype(np.int64)
    shared, pos = _varints(buf, at)
    non_shared, pos = _varints(buf, pos)
    if not delta:
        _, pos = _varints(buf, pos)  # value length
    off, pos = _varints(buf, pos + non_shared)
    size, pos = _varints(buf, pos)
    if np.any(shared != 0) or np.any(pos != np.r_[at[1:], end]):
        return None
    return off, size


@dataclass
class _Table:
    """One SST's bytes and the handles of its data blocks, in key order; how many entries its properties block
    counts, and how many of them are deletions."""

    path: Path
    data: bytes | mmap.mmap
    offsets: np.ndarray
    sizes: np.ndarray
    entries: int = 0
    deletions: int = 0


def _table(path: Path) -> _Table:
    """The data block handles of one SST (footer, metaindex, properties and index read; no data block yet)."""
    with path.open("rb") as f:  # mapped, not read: no copy, no fresh memory (SSTs are never rewritten in place)
        data: bytes | mmap.mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else b""
    if not hadoop_checked(path, data):
        raise Unsupported("no checksum side file: RocksDB verifies its blocks' own checksums instead")
    where = str(path)
    if len(data) < _FOOTER or int.from_bytes(data[-8:], "little") != _MAGIC:
        raise CorruptSavepointError(f"{where} does not end with RocksDB's block-based table magic; the SST is damaged. "
                                    "Restore it from a copy of the checkpoint.")
    version = int.from_bytes(data[-12:-8], "little")
    if not 2 <= version <= 5:
        raise Unsupported(f"format_version {version}")
    footer = data[-_FOOTER:]
    pos = 1  # checksum type
    meta_off, pos = _varint(footer, pos)
    meta_size, pos = _varint(footer, pos)
    index_off, pos = _varint(footer, pos)
    index_size, pos = _varint(footer, pos)
    meta = dict(_plain_entries(_block(data, meta_off, meta_size, where)))
    if b"rocksdb.properties" not in meta:
        raise Unsupported("no properties block")
    handle = meta[b"rocksdb.properties"]
    p_off, p = _varint(handle, 0)
    p_size, _ = _varint(handle, p)
    props = dict(_plain_entries(_block(data, p_off, p_size, where)))

    def prop(name: str) -> int:
        raw = props.get(name.encode())
        return _varint(raw, 0)[0] if raw else 0

    if prop("rocksdb.merge.operands") or prop("rocksdb.num.range-deletions") or b"rocksdb.range_del" in meta:
        raise Unsupported("merge operands or range deletions")
    if props.get(b"rocksdb.block.based.table.index.type") != b"\0\0\0\0":  # fixed32 kBinarySearch
        raise Unsupported("index type")
    if props.get(b"rocksdb.comparator", b"leveldb.BytewiseComparator") != b"leveldb.BytewiseComparator":
        raise Unsupported("comparator")
    delta = prop("rocksdb.index.value.is.delta.encoded") == 1
    offsets, sizes = _handles(_block(data, index_off, index_size, where), delta)
    # the data blocks lie before the footer: their trailers' compression bytes, and 10 bytes after a block's start
    # (the varint `_decompress` reads), stay inside the file
    if len(offsets) and (int(offsets.min()) < 0 or int(sizes.min()) < 1
                         or int((offsets + sizes).max()) + _TRAILER > len(data) - _FOOTER):
        raise CorruptSavepointError(f"{where}: a block handle points past the end of the file; the SST is damaged.")
    return _Table(path, data, offsets, sizes, prop("rocksdb.num.entries"), prop("rocksdb.deleted.keys"))


def _decompress(table: _Table, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Data blocks lo..hi-1 of `table` decompressed one after another into one buffer (padded with zeros), and
    each block's start and size in it."""
    import cramjam  # a core dependency (also Spark's lz4-java blocks)

    data = np.frombuffer(table.data, np.uint8)
    off, size = table.offsets[lo:hi], table.sizes[lo:hi]
    kind = data[off + size]
    packed = kind != _NONE
    if np.any(packed & (kind != _LZ4) & (kind != _SNAPPY)):
        raise Unsupported(f"compression type {int(kind[packed & (kind != _LZ4) & (kind != _SNAPPY)][0])}")
    # LZ4 and Snappy blocks start with their uncompressed size (a varint); an uncompressed block is its bytes
    n, head = _varints(data, off)
    head = np.where(packed, head - off, 0)
    n = np.where(packed, n, size)
    if np.any(packed & (head >= size)) or np.any(n > 256 * size + 64):  # (LZ4 expands 255:1 at most, Snappy less)
        raise CorruptSavepointError(f"{table.path}: a data block's size is damaged; the SST is damaged.")
    bases = np.cumsum(n) - n
    total = int(bases[-1] + n[-1]) if len(n) else 0
    buf = np.empty(total + _PAD, np.uint8)
    buf[total:] = 0
    in_order = bool(np.all(off[1:] + head[1:] - (off[:-1] + size[:-1]) >= 4))  # (as RocksDB writes them)
    try:
        if bool(np.all(kind == _LZ4)) and in_order and int(n.max(initial=0)) <= _FRAME_BLOCK \
                and int(size.max(initial=0)) <= _FRAME_BLOCK:
            # Spark's setting. One call for all the blocks, as the blocks of one LZ4 frame: a call per block of a few KB
            # releases and takes back the GIL each time, and two threads doing so ran slower than one
            _frame_into(table.data, off + head, off + size, buf[:total])
        else:
            into, dst, src = cramjam.lz4.decompress_block_into, memoryview(buf.data), memoryview(table.data)
            for o, s, h, b, m, k in zip(off.tolist(), size.tolist(), head.tolist(), bases.tolist(), n.tolist(),
                                        kind.tolist()):
                if k == _NONE:
                    dst[b:b + m] = src[o:o + m]
                elif (into(src[o + h:o + s], dst[b:b + m], output_len=m) if k == _LZ4 else
                      cramjam.snappy.decompress_raw_into(src[o:o + s], dst[b:b + m])) != m:
                    raise ValueError(f"fewer bytes than its {m}")
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise CorruptSavepointError(f"{table.path}: a block does not decompress ({exc}); the SST is damaged.") from None
    return buf, bases, n


# An LZ4 frame (lz4's frame format) of independent blocks of at most 4 MB, no checksums: magic, FLG 0x60 (version 1,
# blocks independent), BD 0x70 (4 MB), then the descriptor's checksum (byte 1 of XXH32 of FLG and BD, seed 0)
_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x70\x73"
_FRAME_BLOCK = 4 << 20


def _frame_into(data: bytes | mmap.mmap, starts: np.ndarray, ends: np.ndarray, out: np.ndarray) -> None:
    """Decompress the raw LZ4 blocks ``data[starts[i]:ends[i]]`` one after another into `out`, which they fill exactly.
    The blocks are in file order with at least 4 bytes between two (a block's trailer and the next one's varint).

    Each block, prefixed with its size, is a block of one LZ4 frame, decoded in one call. The sizes each block
    decompresses to are not checked one by one, only their sum: the whole SST was verified against its checksum
    file before (`_table`), and a data block's restart array is checked when it is parsed.
    """
    import cramjam
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(starts)
    if not n:
        return
    # The frame is built by two copies that release the GIL, not by a Python loop joining slices (which holds it
    # while it copies: two threads then waited for each other): the blocks' bytes copied at once behind the frame's
    # header, each block's size written over the last 4 bytes before it, and one Arrow `take` of the pieces from a
    # size to the end of its block, leaving out the rest of each gap
    lo, hi = int(starts[0]), int(ends[-1])
    head = len(_FRAME_HEADER) + 4  # (+ the first block's size)
    tmp = np.empty(head + hi - lo + 4, np.uint8)
    tmp[:len(_FRAME_HEADER)] = np.frombuffer(_FRAME_HEADER, np.uint8)
    tmp[head:head + hi - lo] = np.frombuffer(data, np.uint8, hi - lo, lo)
    tmp[head + hi - lo:] = 0  # the end mark
    at = starts - (lo - head) - 4  # where each block's size goes
    _view(tmp, "<u4")[at] = (ends - starts).astype("<u4")
    bounds = np.empty(2 * n, np.int64)  # piece 2i: block i with its size; piece 2i + 1: the rest of the gap after it
    bounds[0] = 0
    bounds[1::2] = ends - (lo - head)
    bounds[2::2] = at[1:]
    bounds[-1] = len(tmp)
    pieces = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2 * n - 1,
                                              [None, pa.py_buffer(bounds), pa.py_buffer(tmp)])
    frame = pc.take(pieces, pa.array(np.arange(0, 2 * n, 2))).buffers()[2]
    size = len(tmp) - int(np.sum(starts[1:] - ends[:-1])) + 4 * (n - 1)
    got = cramjam.lz4.decompress_into(memoryview(frame)[:size], out.data)
    if got != len(out):
        raise ValueError(f"{got} bytes instead of {len(out)}")


def _masked(word: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """`word` with only its first `valid` bytes (clipped to 0-8) kept."""
    if int(valid.min()) == int(valid.max()):
        v1 = min(max(int(valid[0]), 0), 8) if len(valid) else 8
        return word & np.uint64((1 << (8 * v1)) - 1)
    v = np.clip(valid, 0, 8).astype(np.uint64)
    with np.errstate(over="ignore"):
        return word & np.where(v == 8, np.uint64(0xFFFFFFFFFFFFFFFF), (np.uint64(1) << (np.uint64(8) * v)) - np.uint64(1))


def _view(buf: np.ndarray, dtype: str) -> np.ndarray:
    """A little-endian `dtype` at every byte offset of `buf` (overlapping, unaligned): gathering one is one item."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((len(buf) - size + 1,), dtype, buf, 0, (1,))


def _u64(buf: np.ndarray) -> np.ndarray:
    return _view(buf, "<u8")


_LOW = np.array([(1 << (8 * i)) - 1 for i in range(8)], np.uint64)  # the low i bytes of a word
_PAD = 8 * 33  # zero bytes after a chunk's blocks: a key's words (< 256 bytes) read from any entry stay inside
# _SHARED[w][s]: the bytes of word w of a key that an entry sharing s bytes takes from the entry before
_SHARED = [np.array([(1 << (8 * min(max(s - 8 * w, 0), 8))) - 1 for s in range(256)], np.uint64) for w in range(32)]
_CHUNK = 1024  # data blocks parsed together (~4 MB): a buffer the cache holds, arrays the allocator reuses


@dataclass
class _Chunk:
    """What deduplication needs of the entries of some data blocks: their user keys (rows of `stride` bytes in
    `flat`), whether each is a put, its 8-byte trailer (sequence number and type) and its hash."""

    flat: np.ndarray
    stride: int
    ulen: np.ndarray
    put: np.ndarray
    trailer: np.ndarray
    h: np.ndarray


T = TypeVar("T")


def read(paths: list[Path], decode: Callable[[Entries], T], *,
         live_keys: int | None = None) -> list[tuple[T, np.ndarray | None]]:
    """The entries of the SSTs of one RocksDB checkpoint, in chunks: each chunk's puts are given to `decode` as soon
    as they are parsed (its decompressed blocks are released after it unless `decode` keeps them); returned with,
    once every chunk is parsed, which of them are live (a mask, None when all are): the newest version of each user
    key wins, and a deletion hides it. The live entries of different chunks have different user keys.

    `live_keys`, when given, is how many live user keys the checkpoint holds, as its writer counted them (Spark's
    ``numKeys``; `providers.sst_entries` says when it can be trusted): when it proves every entry a distinct live
    key (`_distinct`), the entries are not deduplicated.
    """
    tables = [_table(p) for p in paths]
    if _distinct(tables, live_keys):
        return _read_distinct(tables, decode)
    chunks: list[_Chunk] = []
    decoded = []
    for t in tables:
        for i in range(0, len(t.offsets), _CHUNK):
            chunk, entries = _parse(*_decompress(t, i, i + _CHUNK))
            decoded.append(decode(entries.where(None if chunk.put.all() else chunk.put)))
            chunks.append(chunk)
    if not chunks:
        return []
    # the newest version of each user key wins. Equal keys have equal 64-bit hashes: sorted (a sort of plain
    # integers, several times faster than an argsort), equal neighbours name the hashes held more than once; their
    # entries must be equal keys, and of a group of equal keys the highest sequence number is kept
    h = np.concatenate([c.h for c in chunks]) if len(chunks) > 1 else chunks[0].h
    s = np.sort(h)
    again = s[1:][s[1:] == s[:-1]]
    older = _older(chunks, h, np.flatnonzero(np.isin(h, again))) if len(again) else np.zeros(0, np.int64)
    older.sort()
    out: list[tuple[T, np.ndarray | None]] = []
    at = 0
    for c, d in zip(chunks, decoded):
        hidden = older[np.searchsorted(older, at):np.searchsorted(older, at + len(c.h))] - at
        at += len(c.h)
        if not len(hidden):
            out.append((d, None))  # (its deletions were never given to `decode`)
            continue
        live = c.put.copy()
        live[hidden] = False
        out.append((d, live[c.put]))
    return out


def _distinct(tables: list[_Table], live_keys: int | None) -> bool:
    """Whether the SSTs' properties and the checkpoint's count of live keys prove every entry a distinct live key.

    Each user key that is live has at least one entry, and with no deletions (merge operands and range deletions
    are refused by `_table`) every user key that has an entry is live: so entries >= distinct user keys == live
    keys, with equality exactly when no user key has two entries. Σ ``rocksdb.num.entries`` == `live_keys` is that
    equality. `_read_distinct` checks what it parses against the same counts (each table's entries as many as its
    properties say, each a put), so a properties block that does not match its data is refused, not believed.
    """
    return live_keys is not None and not any(t.deletions for t in tables) \
        and sum(t.entries for t in tables) == live_keys


def _read_distinct(tables: list[_Table], decode: Callable[[Entries], T]) -> list[tuple[T, np.ndarray | None]]:
    """`read` of SSTs whose entries are proven distinct live keys (`_distinct`): every chunk decoded, all live."""
    out: list[tuple[T, np.ndarray | None]] = []
    for t in tables:
        n = 0
        for i in range(0, len(t.offsets), _CHUNK):
            entries = _parse_puts(*_decompress(t, i, i + _CHUNK))
            n += len(entries)
            out.append((decode(entries), None))
        if n != t.entries:
            raise Unsupported(f"{t.path} holds {n} entries but its properties block counts {t.entries}")
    return out


def live_entries(paths: list[Path], *, live_keys: int | None = None) -> list[Entries]:
    """`read` without decoding: the live entries, in chunks."""
    return [e.where(live) for e, live in read(paths, lambda e: e, live_keys=live_keys)]


def _older(chunks: list[_Chunk], h: np.ndarray, members: np.ndarray) -> np.ndarray:
    """The entries (of `members`: the entry numbers of every hash held more than once) that a newer version of
    their user key hides."""
    bounds = np.cumsum([0] + [len(c.h) for c in chunks])
    which = np.searchsorted(bounds, members, side="right") - 1
    width = max(c.stride for c in chunks)
    keys = np.zeros((len(members), width), np.uint8)
    ulen = np.empty(len(members), np.int64)
    seq = np.empty(len(members), np.int64)
    for k in np.unique(which).tolist():
        sel = which == k
        c, i = chunks[k], members[sel] - bounds[k]
        keys[sel, :c.stride] = c.flat.reshape(-1, c.stride)[i]
        ulen[sel] = c.ulen[i]
        seq[sel] = (c.trailer[i] >> np.uint64(8)).astype(np.int64)
    keys[np.arange(width) >= ulen[:, None]] = 0  # (a row holds the trailer and more after the user key)
    _, lead, gid = np.unique(h[members], return_index=True, return_inverse=True)
    if np.any(ulen != ulen[lead][gid]) or np.any(keys != keys[lead][gid]):
        raise Unsupported("a 64-bit hash collision between user keys")
    by = np.lexsort((-seq, gid))
    newest = np.r_[True, gid[by][1:] != gid[by][:-1]]
    return members[by][~newest]


def _parse(buf: np.ndarray, bases: np.ndarray, sizes: np.ndarray) -> tuple[_Chunk, Entries]:
    """The entries of decompressed data blocks (``buf[bases[i]:bases[i] + sizes[i]]``, padded with `_PAD` zero
    bytes), keys rebuilt, hashed, not yet deduplicated."""
    keys = _rebuilt(buf, bases, sizes)
    n, width, stride, klen, words, flat = keys.n, keys.width, keys.stride, keys.klen, keys.words, keys.flat
    fixed = keys.fixed
    if fixed:  # every key of one length: the trailer at one place in each row (views, no copy)
        trailer = np.ndarray((n,), "<u8", flat, width - 8, (stride,))
        kind = np.ndarray((n,), np.uint8, flat, width - 8, (stride,))
    else:
        trailer = _u64(flat)[np.arange(n) * stride + klen - 8]
        kind = (trailer & np.uint64(0xFF)).astype(np.uint8)
    put = kind == _PUT
    if not put.all() and np.any((kind != _PUT) & (kind != _DELETE) & (kind != _SINGLE_DELETE)):
        raise Unsupported("entry types other than put and delete")
    ulen = klen - 8
    user = [words[:n, w] if fixed and 8 * w + 8 <= width - 8 else
            words[:n, w] & _LOW[(width - 8) - 8 * w] if fixed else _masked(words[:n, w], ulen - 8 * w)
            for w in range((width - 8 + 7) // 8)]
    h = np.full(n, np.uint64(width - 8) ^ np.uint64(1469598103934665603)) if fixed else \
        ulen.astype(np.uint64) ^ np.uint64(1469598103934665603)
    with np.errstate(over="ignore"):
        for w, word in enumerate(user):  # only the words a key has: the same hash in chunks of other widths
            mixed = (h ^ word) * np.uint64(1099511628211)
            mixed ^= mixed >> np.uint64(29)
            h = mixed if fixed else np.where(8 * w < ulen, mixed, h)
    return _Chunk(flat, stride, ulen, put, trailer, h), keys.entries(buf)


def _parse_puts(buf: np.ndarray, bases: np.ndarray, sizes: np.ndarray) -> Entries:
    """`_parse` of entries that are all puts of distinct user keys (`_distinct`): no trailer kept, no hash; an
    entry of another type raises `Unsupported` (its SST's properties block did not count it as such)."""
    keys = _rebuilt(buf, bases, sizes)
    n, width, stride, flat = keys.n, keys.width, keys.stride, keys.flat
    # the type is the trailer's low byte: at one place in each row when every key has one length (a view)
    kind = np.ndarray((n,), np.uint8, flat, width - 8, (stride,)) if keys.fixed else \
        flat[np.arange(n) * stride + keys.klen - 8]
    if not np.all(kind == _PUT):
        raise Unsupported("an entry other than a put in an SST whose properties block counts no deletion")
    return keys.entries(buf)


@dataclass
class _Keys:
    """The entries of some data blocks with their keys rebuilt: row i of `words` (``stride`` bytes, the same
    memory as `flat`) is entry i's key (user key + 8-byte trailer, ``klen[i]`` bytes, then zeros or other bytes);
    its value is ``vlen[i]`` bytes at ``vstart[i]`` in the decompressed blocks."""

    n: int
    width: int
    stride: int
    klen: np.ndarray
    words: np.ndarray
    flat: np.ndarray
    vstart: np.ndarray
    vlen: np.ndarray
    fixed: bool  # every key of one length (`width`)

    def entries(self, buf: np.ndarray) -> Entries:
        """The entries: user keys in `flat`, values in `buf` (the decompressed blocks)."""
        kstarts = np.arange(0, self.n * self.stride, self.stride)
        kends = kstarts + (self.width - 8 if self.fixed else self.klen - 8)
        return Entries(self.flat, kstarts, kends, buf, self.vstart, self.vstart + self.vlen, self.stride)


def _rebuilt(buf: np.ndarray, bases: np.ndarray, sizes: np.ndarray) -> _Keys:
    """The entries of decompressed data blocks (``buf[bases[i]:bases[i] + sizes[i]]``, padded with `_PAD` zero
    bytes), keys rebuilt."""
    u32 = _view(buf, "<u4")
    # restart segments of every block: [start, end) in `buf`
    counts = u32[bases + sizes - 4].astype(np.int64) if len(bases) else np.zeros(0, np.int64)
    if np.any(counts & 0x80000000):
        raise Unsupported("data block hash index")
    if np.any(sizes < 4 * counts + 4) or np.any(counts < 1):
        raise CorruptSavepointError("an SST data block's restart array is damaged; the SST is damaged.")
    ends_of_entries = bases + sizes - 4 - 4 * counts
    seg_block = np.repeat(np.arange(len(bases)), counts)
    firsts = np.cumsum(counts) - counts
    within = np.arange(len(seg_block)) - np.repeat(firsts, counts)
    rel = u32[ends_of_entries[seg_block] + 4 * within].astype(np.int64)
    seg_start = bases[seg_block] + rel
    last = np.r_[within[1:] == 0, True]  # the last segment of its block ends at the restart array
    seg_end = np.where(last, ends_of_entries[seg_block], np.r_[seg_start[1:], 0])
    if np.any(rel[firsts] != 0) or np.any(seg_end <= seg_start):
        raise CorruptSavepointError("an SST data block's restart points are out of order; the SST is damaged.")

    # pass 1: the j-th entry of every segment at once -> its position, the next one's from its header (shared,
    # non_shared, value length: one byte each), until each segment ends exactly at its end. The header bytes are
    # gathered one by one (numpy gathers bytes several times faster than words at unaligned offsets)
    n_seg = len(seg_start)
    count = np.zeros(n_seg, np.int64)
    steps: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    seg, p, end = np.arange(n_seg), seg_start, seg_end
    byte1, byte2 = buf[1:], buf[2:]
    while len(seg):
        head = buf[p], byte1[p], byte2[p]
        steps.append((seg, p, *head))
        nxt = head[1].astype(np.int64)  # header + key part + value
        nxt += head[2]
        nxt += p
        nxt += 3
        p = nxt
        more = p < end
        if not more.all():
            done = ~more
            if np.any(p[done] != end[done]):
                _long_lengths(steps)
                raise CorruptSavepointError("an SST entry runs past its data block; the SST is damaged.")
            count[seg[done]] = len(steps)
            seg, p, end = seg[more], p[more], end[more]
    # rows in file order: entry j of segment s is row first[s] + j
    first = np.cumsum(count) - count
    n = int(count.sum())
    rows = [first[seg] + j if j else first for j, (seg, *_) in enumerate(steps)]
    order = np.concatenate(rows)  # (one scatter of all steps: fewer numpy calls, each holding the GIL a while)
    at, shared, ns, vlen = (_scattered(order, [step[k] for step in steps]) for k in range(1, 5))
    if np.any((shared | ns | vlen) & 0x80):
        _long_lengths(steps)
    at += 3
    klen = np.add(shared, ns, dtype=np.int64)
    shortest = int(klen.min())
    if shortest < 8:
        raise CorruptSavepointError("an SST key is shorter than its 8-byte sequence number; the SST is damaged.")
    if np.any(shared[first] != 0) or np.any(shared[1:] > klen[:-1]):
        raise CorruptSavepointError("an SST entry shares more of a key than the key before it has; the SST is "
                                    "damaged.")

    # pass 2: every entry's own bytes gathered at once, a row of whole words (row i, byte c = byte c - shared of
    # its key part; a key is < 256 bytes, and `_PAD` keeps the row inside `buf`), then bytes c < shared taken from
    # the entry before it. Below byte `lo` every entry shares its segment's restart key; from byte `hi` on no
    # entry shares anything: only the words between need the entry-by-entry chain, step by step
    width = int(klen.max())
    nw = (width + 7) // 8
    stride = 8 * nw
    own = np.empty(n + 1, np.int64)
    np.subtract(at, shared, out=own[:n])
    own[n] = len(buf) - _PAD  # + one row of the zero padding: the column decoder reads whole words
    rowview = np.ndarray((len(buf) - stride + 1,), f"V{stride}", buf, 0, (1,))  # a row at every byte
    words = rowview[own].view("<u8").reshape(n + 1, nw)
    others = shared.copy()
    others[first] = 255  # (a restart entry shares nothing by definition)
    lo = min(int(others.min()), width)
    hi = int(shared.max())
    lead = None
    for w in range(lo // 8):  # the restart key's word: one value in every restart key (often: Spark's version
        heads_w = words[first, w]  # byte and null bits) fills the column, else each entry takes its segment's
        if np.all(heads_w == heads_w[0]):
            words[:n, w] = heads_w[0]
        else:
            lead = np.repeat(first, count) if lead is None else lead
            words[:n, w] = words[lead, w]
    for w in range(lo // 8, (hi + 7) // 8):
        col = words[:n, w].copy()
        for j in range(1, len(rows)):
            row = rows[j]
            keep = _SHARED[w][steps[j][2]]  # by header byte 0: shared
            mine = col[row]
            col[row] = mine ^ ((mine ^ col[row - 1]) & keep)
        words[:n, w] = col
    flat = words.view(np.uint8).reshape(-1)
    return _Keys(n, width, stride, klen, words, flat, at + ns, vlen, shortest == width)


def _scattered(order: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """The items of `parts`, one after another, at the places `order` gives them."""
    out = np.empty(len(order), parts[0].dtype)
    out[order] = np.concatenate(parts)
    return out


def _long_lengths(steps: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> None:
    """Raise `Unsupported` if an entry header read so far holds a length of 128 or more (a varint of 2+ bytes:
    the one-byte reading of the steps does not hold)."""
    if any(np.any((b0 | b1 | b2) & 0x80) for _, _, b0, b1, b2 in steps):
        raise Unsupported("a key or value length of 128 bytes or more")
