"""Filters on `key` read only the files of those keys' key groups."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.keygroups import assign_to_key_group
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.spark import RANGE_ENUMERATION_LIMIT, SavepointReader
from statekit.spark.filters import key_pruning
from statekit.state import ValueStateDescriptor

pytestmark = pytest.mark.spark

N = 2000


@pytest.fixture(scope="module")
def many_files(tmp_path_factory):
    """2000 keys in files of ~100 rows: about 20 files, each a few key groups wide."""
    path = tmp_path_factory.mktemp("pruning") / "sp"
    with SavepointBuilder(path, rows_per_file=100) as b:
        op = b.add_operator("acct", parallelism=4, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("balance", "bigint")])
        op.write_keyed(pa.table({"key": pa.array(range(N), pa.int64()), "balance": pa.array(range(N), pa.int64())}))
    return path


def _partitions(df):
    return df.rdd.getNumPartitions()


def test_point_lookup_reads_only_its_key_groups_files(spark, many_files):
    sp = Savepoint.open(many_files)
    files = sp.keyed_files("acct")
    assert len(files) > 10
    df = SavepointReader.read(spark, many_files).read_keyed_state("acct")
    assert _partitions(df) == len(files)
    kg = assign_to_key_group(42, 128, "bigint")
    lookup = df.where("key = 42")
    assert _partitions(lookup) == len([f for f in files if f.covers(kg)]) == 1
    assert [tuple(r) for r in lookup.collect()] == [(42, 42)]
    both = df.where("key IN (42, 1999, 5000)")
    assert sorted(tuple(r) for r in both.collect()) == [(42, 42), (1999, 1999)]
    kgs = {assign_to_key_group(k, 128, "bigint") for k in (42, 1999, 5000)}
    assert _partitions(both) == len([f for f in files if any(f.covers(g) for g in kgs)]) < len(files)


def test_small_integer_range_is_enumerated(spark, many_files):
    df = SavepointReader.read(spark, many_files).read_keyed_state("acct")
    ranged = df.where("key BETWEEN 10 AND 12")
    assert sorted(r.key for r in ranged.collect()) == [10, 11, 12]
    assert _partitions(ranged) <= 3
    wide = df.where(f"key >= 0 AND key < {RANGE_ENUMERATION_LIMIT + 10}")
    assert wide.count() == N


def test_filter_analysis_rules():
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull, LessThanOrEqual, StringStartsWith

    p = key_pruning([EqualTo(("key",), 5), In(("key",), (5, 6))], "bigint")
    assert p.keys == {5} and p.handled == (0, 1)
    p = key_pruning([GreaterThan(("key",), 1), LessThanOrEqual(("key",), 3), IsNotNull(("key",))], "int")
    assert p.keys == {2, 3} and p.handled == (2,)  # ranges narrow but Spark re-checks them
    assert key_pruning([GreaterThan(("key",), 1)], "int").keys is None  # open range: no pruning
    assert key_pruning([StringStartsWith(("key",), "a")], "string").keys is None
    assert key_pruning([EqualTo(("key",), "a")], "string").keys == {"a"}
    assert key_pruning([EqualTo(("key",), {"a": 1})], "struct<a:int>").keys is None
