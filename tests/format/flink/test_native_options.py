"""Native RocksDB state of Flink 1.x (RocksDB 6.x records the TaskManager's absolute `wal_dir`): read from a copy whose
OPTIONS point inside it, the input byte for byte untouched, and RocksDB's refusal to open named unsupported, not damage."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.flink import native
from statekit.savepoint import Savepoint

from .conftest import VERSIONS, expected, savepoint
from .test_native_checkpoints import _check, _digest

NATIVE_1X = [v for v in VERSIONS if v.startswith("1.")]
_WAL = re.compile(r"^\s*wal_dir=(.*)$", re.MULTILINE)


def _recorded_wal_dirs(path: Path) -> set[str]:
    """The `wal_dir`s the OPTIONS files of a native savepoint name (the machine that wrote it)."""
    return {m.group(1).strip() for p in path.iterdir() if p.is_file()
            for m in _WAL.finditer(p.read_text("utf-8", "replace"))}


def _created_top(path: Path) -> Path:
    """The outermost directory `path.mkdir(parents=True)` would create (what to remove afterwards)."""
    top = path
    while not top.parent.exists():
        top = top.parent
    return top


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """Where RocksDB's scratch copies go (tempfile's directory for the test)."""
    d = tmp_path / "scratch"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.mark.parametrize("version", NATIVE_1X)
def test_a_1_x_native_savepoint_reads_from_a_copy_whose_options_stay_inside(version, scratch):
    path = savepoint("string-rocksdb-native", version)
    recorded = _recorded_wal_dirs(path)
    assert recorded and all(w.startswith("/") for w in recorded)  # the fixture really has the 1.x trait
    before = _digest(path)
    # RocksDB must not touch the writer's directories even where they exist on the reading machine
    made = [Path(w) for w in sorted(recorded) if not Path(w).exists()]
    tops = {_created_top(w) for w in made}
    for w in made:
        w.mkdir(parents=True)
    try:
        sp = Savepoint.open(path)
        _check(sp, expected("string-rocksdb-native", version))
        copies = list(scratch.glob("statekit-flink-rocksdb-*"))
        assert copies
        for copy in copies:
            for options in copy.glob("OPTIONS-*"):
                assert {m.group(1).strip() for m in _WAL.finditer(options.read_text())} == {""}
        assert all(not any(w.iterdir()) for w in made)
        del sp
    finally:
        for top in tops:  # only what this test created
            shutil.rmtree(top, ignore_errors=True)
    assert _digest(path) == before


@pytest.mark.parametrize("version", NATIVE_1X[-1:])
def test_rocksdb_refusing_to_open_is_unsupported_not_damage(version, scratch, monkeypatch):
    """Without the OPTIONS fix RocksDB refuses the copy ("Invalid argument: wal_dir ..."): the files are healthy."""
    path = savepoint("string-rocksdb-native", version)
    assert not any(Path(w).exists() for w in _recorded_wal_dirs(path))
    before = _digest(path)
    monkeypatch.setattr(native, "_keep_inside", lambda options_file: None)  # the copy keeps the writer's wal_dir
    with pytest.raises(UnsupportedFormatError, match="RocksDB refuses to open.*wal_dir.*CANONICAL savepoint") as e:
        Savepoint.open(path).keyed_table("counter")
    assert not isinstance(e.value, CorruptSavepointError) and "damaged" not in str(e.value)
    assert str(scratch) not in str(e.value)  # the checkpoint's files are named, not the scratch copy
    assert not list(scratch.iterdir())  # the scratch copy is removed on failure
    assert _digest(path) == before
