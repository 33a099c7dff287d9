"""Every Flink version line 1.18-2.3 restores what statekit writes for it, each in its own real Flink build.

Per line with a corpus (`tests/fixtures/flink/<version>/`, made by `make_version_corpus.py` with that
version's jars): every canonical case written back (by default as the version it came from) and some
through statekit's format verify in that version's State Processor API; a savepoint repaired with
statekit (a value set, the uid renamed, max parallelism 128 -> 256) restores into that version's job
with every value as expected. Across lines: Flink 2.3 state written with ``flink_version="1.20"``
verifies in Flink 1.20, and the same savepoint written for 2.3 is refused by 1.20 (the check is real).
The LTS 1.20 and the 2.0 and 2.3 boundaries run in every suite; the other lines are marked `every_version` (`make test-versions`).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess

import pytest

from statekit.errors import CorruptSavepointError
from statekit.format.flink.metadata import read_metadata
from statekit.format.flink.versions import FlinkVersion
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink_out import write_flink
from statekit.savepoint.patch import RenameOperator, SetMaxParallelism, SetValue, repair

from .conftest import FIXTURES
from .test_repair_restore import _spec

pytestmark = pytest.mark.flink

VERSIONS = {".".join(p.name.split(".")[:2]): p.name for p in FIXTURES.iterdir()
            if re.fullmatch(r"\d+\.\d+\.\d+", p.name)}
FAST = {"1.20", "2.0", "2.3"}
LINES = [pytest.param(line, marks=() if line in FAST else pytest.mark.every_version)
         for line in sorted(VERSIONS, key=lambda v: tuple(map(int, v.split("."))))]
VIA_STATEKIT = ["long-rocksdb-canonical", "tuple2-hashmap-canonical"]


def _unverifiable() -> dict[tuple[str, str], str]:
    """The corpus maker's (line, case) -> Flink bug that stops that line's own Flink reading the case back."""
    spec = importlib.util.spec_from_file_location("make_version_corpus", FIXTURES / "make_version_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.UNVERIFIABLE)


#: Flink 1.18.0/1.18.1 wrote the snappy case's operator state with stale offsets (FLINK-34063): statekit refuses to
#: carry it by name (as tests/format/flink/test_corpus.py reads it), writes nothing, and Flink is not asked.
FLINK_BUGS = _unverifiable()


def _canonical(corpus) -> list[str]:
    return sorted(p.name for p in corpus.iterdir() if p.is_dir() and p.name != "string-rocksdb-native")


def _backend(case: str) -> str:
    return "rocksdb" if "rocksdb" in case else "hashmap"


def _verify(flink, line: str, dirs: list[str]) -> str:
    proc = subprocess.run(flink.java_command("statekit.flinkreal.Verify", *dirs, version=line),
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0 and "ALL OK" in proc.stdout, proc.stdout[-6000:] + proc.stderr[-3000:]
    for d in dirs:
        assert f"OK {d}" in proc.stdout
    return proc.stdout


def _case_dir(tmp_path, corpus, case: str, name: str):
    d = tmp_path / name
    d.mkdir()
    shutil.copy(corpus / case / "expected.json", d / "expected.json")
    return d


@pytest.mark.parametrize("line", LINES)
def test_every_corpus_case_written_back_verifies_in_its_own_flink(line, flink_line, tmp_path, compat):
    corpus = FIXTURES / VERSIONS[line]
    for backend in sorted({_backend(c) for c in _canonical(corpus)}):
        compat(line, "write", backend, "canonical savepoint")
    flink = flink_line(line)
    version = FlinkVersion.parse(line)
    dirs = []
    for case in _canonical(corpus):
        d = _case_dir(tmp_path, corpus, case, case)
        if (line, case) in FLINK_BUGS:
            bug = FLINK_BUGS[(line, case)].split(":")[0]
            with pytest.raises(CorruptSavepointError, match=bug):
                write_flink(corpus / case / "savepoint", d / "savepoint")
            assert not (d / "savepoint").exists() and [p.name for p in d.iterdir()] == ["expected.json"]
            continue
        write_flink(corpus / case / "savepoint", d / "savepoint")  # by default: as the version it came from
        assert read_metadata(d / "savepoint").version == version.metadata_version
        dirs.append(str(d))
    for case in VIA_STATEKIT:
        d = _case_dir(tmp_path, corpus, case, f"{case}-via-statekit")
        uids = json.loads((corpus / case / "expected.json").read_text())["operators"]
        convert_to_statekit(corpus / case / "savepoint", tmp_path / f"{case}-statekit", uids=uids,
                            include_stateless=True)
        write_flink(tmp_path / f"{case}-statekit", d / "savepoint")  # the line recorded by convert
        assert read_metadata(d / "savepoint").version == version.metadata_version
        dirs.append(str(d))
    report = _verify(flink, line, dirs)
    assert report.count("read back with rocksdb backend: OK") == len(dirs)


@pytest.mark.parametrize("line", LINES)
def test_a_repaired_savepoint_restores_in_its_own_flink(line, flink_line, tmp_path, compat):
    compat(line, "write", "hashmap", "canonical savepoint")
    flink = flink_line(line)
    case = FIXTURES / VERSIONS[line] / "long-hashmap-canonical"
    exp = json.loads((case / "expected.json").read_text())["operators"]
    uids = list(exp)
    convert_to_statekit(case / "savepoint", tmp_path / "converted", uids=uids, include_stateless=True)
    first = exp["counter"]["keys"][0]
    repair(tmp_path / "converted", tmp_path / "repaired", [
        SetValue("counter", first["key"], "count", 4242),
        RenameOperator("counter", "counter-v2"),
        SetMaxParallelism("counter", 256),
    ])
    out = write_flink(tmp_path / "repaired", tmp_path / "flink")  # a 1.20 savepoint goes back as 1.20
    md = read_metadata(out)
    assert md.version == FlinkVersion.parse(line).metadata_version
    assert OperatorIdentifier.for_uid("counter-v2").uid_hash in {op.operator_id for op in md.operators}

    (got,) = flink.restore_many([(out, _spec(job_max=None, counter_max=256, counter_uid="counter-v2",
                                             counter_key="bigint"))], version=line)
    assert not isinstance(got, str), got
    want = {e["key"]: {s: e[s] for s in ("count", "recent", "per_kind", "sum")} for e in exp["counter"]["keys"]}
    want[first["key"]]["count"] = 4242
    assert got.keyed["counter-v2"] == want
    assert got.timers["counter-v2"] == {e["key"]: [("event", t) for t in e["event_timers"]]
                                        for e in exp["counter"]["keys"]}
    types = exp["types"]["keys"]
    assert {k: v["v_int"] for k, v in got.keyed["types"].items()} == {e["key"]: e["v_int"] for e in types}
    assert sorted(sum(got.operator["buffer"]["buffered"].values(), [])) == sorted(f"e{i}" for i in range(50, 60))


def test_state_from_flink_2_3_written_for_1_20_verifies_in_flink_1_20(flink_line, tmp_path, compat):
    if "1.20" not in VERSIONS:
        pytest.skip("no Flink 1.20 corpus")
    corpus = FIXTURES / VERSIONS["2.3"]
    for backend in sorted({_backend(c) for c in _canonical(corpus)}):
        compat("1.20", "write", backend, "canonical savepoint")
    flink = flink_line("1.20")
    dirs = []
    for case in _canonical(corpus):
        d = _case_dir(tmp_path, corpus, case, case)
        write_flink(corpus / case / "savepoint", d / "savepoint", flink_version="1.20")
        assert read_metadata(d / "savepoint").version == 4
        dirs.append(str(d))
    _verify(flink, "1.20", dirs)
    # the same state as a 2.3 savepoint (metadata v6) is what Flink 1.20 cannot restore
    write_flink(corpus / "long-hashmap-canonical" / "savepoint", tmp_path / "as-2.3")
    (refused,) = flink.restore_many([(tmp_path / "as-2.3", _spec(job_max=None, counter_max=None, counter_uid="counter",
                                                                  counter_key="bigint"))], version="1.20")
    assert isinstance(refused, str) and "version" in refused.lower(), refused
