"""Damaged or unsupported Spark checkpoints give typed errors naming the file (real corpus files, damaged on a copy)."""

from __future__ import annotations

import json

import pytest
from spark_corpus import case_dir, copy_case

from statekit.errors import CorruptSavepointError
from statekit.format.spark.errors import (
    MissingStateFileError,
    StateChecksumMismatchError,
    TruncatedStateFileError,
    UnknownBatchError,
    UnsupportedStateFormatError,
)
from statekit.savepoint import Savepoint
from statekit.savepoint.spark_checkpoint import SparkCheckpoint


def _edit_conf(cp, name, value):
    for f in (cp / "offsets").iterdir():
        lines = f.read_text().split("\n")
        meta = json.loads(lines[1])
        meta["conf"][name] = value
        lines[1] = json.dumps(meta)
        f.write_text("\n".join(lines))


def test_unknown_aggregation_state_format_version(tmp_path):
    cp = copy_case("agg-hdfs", tmp_path)
    _edit_conf(cp, "spark.sql.streaming.aggregation.stateFormatVersion", "7")
    with pytest.raises(UnsupportedStateFormatError, match="state format version 7"):
        Savepoint.open(cp)


def test_unknown_rocksdb_format_version(tmp_path):
    cp = copy_case("agg-rocksdb", tmp_path)
    _edit_conf(cp, "spark.sql.streaming.stateStore.rocksdb.formatVersion", "9")
    with pytest.raises(UnsupportedStateFormatError, match="RocksDB state format version 9"):
        Savepoint.open(cp).keyed_table(0)


def test_unknown_schema_version(tmp_path):
    cp = copy_case("agg-hdfs", tmp_path)
    schema = cp / "state/0/0/_metadata/schema"
    data = schema.read_bytes()
    schema.write_bytes(data[:2] + b"v9" + data[4:])
    with pytest.raises(UnsupportedStateFormatError, match="schema version 'v9'"):
        Savepoint.open(cp).keyed_table(0)


def test_truncated_delta(tmp_path):
    cp = copy_case("window_agg-hdfs", tmp_path)
    delta = cp / "state/0/0/6.delta"
    delta.write_bytes(delta.read_bytes()[:-25])
    with pytest.raises(StateChecksumMismatchError, match="6.delta"):  # Spark's side file notices first
        Savepoint.open(cp).keyed_table(0)
    (cp / "state/0/0/6.delta.crc").unlink()
    with pytest.raises(TruncatedStateFileError, match="6.delta"):
        Savepoint.open(cp).keyed_table(0)


def test_missing_delta(tmp_path):
    cp = copy_case("window_agg-hdfs", tmp_path)
    (cp / "state/0/0/6.delta").unlink()
    with pytest.raises(MissingStateFileError, match="6.delta"):
        Savepoint.open(cp).keyed_table(0)


def test_missing_sst(tmp_path):
    cp = copy_case("agg-rocksdb", tmp_path)
    sst = next((cp / "state/0/1/SSTs").iterdir())
    sst.unlink()
    with pytest.raises(MissingStateFileError, match=sst.name):
        Savepoint.open(cp).keyed_table(0)


def test_crc_mismatch(tmp_path):
    cp = copy_case("agg-rocksdb_changelog", tmp_path)
    f = cp / "state/0/0/3.changelog"
    data = bytearray(f.read_bytes())
    data[30] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(StateChecksumMismatchError, match="3.changelog"):
        Savepoint.open(cp).keyed_table(0)
    (cp / "state/0/0/3.changelog.crc").unlink()  # without the side file the lz4 block's own xxhash32 notices
    with pytest.raises(CorruptSavepointError, match="3.changelog"):
        Savepoint.open(cp).keyed_table(0)


def test_uncommitted_batch_is_refused_by_name():
    with pytest.raises(UnknownBatchError, match="batch 99 was not committed"):
        SparkCheckpoint.open(case_dir("agg-hdfs") / "checkpoint", batch=99)


def test_files_of_a_failed_batch_are_ignored(tmp_path):
    """State files beyond the latest commit (a batch that failed after its state commit) are not read."""
    cp = copy_case("agg-hdfs", tmp_path)
    before = Savepoint.open(cp).keyed_table(0)
    (cp / "state/0/0/4.delta").write_bytes(b"garbage")
    assert Savepoint.open(cp).keyed_table(0).equals(before)
