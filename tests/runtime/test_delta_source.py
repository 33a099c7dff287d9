"""FileSource.delta: the runtime reads Delta tables written by Spark (commits, deletes, checkpoints, partitions) exactly as Spark does."""

from __future__ import annotations

import pytest
from test_sources_sinks import FailOnceAt

from statekit.errors import SourceError
from statekit.runtime import FileSource, RestartStrategies, StreamExecutionEnvironment

pytestmark = pytest.mark.spark

COLUMNS = ["user", "amount", "country"]


@pytest.fixture(scope="module")
def events(spark, tmp_path_factory):
    """A partitioned table with five commits, a DELETE rewriting files, and checkpoints every two commits."""
    path = str(tmp_path_factory.mktemp("delta") / "events")
    spark.sql(f"CREATE TABLE delta.`{path}` (user STRING, amount BIGINT, country STRING) USING delta "
              "PARTITIONED BY (country) TBLPROPERTIES ('delta.checkpointInterval' = '2', "
              "'delta.enableDeletionVectors' = 'false')")  # fmt: skip
    for batch in range(4):
        rows = [(f"u{i % 13}", batch * 100 + i, ["de", "fr", "jp"][i % 3]) for i in range(100)]
        spark.createDataFrame(rows, "user string, amount bigint, country string").write.format("delta").mode(
            "append").save(path)  # fmt: skip
    spark.sql(f"DELETE FROM delta.`{path}` WHERE amount % 5 = 0")
    return path


def _spark_rows(spark, path, **options):
    reader = spark.read.format("delta")
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(tuple(r[c] for c in COLUMNS) for r in reader.load(path).collect())


def _job_rows(source, tmp_path=None, fail_at=None):
    env = StreamExecutionEnvironment(parallelism=2)
    if fail_at is not None:
        env.enable_checkpointing(every_records=40)
        env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path / "chk")
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    rows = env.from_source(source, None, "events").uid("events").map(lambda r: (r["user"], r["amount"], r["country"]))
    if fail_at is not None:
        rows = rows.map(FailOnceAt(fail_at))
    return rows.execute_and_collect()


def test_latest_version_reads_like_spark(spark, events):
    source = FileSource.delta(events)
    assert source.version == 5  # create, four appends, the delete
    assert sorted(_job_rows(source)) == _spark_rows(spark, events)
    assert list((__import__("pathlib").Path(events) / "_delta_log").glob("*.checkpoint.parquet"))  # replayed from one


def test_time_travel_matches_spark_version_as_of(spark, events):
    for version in (1, 2, 3):
        assert sorted(_job_rows(FileSource.delta(events, version=version))) == _spark_rows(
            spark, events, versionAsOf=version)  # fmt: skip


def test_a_failure_mid_table_replays_exactly(spark, events, tmp_path):
    out = _job_rows(FileSource.delta(events), tmp_path, fail_at=("u7", 207, "fr"))
    assert out.job_execution_result.restarts == 1
    assert sorted(out) == _spark_rows(spark, events)


def test_unreadable_tables_are_refused(spark, tmp_path):
    with pytest.raises(SourceError, match="not a Delta table"):
        FileSource.delta(tmp_path)
    path = str(tmp_path / "dv")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.range(100).write.format("delta").mode("append").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3")
    with pytest.raises(SourceError, match="deletion vector"):
        FileSource.delta(path)
    with pytest.raises(SourceError, match="version 99 does not exist"):
        FileSource.delta(path, version=99)
