"""Writing savepoints to a real S3 server: every writer (builder, repairs, both converts, Flink format, bootstrap),
data files first and the manifest last, refusing an existing target, nothing visible after a failure."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from s3_server import BUCKET
from test_read_s3 import FIXTURES, assert_same

from statekit.errors import SavepointExistsError, StorageAccessError, StorageNotFoundError
from statekit.format.storage import locate
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink_out import write_flink
from statekit.savepoint.patch import (
    DeleteKeys,
    RemoveOperator,
    RemoveState,
    RenameOperator,
    SetMaxParallelism,
    SetValue,
    repair,
)
from statekit.savepoint.transforms import change_operator_identifier, remove_operator, with_max_parallelism
from statekit.state import ListStateDescriptor, ValueStateDescriptor


def _build(path, rows: int = 300) -> None:
    with SavepointBuilder(path, checkpoint_id=3, rows_per_file=100) as b:
        op = b.add_operator("counter", parallelism=2, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("count", "bigint"), ListStateDescriptor("seen", "string")])
        op.write_keyed(pa.table({"key": list(range(rows)), "count": list(range(rows)),
                                 "seen": [[str(i)] for i in range(rows)]}))
        op.write_timers(pa.table({"key": [1, 2], "timestamp": [10, 20], "domain": ["event", "event"]}))
        other = b.add_operator("other", parallelism=1, max_parallelism=128, key_type="string",
                               keyed_states=[ValueStateDescriptor("v", "double")])
        other.write_keyed(pa.table({"key": ["a", "b"], "v": [1.0, 2.0]}))


@pytest.fixture
def s3(s3_server, s3_prefix):
    """``s3(name)``: a `StoragePath` at a fresh URI under this test's prefix, with the admin's credentials."""
    return lambda name: locate(f"{s3_prefix}/{name}", storage_options=s3_server.options())


def _upload_dirs() -> list[str]:
    return [p.name for p in Path(tempfile.gettempdir()).glob("statekit-upload-*")]


def test_builder_writes_to_s3_manifest_last(s3_server, s3, tmp_path):
    before = _upload_dirs()
    target = s3("sp")
    _build(target)
    _build(tmp_path / "local")
    assert_same(Savepoint.open(tmp_path / "local"), Savepoint.open(target))
    assert check(target).ok
    keys = s3_server.keys(target.path.split("/", 1)[1] + "/")
    assert any(k.endswith("/sp/_metadata.json") for k in keys) and len(keys) > 3
    assert _upload_dirs() == before  # the local staging went
    with pytest.raises(SavepointExistsError):
        _build(target)


def test_manifest_is_uploaded_after_every_data_file(s3_server, s3, tmp_path, monkeypatch):
    from statekit.format import storage

    order: list[str] = []
    real_close, real_put = storage.ObjectWriter.close, storage.StoragePath.write_bytes

    def closing(self):  # a data file is complete (its upload done) when its writer closes
        if not self.closed:
            order.append(self.where.name)
        return real_close(self)

    def put(self, data):
        order.append(self.name)
        return real_put(self, data)

    monkeypatch.setattr(storage.ObjectWriter, "close", closing)
    monkeypatch.setattr(storage.StoragePath, "write_bytes", put)
    before = _upload_dirs()
    _build(s3("sp"))
    assert order[-1] == "_metadata.json" and len(order) > 3 and order.count("_metadata.json") == 1
    assert _upload_dirs() == before  # streamed: no local staging directory at all


EDITS = {
    "set": [SetValue("counter", 5, "count", 500)],
    "delete-key": [DeleteKeys("counter", (1, 2, 3))],
    "rm-state": [RemoveState("counter", "seen")],
    "rename": [RenameOperator("other", "other-v2")],
    "remove-operator": [RemoveOperator("other")],
    "max-parallelism": [SetMaxParallelism("counter", 256)],
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_every_repair_reads_and_writes_s3(s3_server, s3, tmp_path, name):
    _build(tmp_path / "src")
    source = s3("src")
    _build(source)
    repair(tmp_path / "src", tmp_path / "out", EDITS[name])
    repair(source, s3("out"), EDITS[name])
    assert_same(Savepoint.open(tmp_path / "out"), Savepoint.open(s3("out")))
    assert_same(Savepoint.open(tmp_path / "src"), Savepoint.open(source))  # the source is untouched


def test_library_writes_to_s3_need_no_local_disk(s3_server, s3, tmp_path, monkeypatch):
    """The builder, a repair and `write_flink` to S3 stream every file to the server: with this process's temp
    directory absent (any local staging copy would fail), each writes a savepoint that reads back."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-temp-dir"))
    _build(s3("sp"))
    repair(s3("sp"), s3("repaired"), [SetValue("counter", 7, "count", -1)])
    write_flink(s3("sp"), s3("flink"))
    assert Savepoint.open(s3("repaired")).get("counter", 7)["count"] == -1
    assert Savepoint.open(s3("flink")).get("counter", 7)["count"] == 7
    assert not (tmp_path / "no-temp-dir").exists()


def test_one_key_repair_copies_unchanged_files_on_the_server(s3_server, s3, tmp_path):
    """A one-key repair S3 -> S3 rewrites only its key's file; every other file is copied by the server (S3
    CopyObject), not downloaded and uploaded again: the process reads and writes only about that one file."""
    source = s3("src")
    _build(source, rows=3000)  # 30 keyed files of 100 rows, timers, a second operator
    files = Savepoint.open(source).manifest.operators
    sizes = {f.path: f.bytes for op in files for f in op.files}
    source, target = s3("src"), s3("out")  # fresh counters
    repair(source, target, [SetValue("counter", 7, "count", -1)])
    assert Savepoint.open(target).get("counter", 7)["count"] == -1
    assert check(target).ok
    total, largest = sum(sizes.values()), max(sizes.values())
    assert target.stats.bytes_copied >= total - largest  # all but the edited file, by the server
    # through this process: the edited file and the manifest only (not the savepoint, as a download + upload)
    assert target.stats.bytes_written < total / 4 and source.stats.bytes_read < total / 3


def test_transforms_to_s3(s3, tmp_path):
    _build(tmp_path / "src")
    source = s3("src")
    _build(source)
    change_operator_identifier(source, s3("renamed"), "other", "other-2")
    remove_operator(source, s3("removed"), "other")
    with_max_parallelism(source, s3("rescaled"), "counter", 512)
    change_operator_identifier(tmp_path / "src", tmp_path / "renamed", "other", "other-2")
    with_max_parallelism(tmp_path / "src", tmp_path / "rescaled", "counter", 512)
    assert_same(Savepoint.open(tmp_path / "renamed"), Savepoint.open(s3("renamed")))
    assert_same(Savepoint.open(tmp_path / "rescaled"), Savepoint.open(s3("rescaled")))
    assert [m.uid for m in Savepoint.open(s3("removed")).operators] == ["counter"]


@pytest.mark.parametrize("case", ["long-hashmap-canonical", "string-rocksdb-native", "tuple2-hashmap-canonical"])
def test_convert_both_directions_on_s3(s3_server, s3, tmp_path, case):
    local = FIXTURES / "2.3.0" / case / "savepoint"
    flink_uri = s3_server.upload_dir(local, s3("flink").path.split("/", 1)[1])
    flink = locate(flink_uri, storage_options=s3_server.options())
    convert_to_statekit(local, tmp_path / "converted")
    convert_to_statekit(flink, s3("converted"))
    assert_same(Savepoint.open(tmp_path / "converted"), Savepoint.open(s3("converted")))
    write_flink(tmp_path / "converted", tmp_path / "back")
    write_flink(s3("converted"), s3("back"))
    assert_same(Savepoint.open(tmp_path / "back"), Savepoint.open(s3("back")))
    keys = s3_server.keys(s3("back").path.split("/", 1)[1] + "/")
    assert keys and all(k.rsplit("/", 1)[0] == keys[0].rsplit("/", 1)[0] for k in keys)
    write_flink(flink, s3("flink-to-flink"))  # Flink to Flink, both on the store
    assert_same(Savepoint.open(local), Savepoint.open(s3("flink-to-flink")))


def test_bootstrap_to_s3(s3, tmp_path):
    from statekit.bootstrap import StateColumn, bootstrap_columns

    table = pa.table({"user": ["a", "b"], "amount": [1.5, 2.5]})
    bootstrap_columns(table, s3("boot"), uid="acc", key="user", states=[StateColumn("balance", "amount", None)],
                      max_parallelism=128)
    assert Savepoint.open(s3("boot")).get("acc", "b") == {"balance": 2.5}


def test_no_write_permission_leaves_nothing(s3_server, s3_prefix, tmp_path):
    target = locate(f"{s3_prefix}/denied", storage_options=s3_server.options("reader"))
    before = _upload_dirs()
    with pytest.raises(StorageAccessError, match="may not write") as e:
        _build(target)
    assert s3_server.reader["secret_key"] not in str(e.value) and "Nothing was published" in str(e.value)
    assert s3_server.keys(target.path.split("/", 1)[1]) == []
    assert _upload_dirs() == before


def test_missing_bucket_is_refused_before_writing(s3_server):
    target = locate("s3://no-such-bucket-w/sp", storage_options=s3_server.options())
    with pytest.raises(StorageNotFoundError, match="bucket does not exist"):
        _build(target)


def test_failure_mid_upload_removes_what_was_staged(s3_server, s3, monkeypatch):
    from statekit.errors import StorageUnavailableError
    from statekit.format import storage

    real = storage.StoragePath.create
    calls = []

    def failing(self):
        calls.append(self.name)
        if len(calls) == 3:
            raise StorageUnavailableError(f"{self}: injected failure after two uploads")
        return real(self)

    monkeypatch.setattr(storage.StoragePath, "create", failing)
    target = s3("sp")
    with pytest.raises(StorageUnavailableError, match="Nothing was published"):
        _build(target)
    assert s3_server.keys(target.path.split("/", 1)[1] + "/") == []


def test_server_stopped_mid_write(tmp_path):
    """A second server of our own is stopped while a large savepoint uploads: a typed error, nothing readable there."""
    from s3_server import S3Server

    from statekit.errors import StorageError

    server = S3Server()
    opts = {**server.options(), "max_attempts": "2", "connect_timeout": "1", "request_timeout": "5"}
    target = locate(f"s3://{BUCKET}/big", storage_options=opts)
    from statekit.format import storage

    real = storage.StoragePath.create
    seen = []

    def stop_after_first(self):
        seen.append(self.name)
        if len(seen) == 2:
            server.stop()
        return real(self)

    try:
        import unittest.mock as _m  # patching our own upload to know when to stop the server, not the client library

        with _m.patch.object(storage.StoragePath, "create", stop_after_first):
            with pytest.raises(StorageError) as e:
                _build(target, rows=5000)
        assert "big" in str(e.value) and server.admin["secret_key"] not in str(e.value)
    finally:
        server.stop()


def test_no_credential_in_written_files_or_logs(s3_server, s3, tmp_path, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    target = s3("secretless")
    _build(target)
    write_flink(target, s3("secretless-flink"))
    Savepoint.open(s3("secretless-flink")).get("counter", 1)
    secrets = [s3_server.admin["secret_key"], s3_server.admin["access_key"]]
    assert not any(s in caplog.text for s in secrets)  # every log line of the writes and reads above
    caplog.set_level(logging.WARNING)
    client = s3_server.client()
    for prefix in (target, s3("secretless-flink")):
        for key in s3_server.keys(prefix.path.split("/", 1)[1] + "/"):
            body = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            assert not any(s.encode() in body for s in secrets), key
    assert not any(s in repr(target) + str(target) for s in secrets)


def test_transient_503_during_a_full_read(s3_server, s3, tmp_path):
    """Every request of a whole read may meet a 503 first: each is retried (bounded), the read completes."""
    from s3_server import FaultProxy

    from statekit.format.storage import filesystem_for

    _build(s3("flaky"), rows=2000)
    proxy = FaultProxy(s3_server.port, fail=3)  # fewer than the 4 attempts each request gets
    try:
        opts = s3_server.options(endpoint=proxy.endpoint)
        flaky = locate(str(s3("flaky")), storage_options=opts)
        assert_same(Savepoint.open(s3("flaky")), Savepoint.open(flaky))
        assert proxy.failed == 3
    finally:
        proxy.close()
    assert filesystem_for  # the retry policy lives in the filesystem the URI resolves to
