"""Avro state of a real Flink 2.3.0 savepoint through Spark reads exactly its expected.json, typed (structs, decimals, timestamps)."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest

from statekit.savepoint import Savepoint
from statekit.spark import SavepointReader

from .test_avro_read import AVRO, UID, expected, jsonish

pytestmark = pytest.mark.spark


def aware(v: Any) -> Any:
    """Spark's rows with timestamps (naive, in the local time zone) made UTC-aware, as statekit gives them."""
    if isinstance(v, dict):
        return {k: aware(x) for k, x in v.items()}
    if isinstance(v, list):
        return [aware(x) for x in v]
    if isinstance(v, dt.datetime) and v.tzinfo is None:
        secs = int(time.mktime(v.timetuple()))
        return dt.datetime.fromtimestamp(secs, dt.timezone.utc).replace(microsecond=v.microsecond)
    return v


def test_avro_state_through_spark(spark):
    path = AVRO / "rocksdb-canonical" / "savepoint"
    df = SavepointReader.read(spark, str(path)).read_keyed_state(UID)
    fields = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert "balance:decimal(12,2)" in fields["account"] and "last_seen:timestamp" in fields["account"]
    got = {json.dumps(jsonish(r["key"]), sort_keys=True): r for r in (aware(x.asDict(recursive=True)) for x in df.collect())}
    keys = expected("rocksdb-canonical")["operators"][UID]["keys"]
    assert len(got) == len(keys)
    for e in keys:
        r = got[json.dumps(e["key"], sort_keys=True)]
        for name in ("account", "events", "by_kind"):
            assert jsonish(r[name]) == e[name], (e["key"], name)
    local = Savepoint.open(path).keyed_table(UID)
    assert df.count() == local.num_rows
