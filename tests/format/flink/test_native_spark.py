"""A retained incremental RocksDB checkpoint read through Spark: the same rows as its expected contents."""

from __future__ import annotations

import json

import pytest

from .test_native_checkpoints import CHECKPOINTS

pytestmark = pytest.mark.spark


def test_incremental_checkpoint_through_spark(spark):
    from statekit.spark import SavepointReader

    chk = CHECKPOINTS / "rocksdb-incremental" / "job" / "chk-4"
    exp = json.loads((CHECKPOINTS / "rocksdb-incremental" / "expected" / "chk-4.json").read_text())
    keys = exp["operators"]["counter"]["keys"]
    reader = SavepointReader.read(spark, chk)
    rows = {r["key"]: r for r in (r.asDict(recursive=True) for r in reader.read_keyed_state("counter").collect())}
    assert sorted(rows) == sorted(e["key"] for e in keys)
    for e in keys:
        r = rows[e["key"]]
        assert (r["count"], r["sum"], r["recent"], dict(r["per_kind"])) == (e["count"], e["sum"], e["recent"], e["per_kind"])
    total = reader.read_keyed_state("counter").groupBy().sum("count").collect()[0][0]
    assert total == exp["events_covered"] == 90
    one = reader.read_keyed_state("counter").where("key = 'zoë'").collect()
    assert [r["count"] for r in one] == [next(e["count"] for e in keys if e["key"] == "zoë")]
    timers = {r["key"]: r["timestamp"] for r in reader.read_timers("counter").collect()}
    assert timers == {e["key"]: e["event_timers"][0] for e in keys}
