"""Bad input: each case raises a typed `StatekitError` subclass and leaves its input byte-identical.

Damage is done for real to files on disk (truncation, flipped bytes, rewritten Parquet with the
manifest patched so only the intended fault remains); every read and every `check` runs under
`unchanged`, which hashes the whole tree before and after.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.errors import (
    ChecksumMismatchError,
    CorruptSavepointError,
    DuplicateKeyError,
    InvalidArgumentError,
    NotASavepointError,
    NullKeyError,
    ParallelismError,
    SavepointExistsError,
    SchemaMismatchError,
    StatekitError,
    StateTypeError,
    UnknownOperatorError,
    UnknownStateError,
    UnsafePathError,
    UnsupportedFormatError,
)
from statekit.format.files import checksum
from statekit.keygroups import assign_to_key_group
from statekit.savepoint import MANIFEST_NAME, Savepoint, SavepointBuilder, check
from statekit.state import BroadcastStateDescriptor, ListStateDescriptor, ValueStateDescriptor, operator_list_info

STATES = [ValueStateDescriptor("count", "bigint"), ListStateDescriptor("seen", "string")]
WINDOW = "struct<start:bigint,end:bigint>"


def _build(path: Path) -> None:
    keys = np.arange(-200, 200, dtype=np.int64) * 7919
    with SavepointBuilder(path, checkpoint_id=5, rows_per_file=60) as b:
        op = b.add_operator("counter", parallelism=2, max_parallelism=128, key_type="bigint", keyed_states=STATES)
        op.write_keyed(pa.table({"key": keys, "count": keys * 2, "seen": [["a"] if k % 2 else [] for k in keys]}))
        op.write_timers(pa.table({"key": keys[:5], "timestamp": np.arange(5, dtype=np.int64), "domain": ["event"] * 5}))
        src = b.add_operator("source", parallelism=2, max_parallelism=128)
        src.write_list_state(operator_list_info(ListStateDescriptor("offsets", "bigint"), "split"), [[1, 2], [3]])
        src.write_broadcast_state(BroadcastStateDescriptor("rules", "string", "double").info(), {"a": 1.0})


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "sp"
    _build(path)
    assert check(path).ok
    return path


@pytest.fixture
def sp(pristine, tmp_path) -> Path:
    """A fresh copy of a valid savepoint, free to damage."""
    dst = tmp_path / "sp"
    shutil.copytree(pristine, dst)
    return dst


def manifest(path: Path) -> dict:
    return json.loads((path / MANIFEST_NAME).read_text())


def save_manifest(path: Path, m: dict) -> None:
    (path / MANIFEST_NAME).write_text(json.dumps(m))


def keyed_entry(path: Path, i: int = 0) -> dict:
    return [f for f in manifest(path)["operators"][0]["files"] if f["table"] == "keyed"][i]


def rewrite(path: Path, rel: str, table: pa.Table, *, fix_rows: bool = True) -> None:
    """Replace a data file and patch its size, checksum (and row count) so only the content is wrong."""
    full = path / rel
    pq.write_table(table, full)
    data = full.read_bytes()
    m = manifest(path)
    for op in m["operators"]:
        for f in op["files"]:
            if f["path"] == rel:
                f.update(bytes=len(data), checksum=checksum(data))
                if fix_rows:
                    f["rows"] = table.num_rows
    save_manifest(path, m)


def read_all(path: Path) -> None:
    s = Savepoint.open(path)
    s.keyed_table("counter")
    s.timers("counter")
    s.list_state("source", "offsets")
    s.broadcast_state("source", "rules")


def assert_nothing_left(parent: Path, allowed: set[str] = frozenset()) -> None:
    assert {p.name for p in parent.iterdir()} == set(allowed), "the builder left files behind"


# --- the manifest ---------------------------------------------------------------------------------------


def test_missing_manifest(sp, unchanged):
    (sp / MANIFEST_NAME).unlink()
    with unchanged(sp), pytest.raises(NotASavepointError, match="no _metadata.json"):
        Savepoint.open(sp)


def test_not_a_directory(tmp_path, unchanged):
    (tmp_path / "file").write_text("x")
    with unchanged(tmp_path), pytest.raises(NotASavepointError):
        Savepoint.open(tmp_path / "file")
    with pytest.raises(NotASavepointError):
        Savepoint.open(tmp_path / "absent")


@pytest.mark.parametrize("keep", [0, 1, 100, -1])
def test_truncated_manifest(sp, unchanged, keep):
    raw = (sp / MANIFEST_NAME).read_bytes()
    (sp / MANIFEST_NAME).write_bytes(raw[:keep] if keep >= 0 else raw[: len(raw) // 2])
    with unchanged(sp), pytest.raises(CorruptSavepointError, match="_metadata.json"):
        Savepoint.open(sp)


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"\xff\xfe", b"[1, 2]", b"null", b"[" * 100_000 + b"]" * 100_000],
    ids=["syntax", "not-utf8", "array", "null", "too-deep"],
)
def test_invalid_json(sp, unchanged, raw):
    (sp / MANIFEST_NAME).write_bytes(raw)
    with unchanged(sp), pytest.raises(CorruptSavepointError):
        Savepoint.open(sp)


@pytest.mark.parametrize("version", [2, 0, "1", 1.0, None, True])
def test_unknown_format_version(sp, unchanged, version):
    m = manifest(sp)
    m["format_version"] = version
    save_manifest(sp, m)
    with unchanged(sp), pytest.raises(UnsupportedFormatError, match=r"reads format version\(s\) 1"):
        Savepoint.open(sp)


def test_unknown_format_name(sp, unchanged):
    m = manifest(sp)
    m["format"] = "flink-savepoint"
    save_manifest(sp, m)
    with unchanged(sp), pytest.raises(UnsupportedFormatError, match="statekit-savepoint"):
        Savepoint.open(sp)


def test_unknown_feature(sp, unchanged):
    m = manifest(sp)
    m["features"] = ["pickled", "zstd-dictionaries"]
    save_manifest(sp, m)
    with unchanged(sp), pytest.raises(UnsupportedFormatError, match=r"zstd-dictionaries.*supports.*pickled"):
        Savepoint.open(sp)


@pytest.mark.parametrize("bad", ["../x.parquet", "../../etc/passwd", "/etc/passwd", "op/../../x", "C:/x",
                                 "op/./../../x", "", "a\x00b"])
def test_manifest_path_escaping_the_savepoint(sp, unchanged, bad):
    m = manifest(sp)
    m["operators"][0]["files"][0]["path"] = bad
    save_manifest(sp, m)
    with unchanged(sp), pytest.raises(UnsafePathError):
        Savepoint.open(sp)


def test_symlink_escaping_the_savepoint(sp, tmp_path, unchanged):
    entry = keyed_entry(sp)
    outside = tmp_path / "outside.parquet"
    shutil.copy(sp / entry["path"], outside)
    (sp / entry["path"]).unlink()
    os.symlink(outside, sp / entry["path"])
    with unchanged(sp), pytest.raises(UnsafePathError, match="outside"):
        Savepoint.open(sp)


@pytest.mark.parametrize(
    "patch",
    [
        lambda m: m["operators"][0].update(max_parallelism=40000),
        lambda m: m["operators"][0].update(max_parallelism=0),
        lambda m: m["operators"][0].update(parallelism=129),
        lambda m: m["operators"][0].update(uid_hash="not-a-hash"),
        lambda m: m["operators"][0].update(uid="renamed-without-rehashing"),
        lambda m: m["operators"][0].update(key_type="bigintt"),
        lambda m: m["operators"][0]["keyed_states"][0].update(type="array<>"),
        lambda m: m["operators"][0]["keyed_states"][0].update(kind="sorted"),
        lambda m: m["operators"][0]["files"][0].pop("key_group_start"),
        lambda m: m["operators"][0]["files"][0].update(key_group_end=128),
        lambda m: m["operators"][0]["files"][0].update(key_group_start="0"),
        lambda m: m["operators"][0]["files"][0].update(table="index"),
        lambda m: m["operators"][0]["files"][0].update(bytes=-1),
        lambda m: m["operators"][0]["files"][1].update(path=m["operators"][0]["files"][0]["path"]),
        lambda m: m["operators"][1]["files"][0].update(state="nope"),
        lambda m: m.update(operators={"counter": {}}),
        lambda m: m.update(operators=["counter"]),
        lambda m: m.update(features=[{"x": 1}]),
        lambda m: m.update(kind="snapshot"),
        lambda m: m.pop("checkpoint_id"),
        lambda m: m.update(operators=m["operators"] + m["operators"][:1]),
    ],
    ids=["mp40000", "mp0", "p>mp", "uid_hash", "uid-mismatch", "key_type", "state-type", "state-kind",
         "no-kg-start", "kg-end>mp", "kg-str", "table", "bytes<0", "dup-path", "state-unknown", "ops-dict",
         "ops-str", "features", "kind", "no-checkpoint-id", "dup-operator"],
)
def test_damaged_manifest_fields(sp, unchanged, patch):
    m = manifest(sp)
    patch(m)
    save_manifest(sp, m)
    with unchanged(sp), pytest.raises(CorruptSavepointError, match="_metadata.json"):
        Savepoint.open(sp)
    assert not check(sp).ok


# --- data files ----------------------------------------------------------------------------------------


def test_missing_parquet_file(sp, unchanged):
    entry = keyed_entry(sp, 1)
    (sp / entry["path"]).unlink()
    with unchanged(sp):
        s = Savepoint.open(sp)  # opening reads only the manifest
        with pytest.raises(CorruptSavepointError, match=f"{entry['path']}.*missing"):
            s.keyed_table("counter")


@pytest.mark.parametrize("keep", [0, 4, "half", -1])
def test_truncated_parquet_file(sp, unchanged, keep):
    entry = keyed_entry(sp)
    full = sp / entry["path"]
    raw = full.read_bytes()
    full.write_bytes(raw[: len(raw) // 2] if keep == "half" else raw[:keep])
    with unchanged(sp), pytest.raises(CorruptSavepointError, match="truncated"):
        Savepoint.open(sp).keyed_table("counter")


@pytest.mark.parametrize("where", [0, "middle", -1])
def test_checksum_mismatch(sp, unchanged, where):
    entry = keyed_entry(sp)
    full = sp / entry["path"]
    raw = bytearray(full.read_bytes())
    i = len(raw) // 2 if where == "middle" else where
    raw[i] ^= 0x01
    full.write_bytes(bytes(raw))
    assert len(raw) == entry["bytes"]
    with unchanged(sp):
        with pytest.raises(ChecksumMismatchError, match="checksum"):
            Savepoint.open(sp).keyed_table("counter")
        key = pq.read_table(pa.BufferReader(Path(sp / keyed_entry(sp, 1)["path"]).read_bytes())).column("key")[0]
        assert Savepoint.open(sp).get("counter", key.as_py()) is not None  # other files still readable


def test_corrupt_parquet_with_matching_checksum(sp, unchanged):
    entry = keyed_entry(sp)
    full = sp / entry["path"]
    raw = bytearray(full.read_bytes())
    raw[len(raw) // 3 : len(raw) // 3 + 16] = b"\xff" * 16
    full.write_bytes(bytes(raw))
    m = manifest(sp)
    next(f for f in m["operators"][0]["files"] if f["path"] == entry["path"])["checksum"] = checksum(bytes(raw))
    save_manifest(sp, m)
    with unchanged(sp), pytest.raises(CorruptSavepointError):
        Savepoint.open(sp).keyed_table("counter")


def test_column_type_disagrees_with_manifest(sp, unchanged):
    entry = keyed_entry(sp)
    table = pq.read_table(sp / entry["path"])
    table = table.set_column(2, "count", table.column("count").cast(pa.string()))
    rewrite(sp, entry["path"], table)
    with unchanged(sp):
        s = Savepoint.open(sp)
        with pytest.raises(SchemaMismatchError, match=r"count string.*count int64"):
            s.keyed_table("counter")
        key = table.column("key")[0].as_py()
        with pytest.raises(SchemaMismatchError):
            s.get("counter", key)


def test_column_missing_or_renamed_in_file(sp, unchanged):
    entry = keyed_entry(sp)
    table = pq.read_table(sp / entry["path"]).rename_columns(["key_group", "key", "total", "seen"])
    rewrite(sp, entry["path"], table)
    with unchanged(sp), pytest.raises(SchemaMismatchError):
        Savepoint.open(sp).keyed_table("counter")


def test_null_keys_in_a_file(sp, unchanged):
    entry = keyed_entry(sp)
    table = pq.read_table(sp / entry["path"])
    keys = table.column("key").to_pylist()
    table = table.set_column(1, pa.field("key", pa.int64()), pa.array([None] + keys[1:], pa.int64()))
    rewrite(sp, entry["path"], table)
    with unchanged(sp):
        with pytest.raises(CorruptSavepointError):
            Savepoint.open(sp).keyed_table("counter")
        report = check(sp)
    assert [p.kind for p in report.problems] == ["schema_mismatch"]


def test_row_count_disagrees_with_manifest(sp, unchanged):
    m = manifest(sp)
    m["operators"][0]["files"][0]["rows"] += 1
    save_manifest(sp, m)
    with unchanged(sp):
        with pytest.raises(CorruptSavepointError, match="rows"):
            Savepoint.open(sp).keyed_table("counter")
        assert [p.kind for p in check(sp).problems] == ["row_count"]


# --- operators and states --------------------------------------------------------------------------------


def test_unknown_uid_lists_the_uids_present(sp, unchanged):
    with unchanged(sp):
        s = Savepoint.open(sp)
        for call in (lambda: s.keyed_table("countr"), lambda: s.get("countr", 1), lambda: s.timers("countr"),
                     lambda: s.operator("countr"), lambda: s.list_state("countr", "offsets")):
            with pytest.raises(UnknownOperatorError, match=r"countr.*counter.*source"):
                call()


def test_unknown_state_name(sp, unchanged):
    with unchanged(sp):
        s = Savepoint.open(sp)
        with pytest.raises(UnknownStateError, match=r"offset.*offsets \(split\)"):
            s.list_state("source", "offset")
        with pytest.raises(UnknownStateError):
            s.union_state("source", "offsets")  # it is split state, not union
        with pytest.raises(UnknownStateError):
            s.broadcast_state("source", "offsets")
        with pytest.raises(UnknownStateError, match=r"count.*seen"):
            s.operator("counter").keyed_state("cnt")


def test_errors_are_statekit_errors():
    for cls in (NotASavepointError, CorruptSavepointError, ChecksumMismatchError, SchemaMismatchError,
                UnsupportedFormatError, UnsafePathError, UnknownOperatorError, UnknownStateError):
        assert issubclass(cls, StatekitError)


# --- writing ---------------------------------------------------------------------------------------------


def _write(path: Path, table: pa.Table, *, states=STATES, key_type="bigint", namespace_type=None):
    with SavepointBuilder(path) as b:
        b.add_operator("op", parallelism=1, max_parallelism=128, key_type=key_type, keyed_states=states,
                       namespace_type=namespace_type).write_keyed(table)


def test_duplicate_key_on_write_leaves_nothing(tmp_path):
    table = pa.table({"key": [1, 2, 3, 2], "count": [1, 2, 3, 4]})
    with pytest.raises(DuplicateKeyError, match="key 2 appears more than once"):
        _write(tmp_path / "sp", table)
    assert_nothing_left(tmp_path)


def test_duplicate_key_across_subtask_tables(tmp_path):
    with pytest.raises(DuplicateKeyError):
        with SavepointBuilder(tmp_path / "sp") as b:
            op = b.add_operator("op", parallelism=2, key_type="string", keyed_states=STATES)
            op.write_keyed(pa.table({"key": ["😀", "a"], "count": [1, 2]}))
            op.write_keyed(pa.table({"key": ["b", "😀"], "count": [3, 4]}))
    assert_nothing_left(tmp_path)


def test_duplicate_key_and_namespace(tmp_path):
    w = {"start": 0, "end": 10}
    ok = pa.table({"key": [1, 1], "namespace": [w, {"start": 10, "end": 20}], "count": [1, 2]})
    _write(tmp_path / "ok", ok, namespace_type=WINDOW)
    dup = pa.table({"key": [1, 1], "namespace": [w, w], "count": [1, 2]})
    with pytest.raises(DuplicateKeyError, match="namespace"):
        _write(tmp_path / "sp", dup, namespace_type=WINDOW)
    assert_nothing_left(tmp_path, {"ok"})


def test_duplicate_struct_key(tmp_path):
    t = pa.table({"key": [{"a": 1, "b": "x"}, {"a": 1, "b": "x"}], "count": [1, 2]})
    with pytest.raises(DuplicateKeyError):
        _write(tmp_path / "sp", t, key_type="struct<a:int,b:string>")
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize("kw", [dict(max_parallelism=0), dict(max_parallelism=40000), dict(max_parallelism=-1),
                                dict(parallelism=129, max_parallelism=128), dict(parallelism=0)])
def test_parallelism_out_of_bounds(tmp_path, kw):
    with pytest.raises(ParallelismError, match=r"between 1 and"):
        with SavepointBuilder(tmp_path / "sp") as b:
            b.add_operator("op", key_type="bigint", **kw)
    assert_nothing_left(tmp_path)


def test_writing_to_an_existing_path_is_refused(sp, tmp_path, unchanged):
    with unchanged(tmp_path):
        with pytest.raises(SavepointExistsError, match="never overwritten"):
            SavepointBuilder(sp)
    (tmp_path / "a_file").write_text("precious")
    (tmp_path / "empty_dir").mkdir()
    with unchanged(tmp_path):
        for target in (tmp_path / "a_file", tmp_path / "empty_dir"):
            with pytest.raises(SavepointExistsError):
                with SavepointBuilder(target) as b:
                    b.add_operator("op", key_type="bigint", keyed_states=STATES).write_keyed(
                        pa.table({"key": [1], "count": [1]}))


def test_exception_inside_the_builder_leaves_nothing(tmp_path):
    target = tmp_path / "deep" / "er" / "sp"
    with pytest.raises(RuntimeError, match="boom"):
        with SavepointBuilder(target) as b:
            b.add_operator("op", key_type="bigint", keyed_states=STATES).write_keyed(
                pa.table({"key": [1], "count": [1]}))
            _ = b.staging  # files may already be staged
            raise RuntimeError("boom")
    assert_nothing_left(tmp_path)
    with pytest.raises(StatekitError):
        b.commit()  # an aborted builder cannot be committed later


def test_failure_during_commit_leaves_nothing(tmp_path):
    with pytest.raises(StateTypeError):
        with SavepointBuilder(tmp_path / "sp", rows_per_file=10) as b:
            good = b.add_operator("good", key_type="bigint", keyed_states=STATES)
            good.write_keyed(pa.table({"key": np.arange(100), "count": np.arange(100)}))
            b.add_operator("bad", key_type="bigint", keyed_states=STATES).write_keyed(
                pa.table({"key": [1], "count": ["not a number"]}))
    assert_nothing_left(tmp_path)


def test_null_keys_are_refused(tmp_path):
    with pytest.raises(NullKeyError, match="null key"):
        _write(tmp_path / "sp", pa.table({"key": pa.array([1, None], pa.int64()), "count": [1, 2]}))
    with pytest.raises(NullKeyError):
        _write(tmp_path / "sp", pa.table({"key": pa.array([None, "a"], pa.string()), "count": [1, 2]}),
               key_type="string")
    with pytest.raises(NullKeyError):
        with SavepointBuilder(tmp_path / "sp") as b:
            b.add_operator("op", key_type="bigint").write_timers(
                pa.table({"key": pa.array([None], pa.int64()), "timestamp": [1], "domain": ["event"]}))
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize(
    "column, values",
    [
        ("count", pa.array(["12"])),           # text is not silently parsed as a number
        ("count", pa.array([True])),           # nor booleans as integers
        ("count", pa.array([1.5])),            # nor floats truncated
        ("count", pa.array([[1]])),            # nor lists unwrapped
        ("seen", pa.array([[1]])),             # nor numbers turned into text
        ("seen", pa.array(["abc"])),           # a string is not a list of strings
        ("key", pa.array(["1"])),              # keys too
        ("key", pa.array([2**63], pa.uint64())),  # out of range
    ],
)
def test_wrong_value_types_are_refused(tmp_path, column, values):
    data = {"key": pa.array([1], pa.int64()), "count": pa.array([1], pa.int64())}
    data[column] = values
    with pytest.raises(StateTypeError, match=column):
        _write(tmp_path / "sp", pa.table(data))
    assert_nothing_left(tmp_path)


def test_widening_casts_are_allowed(tmp_path):
    _write(tmp_path / "sp", pa.table({"key": pa.array([1], pa.int8()), "count": pa.array([7], pa.int32()),
                                      "seen": pa.array([["x"]], pa.large_list(pa.large_string()))}))
    assert Savepoint.open(tmp_path / "sp").get("op", 1) == {"count": 7, "seen": ["x"]}


def test_undeclared_columns_and_bad_timer_rows(tmp_path):
    with pytest.raises(InvalidArgumentError, match="not declared"):
        _write(tmp_path / "sp", pa.table({"key": [1], "count": [1], "typo": [1]}))
    with pytest.raises(InvalidArgumentError, match="domain"):
        with SavepointBuilder(tmp_path / "sp") as b:
            b.add_operator("op", key_type="bigint").write_timers(
                pa.table({"key": [1], "timestamp": [1], "domain": ["wallclock"]}))
    with pytest.raises(InvalidArgumentError, match="timestamp"):
        with SavepointBuilder(tmp_path / "sp") as b:
            b.add_operator("op", key_type="bigint").write_timers(
                pa.table({"key": [1], "timestamp": pa.array([None], pa.int64()), "domain": ["event"]}))
    with pytest.raises(InvalidArgumentError, match="key_group"):
        _write(tmp_path / "sp", pa.table({"key": [1], "key_group": pa.array([0], pa.int32()), "count": [1]}))
    assert_nothing_left(tmp_path)


def test_bad_operator_state_input(tmp_path):
    info = operator_list_info(ListStateDescriptor("offsets", "bigint"), "split")
    cases = [
        (InvalidArgumentError, lambda op: op.write_list_state(info, [[1, None]])),
        (InvalidArgumentError, lambda op: op.write_list_state(info, [[1], [2], [3]])),  # parallelism 2
        (StateTypeError, lambda op: op.write_list_state(info, [["x"]])),
        (StateTypeError, lambda op: op.write_list_state(info, [pa.array(["x"])])),
        (DuplicateKeyError, lambda op: op.write_broadcast_state(
            BroadcastStateDescriptor("b", "string", "double").info(), pa.table({"key": ["a", "a"], "value": [1.0, 2.0]}))),
        (NullKeyError, lambda op: op.write_broadcast_state(
            BroadcastStateDescriptor("b", "string", "double").info(), pa.table({"key": ["a", None], "value": [1.0, 2.0]}))),
        (InvalidArgumentError, lambda op: op.write_keyed(pa.table({"key": [1]}))),  # not a keyed operator
    ]
    for error, call in cases:
        with pytest.raises(error):
            with SavepointBuilder(tmp_path / "sp") as b:
                call(b.add_operator("src", parallelism=2))
    assert_nothing_left(tmp_path)


# --- check() ---------------------------------------------------------------------------------------------


def kinds(path: Path) -> list[str]:
    return sorted(p.kind for p in check(path).problems)


def test_check_ok_and_read_only(sp, unchanged):
    with unchanged(sp):
        report = check(sp)
    assert report.ok and report.files_checked == len(manifest(sp)["operators"][0]["files"]) + 2
    assert report.rows_checked > 400 and "OK" in str(report)


def test_check_reports_missing_extra_and_corrupt_files(sp, unchanged):
    e0, e1, e2 = keyed_entry(sp, 0), keyed_entry(sp, 1), keyed_entry(sp, 2)
    (sp / e0["path"]).unlink()                                     # missing
    (sp / "op-stray" / "x.parquet").parent.mkdir()
    (sp / "op-stray" / "x.parquet").write_bytes(b"stray")          # extra
    raw = (sp / e1["path"]).read_bytes()
    (sp / e1["path"]).write_bytes(raw[:-10])                       # corrupt: truncated
    raw = bytearray((sp / e2["path"]).read_bytes())
    raw[100] ^= 0xFF
    (sp / e2["path"]).write_bytes(bytes(raw))                      # checksum mismatch
    with unchanged(sp):
        report = check(sp)
    by_kind = {p.kind: p for p in report.problems}
    assert sorted(by_kind) == ["checksum_mismatch", "extra_file", "missing_file", "size_mismatch"]
    assert by_kind["missing_file"].path == e0["path"]
    assert by_kind["extra_file"].path == "op-stray/x.parquet"
    assert by_kind["size_mismatch"].path == e1["path"]
    assert by_kind["checksum_mismatch"].path == e2["path"]
    assert not report.ok and "4 problem(s)" in str(report)


def test_check_reports_unreadable_parquet(sp, unchanged):
    entry = keyed_entry(sp)
    full = sp / entry["path"]
    raw = bytearray(full.read_bytes())
    raw[-12:-8] = b"\xff\xff\xff\x7f"  # footer length
    full.write_bytes(bytes(raw))
    m = manifest(sp)
    next(f for f in m["operators"][0]["files"] if f["path"] == entry["path"])["checksum"] = checksum(bytes(raw))
    save_manifest(sp, m)
    with unchanged(sp):
        assert kinds(sp) == ["unreadable"]


def test_check_reports_rows_in_the_wrong_key_group(sp, unchanged):
    entry = keyed_entry(sp)
    table = pq.read_table(sp / entry["path"])
    kg = table.column("key_group").to_numpy().copy()
    kg[0] = (kg[0] + 1) % 128  # a wrong key_group value
    rewrite(sp, entry["path"], table.set_column(0, table.schema.field(0), pa.array(kg, pa.int32())))
    with unchanged(sp):
        report = check(sp)
    assert [p.kind for p in report.problems] == ["wrong_key_group"] * len(report.problems) and report.problems
    assert any("other than their key's" in p.message for p in report.problems)


def test_check_reports_rows_outside_the_file_range(sp, unchanged):
    e0, e1 = keyed_entry(sp, 0), keyed_entry(sp, 1)
    t0 = pq.read_table(sp / e0["path"])
    t1 = pq.read_table(sp / e1["path"])
    moved = pa.concat_tables([t0, t1.slice(0, 1)])  # a row of the next file's key group, correctly tagged
    rewrite(sp, e0["path"], moved)
    rewrite(sp, e1["path"], t1.slice(1))
    with unchanged(sp):
        report = check(sp)
    assert {p.kind for p in report.problems} == {"wrong_key_group"}
    assert any("outside the file's key-group range" in p.message for p in report.problems)


def test_check_reports_duplicate_keys(sp, unchanged):
    entry = keyed_entry(sp)
    table = pq.read_table(sp / entry["path"])
    rewrite(sp, entry["path"], pa.concat_tables([table.slice(0, 1), table]))
    with unchanged(sp):
        report = check(sp)
    assert [p.kind for p in report.problems] == ["duplicate_key"]
    assert "appears more than once" in report.problems[0].message


def test_check_reports_schema_vs_manifest(sp, unchanged):
    entry = keyed_entry(sp)
    table = pq.read_table(sp / entry["path"])
    rewrite(sp, entry["path"], table.set_column(3, "seen", table.column("count")))
    with unchanged(sp):
        assert kinds(sp) == ["schema_mismatch"]


def test_check_reports_a_broken_manifest(sp, unchanged):
    (sp / MANIFEST_NAME).write_text("{")
    with unchanged(sp):
        report = check(sp)
    assert [p.kind for p in report.problems] == ["manifest"]
    with unchanged(sp.parent):
        assert [p.kind for p in check(sp.parent / "absent").problems] == ["manifest"]


@pytest.mark.parametrize("key", ["1", 1.0, True, b"1", 2**64, {"key": 1}])
def test_lookups_reject_keys_of_the_wrong_type(sp, unchanged, key):
    with unchanged(sp), pytest.raises(StateTypeError):
        Savepoint.open(sp).get("counter", key)


def test_lookups_refuse_a_namespace_on_an_operator_without_one(sp, unchanged):
    with unchanged(sp), pytest.raises(InvalidArgumentError, match="namespace"):
        Savepoint.open(sp).get("counter", 1, namespace={"start": 0, "end": 1})
    with pytest.raises(NullKeyError):
        Savepoint.open(sp).get("counter", None)


def test_reads_of_every_table_leave_the_savepoint_untouched(sp, unchanged):
    with unchanged(sp):
        read_all(sp)
        s = Savepoint.open(sp)
        key = int(np.int64(-200) * 7919)
        assert s.get("counter", key) == {"count": key * 2, "seen": []}
        assert assign_to_key_group(key, 128, "bigint") in range(128)


def test_two_builders_racing_for_one_path(tmp_path, unchanged):
    first, second = SavepointBuilder(tmp_path / "sp"), SavepointBuilder(tmp_path / "sp")
    for b, n in ((first, 1), (second, 2)):
        b.add_operator("op", key_type="bigint", keyed_states=STATES).write_keyed(pa.table({"key": [n], "count": [n]}))
    first.commit()
    with unchanged(tmp_path / "sp"), pytest.raises(SavepointExistsError):
        second.commit()
    assert_nothing_left(tmp_path, {"sp"})
    assert Savepoint.open(tmp_path / "sp").get("op", 1) == {"count": 1, "seen": None}


def test_a_committed_builder_refuses_more_writes(tmp_path):
    with SavepointBuilder(tmp_path / "sp") as b:
        op = b.add_operator("op", parallelism=2, key_type="bigint", keyed_states=STATES)
        op.write_keyed(pa.table({"key": [1], "count": [1]}))
    for late in (lambda: op.write_keyed(pa.table({"key": [2], "count": [2]})),
                 lambda: op.write_list_state(operator_list_info(ListStateDescriptor("o", "bigint"), "split"), [[1]]),
                 lambda: b.add_operator("other"), b.commit):
        with pytest.raises(StatekitError, match="already committed"):
            late()


def test_bad_declarations_are_refused_when_declared(tmp_path):
    from statekit.state import StateInfo

    with SavepointBuilder(tmp_path / "sp") as b:
        with pytest.raises(StateTypeError):
            b.add_operator("op", key_type="bigint", keyed_states=[StateInfo("v", "value", "bigintt")])
        with pytest.raises(StateTypeError):
            b.add_operator("op2", key_type="long int")
        with pytest.raises(InvalidArgumentError, match="key_type"):
            b.add_operator("op3", keyed_states=STATES)
        with pytest.raises(InvalidArgumentError, match="share a name"):
            b.add_operator("op4", key_type="bigint", keyed_states=STATES + STATES[:1])
    assert Savepoint.open(tmp_path / "sp").operators == []


@pytest.mark.parametrize("ddl", ["struct<>", "struct<a:int,a:string>", "decimal(50,2)", "decimal(5,9)", "decimal(0)",
                                 "array<bigint", "map<string>", "bigint,", "varchar(3)", ""])
def test_invalid_type_declarations(tmp_path, ddl):
    with pytest.raises(StateTypeError, match="type"):
        ValueStateDescriptor("v", ddl)
    with pytest.raises(StateTypeError):
        with SavepointBuilder(tmp_path / "sp") as b:
            b.add_operator("op", key_type=ddl)
    assert_nothing_left(tmp_path)


def _operator_entry(path: Path, table: str) -> dict:
    return next(f for op in manifest(path)["operators"] for f in op["files"] if f["table"] == table)


def test_check_reports_bad_operator_and_broadcast_rows(sp, unchanged):
    lst, bc = _operator_entry(sp, "operator"), _operator_entry(sp, "broadcast")
    rewrite(sp, lst["path"], pa.table({"subtask": pa.array([0, 5], pa.int32()), "idx": pa.array([0, 0], pa.int64()),
                                       "value": pa.array([1, None], pa.int64())}))
    rewrite(sp, bc["path"], pa.table({"key": ["a", "a"], "value": [1.0, 2.0]}))
    with unchanged(sp):
        report = check(sp)
        with pytest.raises(CorruptSavepointError, match="subtask 5"):
            Savepoint.open(sp).operator_state_lists("source", "offsets")
    assert sorted(p.kind for p in report.problems) == ["duplicate_key", "invalid_row", "invalid_row"]


def test_descriptor_mistakes_are_state_type_errors():
    from statekit.state import MapStateDescriptor, ReducingStateDescriptor
    from statekit.types import PICKLED

    with pytest.raises(StateTypeError, match="reducing state 'r'"):
        ReducingStateDescriptor("r", None, "bigint")
    for make in (lambda: MapStateDescriptor("m", PICKLED, "bigint"),
                 lambda: BroadcastStateDescriptor("b", PICKLED, "bigint")):
        with pytest.raises(StateTypeError, match="PICKLED"):
            make()
