"""`repartition` without a JVM: every corpus checkpoint rewritten to 8 and 2 partitions holds the same rows, each in
the partition Spark's hash gives it, with valid `.crc` side files; the source is untouched; bad input writes nothing."""

from __future__ import annotations

import json

import pytest
from spark_corpus import CASES, canon, case_dir, copy_case, copy_with_sst_crcs

from statekit.errors import OutputExistsError
from statekit.format.spark.errors import RunningQueryError
from statekit.format.spark.layout import read_checked
from statekit.format.spark.murmur import partition_ids
from statekit.savepoint.spark_checkpoint import SparkCheckpoint
from statekit.savepoint.spark_repartition import repartition
from statekit.testing import tree_digest


def _rows(sp, store):
    return canon([{k: str(v) for k, v in r.items() if k != "partition_id"}
                  for r in sp.keyed_table(0, store=store).to_pylist()])


#: every case to 8 partitions; to 2 one case per provider (all of them under `make test-extended`)
_TO_2 = ("agg-hdfs", "join-rocksdb", "tws-rocksdb_changelog")
PARAMS = [pytest.param(c, 8) for c in CASES] + [
    pytest.param(c, 2, marks=() if c in _TO_2 else pytest.mark.extended) for c in CASES]


@pytest.mark.parametrize("case,m", PARAMS)
def test_same_state_in_m_partitions(tmp_path, case, m):
    src = case_dir(case) / "checkpoint"
    before = tree_digest(src)
    summary = repartition(src, tmp_path / "out", partitions=m)
    assert tree_digest(src) == before  # the source is never modified
    a, b = SparkCheckpoint.open(src), SparkCheckpoint.open(tmp_path / "out")
    assert b.batch == a.batch and b.spark_operator(0).num_partitions == m
    assert b.conf["spark.sql.shuffle.partitions"] == str(m)
    for store in a.tables(0):
        assert _rows(a, store) == _rows(b, store)
        table = b.keyed_table(0, store=store)
        names = b._grouping_key(b.spark_operator(0)).names
        assert partition_ids([table.column(n) for n in names], m).tolist() == table.column("partition_id").to_pylist()
    assert sum(sum(v) for v in summary.entries.values()) > 0
    for crc in (tmp_path / "out").rglob("*.crc"):  # every side file matches its file (read_checked verifies)
        read_checked(crc.with_name(crc.name[:-4]), str(crc))
    for f in (tmp_path / "out" / "offsets").iterdir():
        assert json.loads(f.read_text().split("\n")[1])["conf"]["spark.sql.shuffle.partitions"] == str(m)


@pytest.mark.parametrize("case", [c for c in CASES if c.endswith("-rocksdb") and not c.startswith("tws")])
def test_sst_read_repartitions_as_rocksdb_does(tmp_path, monkeypatch, case):
    """With Hadoop side files the plain stores' SSTs are read directly (RocksDB never opened); the new checkpoint
    holds exactly what the RocksDB-read repartition writes, store by store and partition by partition."""
    by_rocksdb = repartition(copy_case(case, tmp_path / "a"), tmp_path / "out-a", partitions=8)
    src = copy_with_sst_crcs(case, tmp_path / "b")

    def no_rocksdb(*args, **kwargs):
        raise AssertionError("RocksDB opened: the SSTs were to be read directly")

    monkeypatch.setattr(SparkCheckpoint, "load", no_rocksdb)
    direct = repartition(src, tmp_path / "out-b", partitions=8)
    monkeypatch.undo()
    assert direct.entries == by_rocksdb.entries
    a, b = SparkCheckpoint.open(tmp_path / "out-a"), SparkCheckpoint.open(tmp_path / "out-b")
    for store in a.tables(0):
        rows = [canon([{k: str(v) for k, v in r.items()} for r in sp.keyed_table(0, store=store).to_pylist()])
                for sp in (a, b)]
        assert rows[0] == rows[1]


def test_transform_with_state_metadata_points_into_the_new_checkpoint(tmp_path):
    repartition(case_dir("tws-rocksdb") / "checkpoint", tmp_path / "out", partitions=3)
    meta = tmp_path / "out/state/0/_metadata/v2"
    for f in meta.iterdir():
        doc = json.loads(f.read_text().split("\n")[1])
        for path in doc["stateStoreInfo"][0]["stateSchemaFilePaths"]:
            assert path.startswith("file:" + str((tmp_path / "out").resolve()))
            assert (tmp_path / "out" / path.split(str((tmp_path / "out").resolve()) + "/")[1]).is_file()
        assert doc["stateStoreInfo"][0]["numPartitions"] == 3


def test_existing_target_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(OutputExistsError):
        repartition(case_dir("agg-hdfs") / "checkpoint", tmp_path / "out", partitions=8)


def test_running_query_is_refused_and_nothing_written(tmp_path):
    """An offset log entry without its commit: the query is running (or stopped inside a batch)."""
    cp = copy_case("agg-hdfs", tmp_path)
    last = max(int(p.name) for p in (cp / "offsets").iterdir())
    (cp / "offsets" / str(last + 1)).write_text((cp / "offsets" / str(last)).read_text())
    with pytest.raises(RunningQueryError, match=f"batch {last + 1} is in the offset log but not committed"):
        repartition(cp, tmp_path / "out", partitions=8)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_damaged_source_writes_nothing(tmp_path):
    cp = copy_case("agg-rocksdb", tmp_path)
    next((cp / "state/0/2/SSTs").iterdir()).unlink()
    with pytest.raises(Exception, match="is missing"):
        repartition(cp, tmp_path / "out", partitions=8)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
