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
from typing import TYPE_CHECKING, Iterator, Literal

import pyarrow as pa

from statekit.errors import (
    ChecksumMismatchError,
    CorruptSavepointError,
    SavepointWriteError,
    StatekitError,
    StorageFullError,
    StorageNotFoundError,
)
from statekit.format.manifest import FileEntry, safe_relative_path
from statekit.format.storage import StoragePath

if TYPE_CHECKING:
    import pyarrow.parquet as pq
# pyarrow.parquet (and the file systems it loads) is imported where files are written or parsed:
# reading a manifest (`statekit inspect`) does without it.

CHECKSUM_ALGORITHM = "crc32"
#: Row groups small enough that a single-key lookup decodes little more than its key group. Tables with a
#: ``key_group`` column are also cut where key groups change (`row_group_bounds`), so that a lookup
#: decodes only its own key group's row groups, selected by their ``key_group`` statistics.
ROW_GROUP_ROWS = 128 * 1024


def checksum(data: bytes | memoryview | pa.Buffer) -> str:
    """The manifest's checksum notation for `data` (zlib's CRC-32 releases the GIL on large buffers)."""
    return f"{CHECKSUM_ALGORITHM}:{zlib.crc32(memoryview(data)) & 0xFFFFFFFF:08x}"


def write_parquet(table: pa.Table, full_path: "Path | StoragePath", *, root: Path | None = None) -> tuple[int, str]:
    """Write `table` to `full_path` as Parquet; return (bytes, checksum) of exactly what was written.

    The encoder streams its pages straight into the new file through `_ChecksummedFile`, so the
    checksum covers the bytes written to disk without reading them back, and no whole-file buffer
    is built first (that buffer's growth and fresh memory cost a third of the time of writing a
    32 MB batch). The file is fsynced, so that once the manifest naming it is durable, so is the
    file; a failed write removes it. With `root` (a staging directory), directories are made below
    it only (`make_dirs_below`).
    """
    import pyarrow.parquet as pq

    # Dictionary encoding pays off for text; on numbers it only costs time (even on key_group, whose
    # sorted runs snappy compresses almost as well: ~17% less encoding CPU for ~0.7% more bytes). Not
    # on the key column either: its values are (nearly) all distinct, so every row group would build a
    # dictionary only to fall back to plain encoding (String keys: ~2x the encoding time, ~6% more bytes).
    dictionary = [f.name for f in table.schema if _is_text(f.type) and f.name != "key"]
    bounds = None
    if "key_group" in table.column_names and table.num_rows:
        from statekit.format.keyed import column_values

        kg = column_values(table.column("key_group"))
        bounds = None if kg is None else row_group_bounds(kg, ROW_GROUP_ROWS)
    # Statistics only where a reader selects row groups by them: key_group (rows are laid out by key
    # group, so the min/max of keys or states rule out nothing; String keys: ~30% of the encoding time).
    statistics: bool | list[str] = ["key_group"] if "key_group" in table.column_names else True
    def encode(sink: _ChecksummedFile) -> None:
        if bounds is None:
            pq.write_table(table, sink, row_group_size=ROW_GROUP_ROWS, compression="snappy",
                           use_dictionary=dictionary, write_statistics=statistics)
            return
        with pq.ParquetWriter(sink, table.schema, compression="snappy", use_dictionary=dictionary,
                              write_statistics=statistics) as writer:
            for start, end in bounds:
                writer.write_table(table.slice(start, end - start), row_group_size=end - start)

    if isinstance(full_path, StoragePath):  # streamed into the new object as encoded (bounded memory)
        with full_path.create() as obj:
            sink = _ChecksummedFile(obj)
            encode(sink)
            obj.close()
        return sink.size, f"{CHECKSUM_ALGORITHM}:{sink.crc:08x}"
    if root is None:
        full_path.parent.mkdir(parents=True, exist_ok=True)
    else:
        make_dirs_below(root, full_path.parent)
    with open(full_path, "xb", buffering=_WRITE_BUFFER) as fh:  # always a new file: never through a name that exists (a link)
        sink = _ChecksummedFile(fh)
        try:
            encode(sink)
            fh.flush()
            os.fsync(fh.fileno())
        except BaseException:
            fh.close()
            full_path.unlink(missing_ok=True)
            raise
    return sink.size, f"{CHECKSUM_ALGORITHM}:{sink.crc:08x}"


_WRITE_BUFFER = 1 << 20  # the encoder's many small writes (page headers) are gathered; pages pass through


class _ChecksummedFile:
    """A write-only file object for pyarrow that checksums (and counts) every byte on its way to `fh`.

    Closing it leaves `fh` open: the caller fsyncs and closes it.
    """

    def __init__(self, fh) -> None:
        self._fh = fh
        self.crc = 0
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        self._fh.write(data)  # a buffered file writes all of it or raises
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass  # `fh` is flushed (and fsynced) by `write_parquet`

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


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


def row_group_bounds(kg, max_rows: int) -> list[tuple[int, int]]:
    """Row ranges ``[start, end)`` of the row groups of rows with key groups `kg` (grouped, ascending):
    cut where the key group changes, consecutive small key groups sharing a row group of at most
    `max_rows` rows, a larger key group split into row groups of `max_rows` (its remainder may share
    a row group with the key groups after it; readers select row groups by key-group statistics).

    >>> import numpy as np
    >>> row_group_bounds(np.array([0, 0, 1, 2, 2, 2, 2, 2, 3]), 3)
    [(0, 3), (3, 6), (6, 9)]
    """
    import numpy as np

    n = len(kg)
    out: list[tuple[int, int]] = []
    start = last = 0  # `last`: the latest key-group boundary at or after `start`
    for b in [*(np.flatnonzero(np.diff(kg)) + 1).tolist(), n]:
        if b - start <= max_rows:
            last = b
            continue
        if last > start:
            out.append((start, last))
            start = last
        while b - start > max_rows:
            out.append((start, start + max_rows))
            start += max_rows
        last = b
    if start < n:
        out.append((start, n))
    return out


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
    if isinstance(src, StoragePath):  # on object storage: downloaded into a new file
        try:
            n = src.download(dst)
        except StorageNotFoundError:
            raise CorruptSavepointError(f"{src} is missing; the savepoint is incomplete.") from None
        except BaseException:
            if os.path.lexists(dst):
                os.unlink(dst)  # ours: created by the download with O_EXCL
            raise
        if expected_size is not None and n != expected_size:
            os.unlink(dst)
            raise CorruptSavepointError(f"{src} has {n} bytes but the manifest recorded {expected_size}; restore it "
                                        "or use another savepoint.")
        return
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


def place_object(src: "Path | StoragePath", dst: StoragePath, *, expected_size: int | None = None) -> None:
    """`place_file` for a new savepoint on object storage: `dst` becomes a copy of `src`, server-side (S3
    CopyObject) when both are on the same store, else streamed from `src`. `src` is checked as `place_file` checks it."""
    if isinstance(src, StoragePath):
        try:
            n = src.stat().st_size
        except StorageNotFoundError:
            raise CorruptSavepointError(f"{src} is missing; the savepoint is incomplete.") from None
        if expected_size is not None and n != expected_size:
            raise CorruptSavepointError(f"{src} has {n} bytes but the manifest recorded {expected_size}; restore it "
                                        "or use another savepoint.")
        dst.copy_from(src)
        return
    _regular_stat(src, expected_size)
    with open(src, "rb", buffering=0) as fh, dst.create() as out:
        while chunk := fh.read(_COPY_CHUNK):
            out.write(chunk)
        out.close()


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
def storage_errors(target: "Path | StoragePath") -> Iterator[None]:
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
    if isinstance(full, StoragePath):
        return _verify_remote(full, root, entry)
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
            # memory: a buffer over Python bytes could abort the interpreter's exit (statekit.format.arrow_memory).
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


def _verify_remote(full: StoragePath, root: Path, entry: FileEntry) -> tuple[pa.Buffer | None, FileProblem | None, str]:
    """`verify_file` of an object: one GET of at most the manifest's size plus one byte, then the same checks."""
    try:
        data = full.read_buffer(entry.bytes)
    except StorageNotFoundError:
        return None, "missing_file", _missing(root, entry)
    if data.size != entry.bytes:
        return None, "size_mismatch", _size_mismatch(root, entry, data.size)
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
    if isinstance(full, StoragePath):
        try:
            size = full.stat().st_size
        except FileNotFoundError:  # also StorageNotFoundError
            raise CorruptSavepointError(_missing(root, entry)) from None
        if size != entry.bytes:
            raise CorruptSavepointError(_size_mismatch(root, entry, size))
        return full  # type: ignore[return-value]
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


def read_parquet_verified(root: Path, entry: FileEntry, *, columns=None, key_group: int | None = None,
                          key_groups: tuple[int, int] | None = None, max_rows: int | None = None) -> pa.Table:
    """A verified file parsed as an Arrow table.

    The whole file is checksummed first (a damaged byte anywhere raises `ChecksumMismatchError`);
    then only the row groups needed are decoded: with `key_group` (or an inclusive range `key_groups`),
    those whose ``key_group`` statistics may hold it (the caller filters the rows); with `max_rows`, the
    leading ones that hold at least that many rows. Read through `ParquetFile`, not `pq.read_table`, whose dataset
    layer costs a pandas import per process.
    """
    import pyarrow.parquet as pq

    buf = read_verified_bytes(root, entry)
    try:
        pf = pq.ParquetFile(pa.BufferReader(buf))
        if key_group is None and key_groups is None and max_rows is None:
            return pf.read(columns=columns)
        md = pf.metadata
        if key_group is not None or key_groups is not None:
            lo, hi = key_groups if key_groups is not None else (key_group, key_group)
            assert lo is not None
            groups = row_groups_holding(md, lo, hi)
        else:
            groups, rows, wanted = [], 0, max_rows or 0
            while len(groups) < md.num_row_groups and rows < wanted:
                rows += md.row_group(len(groups)).num_rows
                groups.append(len(groups))
        if not groups:
            from statekit.format.arrow_memory import empty_table  # numpy: not needed by manifest-only commands

            empty = empty_table(pf.schema_arrow)
            return empty if columns is None else empty.select(columns)
        return pf.read_row_groups(groups, columns=columns)
    # any decoding failure of a file that passed its checksum; KeyError: a column the manifest implies
    # (e.g. namespace) that the file lacks
    except (pa.ArrowException, OSError, KeyError) as exc:
        raise CorruptSavepointError(
            f"{root}: file {entry.path} is not readable Parquet ({exc}). Restore it or use another savepoint."
        ) from None


def row_groups_holding(metadata: "pq.FileMetaData", key_group: int, last: int | None = None) -> list[int]:
    """Indexes of the row groups whose ``key_group`` column statistics do not rule out `key_group` (with
    `last`: any key group of `key_group`..`last`); all of them when the file has no such column or no statistics."""
    last = key_group if last is None else last
    leaf = next((j for j in range(metadata.num_columns) if metadata.schema.column(j).path == "key_group"), None)
    if leaf is None:
        return list(range(metadata.num_row_groups))
    out = []
    for i in range(metadata.num_row_groups):
        st = metadata.row_group(i).column(leaf).statistics
        if st is None or not st.has_min_max or (st.min <= last and key_group <= st.max):
            out.append(i)
    return out


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
