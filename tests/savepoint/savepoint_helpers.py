"""Helpers shared by the savepoint tests and their child processes: tree digests, test savepoints."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "v1"


def tree_digest(root: Path) -> dict[str, str]:
    """Every file (sha256 of its bytes), directory and symlink under `root`, by relative path; the whole tree."""
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


def copy_golden(target: Path) -> Path:
    """A private copy of the golden savepoint (every state kind) at `target`."""
    shutil.copytree(GOLDEN, target)
    return target
