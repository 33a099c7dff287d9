"""The corpus read through DuckDB (`statekit.sql`) and through Spark (the ``statekit-streaming-state`` data source)."""

from __future__ import annotations

import pytest
from spark_corpus import CASES, assert_state, case_dir, expected

import statekit
from statekit.savepoint.spark_checkpoint import SparkCheckpoint, sql_table_name


@pytest.mark.parametrize("case", CASES)
def test_duckdb_reads_expected_state(case):
    path = case_dir(case) / "checkpoint"
    sp = SparkCheckpoint.open(path)
    dbs = sp.sql_tables()
    db = next(iter(dbs))

    def read(op, store):
        return statekit.sql(path, f'SELECT * FROM "{db}"."{sql_table_name(store)}"').to_pylist()

    assert assert_state(expected(case), read) > 0


def test_duckdb_query_over_state():
    path = case_dir("agg-hdfs") / "checkpoint"
    got = statekit.sql(path, "SELECT sum(count) AS n FROM statestoresave.state WHERE k = 'a'").to_pylist()
    assert got == [{"n": 5}]


#: one case per provider in `make test` (a plain store; transformWithState variables) (all seventeen under `make test-extended`)
_SPARK_CORE = ("agg-hdfs", "tws-rocksdb_changelog")


@pytest.mark.spark
@pytest.mark.parametrize("case", [c if c in _SPARK_CORE else pytest.param(c, marks=pytest.mark.extended) for c in CASES])
def test_spark_reads_expected_state(spark, case):
    from statekit.spark.streaming_state import StreamingStateReader

    reader = StreamingStateReader.read(spark, case_dir(case) / "checkpoint")

    def read(op, store):
        df = reader.keyed_table(op, store)
        return [r.asDict(recursive=True) for r in df.collect()]

    assert assert_state(expected(case), read) > 0
