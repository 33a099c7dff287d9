"""Shared helpers for the savepoint tests: byte-level snapshots of a directory tree."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest


def tree_digest(root: Path) -> dict[str, str]:
    """Every file (sha256 of its bytes) and directory under `root`, by relative path; the whole tree."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = "dir"
        for f in filenames:
            full = os.path.join(dirpath, f)
            out[os.path.relpath(full, root)] = hashlib.sha256(Path(full).read_bytes()).hexdigest()
    return out


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
