"""Tests for statekit.identifiers: murmur3 x64 128 vectors and OperatorIdentifier value semantics."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.errors import InvalidArgumentError
from statekit.identifiers import OperatorIdentifier, generated_uid_hash, murmur3_x64_128

COUNTER = "0da08f51eaa85fc298e176a139b3649a"


# --- murmur3 x64 128 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uid", "expected"),
    [("counter", COUNTER), ("broadcast-source-uid", "3a6f51704798c4f418be51bfb6813b77")],
)
def test_flink_uid_hash_vectors(uid, expected):
    assert OperatorIdentifier.for_uid(uid).uid_hash == expected
    assert murmur3_x64_128(uid.encode()).hex() == expected


# Published (h1, h2, text, seed) vectors of Guava's murmur3_128, as repeated in other projects' tests.
PUBLISHED = [
    (0x629942693E10F867, 0x92DB0B82BAEB5347, "hell", 0),
    (0xA78DDFF5ADAE8D10, 0x128900EF20900135, "hello", 1),
    (0x8A486B23F422E826, 0xF962A2C58947765F, "hello ", 2),
    (0x2EA59F466F6BED8C, 0xC610990ACC428A17, "hello w", 3),
    (0x79F6305A386C572C, 0x46305AED3483B94E, "hello wo", 4),
    (0xC2219D213EC1F1B5, 0xA1D8E2E0A52785BD, "hello wor", 5),
    (0xE34BBC7BBC071B6C, 0x7A433CA9C49A9347, "The quick brown fox jumps over the lazy dog", 0),
    (0x658CA970FF85269A, 0x43FEE3EAA68E5C3E, "The quick brown fox jumps over the lazy cog", 0),
]


@pytest.mark.parametrize(("h1", "h2", "text", "seed"), PUBLISHED)
def test_published_vectors_with_seeds(h1, h2, text, seed):
    assert murmur3_x64_128(text.encode(), seed) == struct.pack("<QQ", h1, h2)


def test_smhasher_verification_value_covers_every_tail_length():
    # SMHasher's check: hash prefixes of 0,1,2,...,255 (lengths 0..255, seed 256-len), then hash
    # the concatenated results; the first 4 bytes must read 0x6384BA69 for MurmurHash3_x64_128.
    key = bytes(range(256))
    hashes = b"".join(murmur3_x64_128(key[:n], 256 - n) for n in range(256))
    assert int.from_bytes(murmur3_x64_128(hashes)[:4], "little") == 0x6384BA69


def test_empty_input_with_seed_zero_is_all_zero():
    assert murmur3_x64_128(b"") == bytes(16)
    assert murmur3_x64_128(b"", 1) != bytes(16)


def test_tails_of_every_length_are_distinct_and_length_sensitive():
    data = bytes(range(1, 40))
    digests = [murmur3_x64_128(data[:n]) for n in range(40)]  # every tail 0..15, 0..2 blocks
    assert len(set(digests)) == 40
    for n in range(16):
        assert murmur3_x64_128(data[:n] + b"\0") != murmur3_x64_128(data[:n])  # length is mixed in
        assert all(len(d) == 16 for d in digests)


def test_long_input_is_stable_and_sensitive_to_every_position():
    rng = random.Random(7)
    data = bytes(rng.getrandbits(8) for _ in range(200_003))
    digest = murmur3_x64_128(data)
    assert murmur3_x64_128(bytearray(data)) == digest == murmur3_x64_128(memoryview(data))
    for pos in (0, 15, 16, 100_000, len(data) - 3, len(data) - 1):
        flipped = bytearray(data)
        flipped[pos] ^= 1
        assert murmur3_x64_128(bytes(flipped)) != digest


def test_murmur_argument_errors():
    with pytest.raises(InvalidArgumentError, match="encode"):
        murmur3_x64_128("text")  # type: ignore[arg-type]
    for seed in (-1, 2**32, 1.0, True):
        with pytest.raises(InvalidArgumentError, match="seed"):
            murmur3_x64_128(b"x", seed)


# --- OperatorIdentifier --------------------------------------------------------------------------


def test_for_uid_and_for_uid_hash_are_equal_values():
    by_uid = OperatorIdentifier.for_uid("counter")
    by_hash = OperatorIdentifier.for_uid_hash(COUNTER)
    assert by_uid.uid == "counter" and by_hash.uid is None
    assert by_uid == by_hash and hash(by_uid) == hash(by_hash)
    assert {by_uid: 1}[by_hash] == 1 and len({by_uid, by_hash}) == 1
    assert by_uid != OperatorIdentifier.for_uid("other") and by_uid != COUNTER
    assert by_uid.bytes == bytes.fromhex(COUNTER) and len(by_uid.bytes) == 16
    assert OperatorIdentifier.for_uid_hash(by_uid.bytes) == by_uid
    assert OperatorIdentifier.for_uid_hash(bytearray(by_uid.bytes)) == by_uid
    assert OperatorIdentifier.for_uid_hash(COUNTER.upper()).uid_hash == COUNTER


def test_repr_and_str():
    op = OperatorIdentifier.for_uid("counter")
    assert repr(op) == f"OperatorIdentifier(uid='counter', uid_hash='{COUNTER}')"
    assert str(op) == "counter"
    anonymous = OperatorIdentifier.for_uid_hash(COUNTER)
    assert repr(anonymous) == f"OperatorIdentifier(uid=None, uid_hash='{COUNTER}')"
    assert str(anonymous) == COUNTER
    assert eval(repr(op), {"OperatorIdentifier": OperatorIdentifier}) == op


def test_is_immutable_and_survives_pickle_and_copy():
    op = OperatorIdentifier.for_uid("counter")
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.uid = "x"  # type: ignore[misc]
    for clone in (pickle.loads(pickle.dumps(op)), copy.deepcopy(op), copy.copy(op)):
        assert clone == op and clone.uid == "counter"


@pytest.mark.parametrize(
    "bad",
    ["", "0da08f51", COUNTER + "0", "zz" * 16, "0x" + COUNTER[2:], b"\x00" * 15, b"\x00" * 17, 12, None],
)
def test_malformed_uid_hash_names_input_and_expected_form(bad):
    with pytest.raises(InvalidArgumentError, match="32 hex characters") as info:
        OperatorIdentifier.for_uid_hash(bad)
    shown = f"{len(bad)} bytes" if isinstance(bad, bytes) else repr(bad)
    assert shown in str(info.value)


@pytest.mark.parametrize("bad", ["", None, 5, b"counter"])
def test_bad_uid_raises(bad):
    with pytest.raises(InvalidArgumentError, match="non-empty str"):
        OperatorIdentifier.for_uid(bad)


def test_constructor_refuses_a_uid_that_disagrees_with_its_hash():
    assert OperatorIdentifier(uid_hash=COUNTER, uid="counter") == OperatorIdentifier.for_uid("counter")
    with pytest.raises(InvalidArgumentError, match="for_uid"):
        OperatorIdentifier(uid_hash=COUNTER, uid="not-counter")


def test_coerce_treats_a_str_as_a_uid():
    op = OperatorIdentifier.for_uid_hash(COUNTER)
    assert OperatorIdentifier.coerce(op) is op
    assert OperatorIdentifier.coerce("counter") == op
    # a hash-looking str is still a uid: it hashes again
    assert OperatorIdentifier.coerce(COUNTER) != op and OperatorIdentifier.coerce(COUNTER).uid == COUNTER
    with pytest.raises(InvalidArgumentError, match="for_uid_hash"):
        OperatorIdentifier.coerce(op.bytes)  # type: ignore[arg-type]


def test_uid_is_hashed_as_java_utf8():
    uid = "zähler-\U0001f600"
    assert OperatorIdentifier.for_uid(uid).bytes == murmur3_x64_128(uid.encode("utf-8"))
    # Java joins a surrogate pair held as two chars and writes a lone surrogate as '?'
    assert OperatorIdentifier.for_uid("a\ud83d\ude00") == OperatorIdentifier.for_uid("a\U0001f600")
    assert OperatorIdentifier.for_uid("a\ud800") == OperatorIdentifier.for_uid("a?")


@settings(max_examples=50, deadline=None)
@given(uid=st.text(min_size=1, max_size=40))
def test_hash_round_trips(uid):
    op = OperatorIdentifier.for_uid(uid)
    assert OperatorIdentifier.for_uid_hash(op.uid_hash) == op == OperatorIdentifier.for_uid_hash(op.bytes)
    assert len(op.uid_hash) == 32 and op.uid_hash == op.uid_hash.lower()


# --- generated uid hashes ------------------------------------------------------------------------


def test_generated_uid_hash_is_deterministic_and_unambiguous():
    h = generated_uid_hash("3", "map")
    assert h == generated_uid_hash("3", "map") and len(h) == 32
    assert int(h, 16) >= 0
    assert h != generated_uid_hash("3m", "ap") != generated_uid_hash("3", "map", "")
    assert h != OperatorIdentifier.for_uid("3map").uid_hash
    assert OperatorIdentifier.for_uid_hash(h).uid is None


def test_generated_uid_hash_argument_errors():
    with pytest.raises(InvalidArgumentError, match="at least one part"):
        generated_uid_hash()
    with pytest.raises(InvalidArgumentError, match="str"):
        generated_uid_hash(3, "map")  # type: ignore[arg-type]
