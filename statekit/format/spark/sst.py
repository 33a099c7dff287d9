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
deletion hides it: resolved by sorting a 64-bit hash of the user keys. The blocks' own checksums (XXH3)
are not verified here; the SST's Hadoop ``.crc`` side file is, and an SST without one is left to RocksDB.
Anything this reader does not handle exactly (merge operands, range deletions, a hash index in data
blocks, lengths of 128 bytes or more, other compressions, a hash collision, no checksum side file)
raises `Unsupported`, and the caller opens the checkpoint with RocksDB instead
(`statekit.format.spark.providers`): never a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    """Live entries as two byte buffers with row bounds: ``keys[key_starts[i]:key_ends[i]]`` is entry i's user key.

    Both buffers hold at least 8 bytes after the last row (the column decoder reads whole words).
    """

    keys: np.ndarray
    key_starts: np.ndarray
    key_ends: np.ndarray
    values: np.ndarray
    value_starts: np.ndarray
    value_ends: np.ndarray

    def __len__(self) -> int:
        return len(self.key_starts)


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


def _block(data: bytes, offset: int, size: int, where: str) -> bytes:
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
    window = np.lib.stride_tricks.sliding_window_view(buf, 10)[pos].astype(np.int64)
    more = window >= 0x80
    size = np.argmin(more, axis=1) + 1
    if np.any(more.all(axis=1)):
        raise CorruptSavepointError("an SST index holds a varint longer than 10 bytes; the SST is damaged.")
    digits = np.where(np.arange(10) < size[:, None], window & 0x7F, 0)
    return (digits << (7 * np.arange(10))).sum(axis=1), pos + size


def _handles(block: bytes, delta: bool) -> list[tuple[int, int]]:
    """The data block handles of an index block (kBinarySearch)."""
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
    return out


def _restart_handles(block: bytes, delta: bool) -> list[tuple[int, int]] | None:
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
    return list(zip(off.tolist(), size.tolist()))


def _data_blocks(path: Path) -> list:
    """The decompressed data blocks of one SST, in key order (bytes-like)."""
    data = path.read_bytes()
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
    import cramjam

    out: list = []
    lz4 = cramjam.lz4.decompress_block
    view = memoryview(data)
    for off, size in _handles(_block(data, index_off, index_size, where), delta):
        if off + size + _TRAILER > len(data) or data[off + size] != _LZ4 or size < 2 or data[off + 1] >= 0x80:
            out.append(_block(data, off, size, where))  # the general path: other kinds, long sizes, damage
            continue
        b0 = data[off]
        n, head = (b0, 1) if b0 < 0x80 else ((b0 & 0x7F) | data[off + 1] << 7, 2)
        try:  # the common case inline: LZ4 with an uncompressed size of one or two bytes
            out.append(lz4(view[off + head:off + size], output_len=n))
        except Exception as exc:  # cramjam raises its own DecompressionError
            raise CorruptSavepointError(f"{where}: a block does not decompress ({exc}); the SST is damaged.") from None
    return out


def _u64(buf: np.ndarray) -> np.ndarray:
    """A little-endian uint64 at every byte offset of `buf` (overlapping, unaligned): gathering 8 bytes is one item."""
    return np.ndarray((len(buf) - 7,), "<u8", buf, 0, (1,))


def _masked(word: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """`word` with only its first `valid` bytes (clipped to 0-8) kept."""
    if int(valid.min()) == int(valid.max()):
        v1 = min(max(int(valid[0]), 0), 8) if len(valid) else 8
        return word & np.uint64((1 << (8 * v1)) - 1)
    v = np.clip(valid, 0, 8).astype(np.uint64)
    with np.errstate(over="ignore"):
        return word & np.where(v == 8, np.uint64(0xFFFFFFFFFFFFFFFF), (np.uint64(1) << (np.uint64(8) * v)) - np.uint64(1))


_CHUNK = 2048  # data blocks parsed together (~8 MB): arrays small enough for the allocator to reuse, not page in


@dataclass
class _Chunk:
    """The entries of some data blocks before deduplication."""

    flat: np.ndarray
    stride: int
    ulen: np.ndarray
    kind: np.ndarray
    seq: np.ndarray
    h: np.ndarray
    buf: np.ndarray
    vstart: np.ndarray
    vlen: np.ndarray

    def key(self, i: int) -> bytes:
        return self.flat[i * self.stride:i * self.stride + int(self.ulen[i])].tobytes()

    def entries(self, live: np.ndarray) -> Entries:
        if live.all():
            kstarts, ul, vs, vl = np.arange(len(live)) * self.stride, self.ulen, self.vstart, self.vlen
        else:
            keep = np.flatnonzero(live)
            kstarts, ul, vs, vl = keep * self.stride, self.ulen[keep], self.vstart[keep], self.vlen[keep]
        return Entries(self.flat, kstarts, kstarts + ul, self.buf, vs, vs + vl)


def read(paths: list[Path]) -> list[Entries]:
    """The live entries (newest version of each user key, deletions applied) of the SSTs of one RocksDB checkpoint,
    in chunks (each chunk's user keys distinct from every other's)."""
    blocks = [b for p in paths for b in _data_blocks(p)]
    chunks = [_parse(blocks[i:i + _CHUNK]) for i in range(0, len(blocks), _CHUNK)]
    if not chunks:
        return []
    # the newest version of each user key wins: sort the 64-bit hashes of the user keys; equal hashes must be
    # equal keys, and in a group of equal keys the highest sequence number is kept
    h = np.concatenate([c.h for c in chunks]) if len(chunks) > 1 else chunks[0].h
    kind = np.concatenate([c.kind for c in chunks]) if len(chunks) > 1 else chunks[0].kind
    order = np.argsort(h)
    hs = h[order]
    dup = np.flatnonzero(hs[1:] == hs[:-1]) + 1
    live = kind == _PUT
    if len(dup):
        seq = np.concatenate([c.seq for c in chunks])
        bounds = np.cumsum([0] + [len(c.h) for c in chunks])
        group = np.unique(np.r_[dup - 1, dup])  # sorted positions in a group of equal hashes
        members = order[group]
        gid = np.cumsum(np.r_[True, hs[group[1:]] != hs[group[:-1]]])
        lead = members[np.r_[0, np.flatnonzero(np.diff(gid)) + 1]][gid - 1]

        def key(i: int) -> bytes:
            c = int(np.searchsorted(bounds, i, side="right")) - 1
            return chunks[c].key(i - int(bounds[c]))
        if any(key(a) != key(b) for a, b in zip(members.tolist(), lead.tolist()) if a != b):
            raise Unsupported("a 64-bit hash collision between user keys")
        by = np.lexsort((-seq[members].astype(np.int64), gid))
        newest = np.r_[True, gid[by][1:] != gid[by][:-1]]
        live[members[by][~newest]] = False  # older versions
    out, at = [], 0
    for c in chunks:
        out.append(c.entries(live[at:at + len(c.h)]))
        at += len(c.h)
    return out


def _parse(blocks: list) -> _Chunk:
    """The entries of decompressed data blocks, keys rebuilt, hashed, not yet deduplicated."""
    sizes = np.fromiter(map(len, blocks), np.int64, len(blocks))
    bases = np.cumsum(sizes) - sizes
    buf = np.frombuffer(b"".join(blocks) + b"\0" * 8, np.uint8)
    # restart segments of every block: [start, end) in `buf`
    tails = bases + sizes - 4
    counts = buf[tails[:, None] + np.arange(4)].view("<u4").reshape(-1).astype(np.int64) if len(blocks) else \
        np.zeros(0, np.int64)
    if np.any(counts & 0x80000000) or np.any(counts < 1):
        raise Unsupported("data block hash index")
    ends_of_entries = tails - 4 * counts
    seg_block = np.repeat(np.arange(len(blocks)), counts)
    within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    rpos = ends_of_entries[seg_block] + 4 * within
    seg_start = bases[seg_block] + buf[rpos[:, None] + np.arange(4)].view("<u4").reshape(-1).astype(np.int64)
    last = np.r_[within[1:] == 0, True]  # the last segment of its block ends at the restart array
    seg_end = np.where(last, ends_of_entries[seg_block], np.r_[seg_start[1:], 0])
    if np.any(seg_end < seg_start):
        raise CorruptSavepointError("an SST data block's restart points are out of order; the SST is damaged.")

    # pass 1: the j-th entry of every segment at once -> position, shared, non_shared, value length. Rows stay in
    # this order (step-major: every segment's first entry, then every segment's second, ...); row s is the
    # restart entry of segment s
    steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    seg = np.arange(len(seg_start))
    p = seg_start.copy()
    while len(seg):
        head = buf[p[:, None] + np.arange(3)]
        if np.any(head >= 0x80):
            raise Unsupported("a key or value length of 128 bytes or more")
        steps.append((seg, p, head))
        p = p + 3 + head[:, 1] + head[:, 2]
        if np.any(p > seg_end[seg]):
            raise CorruptSavepointError("an SST entry runs past its data block; the SST is damaged.")
        more = p < seg_end[seg]
        seg, p = seg[more], p[more]
    # rows in file order (entry j of segment s is row first[s] + j): positions ascend, so the gathers below read
    # `buf` front to back instead of jumping between segments
    n_seg = len(seg_start)
    count = np.zeros(n_seg, np.int64)
    for seg, _, _ in steps:
        count[seg] += 1
    first = np.cumsum(count) - count
    n = int(count.sum())
    at = np.empty(n, np.int64)
    head = np.empty((n, 3), np.int64)
    for j, (seg, p, hd) in enumerate(steps):
        row = first[seg] + j
        at[row] = p + 3
        head[row] = hd
    shared, ns, vlen = head[:, 0], head[:, 1], head[:, 2]
    klen = shared + ns
    if int(klen.min()) < 8:
        raise CorruptSavepointError("an SST key is shorter than its 8-byte sequence number; the SST is damaged.")
    if np.any(shared[first] != 0):
        raise CorruptSavepointError("an SST restart point shares a key prefix; the SST is damaged.")

    # pass 2: every entry's own bytes gathered at once, 8 at a time (row i, byte c = byte c - shared of its key
    # part), then bytes c < shared taken from the entry before it in its segment. Before byte `lo` every entry
    # shares its segment's restart key; from byte `hi` on no entry shares anything; between them byte c comes
    # from the last entry k <= i whose shared <= c (a restart entry has shared 0: never the previous segment).
    width = int(klen.max())
    nw = (width + 7) // 8
    if int((at - shared).max()) + 8 * nw > len(buf):
        buf = np.concatenate([buf, np.zeros(8 * nw, np.uint8)])
    words = np.zeros((n + 1, nw), "<u8")  # + one zero row: the column decoder reads whole words
    own = at - shared
    for w in range(nw):
        words[:n, w] = _u64(buf)[own + 8 * w]
    restart = np.zeros(n, bool)
    restart[first] = True
    lo = int(shared[~restart].min()) if n > n_seg else width
    hi = int(shared.max())
    if lo:
        lead = np.repeat(first, count)
    for w in range(min(lo, width) // 8 + (lo % 8 > 0)):
        if 8 * w + 8 <= lo:
            words[:n, w] = words[lead, w]
        else:  # the restart key's bytes below lo, the entry's own above
            low = np.uint64((1 << (8 * (lo - 8 * w))) - 1)
            words[:n, w] = (words[lead, w] & low) | (words[:n, w] & ~low)
    keys = words.view(np.uint8)
    rows = np.arange(n)
    for c in range(lo, hi):
        keys[:n, c] = keys[np.maximum.accumulate(np.where(shared <= c, rows, 0)), c]
    flat = keys.reshape(-1)
    stride = 8 * nw
    trailer = _u64(flat)[rows * stride + klen - 8]
    kind, seq = trailer & np.uint64(0xFF), trailer >> np.uint64(8)
    if np.any((kind != _PUT) & (kind != _DELETE) & (kind != _SINGLE_DELETE)):
        raise Unsupported("entry types other than put and delete")
    ulen = klen - 8
    fixed = int(klen.min()) == width
    user = [words[:n, w] if fixed and 8 * w + 8 <= width - 8 else _masked(words[:n, w], ulen - 8 * w)
            for w in range((width - 8 + 7) // 8)]
    h = ulen.astype(np.uint64) ^ np.uint64(1469598103934665603)
    with np.errstate(over="ignore"):
        for w, word in enumerate(user):  # only the words a key has: the same hash in chunks of other widths
            mixed = (h ^ word) * np.uint64(1099511628211)
            mixed ^= mixed >> np.uint64(29)
            h = mixed if fixed else np.where(8 * w < ulen, mixed, h)
    return _Chunk(flat, stride, ulen, kind, seq, h, buf, at + ns, vlen)
