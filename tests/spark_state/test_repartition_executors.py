"""`statekit.spark.streaming_repartition.repartition(..., spark=session)`: the state files are read and written by Spark tasks, and the result is the
local repartition's: the same rows in the same new partitions, valid ``.crc`` side files, the source untouched."""

from __future__ import annotations

import pytest
from spark_corpus import canon, case_dir

from statekit.format.spark.layout import read_checked
from statekit.savepoint.spark_checkpoint import SparkCheckpoint
from statekit.savepoint.spark_repartition import repartition
from statekit.spark.streaming_repartition import repartition as on_executors
from statekit.testing import tree_digest


def _rows(sp, store):
    return canon([{k: str(v) for k, v in r.items()} for r in sp.keyed_table(0, store=store).to_pylist()])


#: in `make test` the smallest job (6 tasks); a join (two stores per task) and an HDFS case under `make test-extended`
CASES = [("tws-rocksdb_changelog", 2), pytest.param("agg-hdfs", 8, marks=pytest.mark.extended),
         pytest.param("join-rocksdb", 3, marks=pytest.mark.extended)]


@pytest.mark.spark
@pytest.mark.parametrize("case,m", CASES)
def test_executors_write_what_the_local_repartition_writes(spark, tmp_path, case, m):
    src = case_dir(case) / "checkpoint"
    before = tree_digest(src)
    sc = spark.sparkContext
    sc.setJobGroup(f"statekit-repartition-{case}", "test")
    try:
        summary = on_executors(src, tmp_path / "spark", partitions=m, spark=spark)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    local = repartition(src, tmp_path / "local", partitions=m)
    assert tree_digest(src) == before
    assert summary.entries == local.entries and sum(map(sum, summary.entries.values())) > 0
    a, b = SparkCheckpoint.open(tmp_path / "local"), SparkCheckpoint.open(tmp_path / "spark")
    assert b.batch == a.batch and b.spark_operator(0).num_partitions == m
    for store in a.tables(0):
        assert _rows(a, store) == _rows(b, store)  # partition_id included: each entry in the same new partition
    for crc in (tmp_path / "spark").rglob("*.crc"):
        read_checked(crc.with_name(crc.name[:-4]), str(crc))
    # the work ran as Spark tasks: one per source store partition, then one per new store partition
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup(f"statekit-repartition-{case}")
    assert len(jobs) == 1
    stages = [tracker.getStageInfo(s) for s in tracker.getJobInfo(jobs[0]).stageIds]
    stores = len(SparkCheckpoint.open(src).spark_operator(0).stores) if not case.startswith("tws") else 1
    assert sorted(s.numTasks for s in stages) == sorted([4 * stores, m * stores])


@pytest.mark.spark
@pytest.mark.extended
def test_cli_engine_spark(spark, tmp_path):
    from typer.testing import CliRunner

    from statekit_cli.app import app

    r = CliRunner().invoke(app, ["repartition", str(case_dir("agg-rocksdb") / "checkpoint"), str(tmp_path / "out"),
                                 "--partitions", "3", "--engine", "spark"])
    assert r.exit_code == 0, r.output
    local = repartition(case_dir("agg-rocksdb") / "checkpoint", tmp_path / "local", partitions=3)
    a, b = SparkCheckpoint.open(tmp_path / "local"), SparkCheckpoint.open(tmp_path / "out")
    assert _rows(a, "default") == _rows(b, "default") and sum(local.entries["0/default"]) > 0
