"""Manifests and files that disagree, that name FIFOs or devices, or whose fields are hostile: typed errors naming the field."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from savepoint_helpers import copy_golden, write_native
from typer.testing import CliRunner

from statekit.errors import CorruptSavepointError, StatekitError
from statekit.format.files import checksum
from statekit.format.manifest import MANIFEST_NAME
from statekit.savepoint import Savepoint, check
from statekit.testing import tree_digest
from statekit_cli.app import app

COUNTER, WINDOW, SOURCE, RULES = range(4)  # operators of the golden savepoint


@pytest.fixture
def sp(tmp_path) -> Path:
    return copy_golden(tmp_path / "sp")


def edit(sp: Path, fn) -> None:
    m = json.loads((sp / MANIFEST_NAME).read_text())
    fn(m)
    (sp / MANIFEST_NAME).write_text(json.dumps(m))


def read_everything(sp: Path) -> None:
    """Every reader entry point over every operator."""
    s = Savepoint.open(sp)
    for op in s.operators:
        s.keyed_table(op.identifier)
        s.timers(op.identifier)
        for info in op.operator_states:
            if info.redistribution == "broadcast":
                s.broadcast_state(op.identifier, info.name)
            else:
                s.list_state(op.identifier, info.name)


def assert_refused(sp: Path, *match: str) -> None:
    """Every reader and check() refuse the savepoint with a typed error (naming `match`); nothing is modified."""
    before = tree_digest(sp)
    with pytest.raises(StatekitError) as info:
        read_everything(sp)
    for m in match:
        assert m in str(info.value), str(info.value)
    report = check(sp)
    assert not report.ok
    assert any(all(m in p.message for m in match) for p in report.problems), report
    result = CliRunner().invoke(app, ["inspect", str(sp)])
    assert result.exit_code not in (0, None) and "Traceback" not in result.output, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert tree_digest(sp) == before


# --- 6. the manifest and the files must agree ------------------------------------------------------------


def test_golden_copy_is_valid(sp):
    assert check(sp).ok
    read_everything(sp)


def test_keyed_format_rocksdb_over_parquet_files_is_refused(sp):
    def patch(m):
        m["operators"][COUNTER]["keyed_format"] = "rocksdb"
        m["features"] = ["rocksdb-native"]
    edit(sp, patch)
    assert_refused(sp, "keyed_format")


def test_keyed_format_rocksdb_without_its_feature_is_refused(sp):
    edit(sp, lambda m: m["operators"][COUNTER].update(keyed_format="rocksdb"))
    assert_refused(sp, "keyed_format")


def test_keyed_parquet_file_listed_as_rocksdb_is_refused(sp):
    def patch(m):
        for f in m["operators"][COUNTER]["files"]:
            f["table"] = "rocksdb"
            f["subtask"] = 0
    edit(sp, patch)
    assert_refused(sp, "rocksdb")


def test_native_files_under_a_parquet_keyed_format_are_refused(tmp_path):
    sp = write_native(tmp_path / "native", tmp_path / "work")
    assert check(sp).ok
    assert Savepoint.open(sp).keyed_table("native").num_rows == 200
    edit(sp, lambda m: m["operators"][0].update(keyed_format="parquet"))
    assert_refused(sp, "keyed_format")


def test_native_files_of_one_subtask_in_two_directories_are_refused(tmp_path):
    sp = write_native(tmp_path / "native", tmp_path / "work")

    def patch(m):
        f = m["operators"][0]["files"][0]
        moved = f["path"].replace("subtask-0", "subtask-0b")
        (sp / moved).parent.mkdir(parents=True, exist_ok=True)
        os.rename(sp / f["path"], sp / moved)
        f["path"] = moved
    edit(sp, patch)
    assert_refused(sp, "more than one directory")


def test_garbage_listed_as_native_files_is_reported_by_check(tmp_path):
    """A native operator whose listed files are not a RocksDB checkpoint: check() reads it like every reader."""
    sp = write_native(tmp_path / "native", tmp_path / "work")

    def patch(m):
        for f in m["operators"][0]["files"]:
            data = b"not rocksdb"
            (sp / f["path"]).write_bytes(data)
            f.update(bytes=len(data), checksum=checksum(data))
    edit(sp, patch)
    report = check(sp)
    assert [p.kind for p in report.problems] == ["unreadable"], report
    with pytest.raises(CorruptSavepointError):
        Savepoint.open(sp).keyed_table("native")


# --- 7. only regular files are data files ----------------------------------------------------------------


_READ_IN_CHILD = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a device read until MemoryError stays small
    from statekit.errors import StatekitError
    from statekit.savepoint import Savepoint, check
    report = check(sys.argv[1])
    assert not report.ok and report.problems[0].kind == "missing_file", report
    assert "regular file" in report.problems[0].message, report
    try:
        Savepoint.open(sys.argv[1]).keyed_table("counter")
    except StatekitError as exc:
        assert "regular file" in str(exc), exc
        print("typed:", type(exc).__name__)
    else:
        raise SystemExit("read a special file as data")
""")


@pytest.mark.parametrize("special", ["fifo", "char-device"])
def test_special_files_are_refused_without_hanging(sp, special):
    path = sp / json.loads((sp / MANIFEST_NAME).read_text())["operators"][COUNTER]["files"][0]["path"]
    path.unlink()
    if special == "fifo":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers: reads never end
        except PermissionError:
            pytest.skip("creating a device node needs root")
    before = tree_digest(sp)
    try:
        r = subprocess.run([sys.executable, "-c", _READ_IN_CHILD, str(sp)], capture_output=True, text=True,
                           timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading a savepoint with a {special} hung")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "typed: CorruptSavepointError" in r.stdout
    assert tree_digest(sp) == before


# --- 8. the manifest's schema, fully validated ------------------------------------------------------------


HUGE = "9" * 5000


def _raw(sp: Path, fn, *replacements: tuple[str, str]) -> None:
    """Edit the manifest, then replace placeholders in its text (for JSON Python will not write)."""
    m = json.loads((sp / MANIFEST_NAME).read_text())
    fn(m)
    text = json.dumps(m)
    for a, b in replacements:
        text = text.replace(a, b)
    (sp / MANIFEST_NAME).write_text(text)


NESTED = "array<" * 3000 + "bigint" + ">" * 3000
SCHEMA_CASES = {
    "checkpoint_id-Infinity": (lambda m: m.update(checkpoint_id=float("inf")), "checkpoint_id"),
    "checkpoint_id-1e400": (lambda m: m.update(checkpoint_id="@1e400@"), "checkpoint_id"),
    "checkpoint_id-NaN": (lambda m: m.update(checkpoint_id=float("nan")), "checkpoint_id"),
    "checkpoint_id-huge": (lambda m: m.update(checkpoint_id="@HUGE@"), "checkpoint_id"),
    "parallelism-1e400": (lambda m: m["operators"][COUNTER].update(parallelism="@1e400@"),
                          "operators[0].parallelism"),
    "max_parallelism-huge": (lambda m: m["operators"][WINDOW].update(max_parallelism="@HUGE@"),
                             "operators[1].max_parallelism"),
    "rows-huge": (lambda m: m["operators"][COUNTER]["files"][0].update(rows="@HUGE@"), "files[0].rows"),
    "bytes-Infinity": (lambda m: m["operators"][COUNTER]["files"][1].update(bytes=float("inf")), "files[1].bytes"),
    "key_group_start-float": (lambda m: m["operators"][COUNTER]["files"][1].update(key_group_start=86.0),
                              "key_group_start"),
    "nested-ddl": (lambda m: m["operators"][COUNTER]["keyed_states"][0].update(type=NESTED), "64 levels"),
    "nested-key-ddl": (lambda m: m["operators"][COUNTER].update(key_type=NESTED), "64 levels"),
    "kind-list": (lambda m: m["operators"][COUNTER]["keyed_states"][1].update(kind=["list"]),
                  "keyed_states[1].kind"),
    "kind-object": (lambda m: m["operators"][COUNTER]["keyed_states"][1].update(kind={"list": 1}),
                    "keyed_states[1].kind"),
    "redistribution-list": (lambda m: m["operators"][SOURCE]["operator_states"][0].update(redistribution=["split"]),
                            "operator_states[0].redistribution"),
    "keyed_format-list": (lambda m: m["operators"][COUNTER].update(keyed_format=["parquet"]), "keyed_format"),
    "keyed_format-object": (lambda m: m["operators"][COUNTER].update(keyed_format={}), "keyed_format"),
    "table-object": (lambda m: m["operators"][COUNTER]["files"][0].update(table={"keyed": True}),
                     "files[0].table"),
    "table-list": (lambda m: m["operators"][COUNTER]["files"][0].update(table=["keyed"]), "files[0].table"),
    "path-component-300-bytes": (
        lambda m: m["operators"][COUNTER]["files"][0].update(path="op-0da08f51eaa85fc298e176a139b3649a/" + "é" * 150),
        "files[0].path"),
    "uid-empty": (lambda m: m["operators"][COUNTER].update(uid=""), "operators[0].uid"),
    "uid-lone-surrogate": (lambda m: m["operators"][COUNTER].update(uid="@SURROGATE@"), "operators[0].uid"),
    "name-number": (lambda m: m["operators"][COUNTER].update(name=7), "operators[0].name"),
    "state-name-list": (lambda m: m["operators"][COUNTER]["keyed_states"][0].update(name=["count"]),
                        "keyed_states[0].name"),
    "pickled-string": (lambda m: m["operators"][COUNTER]["keyed_states"][0].update(pickled="yes"),
                       "keyed_states[0].pickled"),
    "files-object": (lambda m: m["operators"][COUNTER].update(files={"a": 1}), "operators[0].files"),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
def test_hostile_manifest_fields_are_typed_errors_naming_the_field(sp, case):
    fn, field = SCHEMA_CASES[case]
    _raw(sp, fn, ('"@1e400@"', "1e400"), ('"@HUGE@"', HUGE), ('"@SURROGATE@"', '"\\ud800"'))
    assert_refused(sp, field)


# --- 10. what check() used to accept ----------------------------------------------------------------------


GAP_CASES = {
    "list-state-not-an-array": (lambda m: m["operators"][COUNTER]["keyed_states"][1].update(type="string"),
                                "not an array"),
    "map-state-not-a-map": (lambda m: m["operators"][COUNTER]["keyed_states"][2].update(type="string"),
                            "not a map"),
    "pickled-bigint": (lambda m: (m["operators"][COUNTER]["keyed_states"][0].update(pickled=True),
                                  m.update(features=["pickled"])), "not binary"),
    "pickled-list-of-strings": (lambda m: (m["operators"][COUNTER]["keyed_states"][1].update(pickled=True),
                                           m.update(features=["pickled"])), "not binary"),
    "pickled-operator-state": (lambda m: (m["operators"][SOURCE]["operator_states"][0].update(pickled=True),
                                          m.update(features=["pickled"])), "not binary"),
    "pickled-without-feature": (lambda m: (m["operators"][COUNTER]["keyed_states"][0].update(type="binary"),
                                           m["operators"][COUNTER]["keyed_states"][0].update(pickled=True)),
                                "'pickled' feature"),
    "ttl-negative": (lambda m: m["operators"][COUNTER]["keyed_states"][0].update(ttl_ms=-5), "ttl_ms"),
    "ttl-zero": (lambda m: m["operators"][COUNTER]["keyed_states"][0].update(ttl_ms=0), "ttl_ms"),
    "ttl-float": (lambda m: m["operators"][COUNTER]["keyed_states"][0].update(ttl_ms=1.5), "ttl_ms"),
    "ttl-string": (lambda m: m["operators"][COUNTER]["keyed_states"][0].update(ttl_ms="10"), "ttl_ms"),
    "job_name-number": (lambda m: m.update(job_name=42), "job_name"),
    "job_name-list": (lambda m: m.update(job_name=["a"]), "job_name"),
    "rows-float": (lambda m: m["operators"][COUNTER]["files"][0].update(rows=3.0), "files[0].rows"),
    "bytes-float": (lambda m: m["operators"][COUNTER]["files"][0].update(
        bytes=float(m["operators"][COUNTER]["files"][0]["bytes"])), "files[0].bytes"),
    "created_at-number": (lambda m: m.update(created_at=5), "created_at"),
    "same-file-twice-spelled-differently": (lambda m: m["operators"][COUNTER]["files"][1].update(
        path=m["operators"][COUNTER]["files"][0]["path"].replace("/keyed/", "/keyed/./")), "listed twice"),
}


@pytest.mark.parametrize("case", sorted(GAP_CASES))
def test_validation_gaps_are_closed(sp, case):
    fn, match = GAP_CASES[case]
    edit(sp, fn)
    assert_refused(sp, match)


def test_timer_domain_other_than_event_or_processing_is_reported(sp):
    m = json.loads((sp / MANIFEST_NAME).read_text())
    entry = next(f for f in m["operators"][WINDOW]["files"] if f["table"] == "timers")
    table = pq.read_table(sp / entry["path"])
    domains = ["weekly"] + table.column("domain").to_pylist()[1:]
    table = table.set_column(table.schema.get_field_index("domain"), "domain", pa.array(domains, pa.string()))
    os.unlink(sp / entry["path"])
    pq.write_table(table, sp / entry["path"])
    data = (sp / entry["path"]).read_bytes()
    entry.update(bytes=len(data), checksum=checksum(data))
    (sp / MANIFEST_NAME).write_text(json.dumps(m))
    report = check(sp)
    assert [(p.kind, "weekly" in p.message) for p in report.problems] == [("invalid_row", True)], report


@pytest.mark.parametrize("sidecar", ["[1]", '{"ttl_stamped": 5}', '{"snapshot_time_ms": "now"}',
                                     '{"namespaced": [true]}', '{"snapshot_time_ms": NaN}'])
def test_damaged_native_sidecar_is_a_typed_error(tmp_path, sidecar):
    sp = write_native(tmp_path / "native", tmp_path / "work")

    def patch(m):
        for f in m["operators"][0]["files"]:
            if f["path"].endswith("statekit-native.json"):
                (sp / f["path"]).write_text(sidecar)
                data = (sp / f["path"]).read_bytes()
                f.update(bytes=len(data), checksum=checksum(data))
    edit(sp, patch)
    with pytest.raises(CorruptSavepointError, match="statekit-native.json"):
        Savepoint.open(sp).keyed_table("native")
    assert [p.kind for p in check(sp).problems] == ["unreadable"]


def test_namespace_type_over_files_without_namespace_is_a_problem_not_a_crash(tmp_path):
    """Found by the slow fuzz (seed 7, case 1593): check() raised a bare KeyError on its duplicate-key pass."""
    from statekit.savepoint import SavepointBuilder
    from statekit.state import ValueStateDescriptor

    sp = tmp_path / "sp"
    with SavepointBuilder(sp) as b:
        op = b.add_operator("c", key_type="bigint", keyed_states=[ValueStateDescriptor("count", "bigint")])
        op.write_keyed(pa.table({"key": [1, 2], "count": [1, 2]}))
    manifest = json.loads((sp / "_metadata.json").read_text())
    manifest["operators"][0]["namespace_type"] = "struct<start:bigint,end:bigint>"
    (sp / "_metadata.json").write_text(json.dumps(manifest))
    report = check(sp)
    assert not report.ok and {p.kind for p in report.problems} == {"schema_mismatch"}
