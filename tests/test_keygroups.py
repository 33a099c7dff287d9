"""Tests for statekit.keygroups: Flink parity vectors, Java hashCode rules, ranges, vectorised path."""

from __future__ import annotations

import math
import random
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.errors import InvalidArgumentError, NullKeyError, ParallelismError, StateTypeError
from statekit.keygroups import (
    DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
    MAX_PARALLELISM_UPPER_BOUND,
    KeyGroupRange,
    assign_key_groups,
    assign_to_key_group,
    check_max_parallelism,
    check_parallelism,
    compute_key_group_for_key_hash,
    default_max_parallelism,
    java_hash,
    key_group_range,
    murmur_hash,
    operator_index_for_key_group,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)  # Arrow strings are valid UTF-8
MAXP = st.integers(1, MAX_PARALLELISM_UPPER_BOUND)
AB = pa.struct([("a", pa.int32()), ("b", pa.string())])
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- Flink parity vectors ------------------------------------------------------------------------


def test_int_keys_match_flink():
    expected = [94, 86, 127, 113, 7, 126, 18, 113, 15, 51]
    assert [assign_to_key_group(k, 128, "int") for k in range(10)] == expected
    assert assign_key_groups(pa.array(range(10), pa.int32()), 128).tolist() == expected
    assert assign_key_groups(np.arange(10, dtype=np.int32), 128).tolist() == expected
    assert assign_key_groups(list(range(10)), 128, "int").tolist() == expected


def test_string_keys_match_flink():
    keys = ["hello", "world", "a", ""]
    assert [assign_to_key_group(k, 128, "string") for k in keys] == [35, 66, 81, 94]
    assert [assign_to_key_group(k, 128) for k in keys] == [35, 66, 81, 94]
    assert assign_key_groups(keys, 128, "string").tolist() == [35, 66, 81, 94]


def test_bigint_keys_match_flink():
    keys = [0, 1, 1 << 40, -1]
    assert [assign_to_key_group(k, 32768, "bigint") for k in keys] == [31198, 16342, 32054, 31198]
    assert assign_key_groups(pa.array(keys, pa.int64()), 32768).tolist() == [31198, 16342, 32054, 31198]


def test_ranges_and_default_max_parallelism_match_flink():
    assert [key_group_range(128, 3, i) for i in range(3)] == [
        KeyGroupRange(0, 42),
        KeyGroupRange(43, 85),
        KeyGroupRange(86, 127),
    ]
    assert default_max_parallelism(100) == 256


def test_default_max_parallelism_bounds():
    assert default_max_parallelism(1) == DEFAULT_LOWER_BOUND_MAX_PARALLELISM
    assert default_max_parallelism(86) == 256  # 86 + 43 = 129 rounds up to 256
    assert default_max_parallelism(85) == 128  # 85 + 42 = 127 rounds up to 128
    assert default_max_parallelism(32768) == MAX_PARALLELISM_UPPER_BOUND


# --- murmur and Java hashCode --------------------------------------------------------------------


def test_murmur_hash_is_non_negative_and_rejects_non_int32():
    assert murmur_hash(0) == 593689054  # 593689054 % 128 == 94, the Flink vector for key 0
    assert all(murmur_hash(c) >= 0 for c in (-(2**31), -1, 1, 2**31 - 1))
    for bad in (2**31, -(2**31) - 1, 1.0, True):
        with pytest.raises(InvalidArgumentError):
            murmur_hash(bad)


def test_compute_key_group_for_key_hash_is_murmur_mod_m():
    assert compute_key_group_for_key_hash(java_hash("hello"), 128) == 35
    assert compute_key_group_for_key_hash(99162322, 7) == murmur_hash(99162322) % 7


@pytest.mark.parametrize(
    ("key", "key_type", "expected"),
    [
        (7, "int", 7),
        (-7, "integer", -7),
        (-300, "smallint", -300),
        (-100, "tinyint", -100),
        (-1, "bigint", 0),  # Long: (int)(v ^ v >>> 32)
        (1 << 40, "long", 256),
        (2**63 - 1, "bigint", -(2**31)),
        ("hello", "string", 99162322),
        ("", "string", 0),
        ("\U0001f600", "string", 0xD83D * 31 + 0xDE00),  # one emoji is two UTF-16 units
        ("\ud83d", "string", 0xD83D),  # a lone surrogate is one unit, as in Java
        (True, "boolean", 1231),
        (False, "boolean", 1237),
        (1.0, "double", 1072693248),
        (0.0, "double", 0),
        (-0.0, "double", -(2**31)),  # -0.0 != 0.0 in Double.hashCode
        (math.nan, "double", 0x7FF80000),
        (struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000123))[0], "double", 0x7FF80000),
        (1.0, "float", 1065353216),
        (math.nan, "float", 0x7FC00000),
        ((1, "a"), "struct<a:int,b:string>", 31 * 1 + 97),
        ({"b": "a", "a": 1}, "struct<a:int,b:string>", 31 * 1 + 97),
        ((None, "a"), "struct<a:int,b:string>", 97),  # a null field hashes 0
        ((2, (3, True)), "struct<a:int, b:struct<c:bigint, d:boolean>>", 31 * 2 + 31 * 3 + 1231),
    ],
)
def test_java_hash_known_values(key, key_type, expected):
    assert java_hash(key, key_type) == expected


def test_java_hash_inference():
    assert java_hash(1 << 40) == java_hash(1 << 40, "bigint") == 256
    assert java_hash("x") == java_hash("x", "string")
    assert java_hash(True) == 1231  # a bool is a Boolean, not a Long
    assert java_hash(1.0) == java_hash(1.0, "double")
    assert java_hash((1, "a", 2.0)) == java_hash((1, "a", 2.0), "struct<f0:bigint,f1:string,f2:double>")
    assert java_hash(np.int32(5)) == java_hash(5, "int")
    assert java_hash(np.float32(1.5)) == java_hash(1.5, "float")


def test_pyarrow_key_types():
    cases = [
        (pa.int32(), 5, "int"),
        (pa.int64(), 1 << 40, "bigint"),
        (pa.int16(), 5, "smallint"),
        (pa.int8(), 5, "tinyint"),
        (pa.string(), "x", "string"),
        (pa.large_string(), "x", "string"),
        (pa.bool_(), True, "boolean"),
        (pa.float64(), 2.5, "double"),
        (pa.float32(), 2.5, "float"),
        (pa.struct([("a", pa.int32()), ("b", pa.string())]), (1, "a"), "struct<a:int,b:string>"),
    ]
    for arrow_type, key, ddl in cases:
        assert java_hash(key, arrow_type) == java_hash(key, ddl)
    with pytest.raises(StateTypeError, match="uint32"):
        java_hash(1, pa.uint32())


def test_ddl_parsing_variants():
    assert java_hash((1, "a"), "STRUCT<a INT, b STRING>") == 128
    assert java_hash((1, "a"), "struct<`a`:integer,b:string>") == 128
    assert java_hash(-3, "short") == java_hash(-3, "smallint") == -3  # aliases of statekit.types
    for bad in ["struct<a:int", "struct<a int,a int>", "map<int,int>", "int extra", "struct<>", "", "binary"]:
        with pytest.raises(StateTypeError, match="key type"):
            java_hash(1, bad)


@pytest.mark.parametrize(
    ("ddl", "key"),
    [("int", 7), ("bigint", 1 << 40), ("smallint", -3), ("tinyint", 4), ("string", "k\u00e9y"),
     ("boolean", True), ("double", -0.0), ("float", 2.5),
     ("struct<a:int,`b c`:struct<d:string,e:double>>", (1, ("x", 0.5)))],
)  # fmt: skip
def test_key_types_as_the_manifest_writes_them(ddl, key):
    # the manifest stores to_ddl(...) and readers pass it, or its parsed Arrow type, back to us
    from statekit.types import parse_ddl, to_ddl

    expected = java_hash(key, ddl)
    assert java_hash(key, to_ddl(parse_ddl(ddl))) == expected == java_hash(key, parse_ddl(ddl))


def test_null_key_raises():
    with pytest.raises(NullKeyError):
        java_hash(None, "int")
    with pytest.raises(NullKeyError):
        assign_to_key_group(None, 128)


@pytest.mark.parametrize(
    ("key", "key_type", "fragment"),
    [
        (2**40, "int", "declare the key type as bigint"),
        (2**63, "bigint", "64-bit"),
        (40000, "smallint", "16-bit"),
        ("12", "bigint", "pass an int"),
        (True, "int", "pass an int"),
        (1, "string", "pass a str"),
        (1, "double", "pass a float, e.g. 1.0"),
        (1, "boolean", "True or False"),
        (1e300, "float", "declare the key type as double"),
        ((1,), "struct<a:int,b:string>", "2 fields"),
        ({"a": 1}, "struct<a:int,b:string>", "exactly the fields"),
        (5, "struct<a:int>", "dict by field name"),
        (object(), None, "pass key_type"),
        ((1, None), None, "null field; pass key_type"),
    ],
)
def test_misfit_keys_raise_state_type_error_naming_key_type_and_fix(key, key_type, fragment):
    with pytest.raises(StateTypeError, match=fragment) as info:
        java_hash(key, key_type)
    if key_type is not None:
        assert key_type in str(info.value) or "struct<" in str(info.value)


# --- parallelism validation ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 40000, 32769, 1.5, "128", True, None])
def test_bad_max_parallelism_raises_parallelism_error(bad):
    with pytest.raises(ParallelismError, match="max parallelism"):
        check_max_parallelism(bad)
    for call in (
        lambda: assign_to_key_group(1, bad),
        lambda: compute_key_group_for_key_hash(1, bad),
        lambda: key_group_range(bad, 1, 0),
        lambda: operator_index_for_key_group(bad, 1, 0),
        lambda: assign_key_groups([1, 2], bad),
    ):
        with pytest.raises(ParallelismError):
            call()


def test_parallelism_error_messages_give_bounds_and_value():
    with pytest.raises(ParallelismError, match=r"between 1 and 32768.*got 0"):
        check_max_parallelism(0)
    with pytest.raises(ParallelismError, match=r"between 1 and 128.*got 200"):
        check_parallelism(200, 128)
    with pytest.raises(ParallelismError, match=r"got 40000"):
        default_max_parallelism(40000)
    for bad_p in (0, 129):
        with pytest.raises(ParallelismError):
            key_group_range(128, bad_p, 0)
        with pytest.raises(ParallelismError):
            operator_index_for_key_group(128, bad_p, 0)
    assert check_parallelism(np.int64(4)) == 4


def test_index_arguments_are_checked():
    with pytest.raises(InvalidArgumentError, match="operator index"):
        key_group_range(128, 3, 3)
    with pytest.raises(InvalidArgumentError, match="key group"):
        operator_index_for_key_group(128, 3, 128)


# --- key group ranges ----------------------------------------------------------------------------


def _check_partition(m: int, p: int) -> None:
    ranges = [key_group_range(m, p, i) for i in range(p)]
    assert ranges[0].start == 0 and ranges[-1].end == m - 1
    for a, b in zip(ranges, ranges[1:]):
        assert b.start == a.end + 1  # contiguous, no gaps or overlaps
    assert sum(len(r) for r in ranges) == m
    for i, r in enumerate(ranges):
        assert len(r) >= 1
        assert {operator_index_for_key_group(m, p, kg) for kg in (r.start, r.end)} == {i}


def test_every_key_group_owned_by_exactly_one_subtask_on_a_grid():
    for m in (1, 2, 3, 7, 128, 129, 1000, 4096):
        for p in sorted({q for q in (1, 2, 3, 5, 7, m // 2, m - 1, m) if 1 <= q <= m}):
            ranges = [key_group_range(m, p, i) for i in range(p)]
            owners = [i for i, r in enumerate(ranges) for _ in r]
            assert owners == [operator_index_for_key_group(m, p, kg) for kg in range(m)]


@FAST
@given(data=st.data(), m=MAXP)
def test_ranges_partition_key_groups(data, m):
    p = data.draw(st.integers(1, m))
    _check_partition(m, p)
    kg = data.draw(st.integers(0, m - 1))
    assert kg in key_group_range(m, p, operator_index_for_key_group(m, p, kg))


def test_key_group_range_value_semantics():
    r = KeyGroupRange(3, 5)
    assert list(r) == [3, 4, 5] and len(r) == 3 and 4 in r and 6 not in r and "4" not in r
    assert r.intersect(KeyGroupRange(5, 9)) == KeyGroupRange(5, 5)
    assert r.intersect(KeyGroupRange(6, 9)) is KeyGroupRange.EMPTY
    empty = KeyGroupRange.EMPTY
    assert len(empty) == 0 and not empty and list(empty) == [] and 0 not in empty
    assert empty.intersect(r) == empty and KeyGroupRange(0, -1) == empty
    with pytest.raises(InvalidArgumentError, match="KeyGroupRange.EMPTY"):
        KeyGroupRange(5, 3)
    with pytest.raises(InvalidArgumentError):
        KeyGroupRange(-1, 3)
    with pytest.raises(AttributeError):
        r.start = 0  # type: ignore[misc]


# --- vectorised path agrees with the scalar path -------------------------------------------------


def _scalar(keys, m, key_type):
    return [assign_to_key_group(k, m, key_type) for k in keys]


@FAST
@given(keys=st.lists(INT64, max_size=40), m=MAXP)
def test_vector_bigint_matches_scalar(keys, m):
    assert assign_key_groups(pa.array(keys, pa.int64()), m).tolist() == _scalar(keys, m, "bigint")


@FAST
@given(keys=st.lists(INT32, max_size=40), m=MAXP)
def test_vector_int_matches_scalar(keys, m):
    expected = _scalar(keys, m, "int")
    assert assign_key_groups(np.array(keys, np.int32), m).tolist() == expected
    # wider storage is fine when the values fit the declared type
    assert assign_key_groups(pa.array(keys, pa.int64()), m, "int").tolist() == expected


@FAST
@given(keys=st.lists(TEXT, max_size=40), m=MAXP)
def test_vector_string_matches_scalar(keys, m):
    expected = _scalar(keys, m, "string")
    assert assign_key_groups(keys, m, "string").tolist() == expected
    assert assign_key_groups(pa.array(keys, pa.large_string()), m).tolist() == expected


@FAST
@given(keys=st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=40), m=MAXP)
def test_vector_double_and_float_match_scalar(keys, m):
    assert assign_key_groups(keys, m, "double").tolist() == _scalar(keys, m, "double")
    small = [k for k in keys if not math.isfinite(k) or abs(k) < 3e38]
    assert assign_key_groups(np.array(small), m, "float").tolist() == _scalar(small, m, "float")


STRUCT = "struct<a:int,b:string,c:struct<d:double,e:boolean>>"
STRUCT_KEYS = st.tuples(
    st.none() | INT32,
    st.none() | TEXT,
    st.none() | st.tuples(st.none() | st.floats(), st.none() | st.booleans()),
)


@FAST
@given(keys=st.lists(STRUCT_KEYS, max_size=30), m=MAXP)
def test_vector_struct_matches_scalar(keys, m):
    assert assign_key_groups(keys, m, STRUCT).tolist() == _scalar(keys, m, STRUCT)


def test_large_random_sample_matches_scalar():
    rng = random.Random(42)
    alphabet = "abcXYZ09 -_éßü中文\U0001f600\U0001f680\u0301"
    strings = ["".join(rng.choices(alphabet, k=rng.randint(0, 25))) for _ in range(3000)]
    longs = [rng.randint(-(2**63), 2**63 - 1) for _ in range(3000)] + [0, -1, 2**63 - 1, -(2**63)]
    doubles = [rng.uniform(-1e6, 1e6) for _ in range(1000)] + [0.0, -0.0, math.nan, math.inf, -math.inf]
    for m in (1, 7, 128, 32768):
        assert assign_key_groups(strings, m).tolist() == _scalar(strings, m, "string")
        assert assign_key_groups(longs, m).tolist() == _scalar(longs, m, "bigint")
        assert assign_key_groups(doubles, m).tolist() == _scalar(doubles, m, "double")
    # slices larger than the internal batch size, and a string longer than any batch
    many = strings * 30 + ["\U0001f600" * 100_000]
    assert assign_key_groups(many, 128).tolist() == _scalar(many, 128, "string")


def test_small_types_and_booleans_match_scalar():
    shorts = list(range(-(2**15), 2**15, 97))
    assert assign_key_groups(np.array(shorts, np.int16), 128).tolist() == _scalar(shorts, 128, "smallint")
    tiny = list(range(-128, 128))
    assert assign_key_groups(pa.array(tiny, pa.int8()), 128).tolist() == _scalar(tiny, 128, "tinyint")
    bools = [True, False, True]
    assert assign_key_groups(np.array(bools), 128).tolist() == _scalar(bools, 128, "boolean")


def test_arrow_layouts_offsets_chunks_and_dictionaries():
    keys = ["x", "", "\U0001f600z", "hello", "ü", "world"] * 5
    expected = _scalar(keys, 128, "string")
    arr = pa.array(keys)
    assert assign_key_groups(arr.slice(7, 10), 128).tolist() == expected[7:17]
    assert assign_key_groups(pa.chunked_array([arr.slice(0, 4), arr.slice(4)]), 128).tolist() == expected
    assert assign_key_groups(pa.chunked_array([], pa.string()), 128).tolist() == []
    assert assign_key_groups(arr.dictionary_encode(), 128).tolist() == expected
    assert assign_key_groups(arr.cast(pa.string_view()), 128).tolist() == expected
    assert assign_key_groups(np.array(keys), 128).tolist() == expected
    structs = pa.array([{"a": i, "b": k} for i, k in enumerate(keys)], AB)
    expected_structs = _scalar([(i, k) for i, k in enumerate(keys)], 128, "struct<a:int,b:string>")
    assert assign_key_groups(structs.slice(3, 9), 128).tolist() == expected_structs[3:12]
    # struct fields are matched by name, in the declared order
    swapped = pa.StructArray.from_arrays([structs.field("b"), structs.field("a")], names=["b", "a"])
    assert assign_key_groups(swapped, 128, "struct<a:int,b:string>").tolist() == expected_structs


def test_vector_nulls_raise_with_index_but_null_struct_fields_hash_zero():
    with pytest.raises(NullKeyError, match="index 2"):
        assign_key_groups(pa.array([1, 2, None]), 128)
    with pytest.raises(NullKeyError, match="index 0"):
        assign_key_groups([None, "a"], 128)
    with pytest.raises(NullKeyError):
        assign_key_groups([(1, "a"), None], 128, "struct<a:int,b:string>")
    keys = pa.array([{"a": None, "b": "x"}, {"a": 3, "b": None}], AB)
    expected = _scalar([(None, "x"), (3, None)], 128, "struct<a:int,b:string>")
    assert assign_key_groups(keys, 128).tolist() == expected


def test_vector_misfits_raise_state_type_error():
    with pytest.raises(StateTypeError, match="bigint"):
        assign_key_groups([1, 2**40], 128, "int")
    with pytest.raises(StateTypeError, match="bigint"):
        assign_key_groups(pa.array([1, 2**40]), 128, "int")
    with pytest.raises(StateTypeError, match="string"):
        assign_key_groups(pa.array(["1"]), 128, "bigint")
    with pytest.raises(StateTypeError, match="pass a float"):
        assign_key_groups([1, 2], 128, "double")
    with pytest.raises(StateTypeError, match="mix"):
        assign_key_groups([1, True], 128)
    with pytest.raises(StateTypeError, match="double"):
        assign_key_groups(np.array([1e300]), 128, "float")
    with pytest.raises(StateTypeError, match="uint64"):
        assign_key_groups(np.array([1], np.uint64), 128)
    with pytest.raises(StateTypeError, match="exactly the fields"):
        assign_key_groups([{"a": 1}], 128, "struct<a:int,b:string>")
    assert assign_key_groups(np.array([1], np.uint64), 128, "bigint").tolist() == [86]


def test_empty_inputs():
    assert assign_key_groups([], 128).dtype == np.int32
    assert assign_key_groups(pa.array([], pa.int64()), 128).tolist() == []
