"""Duplicate keys are found exactly, whatever the fast fingerprint test of string/binary keys says."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from statekit.errors import DuplicateKeyError
from statekit.format import keyed as K


def _table(keys: pa.Array | pa.ChunkedArray) -> pa.Table:
    return pa.table({"key": keys})


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_distinct_keys_pass_and_a_repeated_key_is_named(arrow_type: pa.DataType) -> None:
    text = arrow_type in (pa.string(), pa.large_string())
    keys = ["", "a", "é", "key-1", "x" * 17, "x" * 16 + "y", "日本" * 9]
    values = keys if text else [k.encode() for k in keys]
    K.check_unique_keys(_table(pa.array(values, arrow_type)), has_namespace=False, what="t")
    repeated = values + [values[4]]
    with pytest.raises(DuplicateKeyError, match="x" * 17 if text else "appears more than once"):
        K.check_unique_keys(_table(pa.array(repeated, arrow_type)), has_namespace=False, what="t")


def test_keys_whose_fingerprints_meet_are_checked_exactly() -> None:
    # 40-byte keys differing only in bytes the fingerprint does not sample (8-11 and 28-31): equal
    # fingerprints, distinct keys, so no error; a real repeat among them is still found.
    keys = [f"{'p' * 8}{i:04d}{'q' * 16}{i:04d}{'r' * 8}" for i in range(500)]
    assert len(K._maybe_repeated(pa.chunked_array([pa.array(keys)]), None)) == 500
    K.check_unique_keys(_table(pa.array(keys)), has_namespace=False, what="t")
    with pytest.raises(DuplicateKeyError):
        K.check_unique_keys(_table(pa.array(keys + [keys[123]])), has_namespace=False, what="t")


def test_sliced_and_chunked_columns_agree_with_a_python_set() -> None:
    rng = random.Random(7)
    for _ in range(50):
        values = ["".join(rng.choice("ab") for _ in range(rng.randint(0, 20))) for _ in range(rng.randint(1, 60))]
        whole = pa.array(["zz", *values, "zz"])
        col = pa.chunked_array([whole.slice(1, len(values) // 2), whole.slice(1 + len(values) // 2, len(values) - len(values) // 2)])
        unique = len(set(values)) == len(values)
        if not len(K._maybe_repeated(col, None)):
            assert unique, values  # "no row repeats" is never wrong; "maybe" is checked exactly
        table = pa.table({"key": col})
        first = next((i for i, v in enumerate(values) if v in values[:i]), None)
        assert K.first_duplicate(table, ["key"]) == first, values
        _, hashes = K.key_groups_and_hashes(col, 128, "string")
        assert K.first_duplicate(table, ["key"], hashes) == first, values


def test_java_hashcodes_as_fingerprints_check_colliding_keys_exactly() -> None:
    # "Aa" and "BB" share String.hashCode, so every mix of them of one length does too: one fingerprint
    # for 2**8 distinct keys (all candidates, compared exactly), among 5000 others.
    import itertools

    same_hash = ["".join(p) for p in itertools.product(["Aa", "BB"], repeat=8)]
    keys = same_hash + [f"key-{i}" for i in range(5000)]
    t = _table(pa.array(keys))
    _, hashes = K.key_groups_and_hashes(t.column("key"), 128, "string")
    assert len(set(hashes[: len(same_hash)].tolist())) == 1
    assert len(K._maybe_repeated(t.column("key"), hashes)) == len(same_hash)
    K.check_unique_keys(t, has_namespace=False, what="t", key_hashes=hashes)
    for repeat in (same_hash[77], "key-4321"):
        t2 = _table(pa.array(keys + [repeat] + ["key-x"]))
        _, h2 = K.key_groups_and_hashes(t2.column("key"), 128, "string")
        assert K.first_duplicate(t2, ["key"], h2) == len(keys)
        with pytest.raises(DuplicateKeyError, match=repeat):
            K.check_unique_keys(t2, has_namespace=False, what="t", key_hashes=h2)
