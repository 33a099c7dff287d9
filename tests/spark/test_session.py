"""The shared session: Delta Lake works on the pinned PySpark/delta-spark pair, settings statekit needs are on."""

from __future__ import annotations

import pytest

from statekit.spark import SavepointReader, spark_session

pytestmark = pytest.mark.spark


def test_an_active_session_is_reused(spark):
    assert spark_session() is spark
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    assert spark.conf.get("spark.ui.enabled") == "false"


def test_keyed_state_round_trips_through_delta(spark, acceptance_savepoint, tmp_path):
    keyed = SavepointReader.read(spark, acceptance_savepoint).read_keyed_state("proc")
    target = str(tmp_path / "proc_keyed")
    keyed.write.format("delta").save(target)
    back = spark.read.format("delta").load(target)
    assert back.orderBy("key").collect() == keyed.orderBy("key").collect()
    history = spark.sql(f"DESCRIBE HISTORY delta.`{target}`").collect()
    assert history[0].operation == "WRITE"


def test_a_startup_setting_cannot_change_on_a_running_session(spark):
    from statekit.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="spark.ui.enabled"):
        spark_session(**{"spark.ui.enabled": "true"})
    assert spark_session(**{"spark.sql.shuffle.partitions": "4"}) is spark
