"""The JVM key-group column (io.statekit.spark.KeyGroupUdf) agrees with statekit.keygroups, and writers use it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import statekit.spark.keygroup_column as kgc
from statekit.errors import NullKeyError
from statekit.keygroups import assign_key_groups
from statekit.savepoint import Savepoint
from statekit.savepoint.check import check
from statekit.spark import OperatorTransformation, SavepointWriter
from statekit.spark import parts as P
from statekit.state import ValueStateDescriptor
from statekit.testing import EDGE_KEYS
from statekit.types import parse_ddl

pytestmark = pytest.mark.spark

# Beyond EDGE_KEYS: the float values whose Java hash is special (-0.0 differs from 0.0; NaN is canonical).
EXTRA = {"double": [-0.0, float("nan")], "float": [-0.0, float("nan")]}


def _jvm_key_groups(spark, arr: pa.Array, key_type: str, max_parallelism: int) -> list[int]:
    df = spark.createDataFrame(pa.table({"i": pa.array(range(len(arr)), pa.int64()), "key": arr}))
    assert kgc.jvm_hashable(df, "key", key_type), df.schema
    col = kgc.key_group_column(spark, F.col("key"), max_parallelism)
    assert col is not None
    rows = df.select("i", col.alias("kg")).orderBy("i").collect()
    return [r.kg for r in rows]


@pytest.mark.parametrize("key_type", sorted(EDGE_KEYS))
def test_jvm_key_groups_equal_pythons_for_edge_keys_of_every_key_type(spark, key_type):
    keys = list(dict.fromkeys(EDGE_KEYS[key_type])) + EXTRA.get(key_type, [])
    arr = pa.array(keys, parse_ddl(key_type))
    for max_parallelism in (1, 7, 128, 32768):
        expected = assign_key_groups(arr, max_parallelism, key_type).tolist()
        assert _jvm_key_groups(spark, arr, key_type, max_parallelism) == expected, (key_type, max_parallelism)


def test_jvm_key_groups_of_struct_keys_hash_like_flink_tuples(spark):
    key_type = "struct<a:bigint,b:string,c:int,d:double,e:boolean>"
    keys = [{"a": a, "b": b, "c": c, "d": d, "e": e}
            for a, b, c, d, e in zip(EDGE_KEYS["bigint"], EDGE_KEYS["string"], EDGE_KEYS["int"],
                                     EDGE_KEYS["double"], EDGE_KEYS["boolean"] * 100)]  # fmt: skip
    keys += [{"a": None, "b": None, "c": None, "d": None, "e": None}, {"a": 1, "b": None, "c": 2, "d": -0.0, "e": True}]
    arr = pa.array(keys, parse_ddl(key_type))
    for max_parallelism in (128, 4096):
        expected = assign_key_groups(arr, max_parallelism, key_type).tolist()
        assert _jvm_key_groups(spark, arr, key_type, max_parallelism) == expected


def test_only_exact_key_types_are_hashed_in_the_jvm(spark):
    df = spark.range(3).selectExpr("CAST(id AS INT) AS key")
    assert kgc.jvm_hashable(df, "key", "int")
    assert not kgc.jvm_hashable(df, "key", "bigint")  # widened in Python, as declared
    s = spark.range(3).selectExpr("named_struct('a', id) AS key")
    assert kgc.jvm_hashable(s, "key", "struct<a:bigint>") and not kgc.jvm_hashable(s, "key", "struct<b:bigint>")


BALANCE = ValueStateDescriptor("balance", "bigint")


def _bootstrap(spark, df, path):
    t = OperatorTransformation.bootstrap_with(df).key_by("key").columns(BALANCE)
    SavepointWriter.new_savepoint(spark, max_parallelism=64).with_operator("accounts", t).write(path)
    return Savepoint.open(path)


def test_bootstrap_through_the_jvm_equals_the_python_hash_path(spark, tmp_path, monkeypatch):
    df = spark.range(5000).selectExpr("id * 7919 - 20000 AS key", "id AS balance")
    plan = P.PartPlan("/x", "op", "bigint", 64, 4, pa.schema([]), None, 100, "t")
    plan_jvm = P._with_buckets(df, "key", plan)._jdf.queryExecution().executedPlan().toString()
    assert f"{kgc.UDF_NAME}(key" in plan_jvm and "MapInArrow" not in plan_jvm
    jvm = _bootstrap(spark, df, tmp_path / "jvm")
    monkeypatch.setattr(kgc, "key_group_column", lambda *a: None)
    py = _bootstrap(spark, df, tmp_path / "py")
    assert check(jvm.path).ok and check(py.path).ok
    fields = lambda sp: sorted((f.path, f.rows, f.key_group_start, f.key_group_end)  # noqa: E731
                               for f in sp.keyed_files("accounts"))  # fmt: skip
    assert fields(jvm) == fields(py)
    assert jvm.keyed_table("accounts") == py.keyed_table("accounts")
    assert jvm.get("accounts", 7919 * 3 - 20000) == {"balance": 3}


def test_a_null_key_is_refused_by_name_and_nothing_is_written(spark, tmp_path):
    df = spark.createDataFrame([(1, 10), (None, 20)], "key bigint, balance bigint")
    with pytest.raises(NullKeyError, match="null key"):
        _bootstrap(spark, df, tmp_path / "sp")
    assert not (tmp_path / "sp").exists()
