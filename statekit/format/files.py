"""Data files of a savepoint: checksummed Parquet writes and verified reads."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from statekit.errors import (
    ChecksumMismatchError,
    CorruptSavepointError,
    SavepointWriteError,
    StatekitError,
    StorageFullError,
)
from statekit.format.manifest import FileEntry, safe_relative_path

CHECKSUM_ALGORITHM = "crc32"
#: Row groups small enough that a single-key lookup decodes little more than its key group.
ROW_GROUP_ROWS = 128 * 1024


def checksum(data: bytes | memoryview | pa.Buffer) -> str:
    """The manifest's checksum notation for `data` (zlib's CRC-32 releases the GIL on large buffers)."""
    return f"{CHECKSUM_ALGORITHM}:{zlib.crc32(memoryview(data)) & 0xFFFFFFFF:08x}"


def write_parquet(table: pa.Table, full_path: Path, *, root: Path | None = None) -> tuple[int, str]:
    """Write `table` to `full_path` as Parquet; return (bytes, checksum) of exactly what was written.

    The file is encoded in memory first so the checksum covers the bytes on disk without reading
    them back. It is fsynced, so that once the manifest naming it is durable, so is the file.
    With `root` (a staging directory), directories are made below it only (`make_dirs_below`).
    """
    sink = pa.BufferOutputStream()
    # Dictionary encoding pays off for text; on numbers it only costs time (even on key_group, whose
    # sorted runs snappy compresses almost as well: ~17% less encoding CPU for ~0.7% more bytes).
    dictionary = [f.name for f in table.schema if _is_text(f.type)]
    pq.write_table(table, sink, row_group_size=ROW_GROUP_ROWS, compression="snappy", use_dictionary=dictionary)
    buf = sink.getvalue()
    if root is None:
        full_path.parent.mkdir(parents=True, exist_ok=True)
    else:
        make_dirs_below(root, full_path.parent)
    with open(full_path, "xb") as fh:  # always a new file: never through a name that exists (a link)
        fh.write(memoryview(buf))
        fh.flush()
        os.fsync(fh.fileno())
    return buf.size, checksum(buf)


def make_dirs_below(root: Path, directory: Path) -> None:
    """Make `directory` and its parents below `root`, never `root` itself.

    A task of a failed Spark stage may still be writing after the driver removed the staging
    directory: it gets `FileNotFoundError` instead of bringing the staging directory back.
    """
    d = root
    for part in directory.relative_to(root).parts:
        d = d / part
        try:
            d.mkdir()  # no parents=True: a removed root stays removed
        except FileExistsError:
            pass


def remove_tree(path: Path, *, wait_s: float = 30.0) -> None:
    """Remove a staging tree even while late writers still add files to it.

    Tasks of a failed Spark stage can go on writing for a moment after the driver saw the failure;
    they cannot re-create removed directories (`make_dirs_below`, files opened in existing
    directories only), so removing again until nothing is left ends with nothing left.
    """
    deadline = time.monotonic() + wait_s
    while True:
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path) or time.monotonic() > deadline:
            return
        time.sleep(0.05)


#: Why a hard link may fail where a copy works: another file system, no hard links there, link limit.
_LINK_FALLBACK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES})
_COPY_CHUNK = 8 * 1024 * 1024


def place_file(src: Path, dst: Path, *, expected_size: int | None = None) -> None:
    """Give the staging name `dst` the bytes of the regular file `src`, creating `dst` new.

    A hard link when the file system allows it (a savepoint file is never written again, so sharing
    its inode is safe), else a copy into a file created with ``O_EXCL``. Nothing is ever written
    through an existing name: if `dst` exists, that is an error, never a fallback. `src` must be a
    regular file (of `expected_size` bytes, if given); a FIFO or device is refused, not read.
    """
    st = _regular_stat(src, expected_size)
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in _LINK_FALLBACK:
            raise
    else:
        if os.stat(dst, follow_symlinks=False).st_ino != st.st_ino:  # the source was swapped under us
            raise CorruptSavepointError(f"{src} changed while it was being linked; retry the write.")
        return
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd_in).st_mode):
            raise CorruptSavepointError(f"{src} is not a regular file; only regular files are data files.")
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            while chunk := os.read(fd_in, _COPY_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd_out, view):]
            os.fsync(fd_out)
        except BaseException:
            os.close(fd_out)
            os.unlink(dst)  # ours: created by this call with O_EXCL
            raise
        os.close(fd_out)
    finally:
        os.close(fd_in)


def _regular_stat(path: Path, expected_size: int | None) -> os.stat_result:
    try:
        st = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        raise CorruptSavepointError(f"{path} is missing; the savepoint is incomplete.") from None
    if not stat.S_ISREG(st.st_mode):
        raise CorruptSavepointError(
            f"{path} is not a regular file (a directory, FIFO, device or link); only regular files are data "
            "files. The savepoint is damaged; restore it or use another one."
        )
    if expected_size is not None and st.st_size != expected_size:
        raise CorruptSavepointError(
            f"{path} has {st.st_size} bytes but the manifest recorded {expected_size}; restore it or use another "
            "savepoint."
        )
    return st


#: errno values that mean the storage is full (disk, quota, file size limit).
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@contextmanager
def storage_errors(target: Path) -> Iterator[None]:
    """Turn a file-system failure while writing `target` into a typed `SavepointWriteError`
    (`StorageFullError` when the disk or quota is full); statekit's own errors pass unchanged."""
    try:
        yield
    except StatekitError:
        raise
    except OSError as exc:
        if exc.errno in _FULL:
            raise StorageFullError(
                f"no space left while writing {target} ({exc.strerror}: {exc.filename or target}); nothing was "
                "published and the partial output was removed. Free space (or raise the quota) and retry."
            ) from None
        raise SavepointWriteError(
            f"writing {target} failed: {exc.strerror or exc} ({exc.filename or target}); nothing was published. "
            "Check the permissions and the file system of the target, then retry."
        ) from None


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)


#: What `verify_file` found wrong, as `check` reports it.
FileProblem = Literal["missing_file", "size_mismatch", "checksum_mismatch"]


def _missing(root: Path, entry: FileEntry) -> str:
    return (
        f"{root}: file {entry.path} listed in the manifest is missing. The savepoint is incomplete; "
        "restore the file or use another savepoint."
    )


def _not_a_file(root: Path, entry: FileEntry) -> str:
    return (
        f"{root}: {entry.path} should be a regular file but is a directory, FIFO, device or socket, or lies "
        "under a file; only regular files are data files. Restore the file or use another savepoint."
    )


def _size_mismatch(root: Path, entry: FileEntry, size: int) -> str:
    return (
        f"{root}: file {entry.path} has {size} bytes but the manifest recorded {entry.bytes} "
        "(truncated or overwritten). Restore the file or use another savepoint."
    )


def verify_file(root: Path, entry: FileEntry) -> tuple[pa.Buffer | None, FileProblem | None, str]:
    """Read a listed file whole and compare it with the manifest: ``(data, None, "")`` when it matches,
    else ``(None, problem, message)``."""
    full = safe_relative_path(root, entry.path)
    try:
        st = os.stat(full)
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever, a device never end
            return None, "missing_file", _not_a_file(root, entry)
        if st.st_size != entry.bytes:
            return None, "size_mismatch", _size_mismatch(root, entry, st.st_size)
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # swapped for a FIFO since: no hang
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None, "missing_file", _not_a_file(root, entry)
            # Never more than the manifest's size (and one byte to see it grew), read into Arrow's own
            # memory: a buffer over Python bytes could abort the interpreter's exit (statekit.format.owned).
            buf = pa.allocate_buffer(entry.bytes + 1)
            data = buf.slice(0, fh.readinto(memoryview(buf)))
    except (FileNotFoundError, NotADirectoryError):
        return None, "missing_file", _missing(root, entry)
    except OSError as exc:  # permissions, I/O errors: the file cannot serve as data
        return None, "missing_file", f"{root}: file {entry.path} cannot be read ({exc.strerror or exc})."
    if len(data) != entry.bytes:
        return None, "size_mismatch", _size_mismatch(root, entry, len(data))
    actual = checksum(data)
    if actual != entry.checksum:
        return None, "checksum_mismatch", (
            f"{root}: file {entry.path} has checksum {actual} but the manifest recorded {entry.checksum}; "
            "its content was altered. Restore the file or use another savepoint."
        )
    return data, None, ""


def check_present(root: Path, entry: FileEntry) -> Path:
    """The listed file's full path after checking (by ``stat``, without reading it) that it exists with
    the manifest's size; the checksum is left to whoever reads it.

    Raises
    ------
    CorruptSavepointError
        The file is missing, not a regular file, or of another size.
    """
    full = safe_relative_path(root, entry.path)
    try:
        st = os.stat(full)
    except (FileNotFoundError, NotADirectoryError):
        raise CorruptSavepointError(_missing(root, entry)) from None
    except OSError as exc:
        raise CorruptSavepointError(f"{root}: file {entry.path} cannot be read ({exc.strerror or exc}).") from None
    if not stat.S_ISREG(st.st_mode):
        raise CorruptSavepointError(_not_a_file(root, entry))
    if st.st_size != entry.bytes:
        raise CorruptSavepointError(_size_mismatch(root, entry, st.st_size))
    return full


def read_verified_bytes(root: Path, entry: FileEntry) -> pa.Buffer:
    """Read a listed file whole, checking it exists, its size and its checksum against the manifest."""
    data, problem, message = verify_file(root, entry)
    if problem == "checksum_mismatch":
        raise ChecksumMismatchError(message)
    if problem is not None:
        raise CorruptSavepointError(message)
    return data


def read_parquet_verified(root: Path, entry: FileEntry, *, filters=None, columns=None) -> pa.Table:
    """A verified file parsed as an Arrow table (optionally filtered by row-group statistics)."""
    buf = read_verified_bytes(root, entry)
    try:
        return pq.read_table(pa.BufferReader(buf), filters=filters, columns=columns)
    except (pa.ArrowException, OSError) as exc:  # any decoding failure of a file that passed its checksum
        raise CorruptSavepointError(
            f"{root}: file {entry.path} is not readable Parquet ({exc}). Restore it or use another savepoint."
        ) from None


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a rename, a new or removed file) durable; a directory that cannot be opened is skipped."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
