"""Spark 4.1.0 checkpoints read without a JVM: every corpus case equals its expected.json (model-computed)."""

from __future__ import annotations

import pytest
from spark_corpus import CASES, assert_state, case_dir, expected

from statekit.savepoint import Savepoint
from statekit.savepoint.spark_checkpoint import SparkCheckpoint


@pytest.mark.parametrize("case", CASES)
def test_reads_expected_state(case):
    exp = expected(case)
    sp = Savepoint.open(case_dir(case) / "checkpoint")
    assert isinstance(sp, SparkCheckpoint)
    assert sp.batch == exp["latest_batch_id"] and sp.version == exp["state_version"]
    ops = {o.id: o for o in sp.spark_operators}
    for o in exp["operators"]:
        assert ops[o["operatorId"]].name == o["operatorName"]
        assert ops[o["operatorId"]].num_partitions == o["numPartitions"]
    assert sorted(sp.tables(0)) == sorted(exp["state_schemas"])
    assert assert_state(exp, lambda op, store: sp.keyed_table(op, store=store).to_pylist()) > 0


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("tws")])
def test_list_state_keeps_element_order(case):
    exp = expected(case)
    sp = Savepoint.open(case_dir(case) / "checkpoint")
    rows = sp.keyed_table(0, store="seen").to_pylist()
    for want in exp["list_state_order"]["seen"]:
        got = [{"n": r["n"], "t": r["t"]} for r in rows if r["k"] == want["key"]["k"]]
        assert got == want["elements"]
        assert {r["partition_id"] for r in rows if r["k"] == want["key"]["k"]} == {want["partitionId"]}


@pytest.mark.parametrize("case", CASES)
def test_partition_of_every_key_is_sparks(case):
    """Spark's Murmur3 placement, vectorized, puts every stored key where Spark stored it."""
    sp = SparkCheckpoint.open(case_dir(case) / "checkpoint")
    for store in sp.tables(0):
        table = sp.keyed_table(0, store=store)
        names = sp._grouping_key(sp.spark_operator(0)).names
        from statekit.format.spark.murmur import partition_ids

        got = partition_ids([table.column(n) for n in names], sp.spark_operator(0).num_partitions)
        assert got.tolist() == table.column("partition_id").to_pylist(), store


def test_earlier_batch_is_read_as_committed():
    sp = SparkCheckpoint.open(case_dir("agg-hdfs") / "checkpoint", batch=0)
    first = {(r["k"], r["n"]): r["count"] for r in sp.keyed_table(0).to_pylist()}
    rows = expected("agg-hdfs")["input"]["run1"][0][0]["rows"]
    counts: dict = {}
    for r in rows:
        counts[(r["k"], r["n"])] = counts.get((r["k"], r["n"]), 0) + 1
    assert first == counts


@pytest.mark.parametrize("case,op_key,store", [
    ("agg-rocksdb_changelog", {"k": "ü-straße", "n": -9223372036854775808}, "default"),
    ("window_agg-hdfs", {"window": {"start": 160_000_000, "end": 170_000_000}, "k": "ü-straße"}, "default"),
    ("tws-rocksdb", {"k": "a"}, "seen"),
    ("join-hdfs", {"field0": "x"}, "left-keyWithIndexToValue"),
])
def test_get_reads_only_the_keys_partition(tmp_path, case, op_key, store):
    """`get` finds the key with every other partition's state files removed: it read one partition."""
    import datetime as dt

    from spark_corpus import copy_case

    key = dict(op_key)
    if "window" in key:
        key["window"] = {k: dt.datetime.fromtimestamp(v / 1e6, dt.timezone.utc) for k, v in key["window"].items()}
    full = SparkCheckpoint.open(case_dir(case) / "checkpoint")
    want = [r for r in full.keyed_table(0, store=store).to_pylist()
            if all(r[f] == v for f, v in key.items())]
    assert want
    p = full.partition_of(0, key)
    cp = copy_case(case, tmp_path)
    import shutil

    for d in (cp / "state/0").iterdir():
        if d.name.isdigit() and int(d.name) != p:  # its state files go; the schema files (under partition 0) stay
            for f in list(d.rglob("*")):
                if f.is_file() and "_metadata" not in f.parts:
                    f.unlink()
            if not any(f.is_file() for f in d.rglob("*")):
                shutil.rmtree(d)
    sp = SparkCheckpoint.open(cp)
    assert sp.get(0, key, store=store) == want
    with pytest.raises(Exception):
        sp.keyed_table(0, store=store)  # a full read needs the removed partitions
