"""`Savepoint.open` and the registry of savepoint kinds (statekit.savepoint.kinds): each kind recognised and opened by
the registry the package fills, and the options of one kind refused on another by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekit.errors import InvalidArgumentError, StatekitError
from statekit.savepoint import Savepoint, kinds
from statekit.savepoint.stats import savepoint_stats

FIXTURES = Path(__file__).resolve().parents[1]
STATEKIT = FIXTURES / "golden" / "v1"
FLINK = FIXTURES / "fixtures" / "flink" / "2.3.0" / "long-rocksdb-canonical" / "savepoint"
SPARK = FIXTURES / "fixtures" / "spark" / "4.1.0" / "agg-hdfs" / "checkpoint"


def test_the_package_registers_every_kind_statekit_first():
    assert kinds.registered() == ("statekit", "spark", "flink")


@pytest.mark.parametrize(("path", "cls"), [(STATEKIT, "Savepoint"), (FLINK, "FlinkSavepoint"),
                                           (SPARK, "SparkCheckpoint")])
def test_each_kind_opens_as_its_class_through_the_base_and_the_registry(path, cls):
    for sp in (Savepoint.open(path), kinds.open_savepoint(path), kinds.opened(str(path))):
        assert type(sp).__name__ == cls and isinstance(sp, Savepoint)
    sp = Savepoint.open(path)
    assert kinds.opened(sp) is sp
    assert kinds.is_flink_source(sp) == (cls == "FlinkSavepoint")


def test_a_location_no_kind_recognizes_gets_the_statekit_readers_message(tmp_path):
    (tmp_path / "notes.txt").write_text("not a savepoint")
    with pytest.raises(StatekitError, match="_metadata.json"):
        Savepoint.open(tmp_path)


def test_options_of_another_kind_are_refused_by_name():
    with pytest.raises(InvalidArgumentError, match="statekit savepoint; plan="):
        Savepoint.open(STATEKIT, plan={"nodes": []})
    with pytest.raises(InvalidArgumentError, match="Spark Structured Streaming checkpoint; plan, sql"):
        Savepoint.open(SPARK, plan="plan.json", sql="SELECT 1")


def test_operations_above_the_kinds_take_a_path_or_an_opened_savepoint():
    by_path, by_object = savepoint_stats(FLINK, top=0), savepoint_stats(Savepoint.open(FLINK), top=0)
    assert by_path.format == by_object.format == "flink"
    assert by_path.to_json() == by_object.to_json()


def test_a_kind_is_registered_once():
    with pytest.raises(InvalidArgumentError, match="'flink' is registered already"):
        kinds.register(kinds.SavepointKind("flink", lambda p: False, lambda p, **o: None))
