"""The JVM writer of columnar Flink bootstraps (`statekit.spark.flink_jvm`, `io.statekit.spark.FlinkKeyedWriter`): its
files are byte for byte those of statekit's Python writer, every value reads back from several input partitions,
and bad input is a typed error with nothing left behind."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.errors import DuplicateKeyError, SavepointExistsError, StateTypeError
from statekit.format.flink.reader import FlinkStateReader
from statekit.format.flink.writer import write_keyed_file
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import assign_key_groups, key_group_range
from statekit.savepoint import OperatorMetadata, Savepoint
from statekit.savepoint.flink_out import keyed_layout
from statekit.spark import OperatorTransformation, SavepointWriter
from statekit.spark.flink_jvm import jvm_writable
from statekit.state import ListStateDescriptor, ReducingStateDescriptor, ValueStateDescriptor

pytestmark = pytest.mark.spark

STATES = [ValueStateDescriptor("l", "bigint"), ValueStateDescriptor("i", "int"), ValueStateDescriptor("sh", "smallint"),
          ValueStateDescriptor("ti", "tinyint"), ValueStateDescriptor("d", "double"), ValueStateDescriptor("f", "float"),
          ValueStateDescriptor("bo", "boolean"), ValueStateDescriptor("s", "string"),
          ValueStateDescriptor("bi", "binary"), ReducingStateDescriptor("r", lambda a, b: a + b, "bigint")]
SCHEMA = ("k {key}, l bigint, i int, sh smallint, ti tinyint, d double, f float, bo boolean, s string, bi binary, "
          "r bigint")
TEXTS = ["", "a", "ü", "日本", "\U0001f600x", "x" * 200]


def _rows(n: int, key) -> list[tuple]:
    return [(key(j), j * 1_000_000_007 - 5, None if j % 7 == 3 else j - 50, j % 300 - 150, j % 200 - 100,
             j / 8 - 3.5, None if j % 5 == 1 else float(j) / 4, j % 3 == 0, TEXTS[j % len(TEXTS)] + str(j),
             None if j % 4 == 2 else bytes([j % 256, 0, 255])[: j % 4], -j) for j in range(n)]


def _bootstrap(df, parallelism: int):
    return OperatorTransformation.bootstrap_with(df, parallelism=parallelism).key_by("k").columns(*STATES)


@pytest.mark.parametrize(("key_type", "key", "maxp", "parallelism"), [
    ("bigint", lambda j: j * 7919 - 400_000, 128, 2),
    ("string", lambda j: f"user-{j}-{TEXTS[j % len(TEXTS)]}", 256, 3),
])
def test_jvm_files_are_the_python_writers_bytes(spark, tmp_path, key_type, key, maxp, parallelism):
    rows = _rows(600, key)
    # one Parquet file of one row group: one task, which sees the rows in this order (as the Python writer does)
    src = spark.createDataFrame(rows, SCHEMA.format(key=key_type)).toArrow()
    pq.write_table(src, tmp_path / "in.parquet")
    df = spark.read.parquet(str(tmp_path / "in.parquet"))
    assert df.rdd.getNumPartitions() == 1
    t = _bootstrap(df, parallelism)
    meta = OperatorMetadata(identifier=OperatorIdentifier.for_uid("op"), name="op", parallelism=parallelism,
                            max_parallelism=maxp, key_type=key_type, keyed_states=list(t.keyed_states))
    layout = keyed_layout(meta, None, None, max_parallelism=maxp, has_timers=False)
    assert jvm_writable(df, "k", [(d.name, d.name) for d in STATES], layout)
    out = SavepointWriter.new_savepoint(spark, max_parallelism=maxp).with_operator("op", t).write(
        tmp_path / "out", format="flink")

    table = src.rename_columns(["key", *[d.name for d in STATES]])
    kg = assign_key_groups(table.column("key"), maxp, key_type)
    table = table.append_column("key_group", pa.array(kg))
    reader = FlinkStateReader(out)
    op = reader.metadata.operator(OperatorIdentifier.for_uid("op").uid_hash)
    for s in range(parallelism):
        rng = key_group_range(maxp, parallelism, s)
        part = table.filter(pa.array((kg >= rng.start) & (kg <= rng.end)))
        want_path = tmp_path / f"want-{s}"
        offsets, size = write_keyed_file(want_path, layout, part, None, rng.start, rng.end)
        handle = op.subtasks[s].managed_keyed
        got = (out / handle.delegate.path).read_bytes()
        assert got == want_path.read_bytes()
        assert list(handle.offsets) == offsets and handle.delegate.size == size == len(got)

    sp = Savepoint.open(out)
    got = {r["key"]: r for r in sp.keyed_table("op").to_pylist()}
    assert len(got) == len(rows)
    for r in rows:
        assert {d.name: got[r[0]][d.name] for d in STATES} == dict(zip([d.name for d in STATES], r[1:]))


def test_many_partitions_read_back_and_bad_input_is_typed(spark, tmp_path):
    n = 20_000
    df = spark.range(0, n, 1, numPartitions=3).selectExpr(
        "id * 13 - 7000 AS k", "id AS a", "IF(id % 9 = 0, NULL, CAST(id AS STRING)) AS s")
    t = OperatorTransformation.bootstrap_with(df, parallelism=4).key_by("k").columns(
        ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("s", "string"))
    out = SavepointWriter.new_savepoint(spark, max_parallelism=1024).with_operator("op", t).write(
        tmp_path / "out", format="flink")
    sp = Savepoint.open(out)
    assert (sp.operator("op").parallelism, sp.operator("op").max_parallelism) == (4, 1024)
    got = {r["key"]: (r["a"], r["s"]) for r in sp.keyed_table("op").to_pylist()}
    assert got == {i * 13 - 7000: (i, None if i % 9 == 0 else str(i)) for i in range(n)}
    with pytest.raises(SavepointExistsError):
        SavepointWriter.new_savepoint(spark).with_operator("op", t).write(out, format="flink")

    def refused(frame, error, name):
        bad = OperatorTransformation.bootstrap_with(frame).key_by("k").columns(ValueStateDescriptor("a", "bigint"))
        with pytest.raises(error) as exc:
            SavepointWriter.new_savepoint(spark).with_operator("op", bad).write(tmp_path / name, format="flink")
        assert "op" in str(exc.value)
        assert not (tmp_path / name).exists()

    across = spark.range(0, 3000, 1, numPartitions=2).selectExpr("id % 2000 AS k", "id AS a")  # in two partitions
    refused(across, DuplicateKeyError, "dup-across")
    within = spark.range(0, 100, 1, numPartitions=1).selectExpr("id % 60 AS k", "id AS a")
    refused(within, DuplicateKeyError, "dup-within")
    nulls = spark.range(0, 100, 1, numPartitions=2).selectExpr("IF(id = 42, NULL, id) AS k", "id AS a")
    refused(nulls, StateTypeError, "null-key")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging or scratch left behind


def test_plans_a_barrier_stage_refuses_are_shuffled_first(spark, tmp_path):
    """A coalesce or a union gives an RDD chain Spark runs in no barrier stage: the writer repartitions it once."""
    a = spark.range(0, 400, 1, numPartitions=2).selectExpr("id AS k", "id * 3 AS a")
    b = spark.range(400, 700, 1, numPartitions=1).selectExpr("id AS k", "id * 3 AS a")
    for name, df in (("coalesced", a.coalesce(1)), ("union", a.union(b))):
        t = OperatorTransformation.bootstrap_with(df, parallelism=2).key_by("k").columns(
            ValueStateDescriptor("a", "bigint"))
        out = SavepointWriter.new_savepoint(spark).with_operator("op", t).write(tmp_path / name, format="flink")
        got = {r["key"]: r["a"] for r in Savepoint.open(out).keyed_table("op").to_pylist()}
        assert got == {i: 3 * i for i in range(400 if name == "coalesced" else 700)}


def test_other_layouts_and_types_take_the_other_paths(spark, tmp_path):
    df = spark.range(0, 50, 1, numPartitions=2).selectExpr("id AS k", "CAST(id AS INT) AS a", "array(id) AS l")
    t = OperatorTransformation.bootstrap_with(df).key_by("k").columns(ValueStateDescriptor("a", "bigint"))
    meta = OperatorMetadata(identifier=OperatorIdentifier.for_uid("op"), name="op", parallelism=1,
                            max_parallelism=128, key_type="bigint", keyed_states=list(t.keyed_states))
    layout = keyed_layout(meta, None, None, max_parallelism=128, has_timers=False)
    assert not jvm_writable(df, "k", [("a", "a")], layout)  # an int column for a bigint state: no silent cast
    lists = OperatorTransformation.bootstrap_with(df).key_by("k").columns(ListStateDescriptor("l", "bigint"))
    out = SavepointWriter.new_savepoint(spark).with_operator("op", t).with_operator("lists", lists).write(
        tmp_path / "out", format="flink")
    sp = Savepoint.open(out)
    assert {r["key"]: r["a"] for r in sp.keyed_table("op").to_pylist()} == {i: i for i in range(50)}
    assert {r["key"]: r["l"] for r in sp.keyed_table("lists").to_pylist()} == {i: [i] for i in range(50)}
