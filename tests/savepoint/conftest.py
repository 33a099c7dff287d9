"""Fixtures of the savepoint tests: byte-level snapshots of a directory tree, size-limited disks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statekit.testing import tree_digest

sys.path.insert(0, str(Path(__file__).parent))  # savepoint_helpers.py (also imported by child processes)


@pytest.fixture
def unchanged():
    """``with unchanged(path): ...`` asserts the tree under `path` is byte-identical afterwards."""
    from contextlib import contextmanager

    @contextmanager
    def guard(path: Path):
        before = tree_digest(Path(path))
        yield
        assert tree_digest(Path(path)) == before, f"{path} was modified"

    return guard


@pytest.fixture
def scratch(tmp_path):
    """A directory on a fresh tmpfs where root may mount one (fsync costs nothing there, so tests that kill
    hundreds of writes stay fast), else `tmp_path`."""
    import subprocess

    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", str(mnt)], capture_output=True)
    yield mnt
    if r.returncode == 0:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
