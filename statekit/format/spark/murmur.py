"""Spark's partition of a state key: ``pmod(Murmur3Hash(keys, seed 42), n)``, vectorized over Arrow columns.

Spark's `HashPartitioning` (catalyst plans/physical/partitioning.scala) with unsafe Murmur3_x86_32:
ints (and date, byte, short, boolean) `hashInt`, longs (and timestamps) `hashLong` (low word then
high word), strings and binary the *legacy* `hashUnsafeBytes` (each of the 1-3 tail bytes mixed as a
sign-extended int), NULL leaves the running hash unchanged, structs hash their fields in order
with the running hash as seed. Floats and doubles hash their bits with -0.0 as 0.0.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError

SEED = 42
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k: np.ndarray) -> np.ndarray:
    k = k * _C1
    k = _rotl(k, 15)
    return k * _C2


def _mix_h1(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    h = h ^ k
    h = _rotl(h, 13)
    return h * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h = h ^ np.asarray(length, np.uint32)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _hash_int(v: np.ndarray, seed: np.ndarray) -> np.ndarray:
    return _fmix(_mix_h1(seed, _mix_k1(v.astype(np.int64).astype(np.uint32))), 4)


def _hash_long(v: np.ndarray, seed: np.ndarray) -> np.ndarray:
    u = v.astype(np.int64).view(np.uint64)
    h = _mix_h1(seed, _mix_k1((u & np.uint64(0xFFFFFFFF)).astype(np.uint32)))
    h = _mix_h1(h, _mix_k1((u >> np.uint64(32)).astype(np.uint32)))
    return _fmix(h, 8)


def _hash_bytes(col: pa.Array, seed: np.ndarray) -> np.ndarray:
    col = col.cast(pa.large_binary()) if not pa.types.is_large_binary(col.type) else col
    n = len(col)
    bufs = col.buffers()
    offsets = np.frombuffer(bufs[1], np.int64, n + 1, col.offset * 8)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], offsets[1:] - offsets[:-1]
    words = lengths // 4
    h = seed.copy()
    padded = np.concatenate([data, np.zeros(8, np.uint8)])
    for w in range(int(words.max()) if n else 0):  # one step per 4-byte word of the longest value
        rows = np.flatnonzero(words > w)
        at = starts[rows] + 4 * w
        k = (padded[at].astype(np.uint32) | (padded[at + 1].astype(np.uint32) << np.uint32(8))
             | (padded[at + 2].astype(np.uint32) << np.uint32(16)) | (padded[at + 3].astype(np.uint32) << np.uint32(24)))
        h[rows] = _mix_h1(h[rows], _mix_k1(k))
    for t in range(3):  # the legacy tail: each byte sign-extended and mixed as a whole int
        rows = np.flatnonzero(lengths % 4 > t)
        b = padded[starts[rows] + words[rows] * 4 + t].view(np.int8).astype(np.int32).view(np.uint32)
        h[rows] = _mix_h1(h[rows], _mix_k1(b))
    return _fmix(h, lengths.astype(np.uint32))


def _hash_column(col: pa.Array, seed: np.ndarray) -> np.ndarray:
    t = col.type
    valid = np.ones(len(col), bool) if col.null_count == 0 else np.asarray(col.is_valid().to_numpy(zero_copy_only=False))
    if pa.types.is_struct(t):
        h = seed.copy()
        for i in range(t.num_fields):
            h = _hash_column(col.field(i), h)
        out = h
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        out = _hash_bytes(col, seed)
    elif pa.types.is_timestamp(t):
        out = _hash_long(_values(col.cast(pa.int64()), 0), seed)
    elif pa.types.is_date32(t):
        out = _hash_int(_values(col.cast(pa.int32()), 0), seed)
    elif pa.types.is_boolean(t):
        out = _hash_int(_values(col.cast(pa.int32()), 0), seed)
    elif pa.types.is_int64(t):
        out = _hash_long(_values(col, 0), seed)
    elif pa.types.is_integer(t):
        out = _hash_int(_values(col, 0), seed)
    elif pa.types.is_float32(t):
        v = _values(col, 0.0).astype(np.float32)
        v[v == 0] = 0.0  # -0.0 hashes as 0.0
        out = _hash_int(v.view(np.int32), seed)
    elif pa.types.is_float64(t):
        v = _values(col, 0.0).astype(np.float64)
        v[v == 0] = 0.0
        out = _hash_long(v.view(np.int64), seed)
    elif pa.types.is_decimal(t) and t.precision <= 18:
        unscaled = [0 if d is None else int(d.scaleb(t.scale)) for d in col.to_pylist()]
        out = _hash_long(np.asarray(unscaled, np.int64), seed)
    elif pa.types.is_null(t):
        out = seed
    else:
        raise InvalidArgumentError(f"Spark partitioning of a key column of type {t} is not supported by statekit")
    return np.where(valid, out, seed)


def _values(col: pa.Array, fill: object) -> np.ndarray:
    return np.asarray(col.fill_null(fill).to_numpy(zero_copy_only=False))


def spark_hash(columns: list[pa.Array]) -> np.ndarray:
    """Spark's ``Murmur3Hash(columns, 42)`` of each row, as int32."""
    n = len(columns[0]) if columns else 0
    h = np.full(n, SEED, np.uint32)
    with np.errstate(over="ignore"):
        for col in columns:
            if isinstance(col, pa.ChunkedArray):
                col = col.combine_chunks()
            h = _hash_column(col, h)
    return h.view(np.int32)


def partition_ids(columns: list[pa.Array], num_partitions: int) -> np.ndarray:
    """The state partition (``pmod(hash, num_partitions)``) of each row of the key `columns`."""
    return (spark_hash(columns).astype(np.int64) % num_partitions).astype(np.int32)
