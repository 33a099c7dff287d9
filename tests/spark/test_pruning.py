"""Filters on `key` read only the files of those keys' key groups."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from statekit.keygroups import assign_to_key_group
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.spark import RANGE_ENUMERATION_LIMIT, SavepointReader
from statekit.spark.filters import key_pruning
from statekit.state import ValueStateDescriptor
from statekit.testing import EDGE_KEYS

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


ENGINES = ["parquet", "statekit"]


def _files_read(df, engine):
    """Files a query reads: the pruned file index for Spark's Parquet reader, partitions for the data source."""
    return len(df.inputFiles()) if engine == "parquet" else df.rdd.getNumPartitions()


@pytest.mark.parametrize("engine", ENGINES)
def test_point_lookup_reads_only_its_key_groups_files(spark, many_files, engine):
    sp = Savepoint.open(many_files)
    files = sp.keyed_files("acct")
    assert len(files) > 10
    df = SavepointReader.read(spark, many_files).read_keyed_state("acct", engine=engine)
    assert _files_read(df, engine) == len(files)
    kg = assign_to_key_group(42, 128, "bigint")
    lookup = df.where("key = 42")
    assert _files_read(lookup, engine) == len([f for f in files if f.covers(kg)]) == 1
    assert [tuple(r) for r in lookup.collect()] == [(42, 42)]
    both = df.where("key IN (42, 1999, 5000)")
    assert sorted(tuple(r) for r in both.collect()) == [(42, 42), (1999, 1999)]
    kgs = {assign_to_key_group(k, 128, "bigint") for k in (42, 1999, 5000)}
    assert _files_read(both, engine) == len([f for f in files if any(f.covers(g) for g in kgs)]) < len(files)


@pytest.mark.parametrize("engine", ENGINES)
def test_small_integer_range_is_enumerated(spark, many_files, engine):
    df = SavepointReader.read(spark, many_files).read_keyed_state("acct", engine=engine)
    ranged = df.where("key BETWEEN 10 AND 12")
    assert sorted(r.key for r in ranged.collect()) == [10, 11, 12]
    assert _files_read(ranged, engine) <= 3
    wide = df.where(f"key >= 0 AND key < {RANGE_ENUMERATION_LIMIT + 10}")
    assert wide.count() == N


def test_parquet_engine_prunes_or_and_sql_over_the_same_dataframe(spark, many_files):
    df = SavepointReader.read(spark, many_files).read_keyed_state("acct", engine="parquet")
    either = df.where("key = 42 OR key = 7 OR key IN (8)")
    assert sorted(r.key for r in either.collect()) == [7, 8, 42]
    assert _files_read(either, "parquet") <= 3
    assert _files_read(df.where("key = 42 OR balance = 7"), "parquet") == len(df.inputFiles())  # not narrowing
    assert df.where("key > 1990 AND key < 1990").count() == 0
    assert _files_read(df.where("key > 1990 AND key < 1990"), "parquet") == 0
    df.createOrReplaceTempView("acct_keyed")
    one = spark.sql("SELECT balance FROM acct_keyed WHERE key = 1999")
    assert [r.balance for r in one.collect()] == [1999] and _files_read(one, "parquet") == 1


def test_a_lookup_reads_and_verifies_only_its_files(spark, many_files, tmp_path):
    """Other key groups' files may be damaged: a point lookup never reads them; a full scan refuses them."""
    import shutil

    from statekit.errors import ChecksumMismatchError

    copy = tmp_path / "sp"
    shutil.copytree(many_files, copy)
    kg = assign_to_key_group(42, 128, "bigint")
    for f in Savepoint.open(copy).keyed_files("acct"):
        if not f.covers(kg):
            data = bytearray((copy / f.path).read_bytes())
            data[len(data) // 2] ^= 0xFF
            (copy / f.path).write_bytes(bytes(data))
    df = SavepointReader.read(spark, copy).read_keyed_state("acct", engine="parquet")
    assert [tuple(r) for r in df.where("key = 42").collect()] == [(42, 42)]
    with pytest.raises(ChecksumMismatchError):
        df.count()


# Keys of every scalar key type, edge values included (statekit.testing.EDGE_KEYS): a key group computed
# wrongly on the JVM (statekit.spark.java KeyGroups) would drop the key's row from an IN query over all keys.
_ARROW = {"bigint": pa.int64(), "int": pa.int32(), "smallint": pa.int16(), "tinyint": pa.int8(), "string": pa.string(),
          "boolean": pa.bool_(), "double": pa.float64(), "float": pa.float32()}  # fmt: skip


@pytest.mark.parametrize("key_type", sorted(EDGE_KEYS))
def test_jvm_key_groups_match_flink_for_every_scalar_key_type(spark, tmp_path, key_type):
    keys = list(dict.fromkeys(EDGE_KEYS[key_type]))
    path = tmp_path / "sp"
    with SavepointBuilder(path, rows_per_file=8) as b:
        op = b.add_operator("op", parallelism=2, max_parallelism=128, key_type=key_type,
                            keyed_states=[ValueStateDescriptor("i", "bigint")])
        op.write_keyed(pa.table({"key": pa.array(keys, _ARROW[key_type]), "i": pa.array(range(len(keys)), pa.int64())}))
    df = SavepointReader.read(spark, path).read_keyed_state("op", engine="parquet")
    everything = df.where(F.col("key").isin(keys))
    assert everything.count() == len(keys)
    assert _files_read(everything, "parquet") <= len(df.inputFiles())
    files = Savepoint.open(path).keyed_files("op")
    for i in range(0, len(keys), max(1, len(keys) // 12)):
        one = df.where(F.col("key") == F.lit(pa.array([keys[i]], _ARROW[key_type]).to_pylist()[0]).cast(key_type))
        assert [r.i for r in one.collect()] == [i], (key_type, keys[i])
        zero = key_type in ("double", "float") and keys[i] == 0  # 0.0 = -0.0 in SQL: both groups are read
        kgs = {assign_to_key_group(k, 128, key_type) for k in ([0.0, -0.0] if zero else [keys[i]])}
        assert _files_read(one, "parquet") == len([f for f in files if any(f.covers(g) for g in kgs)])


def test_negative_zero_double_key_is_found_by_a_zero_filter(spark, tmp_path):
    """SQL equality has 0.0 = -0.0, but Flink (Java's hashCode) puts them in different key groups."""
    path = tmp_path / "sp"
    with SavepointBuilder(path, rows_per_file=1) as b:
        op = b.add_operator("op", parallelism=1, max_parallelism=128, key_type="double",
                            keyed_states=[ValueStateDescriptor("i", "bigint")])
        op.write_keyed(pa.table({"key": pa.array([-0.0, 5.0], pa.float64()), "i": pa.array([1, 2], pa.int64())}))
    reader = SavepointReader.read(spark, path)
    by_engine = {e: sorted(r.i for r in reader.read_keyed_state("op", engine=e).where("key = 0.0").collect())
                 for e in ENGINES}  # fmt: skip
    assert by_engine["parquet"] == by_engine["statekit"] == [1]


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


@pytest.mark.parametrize("engine", ENGINES)
def test_timers_prune_by_key_too(spark, tmp_path, engine):
    path = tmp_path / "sp"
    keys = list(range(300))
    with SavepointBuilder(path, rows_per_file=20) as b:
        op = b.add_operator("op", parallelism=2, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("i", "bigint")])
        op.write_keyed(pa.table({"key": pa.array(keys, pa.int64()), "i": pa.array(keys, pa.int64())}))
        op.write_timers(pa.table({"key": pa.array(keys * 2, pa.int64()),
                                  "timestamp": pa.array([1000 + k for k in keys] * 2, pa.int64()),
                                  "domain": ["event"] * len(keys) + ["processing"] * len(keys)}))
    timers = SavepointReader.read(spark, path).read_timers("op", engine=engine)
    assert timers.count() == 2 * len(keys)
    one = timers.where("key = 77")
    assert sorted((r.timestamp, r.domain) for r in one.collect()) == [(1077, "event"), (1077, "processing")]
    kg = assign_to_key_group(77, 128, "bigint")
    assert _files_read(one, engine) == len([f for f in Savepoint.open(path).operator("op").files_of("timers")
                                            if f.covers(kg)]) <= _files_read(timers, engine)  # fmt: skip


def test_struct_keys_prune_in_the_jvm_like_flink_tuples(spark, tmp_path):
    path = tmp_path / "sp"
    keys = [{"a": i * 7919 - 500, "b": f"x{i}"} for i in range(200)]
    key_type = "struct<a:bigint,b:string>"
    with SavepointBuilder(path, rows_per_file=10) as b:
        op = b.add_operator("op", parallelism=2, max_parallelism=128, key_type=key_type,
                            keyed_states=[ValueStateDescriptor("i", "bigint")])
        op.write_keyed(pa.table({"key": pa.array(keys, pa.struct([("a", pa.int64()), ("b", pa.string())])),
                                 "i": pa.array(range(len(keys)), pa.int64())}))  # fmt: skip
    reader = SavepointReader.read(spark, path)
    df = reader.read_keyed_state("op")  # auto: Spark's Parquet scan for struct keys without float fields
    assert "FileScan parquet" in df._jdf.queryExecution().executedPlan().toString()
    files = Savepoint.open(path).keyed_files("op")
    for i in (0, 57, 199):
        one = df.where(F.col("key") == F.struct(F.lit(keys[i]["a"]).alias("a"), F.lit(keys[i]["b"]).alias("b")))
        assert [r.i for r in one.collect()] == [i]
        kg = assign_to_key_group(keys[i], 128, key_type)
        assert _files_read(one, "parquet") == len([f for f in files if f.covers(kg)]) < len(files)
    everything = df.where(F.col("key").isin([F.struct(F.lit(k["a"]).alias("a"), F.lit(k["b"]).alias("b")) for k in keys]))
    assert everything.count() == len(keys)


def test_struct_keys_with_float_fields_use_the_data_source(spark, tmp_path):
    path = tmp_path / "sp"
    with SavepointBuilder(path) as b:
        op = b.add_operator("op", max_parallelism=128, key_type="struct<x:double>",
                            keyed_states=[ValueStateDescriptor("i", "bigint")])
        op.write_keyed(pa.table({"key": pa.array([{"x": 0.5}], pa.struct([("x", pa.float64())])),
                                 "i": pa.array([1], pa.int64())}))  # fmt: skip
    df = SavepointReader.read(spark, path).read_keyed_state("op")
    assert "BatchScan statekit" in df._jdf.queryExecution().executedPlan().toString()
    assert [r.i for r in df.where("key.x = 0.5").collect()] == [1]
