"""Native RocksDB state (the corpus's native savepoint, incremental checkpoints) and HashMap checkpoints read exactly, inputs untouched."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.flink.metadata import IncrementalKeyedHandle, KeyGroupsHandle, read_metadata
from statekit.format.flink.versions import FlinkVersion
from statekit.savepoint import Savepoint

from .conftest import expected, savepoint
from .test_corpus import _check_keyed, _check_operator

CHECKPOINTS = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "checkpoints"
COUNTER = "0da08f51eaa85fc298e176a139b3649a"


def _retained(case: str) -> list[tuple[Path, dict]]:
    out = []
    for e in sorted((CHECKPOINTS / case / "expected").glob("chk-*.json")):
        exp = json.loads(e.read_text())
        out.append((CHECKPOINTS / case / exp["checkpoint_dir"], exp))
    return out


def _checkpoint_cell(case: str) -> tuple[str, str]:
    """A checkpoint case's (backend, format) in the README's compatibility table."""
    backend, kind = case.split("-")[:2]
    return backend, f"{kind} checkpoint"


def _check(sp, exp: dict) -> None:
    for uid, op in exp["operators"].items():
        meta = sp.operator(uid)
        assert meta.uid_hash == op["operator_id"]
        if op["kind"] == "keyed":
            _check_keyed(sp, uid, op)
        elif op["kind"] == "operator":
            _check_operator(sp, uid, op)


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_native_rocksdb_savepoint_reads_exactly():
    before = _digest(savepoint("string-rocksdb-native"))
    sp = Savepoint.open(savepoint("string-rocksdb-native"))
    _check(sp, expected("string-rocksdb-native"))
    erin = next(e for e in expected("string-rocksdb-native")["operators"]["counter"]["keys"] if e["key"] == "erin")
    assert sp.get("counter", "erin")["count"] == erin["count"] and sp.get("counter", "nobody") is None
    assert _digest(savepoint("string-rocksdb-native")) == before


@pytest.mark.parametrize("case", ["rocksdb-incremental", "hashmap-full", "rocksdb-claim", "hashmap-snappy"])
def test_every_retained_checkpoint_reads_exactly(case, compat):
    if case in ("rocksdb-incremental", "hashmap-full"):
        compat("2.3", "read", *_checkpoint_cell(case))
    job = CHECKPOINTS / case
    before = _digest(job)
    cases = _retained(case)
    assert len(cases) >= (1 if case == "hashmap-snappy" else 3)
    for chk, exp in cases:
        sp = Savepoint.open(chk)
        assert sp.kind == "checkpoint"
        _check(sp, exp)
        for e in exp["operators"]["counter"]["keys"]:  # one key: one key group's entries
            got = sp.get("counter", e["key"])
            assert got["count"] == e["count"] and got["recent"] == e["recent"] and dict(got["per_kind"]) == e["per_kind"]
    assert _digest(job) == before  # RocksDB opened copies only


#: (version, case) of the retained checkpoints each Flink line made (`make_checkpoint_corpus.py`: checkpoints/<version>/)
VERSION_CHECKPOINTS = [(v.name, c.name) for v in sorted(CHECKPOINTS.iterdir()) if re.fullmatch(r"\d+\.\d+\.\d+", v.name)
                       for c in sorted(v.iterdir()) if c.is_dir()]


@pytest.mark.parametrize("version,case", VERSION_CHECKPOINTS)
def test_every_flink_versions_retained_checkpoints_read_exactly(version, case, compat):
    """HashMap full and RocksDB incremental checkpoints of each line (RocksDB 6.x in 1.x, 8.x in 2.x), inputs untouched."""
    compat(version, "read", *_checkpoint_cell(case))
    job = CHECKPOINTS / version / case
    before = _digest(job)
    cases = _retained(f"{version}/{case}")
    assert len(cases) >= 2
    uploaded_by: dict[str, str] = {}  # SST -> the first checkpoint naming it (the one that uploaded it)
    last: set[str] = set()
    for chk, exp in sorted(cases, key=lambda c: int(c[0].name[4:])):
        assert exp["flink_version"] == version and exp["state_backend"] == case.split("-")[0]
        md = read_metadata(chk)
        assert md.version == FlinkVersion.parse(version).metadata_version
        sp = Savepoint.open(chk)
        assert sp.kind == "checkpoint"
        _check(sp, exp)
        for e in exp["operators"]["counter"]["keys"]:
            got = sp.get("counter", e["key"])
            assert got["count"] == e["count"] and got["recent"] == e["recent"] and dict(got["per_kind"]) == e["per_kind"]
        last = set()
        for st in md.operator(COUNTER).subtasks:
            if isinstance(st.managed_keyed, IncrementalKeyedHandle):
                for local, sh in st.managed_keyed.shared:
                    if local.endswith(".sst"):
                        last.add(uploaded_by.setdefault(sh.path.rsplit("/", 1)[1], chk.name))
    if case.startswith("rocksdb"):  # the last checkpoint is built from SSTs that >= 2 checkpoints uploaded
        assert len(last) >= 2, uploaded_by
    assert _digest(job) == before  # RocksDB opened copies only


def test_incremental_fixture_really_shares_files_across_increments():
    """chk-4 is built from SSTs that three different checkpoints uploaded to shared/ (>= 2 increments)."""
    job = CHECKPOINTS / "rocksdb-incremental" / "job"
    uploaded_by: dict[str, int] = {}
    for chk in sorted(job.glob("chk-*"), key=lambda p: int(p.name[4:])):
        for op in read_metadata(chk).operators:
            for st in op.subtasks:
                h = st.managed_keyed
                if isinstance(h, IncrementalKeyedHandle):
                    for local, sh in h.shared:
                        if local.endswith(".sst"):
                            assert sh.kind == "file" and "/shared/" in sh.path  # absolute, relocated by shared/<name>
                            uploaded_by.setdefault(sh.path.rsplit("/", 1)[1], int(chk.name[4:]))
    last = read_metadata(job / "chk-4").operator(COUNTER)
    sources = {uploaded_by[sh.path.rsplit("/", 1)[1]] for st in last.subtasks
               for local, sh in st.managed_keyed.shared if local.endswith(".sst")}
    assert len(sources) >= 3, sources


def test_heap_checkpoint_is_told_apart_from_canonical():
    from statekit.format.flink.reader import FlinkStateReader

    r = FlinkStateReader(CHECKPOINTS / "hashmap-full" / "job" / "chk-3")
    op = r.metadata.operator(COUNTER)
    hs = r.keyed_handles(op)
    assert all(isinstance(h, KeyGroupsHandle) and h.type == 12 for h in hs)
    assert {r.handle_layout(h) for h in hs} == {"heap"}
    canon = FlinkStateReader(savepoint("string-rocksdb-canonical"))
    op = canon.metadata.operator(COUNTER)
    assert {canon.handle_layout(h) for h in canon.keyed_handles(op)} == {"canonical"}


@pytest.fixture
def job_copy(tmp_path, monkeypatch):
    """A writable copy of the incremental job directory; RocksDB's scratch copies go below tmp_path too."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    dst = tmp_path / "job"
    shutil.copytree(CHECKPOINTS / "rocksdb-incremental" / "job", dst)
    return dst, scratch


def _shared_ssts(chk: Path) -> list[Path]:
    h = read_metadata(chk).operator(COUNTER).subtasks[0].managed_keyed
    return [chk.parent / "shared" / sh.path.rsplit("/", 1)[1] for local, sh in h.shared if local.endswith(".sst")]


def test_damaged_sst_is_a_typed_error_and_nothing_changes(job_copy):
    job, scratch = job_copy
    for p in _shared_ssts(job / "chk-4"):
        b = bytearray(p.read_bytes())
        b[20] ^= 0xFF  # inside the first data block: its checksum no longer matches
        p.write_bytes(bytes(b))
    before = _digest(job)
    with pytest.raises(CorruptSavepointError, match="damaged"):
        Savepoint.open(job / "chk-4").keyed_table("counter")
    assert _digest(job) == before
    assert not list(scratch.iterdir())  # the scratch copy is removed on failure too


def test_missing_or_short_shared_file_is_a_typed_error(job_copy):
    job, _ = job_copy
    victim = _shared_ssts(job / "chk-4")[0]
    data = victim.read_bytes()
    victim.write_bytes(data[:-10])
    with pytest.raises(CorruptSavepointError, match="truncated|bytes"):
        Savepoint.open(job / "chk-4").keyed_table("counter")
    victim.unlink()
    with pytest.raises(CorruptSavepointError, match="missing"):
        Savepoint.open(job / "chk-4").keyed_table("counter")


def test_unknown_merge_operator_is_refused_before_rocksdb_opens(job_copy):
    job, _ = job_copy
    h = read_metadata(job / "chk-4").operator(COUNTER).subtasks[0].managed_keyed
    options = [sh for local, sh in (*h.shared, *h.private) if local.startswith("OPTIONS-")]
    for sh in options:
        p = job / "shared" / sh.path.rsplit("/", 1)[1] if sh.kind == "file" else job / "chk-4" / sh.path
        text = p.read_text()
        p.write_text(text.replace("StringAppendTESTOperator", "StringAppendXXXXOperator"))  # same size
    with pytest.raises(UnsupportedFormatError, match="merge operator.*CANONICAL savepoint"):
        Savepoint.open(job / "chk-4").keyed_table("counter")


def test_scratch_copies_are_made_once_and_removed_with_the_reader(tmp_path, monkeypatch):
    import gc

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sp = Savepoint.open(CHECKPOINTS / "rocksdb-incremental" / "job" / "chk-4")
    sp.keyed_table("counter")
    assert sp.get("counter", "alice")["count"] > 0 and sp.get("counter", "bob")["count"] > 0
    assert len(list(tmp_path.glob("statekit-flink-rocksdb-*"))) == 2  # one per subtask, copied and opened once
    del sp
    gc.collect()
    assert not list(tmp_path.glob("statekit-flink-rocksdb-*"))


@pytest.mark.parametrize("source", ["native-savepoint", "rocksdb-incremental/chk-4", "hashmap-full/chk-3"])
def test_converted_native_state_and_checkpoints_continue_the_counts(source, tmp_path):
    from statekit.runtime import StreamExecutionEnvironment
    from statekit.savepoint.convert import convert_to_statekit

    from .test_convert import Counter

    if source == "native-savepoint":
        path, exp = savepoint("string-rocksdb-native"), expected("string-rocksdb-native")
    else:
        case, chk = source.split("/")
        path = CHECKPOINTS / case / "job" / chk
        exp = json.loads((CHECKPOINTS / case / "expected" / f"{chk}.json").read_text())
    before = _digest(path.parent)
    keys = {e["key"]: e for e in exp["operators"]["counter"]["keys"]}
    out = convert_to_statekit(path, tmp_path / "sp", uids=["counter"])
    assert Savepoint.open(out).timers("counter").num_rows == len(keys)
    env = StreamExecutionEnvironment(parallelism=2)
    got = (env.from_collection([(k, "view", 7) for k in sorted(keys)]).key_by(lambda e: e[0]).process(Counter())
           .uid("counter").execute_and_collect(restore_from=out, allow_non_restored_state=True))
    assert sorted(got) == sorted((k, e["count"] + 1, e["sum"] + 7) for k, e in keys.items())
    assert _digest(path.parent) == before


def test_checkpoints_of_a_job_resumed_in_claim_mode_read_the_previous_jobs_files(tmp_path):
    """A job restored from a retained checkpoint in CLAIM mode names SSTs in the old job's shared/ (a sibling)."""
    base = CHECKPOINTS / "rocksdb-claim" / "base"
    chk, exp = _retained("rocksdb-claim")[-1]
    jobs = {sh.path.rsplit("/", 3)[-3] for op in read_metadata(chk).operators for st in op.subtasks
            if isinstance(st.managed_keyed, IncrementalKeyedHandle) for _, sh in st.managed_keyed.shared}
    assert chk.parent.name in jobs and len(jobs) == 2  # its own files and the previous job's
    _check(Savepoint.open(chk), exp)
    # without the previous job's directory the checkpoint is incomplete: a typed error naming the file
    copy = tmp_path / "base"
    shutil.copytree(base / chk.parent.name, copy / chk.parent.name)
    with pytest.raises(CorruptSavepointError, match="missing"):
        Savepoint.open(copy / chk.parent.name / chk.name).keyed_table("counter")


def test_a_native_database_holding_other_key_groups_yields_only_its_handles_range():
    """After a rescale a subtask's RocksDB may still hold key groups it no longer owns; only [start, end] are read."""
    import dataclasses

    from statekit.format.flink.files import StateFiles
    from statekit.format.flink.native import read_native, read_native_proxy

    chk = CHECKPOINTS / "rocksdb-incremental" / "job" / "chk-4"
    h = read_metadata(chk).operator(COUNTER).subtasks[1].managed_keyed  # key groups 64..127
    files = StateFiles(chk)
    proxy = read_native_proxy(files, h)
    full = read_native(files, h, proxy, 1)
    kgs = sorted({int(full.buf[p]) for p in full.kp})
    assert kgs[0] >= 64 and len(kgs) >= 3
    narrow = dataclasses.replace(h, start=kgs[1], count=kgs[-1] - kgs[1])  # drops the first and the last
    part = read_native(files, narrow, proxy, 1)
    got = sorted({int(part.buf[p]) for p in part.kp})
    assert got == [k for k in kgs if kgs[1] <= k < kgs[-1]]
    one = read_native(files, h, proxy, 1, key_groups=(kgs[1], kgs[1]))
    assert {int(one.buf[p]) for p in one.kp} == {kgs[1]}


def test_check_reports_native_state_and_checkpoints_ok():
    from statekit.savepoint import check

    for path in [savepoint("string-rocksdb-native")] + [chk for case in ("rocksdb-incremental", "hashmap-full",
                                                                        "rocksdb-claim", "hashmap-snappy")
                                                        for chk, _ in _retained(case)]:
        report = check(path)
        assert report.ok, str(report)


def test_sql_over_a_retained_incremental_checkpoint():
    import statekit

    chk, exp = _retained("rocksdb-incremental")[-1]
    got = statekit.sql(chk, "SELECT count(*) AS n, sum(count) AS events FROM counter.keyed").to_pylist()[0]
    assert (got["n"], int(got["events"])) == (len(exp["operators"]["counter"]["keys"]), exp["events_covered"])
