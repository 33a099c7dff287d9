"""The byte-level codecs of Spark state files: lz4-java's block stream, its xxhash32 check, and CRC32C side files.

Spark compresses every HDFS delta/snapshot and RocksDB changelog with lz4-java's `LZ4BlockOutputStream`
(spark-core io/CompressionCodec.scala): frames of ``"LZ4Block"``, a token (method | log2(block) - 10),
int32 LE compressed length, int32 LE original length, int32 LE ``xxhash32(original, 0x9747b28c) &
0x0FFFFFFF``, then an LZ4 *block*; a frame with both lengths 0 ends a stream, and streams may follow
one another. The LZ4 block itself is cramjam's (a core dependency).
"""

from __future__ import annotations

import functools
import struct
from typing import TYPE_CHECKING

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.spark.errors import TruncatedStateFileError

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"LZ4Block"
_HEADER = struct.Struct("<Biii")  # token, compressed length, original length, checksum
_RAW, _LZ4 = 0x10, 0x20
SEED = 0x9747B28C
BLOCK_SIZE = 32 * 1024  # spark.io.compression.lz4.blockSize's default
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxhash32(data: bytes, seed: int = SEED) -> int:
    """XXH32 of `data` (used by lz4-java to check each block; the `xxhash` package when installed)."""
    try:
        import xxhash  # type: ignore[import-not-found]  # optional: ~100x faster for large files

        return int(xxhash.xxh32_intdigest(data, seed))
    except ImportError:
        pass
    n = len(data)
    i = 0
    if n >= 16:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M
        words = struct.unpack_from(f"<{(n // 16) * 4}I", data)
        for j in range(0, len(words), 4):
            v1 = (_rotl((v1 + words[j] * _P2) & _M, 13) * _P1) & _M
            v2 = (_rotl((v2 + words[j + 1] * _P2) & _M, 13) * _P1) & _M
            v3 = (_rotl((v3 + words[j + 2] * _P2) & _M, 13) * _P1) & _M
            v4 = (_rotl((v4 + words[j + 3] * _P2) & _M, 13) * _P1) & _M
        i = (n // 16) * 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        (w,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + w * _P3) & _M, 17) * _P4) & _M
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M, 11) * _P1) & _M
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h


def lz4_block_decompress(data: bytes, where: str) -> bytes:
    """The concatenated content of an lz4-java block stream (`where` names the file in errors)."""
    import cramjam

    out = bytearray()
    pos, n = 0, len(data)
    ended = False
    while pos < n:
        if data[pos:pos + 8] != MAGIC:
            raise CorruptSavepointError(
                f"{where}: no lz4-java block at byte {pos} (expected 'LZ4Block'). The file is damaged or was not "
                "written by Spark's lz4 codec; restore it from a copy of the checkpoint."
            )
        if pos + 8 + _HEADER.size > n:
            raise TruncatedStateFileError(f"{where}: truncated lz4 block header at byte {pos}; the file is cut short. "
                                        "Restore it from a copy of the checkpoint.")
        token, clen, olen, check = _HEADER.unpack_from(data, pos + 8)
        pos += 8 + _HEADER.size
        method = token & 0xF0
        if clen == 0 and olen == 0:
            ended = True
            continue  # the end frame of one stream; another may follow
        ended = False
        if pos + clen > n:
            raise TruncatedStateFileError(f"{where}: the lz4 block at byte {pos - 21} is cut short ({n - pos} of "
                                          f"{clen} bytes); restore the file from a copy of the checkpoint.")
        if method not in (_RAW, _LZ4) or clen < 0 or olen < 0:
            raise CorruptSavepointError(f"{where}: lz4 block at byte {pos - 21} is cut short or malformed "
                                        f"(method {method:#x}, {clen} of {n - pos} bytes); restore the file.")
        payload = data[pos:pos + clen]
        pos += clen
        if method == _RAW:
            block = bytes(payload)
        else:
            try:
                block = bytes(cramjam.lz4.decompress_block(payload, output_len=olen))
            except Exception as exc:  # cramjam raises its own DecompressionError
                raise CorruptSavepointError(f"{where}: an lz4 block does not decompress ({exc}); restore the file.") from None
        if len(block) != olen or (xxhash32(block) & 0x0FFFFFFF) != (check & 0x0FFFFFFF):
            raise CorruptSavepointError(f"{where}: an lz4 block fails its xxhash32 check; the file is damaged. "
                                        "Restore it from a copy of the checkpoint.")
        out += block
    if not ended:
        raise TruncatedStateFileError(f"{where}: the lz4 stream has no end frame; the file is cut short. "
                                    "Restore it from a copy of the checkpoint.")
    return bytes(out)


def lz4_block_compress(data: bytes, *, block_size: int = BLOCK_SIZE) -> bytes:
    """`data` as lz4-java's `LZ4BlockOutputStream` writes it (blocks of `block_size`, then the end frame)."""
    import cramjam

    level = max(0, block_size.bit_length() - 1 - 10)
    out = bytearray()
    for start in range(0, len(data), block_size):
        block = data[start:start + block_size]
        packed = bytes(cramjam.lz4.compress_block(block, store_size=False))
        check = xxhash32(block) & 0x0FFFFFFF
        if len(packed) >= len(block):
            out += MAGIC + _HEADER.pack(_RAW | level, len(block), len(block), check) + block
        else:
            out += MAGIC + _HEADER.pack(_LZ4 | level, len(packed), len(block), check) + packed
    out += MAGIC + _HEADER.pack(_RAW | level, 0, 0, 0)
    return bytes(out)


def decompress(data: bytes, codec: str, where: str) -> bytes:
    """A Spark state stream compressed with `codec` (the offset log's stateStore.compression.codec)."""
    name = codec.rsplit(".", 1)[-1].lower()
    if name in ("lz4", "lz4compressioncodec"):
        return lz4_block_decompress(data, where)
    raise UnsupportedFormatError(
        f"{where}: compressed with Spark codec {codec!r}; statekit decodes Spark state compressed with lz4 (Spark's "
        "default). Restart the query with spark.sql.streaming.stateStore.compression.codec=lz4 on a new checkpoint, "
        "or read it with Spark's statestore source."
    )


def compress(data: bytes, codec: str) -> bytes:
    """`data` compressed as Spark's `codec` writes state streams (lz4 only)."""
    name = codec.rsplit(".", 1)[-1].lower()
    if name in ("lz4", "lz4compressioncodec"):
        return lz4_block_compress(data)
    raise UnsupportedFormatError(f"writing Spark state compressed with {codec!r}: statekit writes lz4 only.")


_CRC_TABLE: list[int] = []


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli) of `data`, unsigned (the `crc32c` package when installed)."""
    try:
        import crc32c as _c  # type: ignore[import-not-found]  # optional: hardware CRC for large files

        return int(_c.crc32c(data))
    except ImportError:
        pass
    if not _CRC_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    table = _CRC_TABLE
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _times(mat: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The GF(2) matrix `mat` (32 columns: the image of each bit) applied to every 32-bit value of `v`."""
    import numpy as np  # deferred, as everywhere in this module's importers: only SST reads need it

    out = np.zeros(v.shape, np.uint32)
    for i in range(32):
        out ^= np.where((v >> np.uint32(i)) & np.uint32(1) == 1, mat[i], np.uint32(0))
    return out


@functools.lru_cache(maxsize=None)
def _zeros_op(log2_bytes: int) -> np.ndarray:
    """The map of a CRC-32 register over 2**log2_bytes zero bytes (zlib's crc32_combine, as 32 columns)."""
    import numpy as np

    if log2_bytes < 0:  # one zero bit: shift right, the polynomial where a 1 falls out
        return np.array([0xEDB88320] + [1 << (i - 1) for i in range(1, 32)], np.uint32)
    op = _zeros_op(log2_bytes - 1) if log2_bytes else _times(_zeros_op(-1), _zeros_op(-1))  # 2 bits
    if not log2_bytes:
        op = _times(op, op)  # 4 bits
    return _times(op, op)


@functools.lru_cache(maxsize=None)
def _zeros_tables(log2_bytes: int) -> np.ndarray:
    """`_zeros_op(log2_bytes)` as four 256-entry tables, one per byte of the register."""
    import numpy as np

    byte = np.arange(256, dtype=np.uint32)
    return np.stack([_times(_zeros_op(log2_bytes), byte << np.uint32(8 * b)) for b in range(4)])


def _shifted(v: np.ndarray, log2_bytes: int) -> np.ndarray:
    import numpy as np

    t = _zeros_tables(log2_bytes)
    return t[0][v & 0xFF] ^ t[1][v >> np.uint32(8) & 0xFF] ^ t[2][v >> np.uint32(16) & 0xFF] ^ t[3][v >> np.uint32(24)]


def crc32_combined(crcs: np.ndarray, chunk: int, size: int) -> int:
    """`zlib.crc32` of `size` bytes given the CRC-32s of its consecutive `chunk`-byte pieces (`chunk` a power of
    two; the last piece the rest): zlib's crc32_combine, vectorized as a tree of pairs, left-padded with empty
    pieces (CRC 0, which combine to nothing) to a power of two."""
    import numpy as np

    if not len(crcs):
        return 0
    full = size // chunk
    tail = size - full * chunk  # bytes of a last, shorter piece (0: none)
    x = crcs[:full].astype(np.uint32)
    x = np.concatenate([np.zeros((1 << max(full - 1, 0).bit_length()) - full, np.uint32), x])
    level = chunk.bit_length() - 1
    while len(x) > 1:  # each left node moves past its right neighbour's bytes, then takes its CRC in
        x = _shifted(x[0::2], level) ^ x[1::2]
        level += 1
    out = np.uint32(x[0]) if full else np.uint32(0)
    for b in range(tail.bit_length()):  # the last piece: its length bit by bit
        if tail >> b & 1:
            out = _shifted(np.array([out], np.uint32), b)[0]
    return int(out ^ (crcs[-1] if tail else 0))


def to_signed32(v: int) -> int:
    """An unsigned 32-bit value as the Java int Spark writes."""
    return v - (1 << 32) if v & 0x80000000 else v
