"""Temporary directories statekit creates for itself: named by process id, removed at exit, swept when stale.

A directory is ``$TMPDIR/<prefix><pid>-<random>``. It is removed when the process exits normally
(``atexit``); one left by a process that was killed (SIGKILL, SIGTERM: no exit handlers run) is
removed by the next statekit process that creates a directory with the same prefix, once no
process with that id is alive.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["owned_temp_dir", "release"]

_OWNED: set[Path] = set()


def owned_temp_dir(prefix: str) -> Path:
    """A new directory ``<tmp>/<prefix><pid>-<random>``, removed at exit unless `release`d first."""
    sweep(prefix)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    if not _OWNED:
        atexit.register(_remove_all)
    _OWNED.add(path)
    return path


def release(path: Path) -> None:
    """Remove `path` now (it is no longer needed)."""
    shutil.rmtree(path, ignore_errors=True)
    _OWNED.discard(path)


def sweep(prefix: str) -> None:
    """Remove directories of `prefix` whose process is gone."""
    tmp = Path(tempfile.gettempdir())
    try:
        candidates = list(tmp.glob(f"{prefix}*-*"))
    except OSError:
        return
    for stale in candidates:
        pid = stale.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_all() -> None:
    for path in list(_OWNED):
        shutil.rmtree(path, ignore_errors=True)
    _OWNED.clear()
