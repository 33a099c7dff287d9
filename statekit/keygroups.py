"""Flink-exact key groups: Java hashCode of typed keys, murmur mixing, and subtask ranges."""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator

import numpy as np

from statekit.errors import InvalidArgumentError, ParallelismError
from statekit.keyhash import INT32_MIN, M32, U32, KeyType, int32, java_hash, java_hash_array

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM", "MAX_PARALLELISM_UPPER_BOUND", "KeyGroupRange",
    "assign_key_groups", "assign_to_key_group", "check_max_parallelism", "check_parallelism",
    "compute_key_group_for_key_hash", "compute_key_groups_for_key_hashes", "default_max_parallelism", "java_hash", "key_group_range",
    "murmur_hash", "operator_index_for_key_group",
]  # fmt: skip

MAX_PARALLELISM_UPPER_BOUND = 32768
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 128



# --- parallelism bounds --------------------------------------------------------------------------


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):  # True is an int to Python, never a parallelism to a user
        raise ParallelismError(f"{what} must be an int, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ParallelismError(f"{what} must be an int, got {value!r} ({type(value).__name__})") from None


def check_max_parallelism(max_parallelism: int) -> int:
    """Validate a max parallelism (the number of key groups) and return it.

    Raises
    ------
    ParallelismError
        Unless ``1 <= max_parallelism <= 32768`` (Flink's bounds).

    Examples
    --------
    >>> check_max_parallelism(128)
    128
    """
    m = _as_int(max_parallelism, "max parallelism")
    if not 1 <= m <= MAX_PARALLELISM_UPPER_BOUND:
        raise ParallelismError(
            f"max parallelism must be between 1 and {MAX_PARALLELISM_UPPER_BOUND}, got {m}; "
            f"use default_max_parallelism(parallelism) if unsure"
        )
    return m


def check_parallelism(parallelism: int, max_parallelism: int | None = None) -> int:
    """Validate a parallelism (number of subtasks) against its max parallelism and return it.

    Raises
    ------
    ParallelismError
        Unless ``1 <= parallelism <= max_parallelism`` (32768 when no max is given).

    Examples
    --------
    >>> check_parallelism(4, 128)
    4
    """
    upper = MAX_PARALLELISM_UPPER_BOUND if max_parallelism is None else check_max_parallelism(max_parallelism)
    p = _as_int(parallelism, "parallelism")
    if not 1 <= p <= upper:
        bound = "the upper bound" if max_parallelism is None else "the max parallelism"
        raise ParallelismError(
            f"parallelism must be between 1 and {upper} ({bound}), got {p}; "
            f"lower the parallelism or raise the max parallelism"
        )
    return p


def default_max_parallelism(parallelism: int) -> int:
    """Flink's default max parallelism for an operator of the given parallelism.

    ``min(max(round_up_pow2(p + p // 2), 128), 32768)``.

    Examples
    --------
    >>> default_max_parallelism(1), default_max_parallelism(100), default_max_parallelism(30000)
    (128, 256, 32768)
    """
    p = check_parallelism(parallelism)
    rounded = 1 << (p + p // 2 - 1).bit_length()  # smallest power of two >= p + p//2
    return min(max(rounded, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), MAX_PARALLELISM_UPPER_BOUND)


# --- key groups and subtasks ---------------------------------------------------------------------


@dataclass(frozen=True)
class KeyGroupRange:
    """An inclusive range ``[start, end]`` of key groups; ``KeyGroupRange.EMPTY`` is ``(0, -1)``.

    Examples
    --------
    >>> r = KeyGroupRange(43, 85)
    >>> len(r), 43 in r, 86 in r
    (43, True, False)
    >>> r.intersect(KeyGroupRange(80, 127))
    KeyGroupRange(start=80, end=85)
    >>> r.intersect(KeyGroupRange(0, 10)) == KeyGroupRange.EMPTY
    True
    """

    start: int
    end: int

    EMPTY: ClassVar[KeyGroupRange]

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise InvalidArgumentError(f"KeyGroupRange.{name} must be an int, got {value!r}")
            object.__setattr__(self, name, int(value))
        empty = (self.start, self.end) == (0, -1)
        if not empty and not 0 <= self.start <= self.end:
            raise InvalidArgumentError(
                f"KeyGroupRange({self.start}, {self.end}) is invalid: need 0 <= start <= end; "
                f"use KeyGroupRange.EMPTY for an empty range"
            )

    def __len__(self) -> int:
        return self.end - self.start + 1

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, numbers.Integral) and self.start <= int(key_group) <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def intersect(self, other: KeyGroupRange) -> KeyGroupRange:
        """The key groups in both ranges (``EMPTY`` when they do not overlap)."""
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange.EMPTY


KeyGroupRange.EMPTY = KeyGroupRange(0, -1)


def key_group_range(max_parallelism: int, parallelism: int, operator_index: int) -> KeyGroupRange:
    """The key groups owned by subtask ``operator_index`` of ``parallelism`` subtasks.

    Subtask ``i`` owns ``[ceil(i*m/p), floor(((i+1)*m - 1)/p)]``.

    Examples
    --------
    >>> key_group_range(128, 3, 1)
    KeyGroupRange(start=43, end=85)
    """
    m = check_max_parallelism(max_parallelism)
    p = check_parallelism(parallelism, m)
    i = _as_int(operator_index, "operator index")
    if not 0 <= i < p:
        raise InvalidArgumentError(f"operator index must be between 0 and {p - 1} (parallelism {p}), got {i}")
    return KeyGroupRange((i * m + p - 1) // p, ((i + 1) * m - 1) // p)


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask that owns ``key_group``: ``key_group * parallelism // max_parallelism``.

    Examples
    --------
    >>> operator_index_for_key_group(128, 3, 42), operator_index_for_key_group(128, 3, 43)
    (0, 1)
    """
    m = check_max_parallelism(max_parallelism)
    p = check_parallelism(parallelism, m)
    kg = _as_int(key_group, "key group")
    if not 0 <= kg < m:
        raise InvalidArgumentError(f"key group must be between 0 and {m - 1} (max parallelism {m}), got {kg}")
    return kg * p // m


def murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)``: murmur3 mixing of one int, made non-negative.

    Examples
    --------
    >>> murmur_hash(0), murmur_hash(-1)
    (593689054, 1982413648)
    """
    # exact-int fast path first: this runs once per element in the runtime, and ABC checks are slow
    if type(code) is not int or not INT32_MIN <= code <= 0x7FFFFFFF:
        if isinstance(code, (bool, np.bool_)) or not isinstance(code, numbers.Integral):
            raise InvalidArgumentError(f"murmur_hash takes a signed 32-bit int, got {code!r}")
        code = int(code)
        if not INT32_MIN <= code <= 0x7FFFFFFF:
            raise InvalidArgumentError(f"murmur_hash takes a signed 32-bit int, got {code!r}")
    h = (code * 0xCC9E2D51) & M32
    h = ((h << 15) | (h >> 17)) & M32
    h = (h * 0x1B873593) & M32
    h = ((h << 13) | (h >> 19)) & M32
    h = (h * 5 + 0xE6546B64) & M32
    h ^= 4  # the length in bytes of the single int hashed
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    h ^= h >> 16
    signed = int32(h)
    # abs(), except that Integer.MIN_VALUE (whose negation overflows) maps to 0
    return signed if signed >= 0 else (-signed if signed != INT32_MIN else 0)


def compute_key_group_for_key_hash(key_hash: int, max_parallelism: int) -> int:
    """The key group of a key whose Java ``hashCode()`` is ``key_hash``.

    Examples
    --------
    >>> compute_key_group_for_key_hash(0, 128)
    94
    """
    return murmur_hash(key_hash) % check_max_parallelism(max_parallelism)


def assign_to_key_group(key: Any, max_parallelism: int, key_type: KeyType = None) -> int:
    """The key group of ``key`` hashed as its declared ``key_type`` (see `java_hash`).

    Examples
    --------
    >>> [assign_to_key_group(k, 128, "int") for k in range(4)]
    [94, 86, 127, 113]
    >>> assign_to_key_group("hello", 128, "string")
    35
    """
    m = check_max_parallelism(max_parallelism)
    return murmur_hash(java_hash(key, key_type)) % m


def _murmur_array(h: np.ndarray, max_parallelism: int) -> np.ndarray:
    """Vectorised `murmur_hash` then ``% max_parallelism``, in place on a uint32 array."""
    h *= U32(0xCC9E2D51)
    h[:] = (h << U32(15)) | (h >> U32(17))
    h *= U32(0x1B873593)
    h[:] = (h << U32(13)) | (h >> U32(19))
    h *= U32(5)
    h += U32(0xE6546B64)
    h ^= U32(4)
    h ^= h >> U32(16)
    h *= U32(0x85EBCA6B)
    h ^= h >> U32(13)
    h *= U32(0xC2B2AE35)
    h ^= h >> U32(16)
    signed = h.view(np.int32)
    np.abs(signed, out=signed)
    signed[signed < 0] = 0  # abs(MIN_VALUE) stays negative; Flink maps it to 0
    signed %= np.int32(max_parallelism)
    return signed


def compute_key_groups_for_key_hashes(hashes: np.ndarray, max_parallelism: int) -> np.ndarray:
    """Vectorised `compute_key_group_for_key_hash`: the int32 key groups of uint32 Java hashCodes.

    Works in place: `hashes` is overwritten (pass a copy to keep it).

    >>> compute_key_groups_for_key_hashes(np.array([0, 1], np.uint32), 128).tolist()
    [94, 86]
    """
    m = check_max_parallelism(max_parallelism)
    return _murmur_array(hashes, m) if len(hashes) else np.zeros(0, np.int32)


def assign_key_groups(values: Any, max_parallelism: int, key_type: KeyType = None) -> np.ndarray:
    """Vectorised `assign_to_key_group`: the key group of every key, as an int32 numpy array.

    Parameters
    ----------
    values
        A pyarrow Array or ChunkedArray, a numpy array or a Python sequence of keys.
    max_parallelism
        The number of key groups, 1..32768.
    key_type
        As for `java_hash`. When None it is taken from the Arrow type or numpy dtype, or, for a
        Python sequence, inferred from the first key (all keys must then share one Python type).

    Raises
    ------
    NullKeyError
        If any key is null.
    StateTypeError
        If the keys do not fit ``key_type``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> assign_key_groups(pa.array(["hello", "world", "a", ""]), 128).tolist()
    [35, 66, 81, 94]
    >>> assign_key_groups(np.arange(3, dtype=np.int32), 128).tolist()
    [94, 86, 127]
    """
    check_max_parallelism(max_parallelism)  # before hashing: a bad value is refused even for no keys
    return compute_key_groups_for_key_hashes(java_hash_array(values, key_type), max_parallelism)
