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
    assert not K._surely_unique(pa.chunked_array([pa.array(keys)]))
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
        if K._surely_unique(col):
            assert unique, values  # "surely" is never wrong; "maybe not" is checked exactly
        assert (K.first_duplicate(pa.table({"key": col}), ["key"]) is None) == unique, values
