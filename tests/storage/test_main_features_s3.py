"""What main added since object-storage branched, on a real S3 server: a repair writes its source's format to a
URI (Flink in, Flink out), `stats` and `compat` read savepoints on the store as from disk."""

from __future__ import annotations

import pytest
from test_read_s3 import FIXTURES, assert_same
from test_write_s3 import _build

from statekit.format.flink.metadata import is_flink_metadata
from statekit.format.storage import locate
from statekit.savepoint import Savepoint
from statekit.savepoint.compat import compat
from statekit.savepoint.patch import SetMaxParallelism, repair
from statekit.savepoint.stats import savepoint_stats


@pytest.fixture
def s3(s3_server, s3_prefix):
    return lambda name: locate(f"{s3_prefix}/{name}", storage_options=s3_server.options())


def _without_path(stats) -> dict:
    data = stats.to_json()
    data.pop("path")
    return data


def test_repair_of_a_flink_savepoint_writes_flink_to_s3(s3_server, s3, tmp_path):
    local = FIXTURES / "2.3.0" / "long-hashmap-canonical" / "savepoint"
    flink = locate(s3_server.upload_dir(local, s3("flink").path.split("/", 1)[1]), storage_options=s3_server.options())
    keyed = next(m for m in Savepoint.open(local).operators if m.key_type is not None)
    edits = [SetMaxParallelism(keyed.uid_hash, keyed.max_parallelism * 2)]
    repair(local, tmp_path / "out", edits)
    plan = repair(flink, s3("out"), edits)
    assert plan.written and plan.output.startswith("Flink savepoint")
    assert is_flink_metadata(s3("out")) and not (s3("out") / "_metadata.json").exists()  # the source's format
    assert_same(Savepoint.open(tmp_path / "out"), Savepoint.open(s3("out")))
    repair(local, tmp_path / "as-statekit", edits, to="statekit")
    repair(flink, s3("as-statekit"), edits, to="statekit")
    assert (s3("as-statekit") / "_metadata.json").is_file()
    assert_same(Savepoint.open(tmp_path / "as-statekit"), Savepoint.open(s3("as-statekit")))


def test_stats_and_compat_read_from_s3(s3_server, s3, tmp_path):
    _build(tmp_path / "sp")
    _build(s3("sp"))
    assert _without_path(savepoint_stats(s3("sp"))) == _without_path(savepoint_stats(tmp_path / "sp"))
    local = FIXTURES / "2.3.0" / "long-hashmap-canonical" / "savepoint"
    flink = locate(s3_server.upload_dir(local, s3("flink").path.split("/", 1)[1]), storage_options=s3_server.options())
    assert _without_path(savepoint_stats(flink)) == _without_path(savepoint_stats(local))
    assert compat(flink, flink).to_json()["findings"] == compat(local, local).to_json()["findings"]
