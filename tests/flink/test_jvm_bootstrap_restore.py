"""Spark bootstraps written by the JVM writer (`statekit.spark.flink_jvm`: a barrier stage whose tasks write their
entries straight into the subtask files) restore into real Flink 2.3.0 jobs - Long and String keys, every simple
value type, 1- and 2-byte key-group prefixes, the same and another parallelism - and Flink's SavepointReader reads
each key exactly once."""

from __future__ import annotations

import pytest

from statekit.spark import OperatorTransformation, SavepointWriter
from statekit.state import ReducingStateDescriptor, ValueStateDescriptor

pytestmark = [pytest.mark.flink, pytest.mark.spark]

TYPES = {"l": "bigint", "i": "int", "sh": "smallint", "ti": "tinyint", "d": "double", "f": "float", "bo": "boolean",
         "s": "string", "bi": "binary"}
TEXTS = ["", "ü", "日本", "\U0001f600"]


def _rows(n: int, key) -> list[tuple]:
    return [(key(j), j * 1_000_000_007 - 5, None if j % 7 == 3 else j - 50, j % 300 - 150, j % 200 - 100, j / 8 - 3.5,
             j / 4, j % 3 == 0, TEXTS[j % 4] + str(j), bytes([j % 256, 0, 255])[: j % 4], -j) for j in range(n)]


def _want(rows: list[tuple]) -> dict:
    out = {}
    for r in rows:
        values = dict(zip([*TYPES, "r"], r[1:]))
        values["bi"] = values["bi"].hex()
        out[r[0]] = {k: v for k, v in values.items() if v is not None}
    return out


def test_jvm_written_bootstraps_restore_in_flink(spark, flink, tmp_path):
    schema = "k {key}, " + ", ".join(f"{c} {t}" for c, t in TYPES.items()) + ", r bigint"
    states = [ValueStateDescriptor(c, t) for c, t in TYPES.items()] + [
        ReducingStateDescriptor("r", lambda a, b: a + b, "bigint")]
    longs = _rows(300, lambda j: j * 7919 - 100_000)
    strings = _rows(300, lambda j: f"user-{j}-{TEXTS[j % 4]}")
    out = tmp_path / "sp"
    (SavepointWriter.new_savepoint(spark, max_parallelism=128)
     .with_operator("longs", OperatorTransformation.bootstrap_with(
         spark.createDataFrame(longs, schema.format(key="bigint")).repartition(2), parallelism=2)
         .key_by("k").columns(*states))
     .with_operator("strings", OperatorTransformation.bootstrap_with(
         spark.createDataFrame(strings, schema.format(key="string")).repartition(2), parallelism=3)
         .key_by("k").columns(*states))
     .with_max_parallelism("strings", 256)
     .write(out, format="flink"))

    state_spec = [{"name": c, "kind": "value", "type": t} for c, t in TYPES.items()] + [
        {"name": "r", "kind": "reducing", "type": "bigint"}]

    def spec(parallelism: int) -> dict:
        return {"parallelism": parallelism, "operators": [
            {"uid": "longs", "kind": "keyed", "key_type": "bigint", "states": state_spec},
            {"uid": "strings", "kind": "keyed", "key_type": "string", "max_parallelism": 256, "states": state_spec}]}

    same, rescaled = flink.restore_many([(out, spec(2)), (out, spec(3))])
    for got in (same, rescaled):
        assert not isinstance(got, str), got
        assert got.keyed["longs"] == _want(longs)
        assert got.keyed["strings"] == _want(strings)
    dumped = flink.dump(out, spec(2))
    assert not dumped.duplicate_keys
    for op, rows in (("longs", longs), ("strings", strings)):
        read = {k: {s: x for s, x in v["states"].items() if x is not None} for k, v in dumped.keyed[op].items()}
        assert read == _want(rows)
