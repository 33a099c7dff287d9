"""Operator identifiers: Flink uid hashes (murmur3 x64 128 over the UTF-8 uid) as immutable values."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Union

from statekit.errors import InvalidArgumentError
from statekit.limits import MAX_TEXT

__all__ = ["OpLike", "OperatorIdentifier", "generated_uid_hash", "murmur3_x64_128"]

_M64 = 0xFFFFFFFFFFFFFFFF
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F
_HEX32 = re.compile(r"[0-9a-f]{32}")


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    return k ^ (k >> 33)


def _mix_k1(k1: int) -> int:
    return (_rotl64((k1 * _C1) & _M64, 31) * _C2) & _M64


def _mix_k2(k2: int) -> int:
    return (_rotl64((k2 * _C2) & _M64, 33) * _C1) & _M64


def murmur3_x64_128(data: bytes, seed: int = 0) -> bytes:
    """MurmurHash3 x64 128-bit of ``data``: ``h1`` then ``h2``, each as 8 little-endian bytes.

    This is the byte order of Guava's ``Hashing.murmur3_128(seed).hashBytes(data).asBytes()``.
    ``seed`` is an unsigned 32-bit int, as in the reference implementation.

    Examples
    --------
    >>> murmur3_x64_128(b"").hex()
    '00000000000000000000000000000000'
    >>> murmur3_x64_128("counter".encode()).hex()
    '0da08f51eaa85fc298e176a139b3649a'
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(
            f"murmur3_x64_128 hashes bytes, got {type(data).__name__}; encode text first"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 0xFFFFFFFF:
        raise InvalidArgumentError(f"seed must be an int in 0..2**32-1, got {seed!r}")
    data = bytes(data)
    n = len(data)
    h1 = h2 = seed
    body = n - n % 16
    for k1, k2 in struct.iter_unpack("<QQ", data[:body]):
        h1 ^= _mix_k1(k1)
        h1 = (_rotl64(h1, 27) + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        h2 ^= _mix_k2(k2)
        h2 = (_rotl64(h2, 31) + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[body:]
    if len(tail) > 8:  # tail bytes 8.. form k2, bytes ..7 form k1, both little-endian
        h2 ^= _mix_k2(int.from_bytes(tail[8:], "little"))
    if tail:
        h1 ^= _mix_k1(int.from_bytes(tail[:8], "little"))
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix64(h1), _fmix64(h2)
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    return struct.pack("<QQ", h1, h2)


def _java_utf8(text: str) -> bytes:
    """UTF-8 bytes as Java's ``String.getBytes(UTF_8)`` gives them.

    Java sees UTF-16 units: a surrogate pair is one character, a lone surrogate becomes ``?``.
    Round-tripping through UTF-16 joins pairs that Python holds as two code points.
    """
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return joined.encode("utf-8", "replace")


def _uid_hash(uid: Any) -> str:
    if not isinstance(uid, str) or not uid:
        raise InvalidArgumentError(f"an operator uid must be a non-empty str, got {uid!r}")
    return murmur3_x64_128(_java_utf8(uid)).hex()


def _check_new_uid(uid: Any) -> None:
    # The longest text a savepoint holds is one rule (statekit.limits, also the manifest schema's); no uid is longer
    # in Flink either (writeUTF: 65,535 bytes). NUL and lone surrogates still hash as Java hashes them (for
    # look-ups); a writer refuses them when the uid would be written (`SavepointBuilder.add_operator`).
    if isinstance(uid, str) and len(uid) > MAX_TEXT:
        raise InvalidArgumentError(f"operator uid {uid[:40]!r}... is {len(uid):,} characters long; no savepoint holds "
                                   f"a uid longer than {MAX_TEXT:,} characters. Choose a shorter uid.")


def _normalise_hash(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) == 16:
            return raw.hex()
        shown = f"{len(raw)} bytes"
    elif isinstance(value, str):
        if _HEX32.fullmatch(value.lower()):
            return value.lower()
        shown = repr(value)
    else:
        shown = f"{value!r} ({type(value).__name__})"
    raise InvalidArgumentError(
        f"malformed operator uid hash {shown}; expected 32 hex characters "
        f"(e.g. '0da08f51eaa85fc298e176a139b3649a') or 16 bytes"
    )


@dataclass(frozen=True, eq=False, repr=False, kw_only=True, slots=True)
class OperatorIdentifier:
    """An operator of a job, identified as Flink does: by the 128-bit hash of its uid.

    Build one with `for_uid` (you know the uid) or `for_uid_hash` (only the hash is known, e.g. it
    came from a savepoint or Flink's ``setUidHash``). Equality and hashing use ``uid_hash`` only:
    the uid is for people.

    Attributes
    ----------
    uid_hash : str
        32 lowercase hex characters.
    uid : str or None
        The uid, or None when built from a hash.

    Examples
    --------
    >>> op = OperatorIdentifier.for_uid("counter")
    >>> op.uid_hash
    '0da08f51eaa85fc298e176a139b3649a'
    >>> op == OperatorIdentifier.for_uid_hash("0DA08F51EAA85FC298E176A139B3649A")
    True
    >>> str(op), str(OperatorIdentifier.for_uid_hash(op.bytes))
    ('counter', '0da08f51eaa85fc298e176a139b3649a')
    """

    uid_hash: str
    uid: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "uid_hash", _normalise_hash(self.uid_hash))
        if self.uid is not None and _uid_hash(self.uid) != self.uid_hash:
            # a uid that disagrees with its hash would make equality lie; Flink has no such pair
            raise InvalidArgumentError(
                f"uid {self.uid!r} hashes to {_uid_hash(self.uid)}, not {self.uid_hash}; "
                f"use OperatorIdentifier.for_uid(uid) or OperatorIdentifier.for_uid_hash(hash)"
            )

    @classmethod
    def for_uid(cls, uid: str) -> OperatorIdentifier:
        """The operator whose uid (Flink ``.uid(...)``) is ``uid`` (at most 65,536 characters, the longest a
        savepoint holds; a longer one is an `InvalidArgumentError`)."""
        _check_new_uid(uid)
        return cls(uid_hash=_uid_hash(uid), uid=uid)

    @classmethod
    def for_uid_hash(cls, uid_hash: Union[str, bytes]) -> OperatorIdentifier:
        """The operator whose uid hash is ``uid_hash``: 32 hex characters or 16 bytes."""
        return cls(uid_hash=_normalise_hash(uid_hash))

    @classmethod
    def coerce(cls, op: Union[OperatorIdentifier, str]) -> OperatorIdentifier:
        """Accept an `OperatorIdentifier` or a uid, for APIs taking ``op``.

        A str is always a uid, even if it looks like a hash; pass
        ``OperatorIdentifier.for_uid_hash(h)`` to address an operator by hash.

        Examples
        --------
        >>> OperatorIdentifier.coerce("counter") == OperatorIdentifier.for_uid("counter")
        True
        """
        if isinstance(op, OperatorIdentifier):
            return op
        if isinstance(op, str):
            return cls.for_uid(op)
        raise InvalidArgumentError(
            f"op must be an OperatorIdentifier or a uid str, got {op!r} ({type(op).__name__}); "
            f"use OperatorIdentifier.for_uid_hash(...) for a hash"
        )

    @property
    def bytes(self) -> bytes:
        """The 16 bytes of the uid hash."""
        return bytes.fromhex(self.uid_hash)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OperatorIdentifier):
            return NotImplemented
        return self.uid_hash == other.uid_hash

    def __hash__(self) -> int:
        return hash(self.uid_hash)

    def __repr__(self) -> str:
        return f"OperatorIdentifier(uid={self.uid!r}, uid_hash={self.uid_hash!r})"

    def __str__(self) -> str:
        return self.uid if self.uid is not None else self.uid_hash


_GENERATED_PREFIX = b"statekit/generated-uid/v1"


def generated_uid_hash(*parts: str) -> str:
    """A deterministic uid hash for an operator that has no uid, from parts that identify it.

    The parts (e.g. the operator's position in the job graph and its name) are joined
    unambiguously, each length-prefixed after a statekit-specific prefix, and hashed with
    `murmur3_x64_128`. This is **not** Flink's ``StreamGraphHasherV2`` hash (which depends on the
    whole job graph), so it only matches operators whose savepoint statekit wrote itself.

    Examples
    --------
    >>> generated_uid_hash("0", "map") == generated_uid_hash("0", "map")
    True
    >>> generated_uid_hash("0", "map") != generated_uid_hash("0m", "ap")
    True
    """
    if not parts:
        raise InvalidArgumentError("generated_uid_hash needs at least one part, e.g. the job-graph position")
    data = bytearray(_GENERATED_PREFIX)
    for part in parts:
        if not isinstance(part, str):
            raise InvalidArgumentError(
                f"generated_uid_hash parts must be str, got {part!r}; convert positions with str()"
            )
        encoded = _java_utf8(part)
        data += struct.pack("<Q", len(encoded)) + encoded
    return murmur3_x64_128(bytes(data)).hex()


#: How APIs taking ``op`` accept an operator: an `OperatorIdentifier`, or a str that is its uid (`coerce`).
OpLike = Union[OperatorIdentifier, str]
