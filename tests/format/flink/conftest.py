"""The Flink 2.3.0 corpus (real savepoints written by Flink, each with its expected content) as test fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "2.3.0"
CANONICAL = sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and p.name != "string-rocksdb-native")
ALL_CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


def expected(case: str) -> dict:
    return json.loads((CORPUS / case / "expected.json").read_text())


def savepoint(case: str) -> Path:
    return CORPUS / case / "savepoint"


@pytest.fixture
def copy_case(tmp_path):
    """``copy_case(name)``: a writable copy of a corpus savepoint (for damage tests)."""

    def make(case: str) -> Path:
        dst = tmp_path / case
        shutil.copytree(savepoint(case), dst)
        for p in dst.iterdir():
            p.chmod(0o644)
        return dst

    return make
