"""Corrupt savepoints raise statekit's typed errors through Spark, not JVM stack traces."""

from __future__ import annotations

import json
import shutil

import pytest

from statekit.errors import ChecksumMismatchError, CorruptSavepointError, NotASavepointError, UnsupportedFormatError
from statekit.savepoint import Savepoint
from statekit.spark import SavepointReader

pytestmark = pytest.mark.spark


@pytest.fixture
def copy(acceptance_savepoint, tmp_path):
    target = tmp_path / "sp"
    shutil.copytree(acceptance_savepoint, target)
    return target


def _keyed_file(path):
    entry = Savepoint.open(path).keyed_files("proc")[0]
    return path / entry.path


def test_missing_file_raises_corrupt_savepoint_error(spark, copy):
    reader = SavepointReader.read(spark, copy)  # the manifest is fine: the damage shows when reading
    _keyed_file(copy).unlink()
    with pytest.raises(CorruptSavepointError, match="missing"):
        reader.read_keyed_state("proc").collect()


def test_checksum_mismatch_raises_typed_error(spark, copy):
    f = _keyed_file(copy)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different content
    f.write_bytes(bytes(data))
    reader = SavepointReader.read(spark, copy)
    with pytest.raises(ChecksumMismatchError, match="checksum") as info:
        reader.read_keyed_state("proc").count()
    assert "Traceback" not in str(info.value) and "java" not in str(info.value).lower()
    from pyspark.errors import PySparkException

    assert isinstance(info.value, PySparkException)  # Spark-aware handlers still catch it


def test_unknown_format_version_is_refused_on_the_driver(spark, copy):
    manifest = copy / "_metadata.json"
    doc = json.loads(manifest.read_text())
    doc["format_version"] = 99
    manifest.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedFormatError, match="version"):
        SavepointReader.read(spark, copy)
    # The data source, planned in a Spark worker, raises the same typed error.
    with pytest.raises(UnsupportedFormatError, match="version"):
        spark.read.format("statekit").option("uid", "proc").load(str(copy)).collect()


def test_not_a_savepoint(spark, tmp_path):
    with pytest.raises(NotASavepointError):
        SavepointReader.read(spark, tmp_path)


@pytest.mark.parametrize("engine", ["parquet", "statekit"])
def test_damage_is_found_by_either_engine(spark, copy, engine):
    reader = SavepointReader.read(spark, copy)
    f = _keyed_file(copy)
    data = bytearray(f.read_bytes())
    data[-20] ^= 0x01  # inside the Parquet footer
    f.write_bytes(bytes(data))
    df = reader.read_keyed_state("proc", engine=engine)
    with pytest.raises(ChecksumMismatchError, match="checksum") as info:
        df.collect()
    assert "java" not in str(info.value).lower()


def test_parquet_engine_refuses_a_truncated_file_when_the_dataframe_is_created(spark, copy):
    reader = SavepointReader.read(spark, copy)
    f = _keyed_file(copy)
    f.write_bytes(f.read_bytes()[:-1])
    with pytest.raises(CorruptSavepointError, match="bytes but the manifest recorded"):
        reader.read_keyed_state("proc", engine="parquet")
