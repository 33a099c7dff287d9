"""Flink writers that carry files as they are, on a real S3 server: `set-offsets`, SQL repairs (carried operators,
spliced key groups) and DataStream repairs written as Flink write straight under the target URI - carried files
copied by the server, nothing staged on this machine's disk, `_metadata` last - and a failure mid-write leaves
nothing under the target and the source untouched."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from savepoint_helpers import filed_kafka
from test_read_s3 import FIXTURES

from statekit.errors import StorageUnavailableError
from statekit.format import storage
from statekit.format.storage import locate
from statekit.savepoint import Savepoint, check
from statekit.savepoint.offsets import set_offsets, source_offsets
from statekit.savepoint.patch import SetValue, repair

KAFKA = FIXTURES / "kafka" / "kafka-source-2p"
SQL = FIXTURES / "sql" / "2.3.0" / "default-hashmap-canonical" / "savepoint"
DATASTREAM = FIXTURES / "2.3.0" / "long-hashmap-canonical" / "savepoint"
TEMPLATE = FIXTURES / "sql" / "2.3.0-template" / "plan-hashmap" / "savepoint"
PLAN = FIXTURES / "sql" / "2.3.0" / "plan-hashmap-canonical" / "plan.json"
AGG = "GroupAggregate[51]"


@pytest.fixture
def s3(s3_server, s3_prefix):
    """``s3(name)``: a `StoragePath` at a fresh URI under this test's prefix, with the admin's credentials."""
    return lambda name: locate(f"{s3_prefix}/{name}", storage_options=s3_server.options())


def _upload(s3_server, s3, local: Path, name: str):
    return locate(s3_server.upload_dir(local, s3(name).path.split("/", 1)[1]), storage_options=s3_server.options())


def _objects(s3_server, where) -> dict[str, bytes]:
    """Every object under `where` with its bytes (pyarrow's empty directory markers left out)."""
    prefix = where.path.split("/", 1)[1] + "/"
    return {k[len(prefix):]: (where / k[len(prefix):]).read_bytes() for k in s3_server.keys(prefix)
            if not k.endswith("/")}


def _rows(sp: Savepoint, lists=list) -> dict[str, list]:
    """Every keyed operator's rows, in one order (`lists` applied to list values first)."""
    return {m.uid_hash: sorted(repr({k: lists(v) if isinstance(v, list) else v for k, v in r.items()})
                               for r in sp.keyed_table(m.identifier).to_pylist())
            for m in sp.operators if m.keyed_states}


@pytest.fixture
def no_temp_dir(tmp_path, monkeypatch):
    """This process's temp directory made absent: any local staging of the output fails."""
    absent = tmp_path / "no-temp-dir"
    monkeypatch.setattr(tempfile, "tempdir", str(absent))
    yield
    assert not absent.exists()


def _fail_on(monkeypatch, method: str, nth: int) -> list[str]:
    """`StoragePath.<method>` raises a transient store error on its `nth` call (a write stopped mid-way)."""
    real = getattr(storage.StoragePath, method)
    calls: list[str] = []

    def failing(self, *args, **kwargs):
        calls.append(self.name)
        if len(calls) == nth:
            raise StorageUnavailableError(f"{self}: injected failure after {nth - 1} object(s)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(storage.StoragePath, method, failing)
    return calls


ARGS = dict(op="kafka-source", topic="events", partition=1, shift=1, dry_run=False)


def test_set_offsets_s3_to_s3_copies_on_the_server_with_no_local_disk(s3_server, s3, tmp_path, monkeypatch):
    filed = filed_kafka(tmp_path / "filed")
    source = _upload(s3_server, s3, filed, "kafka")
    set_offsets(filed, tmp_path / "local", **ARGS)
    before = _objects(s3_server, source)
    absent = tmp_path / "no-temp-dir"
    monkeypatch.setattr(tempfile, "tempdir", str(absent))
    target = s3("out")
    order: list[str] = []
    real_put = storage.StoragePath.write_bytes
    monkeypatch.setattr(storage.StoragePath, "write_bytes", lambda self, data: (order.append(self.name),
                                                                                real_put(self, data))[1])
    assert set_offsets(source, target, **ARGS).written
    assert order[-1] == "_metadata" and order.count("_metadata") == 1
    assert source_offsets(target) == source_offsets(tmp_path / "local")
    # both subtasks' files carried (subtask 1's rewritten stream is a new file; its old one is kept, it may be
    # shared): copied by the server; through this process only the new stream and _metadata
    assert target.stats.bytes_copied == sum(len(b) for n, b in before.items() if n != "_metadata") > 0
    new = {n: b for n, b in _objects(s3_server, target).items() if n not in before}
    assert len(new) == 1 and target.stats.bytes_written == len(next(iter(new.values()))) + len((target / "_metadata").read_bytes())
    assert not absent.exists() and _objects(s3_server, source) == before


@pytest.mark.parametrize("method, nth", [("copy_from", 2), ("write_bytes", 1)])
def test_set_offsets_failing_mid_write_leaves_nothing(s3_server, s3, tmp_path, monkeypatch, method, nth):
    source = _upload(s3_server, s3, filed_kafka(tmp_path / "filed"), "kafka")
    before = _objects(s3_server, source)
    target = s3("out")
    _fail_on(monkeypatch, method, nth)
    with pytest.raises(StorageUnavailableError, match="Nothing was published"):
        set_offsets(source, target, **ARGS)
    assert _objects(s3_server, target) == {}
    assert _objects(s3_server, source) == before


SQL_EDITS = [SetValue(AGG, "dave", "accState", {"f0": 70})]  # spliced into its file; the other operators carried


def test_sql_repair_s3_to_s3_splices_and_copies_on_the_server(s3_server, s3, tmp_path, no_temp_dir):
    source = _upload(s3_server, s3, SQL, "sql")
    before = _objects(s3_server, source)
    repair(SQL, tmp_path / "local", SQL_EDITS)
    target = s3("out")
    repair(source, target, SQL_EDITS)
    out, local = Savepoint.open(target), Savepoint.open(tmp_path / "local")
    assert out.get(AGG, "dave")["accState"]["f0"] == 70
    assert _rows(out) == _rows(local)
    assert check(target).ok
    carried = sum(len(b) for n, b in before.items() if n != "_metadata")
    assert target.stats.bytes_copied > carried / 2  # the carried operators' files, by the server
    assert target.stats.bytes_written < carried / 2  # through this process: the spliced file and _metadata
    assert _objects(s3_server, source) == before


def test_sql_repair_failing_mid_write_leaves_nothing(s3_server, s3, monkeypatch):
    source = _upload(s3_server, s3, SQL, "sql")
    before = _objects(s3_server, source)
    target = s3("out")
    _fail_on(monkeypatch, "copy_from", 3)
    with pytest.raises(StorageUnavailableError, match="Nothing was published"):
        repair(source, target, SQL_EDITS)
    assert _objects(s3_server, target) == {}
    assert _objects(s3_server, source) == before


def test_datastream_repair_to_flink_on_s3_stages_on_the_store_not_the_disk(s3_server, s3, tmp_path, monkeypatch):
    """A DataStream savepoint repaired as Flink: its statekit scratch is a hidden sibling prefix on the store
    (removed afterwards), never this machine's temp directory."""
    source = _upload(s3_server, s3, DATASTREAM, "ds")
    before = _objects(s3_server, source)
    edit = [SetValue("counter", 42, "count", -1)]
    repair(DATASTREAM, tmp_path / "local", edit)  # on disk: its scratch in the temp directory
    absent = tmp_path / "no-temp-dir"
    monkeypatch.setattr(tempfile, "tempdir", str(absent))
    target = s3("out")
    repair(source, target, edit)
    assert Savepoint.open(target).get("counter", 42)["count"] == -1
    assert _rows(Savepoint.open(target)) == _rows(Savepoint.open(tmp_path / "local"))
    assert (target / "_metadata").exists() and not (target / "_metadata.json").exists()  # Flink's format
    assert _objects(s3_server, target.parent).keys() == {f"ds/{n}" for n in before} | \
        {f"out/{n}" for n in _objects(s3_server, target)}  # no scratch left beside it
    assert _objects(s3_server, source) == before and not absent.exists()


def test_datastream_repair_failing_mid_write_leaves_nothing(s3_server, s3, monkeypatch):
    """The scratch is complete, then writing the target's second Flink file fails: neither is left."""
    source = _upload(s3_server, s3, DATASTREAM, "ds")
    before = _objects(s3_server, source)
    target = s3("out")
    real = storage.StoragePath.create
    written: list[str] = []

    def failing(self):
        if self.path.startswith(target.path + "/"):
            written.append(self.name)
            if len(written) == 2:
                raise StorageUnavailableError(f"{self}: injected failure after one Flink file")
        return real(self)

    monkeypatch.setattr(storage.StoragePath, "create", failing)
    with pytest.raises(StorageUnavailableError, match="Nothing was published"):
        repair(source, target, [SetValue("counter", 42, "count", -1)])
    assert len(written) == 2
    assert _objects(s3_server, target.parent).keys() == {f"ds/{n}" for n in before}  # neither target nor scratch
    assert _objects(s3_server, source) == before


def test_sql_bootstrap_from_a_template_on_s3_to_s3(s3_server, s3, tmp_path, no_temp_dir):
    """A SQL bootstrap (the template's other operators carried) from and to the server, as on disk."""
    from statekit.savepoint.sql_bootstrap import bootstrap_sql
    from tests.flink.sql_restore import orders1

    template = _upload(s3_server, s3, TEMPLATE, "template")
    target = s3("boot")
    report = bootstrap_sql(orders1(), template, target, operator="6_group-aggregate", plan=PLAN)
    bootstrap_sql(orders1(), TEMPLATE, tmp_path / "local", operator="6_group-aggregate", plan=PLAN)
    assert report.written and str(report.target) == str(target)
    out, local = Savepoint.open(target, plan=PLAN), Savepoint.open(tmp_path / "local", plan=PLAN)
    assert _rows(out) == _rows(local) and out.keyed_table("6_group-aggregate").num_rows > 0
    assert check(target).ok
