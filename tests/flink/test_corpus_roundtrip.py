"""Acceptance (b): every canonical corpus case read by statekit and written back as a Flink savepoint reads, through
Flink 2.3.0's own SavepointReader (HashMap and RocksDB backends) and SavepointLoader, exactly as the original does
(the generator's `Verify` against each case's expected.json, which the original savepoints pass). Some cases also
take the long way - Flink -> statekit's format (`convert_to_statekit`, serializers carried in the manifest) -> Flink -
and must verify the same."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink_out import write_flink

from .conftest import CORPUS

pytestmark = pytest.mark.flink

CANONICAL = sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and p.name != "string-rocksdb-native")
VIA_STATEKIT = ["long-rocksdb-canonical", "spa-write-hashmap", "string-hashmap-canonical-snappy",
                "tuple2-hashmap-canonical"]


def test_every_corpus_case_written_back_reads_identically_in_flink(flink, tmp_path):
    dirs = []
    for case in CANONICAL:
        d = tmp_path / case
        d.mkdir()
        shutil.copy(CORPUS / case / "expected.json", d / "expected.json")
        write_flink(CORPUS / case / "savepoint", d / "savepoint")
        dirs.append(str(d))
    for case in VIA_STATEKIT:
        d = tmp_path / f"{case}-via-statekit"
        d.mkdir()
        shutil.copy(CORPUS / case / "expected.json", d / "expected.json")
        uids = json.loads((CORPUS / case / "expected.json").read_text())["operators"]
        convert_to_statekit(CORPUS / case / "savepoint", tmp_path / f"{case}-statekit", uids=uids,
                            include_stateless=True)
        write_flink(tmp_path / f"{case}-statekit", d / "savepoint")
        dirs.append(str(d))
    proc = subprocess.run(flink.java_command("statekit.flinkreal.Verify", *dirs), capture_output=True, text=True,
                          timeout=1800)
    report = proc.stdout
    assert proc.returncode == 0 and "ALL OK" in report, report[-6000:] + proc.stderr[-3000:]
    for d in dirs:
        assert f"OK {d}" in report
    assert report.count("read back with hashmap backend: OK") == len(dirs)
    assert report.count("read back with rocksdb backend: OK") == len(dirs)
