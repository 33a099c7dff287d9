"""Staging directories of savepoint writes: a lock their writer holds, and removing those whose writer died.

A write stages its files in ``.<name>.inprogress-<hex>`` next to its target and renames it into
place at the end. Beside it, ``.<name>.inprogress-<hex>.lock`` is held with ``fcntl.flock`` for
the writer's life; the kernel drops the lock when the writer dies, so a staging directory whose
lock can be taken belongs to nobody (a killed write) and may go. A staging directory without a
lock file was left by an older statekit: only `statekit clean --apply` removes those.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from pathlib import Path

__all__ = ["StagingLock", "abandoned_staging", "is_staging_dir", "remove_abandoned_staging"]

_STAGING = re.compile(r"\..+\.inprogress-[0-9a-f]+\Z", re.DOTALL)


def is_staging_dir(path: Path) -> bool:
    """Whether `path` is named as a savepoint writer's staging directory."""
    return bool(_STAGING.match(path.name))


def _lock_path(staging: Path) -> Path:
    return staging.with_name(staging.name + ".lock")


class StagingLock:
    """The writer's hold on its staging directory (taken before the directory is made)."""

    def __init__(self, staging: Path) -> None:
        self.path = _lock_path(staging)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # new file, nobody else has it: never blocks

    def release(self) -> None:
        """Remove the lock file, then let go (the staging directory is gone or renamed by now)."""
        if self._fd is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self._fd)
            self._fd = None


def _try_take(lock: Path) -> int | None:
    """An fd holding `lock` when no live process does, else None."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def abandoned_staging(parent: Path, *, include_unlocked: bool = False) -> list[Path]:
    """Staging directories in `parent` whose writer is dead (and, with `include_unlocked`, those of
    older statekit versions, which have no lock file to tell)."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    out = []
    for e in entries:
        if not (_STAGING.match(e.name) and e.is_dir(follow_symlinks=False)):
            continue
        path = Path(e.path)
        lock = _lock_path(path)
        if not lock.exists():
            if include_unlocked:
                out.append(path)
            continue
        fd = _try_take(lock)
        if fd is not None:
            os.close(fd)
            out.append(path)
    return out


def remove_abandoned_staging(parent: Path, *, include_unlocked: bool = False) -> list[Path]:
    """Remove what `abandoned_staging` finds, each while holding its lock (so never a live writer's)."""
    removed = []
    for path in abandoned_staging(parent, include_unlocked=include_unlocked):
        lock = _lock_path(path)
        fd = _try_take(lock) if lock.exists() else None
        if fd is None and lock.exists():
            continue  # taken again since: not ours to remove
        try:
            shutil.rmtree(path, ignore_errors=True)
            if fd is not None:
                os.unlink(lock)
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
        removed.append(path)
    for e in list(os.scandir(parent)) if parent.is_dir() else []:  # a lock whose writer died before mkdir
        if e.name.endswith(".lock") and _STAGING.match(e.name[:-5]) and not os.path.lexists(e.path[:-5]):
            fd = _try_take(Path(e.path))
            if fd is not None:
                try:
                    os.unlink(e.path)
                finally:
                    os.close(fd)
    return removed
