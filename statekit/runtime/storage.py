"""Checkpoint storage: one live job per directory (a lock), fresh checkpoint ids, deletion that never leaves half a checkpoint."""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import stat
from pathlib import Path

from statekit.errors import CheckpointStorageInUseError, StatekitError
from statekit.format.files import fsync_dir
from statekit.savepoint.staging import remove_abandoned_staging

log = logging.getLogger(__name__)

#: The lock file a running job holds (``fcntl.flock``) in its checkpoint storage for its whole life.
LOCK_NAME = ".statekit-job.lock"
MANIFEST_NAME = "_metadata.json"
_CHECKPOINT = re.compile(r"chk-([0-9]+)\Z")


class StorageLock:
    """An exclusive ``flock`` on ``<storage>/.statekit-job.lock``, held until `release`.

    The kernel drops the lock when its holder dies, so a killed job never blocks the next one. The
    file stays in place (unlinking it would let two processes lock two different inodes); it holds
    the holder's pid and job name, for the message of whoever is refused.
    """

    def __init__(self, storage: Path, fd: int) -> None:
        self.storage = storage
        self._fd: int | None = fd

    @classmethod
    def try_acquire(cls, storage: str | os.PathLike[str], job_name: str) -> "StorageLock | None":
        """The lock, or None when a live process holds it."""
        root = Path(storage)
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {job_name}\n".encode("utf-8", "replace"), 0)
        return cls(root, fd)

    @classmethod
    def acquire(cls, storage: str | os.PathLike[str], job_name: str) -> "StorageLock":
        """The lock; `CheckpointStorageInUseError` when another live job holds the storage."""
        lock = cls.try_acquire(storage, job_name)
        if lock is None:
            holder = _holder(Path(storage))
            raise CheckpointStorageInUseError(
                f"checkpoint storage {storage} is in use by a running job{holder}; two jobs on one storage would "
                "delete each other's checkpoints. Give this job its own directory with "
                "get_checkpoint_config().set_checkpoint_storage_dir(...), or wait for the other job to end."
            )
        return lock

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None

    def __enter__(self) -> "StorageLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(root: Path) -> str:
    try:
        pid, _, name = (root / LOCK_NAME).read_text(encoding="utf-8", errors="replace").strip().partition(" ")
    except OSError:
        return ""
    return f" ({name!r}, pid {pid})" if pid.isdigit() else ""


def checkpoint_dirs(storage: str | os.PathLike[str]) -> dict[int, Path]:
    """Every ``chk-<id>`` directory under `storage` by id, complete or not."""
    root = Path(storage)
    out: dict[int, Path] = {}
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return out
    for e in entries:
        m = _CHECKPOINT.match(e.name)
        if m and e.is_dir(follow_symlinks=False):
            out[int(m.group(1))] = Path(e.path)
    return out


def is_complete(path: Path) -> bool:
    """A valid manifest and every file it lists present as a regular file of the listed size.

    Cheap (one ``stat`` per file, no checksums): it tells a checkpoint apart from one whose
    deletion or copy was interrupted, not a damaged file from a good one.
    """
    from statekit.savepoint import Savepoint

    try:
        sp = Savepoint.open(path)
        for op in sp.operators:
            for f in op.files:
                st = os.stat(path / f.path, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or st.st_size != f.bytes:
                    return False
    except (StatekitError, OSError):
        return False
    return True


def discard_checkpoint(path: Path) -> None:
    """Delete a checkpoint so that no moment leaves a manifest over missing files.

    The manifest goes first (durably), which makes the directory not a checkpoint; a kill after
    that leaves a directory that readers ignore and the next job on the storage removes.
    """
    manifest = path / MANIFEST_NAME
    try:
        os.unlink(manifest)
    except FileNotFoundError:
        pass
    else:
        fsync_dir(path)
    shutil.rmtree(path, ignore_errors=True)


def clean_storage(storage: str | os.PathLike[str]) -> list[Path]:
    """Remove what dead writers left in `storage`: incomplete ``chk-<id>`` and checkpoint staging directories.

    Only call it while holding the storage's `StorageLock` (no live job writes there then).
    Complete checkpoints are kept, whoever wrote them.
    """
    root = Path(storage)
    removed: list[Path] = []
    for _cid, path in sorted(checkpoint_dirs(root).items()):
        if not is_complete(path):
            log.info("removing incomplete checkpoint %s", path)
            discard_checkpoint(path)
            removed.append(path)
    # Under the storage lock no live writer stages here: older statekit's lock-less staging goes too.
    removed += remove_abandoned_staging(root, include_unlocked=True)
    return removed


def latest_checkpoint(storage: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint (``chk-<id>`` with a manifest and all its files) under `storage`, or None.

    What to pass as ``restore_from`` after a process was killed. Incomplete checkpoints (a kill
    during a write or a deletion) are skipped, and removed when no live job holds the storage.
    """
    root = Path(storage)
    if not root.is_dir():
        return None
    try:
        lock = StorageLock.try_acquire(root, "latest_checkpoint")
    except OSError:  # read-only storage: nothing to clean, nothing can be cleaned
        lock = None
    if lock is not None:
        with lock:
            clean_storage(root)
    for _cid, path in sorted(checkpoint_dirs(root).items(), reverse=True):
        if is_complete(path):
            return path
    return None

