"""Proof that an operation left its input alone: a digest of a directory tree to compare before and after."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["tree_digest"]


def tree_digest(root: str | os.PathLike[str]) -> dict[str, str]:
    """Every file (sha256 of its bytes), directory and symlink under `root`, by relative path.

    Compare the digest of a savepoint before and after a repair, a read or a refused command: any
    added, removed, changed or replaced entry (a file turned into a link, an empty directory) shows.

    >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "a").write_text("x")
    >>> tree_digest(d) == {"a": hashlib.sha256(b"x").hexdigest()}
    True
    """
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            full = os.path.join(dirpath, d)
            out[os.path.relpath(full, root) + "/"] = f"link:{os.readlink(full)}" if os.path.islink(full) else "dir"
        for f in filenames:
            full = os.path.join(dirpath, f)
            if os.path.islink(full):
                out[os.path.relpath(full, root)] = f"link:{os.readlink(full)}"
            elif os.path.isfile(full):
                out[os.path.relpath(full, root)] = hashlib.sha256(Path(full).read_bytes()).hexdigest()
            else:
                out[os.path.relpath(full, root)] = f"special:{os.lstat(full).st_mode:o}"
    return out
