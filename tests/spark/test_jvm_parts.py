"""Keyed parts written by Spark's own Parquet writer (statekit.spark.jvm_parts) are statekit files: every reader
reads them as it reads the Python writer's, `check` passes, errors stay typed; other types take the Python path."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.errors import DuplicateKeyError
from statekit.format.files import ROW_GROUP_ROWS
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.spark import OperatorTransformation, SavepointReader, SavepointWriter, jvm_parts
from statekit.state import ValueStateDescriptor

pytestmark = pytest.mark.spark

STATES = [ValueStateDescriptor("n", "bigint"), ValueStateDescriptor("s", "string"),
          ValueStateDescriptor("p", "struct<name:string,age:int>"), ValueStateDescriptor("l", "array<int>"),
          ValueStateDescriptor("m", "map<string,double>"), ValueStateDescriptor("d", "decimal(10,2)")]  # fmt: skip
_ROWS = ("id * 7919 - 20000 AS key", "IF(id % 5 = 0, NULL, id) AS n", "IF(id % 7 = 0, NULL, CAST(id AS STRING)) AS s",
         "named_struct('name', CAST(id AS STRING), 'age', CAST(id % 90 AS INT)) AS p",
         "array(CAST(id AS INT), CAST(id + 1 AS INT)) AS l", "map('a', id * 0.5) AS m",
         "CAST(id / 100 AS DECIMAL(10,2)) AS d")  # fmt: skip


def _written_by_spark(sp: Savepoint, op: str) -> list[bool]:
    return [b"org.apache.spark.version" in (pq.ParquetFile(sp.path / f.path).schema_arrow.metadata or {})
            for f in sp.keyed_files(op)]  # fmt: skip


def _bootstrap(spark, df, path, *states):
    t = OperatorTransformation.bootstrap_with(df).key_by("key").columns(*(states or STATES))
    SavepointWriter.new_savepoint(spark, max_parallelism=64).with_operator("op", t).write(path)
    return Savepoint.open(path)


def _python_path(monkeypatch):
    monkeypatch.setattr(jvm_parts, "jvm_unavailable", lambda *a: "the test's Python path")


def test_columnar_bootstrap_is_written_by_spark_and_reads_as_the_python_writers(spark, tmp_path, monkeypatch):
    # rows with no state set are dropped, as by the Python path
    df = spark.range(300_000).selectExpr(*_ROWS).union(spark.range(2).selectExpr(
        "-1 - id AS key", "CAST(NULL AS BIGINT)", "CAST(NULL AS STRING)", "CAST(NULL AS STRUCT<name:STRING,age:INT>)",
        "CAST(NULL AS ARRAY<INT>)", "CAST(NULL AS MAP<STRING,DOUBLE>)", "CAST(NULL AS DECIMAL(10,2))"))  # fmt: skip
    jvm = _bootstrap(spark, df, tmp_path / "jvm")
    with monkeypatch.context() as m:
        _python_path(m)
        py = _bootstrap(spark, df, tmp_path / "py")
    assert all(_written_by_spark(jvm, "op")) and not any(_written_by_spark(py, "op"))
    assert check(jvm.path).ok and check(py.path).ok
    assert jvm.keyed_table("op", with_key_group=True).sort_by("key") == py.keyed_table("op", with_key_group=True).sort_by("key")
    assert jvm.keyed_table("op").num_rows == 300_000
    assert sorted((f.key_group_start, f.key_group_end, f.rows) for f in jvm.keyed_files("op")) == \
        sorted((f.key_group_start, f.key_group_end, f.rows) for f in py.keyed_files("op"))  # fmt: skip
    for key in (7919 * 3 - 20000, 7919 * 299_999 - 20000, 123):
        assert jvm.get("op", key) == py.get("op", key)
    # rows sorted by key group, row groups small: point reads decode only their key group's row groups
    for f in jvm.keyed_files("op"):
        md = pq.ParquetFile(jvm.path / f.path).metadata
        bounds = [(md.row_group(i).column(0).statistics.min, md.row_group(i).column(0).statistics.max)
                  for i in range(md.num_row_groups)]  # fmt: skip
        assert all(md.row_group(i).num_rows <= ROW_GROUP_ROWS for i in range(md.num_row_groups))
        assert all(a[1] <= b[0] for a, b in zip(bounds, bounds[1:])), bounds
    both = [SavepointReader.read(spark, sp.path).read_keyed_state("op").orderBy("key").collect() for sp in (jvm, py)]
    assert both[0] == both[1]


@pytest.mark.parametrize("key", ["id % 1000", "CAST(id % 1000 AS STRING)", "named_struct('a', id % 1000)"])
def test_a_duplicate_key_is_refused_by_name_and_nothing_is_written(spark, tmp_path, key):
    df = spark.range(3000).selectExpr(f"{key} AS key", "id AS n")
    with pytest.raises(DuplicateKeyError, match="appears more than once"):
        _bootstrap(spark, df, tmp_path / "sp", STATES[0])
    assert not (tmp_path / "sp").exists()


def test_types_spark_does_not_write_as_statekit_take_the_python_path(spark, tmp_path):
    df = spark.range(100).selectExpr("id AS key", "TIMESTAMP '2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS t")
    sp = _bootstrap(spark, df, tmp_path / "sp", ValueStateDescriptor("t", "timestamp"))
    assert not any(_written_by_spark(sp, "op")) and check(sp.path).ok
    assert sp.keyed_table("op").num_rows == 100


def test_with_state_transform_maps_files_to_files_through_spark(spark, tmp_path, monkeypatch):
    with SavepointBuilder(tmp_path / "src", rows_per_file=1000) as b:
        op = b.add_operator("op", parallelism=2, max_parallelism=64, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("n", "int")])  # fmt: skip
        op.write_keyed(pa.table({"key": pa.array(range(5000), pa.int64()),
                                 "n": pa.array([None if k % 3 == 0 else k for k in range(5000)], pa.int32())}))  # fmt: skip
    src = Savepoint.open(tmp_path / "src")
    evolve = lambda out: (SavepointWriter.from_existing_savepoint(spark, tmp_path / "src")  # noqa: E731
                          .with_state_transform("op", "n", "CAST(n AS BIGINT) * 10", "bigint").write(out))  # fmt: skip
    jvm = Savepoint.open(evolve(tmp_path / "jvm"))
    with monkeypatch.context() as m:
        _python_path(m)
        py = Savepoint.open(evolve(tmp_path / "py"))
    assert all(_written_by_spark(jvm, "op")) and not any(_written_by_spark(py, "op"))
    assert check(jvm.path).ok and check(py.path).ok
    ranges = lambda sp: sorted((f.key_group_start, f.key_group_end) for f in sp.keyed_files("op"))  # noqa: E731
    assert ranges(jvm) == ranges(src)  # one file per source file, no shuffle
    assert jvm.keyed_table("op").sort_by("key") == py.keyed_table("op").sort_by("key")
    assert jvm.get("op", 7) == {"n": 70} and jvm.get("op", 9) is None
