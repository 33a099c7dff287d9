"""A Flink SQL job's state bootstrapped from a Spark DataFrame (Spark aggregates, one executor task per Flink
subtask writes its file): the state equals what real Flink 2.3.0 kept after the same input, and bad input is
refused before any file is written. The local engine's output, which a real Flink restore checks ((e) in
tests/flink/test_sql_write_restore.py), is the same state."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from statekit.errors import StateTypeError, TemplateHasStateError
from statekit.savepoint import Savepoint
from statekit.spark import bootstrap_sql
from tests.flink.sql_restore import orders1

pytestmark = pytest.mark.spark

SQL = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql"
PLAN = SQL / "2.3.0" / "plan-hashmap-canonical" / "plan.json"
TEMPLATE = SQL / "2.3.0-template" / "plan-hashmap" / "savepoint"
FLINK = SQL / "2.3.0" / "plan-rocksdb-canonical" / "savepoint"


def _rows(path: Path, op: str) -> list[dict]:
    rows = Savepoint.open(path, plan=PLAN).keyed_table(op, with_key_group=True).to_pylist()
    for r in rows:
        for k, v in r.items():
            if isinstance(v, list):
                r[k] = sorted(v)
    return sorted(rows, key=str)


def test_spark_bootstrap_equals_flinks_state(spark, tmp_path):
    df = spark.createDataFrame(orders1())
    for op in ("6_group-aggregate", "29_deduplicate"):
        report = bootstrap_sql(df, TEMPLATE, tmp_path / op, operator=op, plan=PLAN)
        assert report.written and report.operators[0][3] == 72
        assert _rows(tmp_path / op, op) == _rows(FLINK, op)


def test_spark_bad_input_writes_nothing(spark, tmp_path):
    t = orders1()
    bad = spark.createDataFrame(t.set_column(t.schema.get_field_index("amount"), "amount",
                                             pa.array([str(i) for i in range(72)])))
    with pytest.raises(StateTypeError, match="amount.*string"):
        bootstrap_sql(bad, TEMPLATE, tmp_path / "out", operator="6_group-aggregate", plan=PLAN)
    with pytest.raises(TemplateHasStateError):
        bootstrap_sql(spark.createDataFrame(t), FLINK, tmp_path / "out", operator="6_group-aggregate", plan=PLAN)
    assert not list(tmp_path.iterdir())
