"""`SavepointWriter.write(format="flink")` from an existing Flink savepoint: the uid change and max parallelism are applied
by Spark, the serializer snapshots of the source are carried byte for byte, and every value survives."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekit.format.flink.reader import FlinkStateReader
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import Savepoint
from statekit.spark import SavepointWriter

pytestmark = pytest.mark.spark

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "2.3.0" / "long-rocksdb-canonical" / "savepoint"


def test_flink_source_renamed_and_rescaled_by_spark_keeps_serializers(spark, tmp_path):
    out = (SavepointWriter.from_existing_savepoint(spark, CASE)
           .change_operator_identifier("counter", "counter-v2").with_max_parallelism("counter-v2", 256)
           .remove_operator("types").write(tmp_path / "out", format="flink"))
    a, b = Savepoint.open(CASE), Savepoint.open(out)
    assert {m.uid_hash for m in b.operators} == {m.uid_hash for m in a.operators
                                                 if m.uid not in ("counter", "types")} | {
        OperatorIdentifier.for_uid("counter-v2").uid_hash}
    assert b.operator("counter-v2").max_parallelism == 256
    rows = lambda sp, op: sorted(map(repr, sp.keyed_table(op).sort_by("key").to_pylist()))  # noqa: E731
    assert rows(a, "counter") == rows(b, "counter-v2")
    assert a.timers("counter").num_rows == b.timers("counter-v2").num_rows > 0
    assert a.broadcast_state("rules", "rules").sort_by("key").equals(b.broadcast_state("rules", "rules").sort_by("key"))
    ra, rb = FlinkStateReader(CASE), FlinkStateReader(out)
    la = ra.layout(ra.metadata.operator(OperatorIdentifier.for_uid("counter").uid_hash))
    lb = rb.layout(rb.metadata.operator(OperatorIdentifier.for_uid("counter-v2").uid_hash))
    assert la.key_type.raw == lb.key_type.raw
    assert {s.name: s.raw for s in la.states} == {s.name: s.raw for s in lb.states}
    assert [t.raw for t in la.timers] == [t.raw for t in lb.timers]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_columnar_bootstrap_goes_straight_to_flink(spark, tmp_path):
    """Fixed-width columns take the direct path (fragments per partition, one file per subtask) and read back exactly."""
    from statekit.errors import DuplicateKeyError
    from statekit.spark import OperatorTransformation
    from statekit.state import ValueStateDescriptor

    df = spark.range(0, 5000, 1, numPartitions=3).selectExpr("id * 7 - 900 AS key", "id AS a", "id * 0.5 AS b",
                                                             "IF(id % 4 = 0, NULL, CAST(id AS INT)) AS c")
    t = OperatorTransformation.bootstrap_with(df, parallelism=2).key_by("key").columns(
        ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "double"), ValueStateDescriptor("c", "int"))
    out = SavepointWriter.new_savepoint(spark, max_parallelism=256).with_operator("op", t).write(
        tmp_path / "out", format="flink")
    sp = Savepoint.open(out)
    m = sp.operator("op")
    assert (m.parallelism, m.max_parallelism) == (2, 256)
    got = {r["key"]: (r["a"], r["b"], r["c"]) for r in sp.keyed_table("op").to_pylist()}
    assert got == {i * 7 - 900: (i, i * 0.5, None if i % 4 == 0 else i) for i in range(5000)}
    assert sp.get("op", 7 * 123 - 900) == {"a": 123, "b": 61.5, "c": 123}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    dup = spark.range(0, 100, 1, numPartitions=2).selectExpr("id % 60 AS key", "id AS a")
    t = OperatorTransformation.bootstrap_with(dup).key_by("key").columns(ValueStateDescriptor("a", "bigint"))
    with pytest.raises(Exception) as exc:
        SavepointWriter.new_savepoint(spark).with_operator("op", t).write(tmp_path / "dup", format="flink")
    assert "DuplicateKeyError" in str(exc.value) or isinstance(exc.value, DuplicateKeyError)
    assert not (tmp_path / "dup").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_spark_writes_of_a_flink_source_carry_the_enumerator_state(spark, tmp_path):
    """A KafkaSource's enumerator state (coordinator state in `_metadata`) survives a Spark write, following a rename:
    without it the restored job re-reads its topic (tests/flink/test_source_offsets.py)."""
    from statekit.savepoint.offsets import source_offsets

    kafka = CASE.parents[2] / "kafka" / "kafka-source-2p"
    out = (SavepointWriter.from_existing_savepoint(spark, kafka).change_operator_identifier("kafka-source", "kafka-in")
           .write(tmp_path / "out"))
    strip = lambda t: [{k: v for k, v in r.items() if k not in ("operator", "uid_hash")} for r in t.to_pylist()]  # noqa: E731
    assert strip(source_offsets(out, "kafka-in")) == strip(source_offsets(kafka, "kafka-source"))
    assert any(r["holder"] == "enumerator" for r in source_offsets(out).to_pylist())
    # from statekit's format (whose manifest keeps the coordinator state) to a Flink savepoint, renamed too
    from statekit.savepoint.convert import convert_to_statekit

    converted = convert_to_statekit(kafka, tmp_path / "sk")
    out = (SavepointWriter.from_existing_savepoint(spark, converted).change_operator_identifier("kafka-source", "kafka-in")
           .write(tmp_path / "from-sk", format="flink"))
    assert strip(source_offsets(out, "kafka-in")) == strip(source_offsets(kafka, "kafka-source"))
