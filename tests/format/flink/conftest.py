"""The Flink corpora (real savepoints written by Flink 1.18-2.3, each with its expected content) as test fixtures."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "flink"
CORPUS = FIXTURES / "2.3.0"
CANONICAL = sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and p.name != "string-rocksdb-native")
ALL_CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
#: every Flink version with a corpus (`make_version_corpus.py`), oldest first: "1.20.5", ..., "2.3.0"
VERSIONS = sorted((p.name for p in FIXTURES.iterdir() if re.fullmatch(r"\d+\.\d+\.\d+", p.name)),
                  key=lambda v: tuple(map(int, v.split("."))))
#: (version, case) for every case of every version's corpus
VERSION_CASES = [(v, p.name) for v in VERSIONS for p in sorted((FIXTURES / v).iterdir()) if p.is_dir()]


def cell(case: str) -> tuple[str, str]:
    """A corpus case's (state backend, format) in the README's compatibility table (`compat` fixture)."""
    return ("rocksdb" if "rocksdb" in case else "hashmap",
            "native savepoint" if "native" in case else "canonical savepoint")


def expected(case: str, version: str = "2.3.0") -> dict:
    return json.loads((FIXTURES / version / case / "expected.json").read_text())


def savepoint(case: str, version: str = "2.3.0") -> Path:
    return FIXTURES / version / case / "savepoint"


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
