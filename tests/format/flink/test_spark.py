"""Flink savepoints through Spark: every read_* method, key pruning by key group, register() and USING statekit."""

from __future__ import annotations

import pytest

from statekit.errors import InvalidArgumentError
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import Savepoint
from statekit.spark import SavepointReader
from statekit.spark.scan import TableSpec, plan_tasks

from .conftest import expected, savepoint

pytestmark = pytest.mark.spark


def _norm(rows):
    """Rows comparable across Spark and Arrow: maps (dicts or item lists) as sorted item lists."""
    def value(v):
        if isinstance(v, dict):
            return sorted(v.items())
        if isinstance(v, list) and v and isinstance(v[0], tuple):
            return sorted(v)
        return v
    return sorted(repr({k: value(v) for k, v in r.items()}) for r in rows)


def _rows(df):
    return sorted(map(repr, (r.asDict(recursive=True) for r in df.collect())))


@pytest.mark.parametrize("case", ["string-hashmap-canonical-snappy", "tuple2-hashmap-canonical", "long-rocksdb-canonical"])
def test_every_table_reads_as_locally(spark, case):
    path = savepoint(case)
    sp = Savepoint.open(path)
    reader = SavepointReader.read(spark, str(path))
    for uid in ("counter", "types"):
        df = reader.read_keyed_state(uid)
        local = sp.keyed_table(uid).to_pylist()
        got = [r.asDict(recursive=True) for r in df.collect()]
        assert len(got) == len(local) == len(expected(case)["operators"][uid]["keys"])
        assert _norm(got) == _norm(local)
    assert reader.read_timers("counter").count() == sp.timers("counter").num_rows
    assert _rows(reader.read_list_state("buffer", "buffered")) == sorted(map(repr, sp.list_state("buffer", "buffered").to_pylist()))
    assert [r.value for r in reader.read_union_state("buffer", "seen").orderBy("idx").collect()] == [30, 1030]
    assert {r.key: r.value for r in reader.read_broadcast_state("rules", "rules").collect()} == \
        {"min": 5, "max": 500, "threshold": 43}


def test_key_filter_reads_one_key_group(spark):
    path = savepoint("string-hashmap-canonical")
    sp = Savepoint.open(path)
    meta = sp.operator("counter")
    tasks = plan_tasks(meta, TableSpec(str(path), meta.uid_hash, "keyed"), frozenset({"alice"}))
    assert len(tasks) == 1 and tasks[0].key_groups == frozenset({116})  # alice's key group only
    row = SavepointReader.read(spark, str(path)).read_keyed_state("counter").where("key = 'alice'").collect()
    assert len(row) == 1 and row[0]["count"] == 9 and row[0]["sum"] == 394


def test_register_and_using_statekit(spark):
    path = str(savepoint("long-hashmap-canonical"))
    dbs = SavepointReader.read(spark, path).register("flk")
    assert set(dbs["flk_counter"]) == {"keyed", "timers"}
    total = spark.sql("SELECT sum(count) AS c FROM flk_counter.keyed").collect()[0]["c"]
    assert total == sum(e["count"] for e in expected("long-hashmap-canonical")["operators"]["counter"]["keys"])
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW flk_types USING statekit OPTIONS (path '{path}', uid 'types', "
              "table 'keyed')")
    assert spark.sql("SELECT count(*) AS n FROM flk_types WHERE v_kryo IS NOT NULL").collect()[0]["n"] == 10


def test_parquet_engine_is_refused_for_flink_state(spark):
    reader = SavepointReader.read(spark, str(savepoint("string-hashmap-canonical")))
    with pytest.raises(InvalidArgumentError, match="engine='statekit'"):
        reader.read_keyed_state(OperatorIdentifier.for_uid("counter"), engine="parquet")


def test_flink_sql_savepoint_tables_through_spark_read_and_register(spark):
    from pathlib import Path

    sp_path = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql" / "2.3.0" / "plan-hashmap-canonical" / "savepoint"
    local = Savepoint.open(sp_path)
    reader = SavepointReader.read(spark, str(sp_path))
    got = reader.read_keyed_state("6_group-aggregate").select("key.k0", "`accState`.f0", "`accState`.f1").collect()
    want = [(r["key"]["k0"], r["accState"]["f0"], r["accState"]["f1"]) for r in local.keyed_table("6_group-aggregate").to_pylist()]
    assert sorted(map(tuple, got), key=repr) == sorted(want, key=repr)
    dbs = reader.register()
    assert "keyed" in dbs["43_join"]
    n = spark.sql("SELECT count(*) AS n FROM `43_join`.keyed").collect()[0]["n"]
    assert n == local.keyed_table("43_join").num_rows
    nameless = SavepointReader.read(spark, str(sp_path.parents[1] / "default-hashmap-canonical" / "savepoint"))
    assert "groupaggregate_51" in nameless.register()  # a SQL operator without uid: its stored name


def test_flink_sql_savepoint_with_its_plan_through_spark_as_through_duckdb(spark):
    import datetime as dt
    from pathlib import Path

    import statekit

    def plain(v):  # Spark gives instants as naive datetimes in its session time zone (UTC here)
        if isinstance(v, list):
            return sorted(map(repr, (plain(x) for x in v)))
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v

    case = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql" / "2.3.0" / "plan-hashmap-canonical"
    sp_path, plan = case / "savepoint", case / "plan.json"
    local = Savepoint.open(sp_path, plan=plan)
    reader = SavepointReader.read(spark, str(sp_path), plan=plan)
    dbs = reader.register(prefix="pl")
    assert "logical" in dbs["pl_6_group_aggregate"] and "logical" in dbs["pl_43_join"]
    for op in ("6_group-aggregate", "12_global-window-aggregate", "18_group-window-aggregate", "25_deduplicate",
               "34_deduplicate", "43_join"):
        want = [plain(r) for r in local.logical_table(op).to_pylist()]
        got = [plain(x.asDict(recursive=True)) for x in reader.read_logical_table(op).collect()]
        assert sorted(map(repr, got)) == sorted(map(repr, want)), op
    q = "SELECT user_name, cnt, total, kinds FROM {db}.logical WHERE cnt > 5 ORDER BY user_name"
    via_spark = [tuple(r) for r in spark.sql(q.format(db="pl_6_group_aggregate")).collect()]
    via_duckdb = statekit.sql(sp_path, q.format(db='"6_group_aggregate"'), plan=plan).to_pylist()
    assert via_spark == [tuple(r.values()) for r in via_duckdb] == [("alice", 8, 434, 3), ("bob", 8, 426, 3),
                                                                  ("carol", 8, 420, 3), ("dave", 7, 302, 3)]
    named = spark.sql("SELECT key.user_name AS u, accState.sum AS s FROM pl_6_group_aggregate.keyed "
                      "WHERE key.user_name = 'alice'").collect()
    assert [tuple(r) for r in named] == [("alice", 434)]
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW sql_windows USING statekit OPTIONS (path '{sp_path}', "
              f"uid '12_global-window-aggregate', table 'logical', plan '{plan}')")
    assert spark.sql("SELECT count(*) AS n FROM sql_windows").collect()[0]["n"] == \
        local.logical_table("12_global-window-aggregate").num_rows
