"""Where savepoints live: a path or URI resolved to a `pathlib.Path` (local) or a `StoragePath` on a `pyarrow.fs` filesystem.

Boundary: the one module that turns ``s3://``, ``s3a://``, ``gs://``, ``abfs://``/``az://``, ``hdfs://``,
``file://`` and plain paths into something the readers and writers open. Local paths stay `Path`
objects (so the local fast paths - memory maps, hard links, O_DIRECT - are untouched); every other
URI becomes a `StoragePath`, which offers the small part of `Path`'s interface the readers use
(``/``, ``name``, ``parent``, ``is_file``, ``stat``, ``read_bytes``, ``open``) plus ranged reads, listing,
streaming writes and deletes. Credentials come from the user's usual configuration (the AWS
environment variables and profiles, ``AWS_ENDPOINT_URL``, GCS application-default credentials,
Azure's environment) or from ``storage_options``; none is ever part of a `StoragePath`'s text, and
`redact` removes any that a filesystem's own message might echo.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from statekit.errors import (
    InvalidArgumentError,
    StorageAccessError,
    StorageError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from statekit.format.stores import (
    AZURE_SCHEMES,
    HDFS_SCHEMES,
    filesystem_for,
    parse_storage_options,
    redact,
    wrap_filesystem,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ObjectWriter", "StoragePath", "TransferStats", "as_path", "is_remote", "locate", "parse_storage_options", "redact"]
_cache_lock = threading.Lock()

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: each read of an object stream is one ranged request: downloads read this much at a time
_COPY_CHUNK = 32 << 20
#: ranges longer than this are split into up to `_PARALLEL` equal requests sent at once (a ranged request may cost
#: the store more than its length: moto copies the whole object for each)
#: (memory: the range itself); the streams of a read are fetched several at a time besides (flink/reader.py)
_PART = 256 << 20
_PARALLEL = 4


def is_remote(path: object) -> bool:
    """Whether `path` is a URI of a non-local filesystem (``file://`` and plain paths are local)."""
    if isinstance(path, StoragePath):
        return True
    m = _URI.match(str(path)) if isinstance(path, str) else None
    return m is not None and m.group(1).lower() != "file"


def as_path(path: "str | os.PathLike[str] | StoragePath") -> "Path | StoragePath":
    """`path` as a local `Path`, or a `StoragePath` for a URI (its credentials from the environment) or one given."""
    return path if isinstance(path, StoragePath) else locate(path)


@dataclass
class TransferStats:
    """Bytes and requests read and bytes written through `StoragePath`s sharing this counter (what a one-key `get`
    transferred), and bytes the store copied itself."""

    bytes_read: int = 0
    reads: int = 0
    bytes_written: int = 0
    bytes_copied: int = 0  #: copied by the store itself (server-side copies): no byte through this process
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_read(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n
            self.reads += 1

    def add_written(self, n: int) -> None:
        with self._lock:
            self.bytes_written += n

    def add_copied(self, n: int) -> None:
        with self._lock:
            self.bytes_copied += n


@dataclass(frozen=True)
class _Stat:
    st_size: int
    st_mode: int


def locate(path: "str | os.PathLike[str] | StoragePath", *, storage_options: Mapping[str, Any] | None = None,
           filesystem: Any = None) -> "Path | StoragePath":
    """A local `Path` for plain paths and ``file://`` URIs, else a `StoragePath` on the URI's filesystem.

    ``filesystem``: a `pyarrow.fs.FileSystem` or an fsspec filesystem to use instead of the one the
    scheme names (the path is then taken inside it). ``storage_options``: credentials and endpoints,
    see `filesystem_for`.
    """
    if isinstance(path, StoragePath):
        return path
    text = os.fspath(path)
    m = _URI.match(text)
    if filesystem is not None:
        fs = wrap_filesystem(filesystem)
        inner = text[m.end():] if m else text
        return StoragePath(fs, inner.strip("/") if m else inner.rstrip("/"), m.group(1).lower() if m else "fs")
    if not m:
        if storage_options:
            raise InvalidArgumentError(f"storage options were given for the local path {text}; they apply to URIs "
                                       "such as s3://bucket/savepoint. Drop them or give the URI.")
        return Path(text)
    scheme = m.group(1).lower()
    parts = urlsplit(text)
    if scheme == "file":
        return Path(parts.path or "/")
    if "@" in parts.netloc and scheme not in AZURE_SCHEMES:
        raise InvalidArgumentError(f"{scheme}://…@{parts.netloc.rpartition('@')[2]}{parts.path}: credentials in a URI are "
                                   "refused (they would end up in logs). Give them as storage options or in the "
                                   "environment instead.")
    fs, inner = filesystem_for(scheme, parts.netloc, parts.path, dict(storage_options or {}))
    return StoragePath(fs, inner, scheme, options=tuple(sorted((k, str(v)) for k, v in (storage_options or {}).items())))


_handles: "OrderedDict[tuple[int, str], Any]" = OrderedDict()
_HANDLES = 64


#: each thread's own open files for `StoragePath.read_range_into` (a file's read position is its own: not shared)
_own = threading.local()
#: how many times `forget_handles` ran: a thread's own files opened before the last time are dropped at its next read
_forgotten = 0


def _own_input_file(fs: pafs.FileSystem, path: str) -> Any:
    """This thread's open random-access file of `path` (opening one costs a HEAD request: kept for later reads)."""
    files = getattr(_own, "files", None)
    if files is None or _own.forgotten != _forgotten:  # (another thread cannot close this thread's files itself)
        for old in (files or {}).values():
            old.close()
        files = _own.files = {}
        _own.forgotten = _forgotten
    key = (id(fs), path)
    f = files.get(key)
    if f is None:
        if len(files) >= _HANDLES:
            for old in files.values():
                old.close()
            files.clear()
        f = files[key] = fs.open_input_file(path)
    return f


def _input_file(fs: pafs.FileSystem, path: str) -> Any:
    """An open random-access file of `path`, kept for later ranged reads (opening one costs a HEAD request)."""
    key = (id(fs), path)
    with _cache_lock:
        f = _handles.get(key)
        if f is not None:
            _handles.move_to_end(key)
            return f
    f = fs.open_input_file(path)
    with _cache_lock:
        _handles[key] = f
        while len(_handles) > _HANDLES:
            _handles.popitem(last=False)[1].close()
    return f


def forget_handles(path_prefix: str = "") -> None:
    """Drop the kept input files under `path_prefix` (after a write or a delete there); each thread's own files
    (`_own_input_file`) are dropped whole at its next read."""
    global _forgotten
    with _cache_lock:
        _forgotten += 1
        for key in [k for k in _handles if k[1].startswith(path_prefix)]:
            _handles.pop(key).close()


class _CountingReader:
    """A read-only binary file over a pyarrow input file, counting what it reads."""

    def __init__(self, raw: Any, stats: TransferStats, where: "StoragePath") -> None:
        self._raw = raw
        self._stats = stats
        self._where = where

    def read(self, n: int = -1) -> bytes:
        with translated(self._where):
            if n is None or n < 0:  # the rest in one request (a plain read() asks in many small ranges)
                n = max(0, self._raw.size() - self._raw.tell())
            data = self._raw.read(n)
        self._stats.add_read(len(data))
        return data

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._raw.seek(pos, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> "_CountingReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StoragePath:
    """A file or directory on a remote filesystem, with the part of `pathlib.Path`'s interface statekit's readers use.

    ``str()`` is the URI (``s3://bucket/key``), never with credentials. Reads are counted in ``stats``
    (shared by every path derived from this one). There is deliberately no ``__fspath__``: code that
    would open it as a local file fails loudly instead of reading the wrong thing.
    """

    __slots__ = ("fs", "path", "scheme", "stats", "options")

    def __init__(self, fs: pafs.FileSystem, path: str, scheme: str, stats: TransferStats | None = None,
                 options: tuple[tuple[str, str], ...] = ()) -> None:
        self.fs = fs
        self.path = path
        self.scheme = scheme
        self.stats = stats if stats is not None else TransferStats()
        #: the storage options it was located with (what another process, e.g. a Spark task, needs to open the
        #: same URI); never part of its text
        self.options = options

    def at(self, path: str) -> "StoragePath":
        """The path `path` (inside the filesystem, no scheme) on the same filesystem, sharing `stats`."""
        return StoragePath(self.fs, path, self.scheme, self.stats, self.options)

    # -- Path-like -------------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{self.scheme}://{self.path.lstrip('/')}" if self.scheme not in HDFS_SCHEMES else \
            f"{self.scheme}://{self.path}"

    def __repr__(self) -> str:
        return f"StoragePath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoragePath) and other.fs is self.fs and other.path == self.path

    def __hash__(self) -> int:
        return hash((id(self.fs), self.path))

    def __truediv__(self, other: str) -> "StoragePath":
        other = str(other).replace("\\", "/")
        return self.at(posixpath.join(self.path, other) if self.path else other)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def parent(self) -> "StoragePath":
        return self.at(posixpath.dirname(self.path.rstrip("/")))

    @property
    def parents(self) -> list["StoragePath"]:
        out, p = [], self.path.rstrip("/")
        while p and p != "/" and posixpath.dirname(p) != p:
            p = posixpath.dirname(p)
            out.append(self.at(p))
        return out

    def resolve(self) -> "StoragePath":
        """The normalised path (no ``.``/``..``; object stores have no links to follow)."""
        norm = posixpath.normpath(self.path) if self.path else self.path
        return self.at("" if norm == "." else norm)

    def with_name(self, name: str) -> "StoragePath":
        return self.parent / name

    def _info(self) -> pafs.FileInfo:
        with translated(self):
            return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        return self._info().type != pafs.FileType.NotFound or self.is_dir()

    def is_file(self) -> bool:
        return self._info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        """A directory, or on an object store: a prefix with at least one object under it."""
        if self._info().type == pafs.FileType.Directory:
            return True
        return any(True for _ in self.iter_files(limit=1))

    def is_symlink(self) -> bool:
        return False

    def stat(self) -> _Stat:
        info = self._info()
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(2, "No such object", str(self))
        return _Stat(st_size=info.size or 0, st_mode=0o100644 if info.type == pafs.FileType.File else 0o040755)

    def file_sizes(self) -> dict[str, int]:
        """The size of every file under this prefix (recursively) by its path in the filesystem: one listing
        (a LIST request per 1000 objects on S3) instead of a HEAD request per file."""
        sel = pafs.FileSelector(self.path, recursive=True, allow_not_found=True)
        with translated(self):
            infos = self.fs.get_file_info(sel)
        return {info.path: info.size or 0 for info in infos if info.type == pafs.FileType.File}

    def iter_files(self, *, limit: int | None = None) -> Iterator["StoragePath"]:
        """Every file under this prefix (recursively), as `StoragePath`s."""
        sel = pafs.FileSelector(self.path, recursive=True, allow_not_found=True)
        with translated(self):
            infos = self.fs.get_file_info(sel)
        n = 0
        for info in infos:
            if info.type == pafs.FileType.File:
                yield self.at(info.path)
                n += 1
                if limit is not None and n >= limit:
                    return

    def iterdir(self) -> Iterator["StoragePath"]:
        sel = pafs.FileSelector(self.path, recursive=False, allow_not_found=True)
        with translated(self):
            infos = self.fs.get_file_info(sel)
        for info in infos:
            yield self.at(info.path)

    def relative_to(self, other: "StoragePath") -> str:
        base = other.path.rstrip("/") + "/"
        if not self.path.startswith(base):
            raise ValueError(f"{self} is not under {other}")
        return self.path[len(base):]

    # -- reads -----------------------------------------------------------------------------------
    def open(self, mode: str = "rb") -> _CountingReader:
        if mode != "rb":
            raise ValueError("StoragePath.open reads only ('rb'); writes go through open_output")
        with translated(self):
            raw = self.fs.open_input_file(self.path)
        return _CountingReader(raw, self.stats, self)

    def read_bytes(self) -> bytes:
        return self.read_buffer().to_pybytes()

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def read_buffer(self, size: int | None = None) -> pa.Buffer:
        """The whole object in Arrow memory (at most `size` + 1 bytes when `size` is given), in one request (two
        without `size`: its length first; a stream's plain read() would ask in many small ranges)."""
        with translated(self):
            if size is None:
                with self.fs.open_input_file(self.path) as f:
                    got = f.read_at(f.size(), 0)
                buf = got if isinstance(got, pa.Buffer) else pa.py_buffer(got)
            else:
                with self.fs.open_input_stream(self.path) as f:
                    buf = f.read_buffer(size + 1)
        self.stats.add_read(buf.size)
        return buf

    def read_range(self, start: int, length: int) -> pa.Buffer:
        """Bytes [start, start + length) in one ranged request (fewer at the object's end)."""
        with translated(self):
            got = _input_file(self.fs, self.path).read_at(length, start)
        buf = got if isinstance(got, pa.Buffer) else pa.py_buffer(got)
        self.stats.add_read(buf.size)
        return buf

    def read_range_into(self, start: int, out: "np.ndarray") -> None:
        """Bytes [start, start + len(out)) into `out` (a writable uint8 array) in one ranged request.

        Why: a response read into new memory (`read_range`) is fresh pages the kernel hands out at first
        touch, which cost the client more CPU than the download itself; a caller that reuses `out` from
        one range to the next pays that once.
        """
        with translated(self):
            f = _own_input_file(self.fs, self.path)
            f.seek(start)
            n = f.readinto(out)
        self.stats.add_read(n)
        if n != len(out):
            raise StorageError(f"{self}: holds fewer bytes than asked for ({start + n} < {start + len(out)}); it "
                               "changed or was truncated while being read. Copy the savepoint again or take a new one.")

    def read_range_array(self, lo: int, hi: int) -> "np.ndarray":
        """Bytes [lo, hi) as a read-only uint8 array: one request when short, else up to `_PARALLEL` ranged
        requests at once into one buffer (a single stream is slower than the store serves)."""
        import numpy as np

        parts_n = max(1, min(_PARALLEL, -(-(hi - lo) // _PART)))  # up to one per thread, each about _PART or more
        step = max(1, -(-(hi - lo) // parts_n))
        parts = [(a, min(a + step, hi)) for a in range(lo, hi, step)]

        def got(part: tuple[int, int]) -> pa.Buffer:
            a, b = part
            buf = self.read_range(a, b - a)
            if buf.size != b - a:
                raise StorageError(f"{self}: holds fewer bytes than asked for ({a + buf.size} < {b}); it changed "
                                   "or was truncated while being read. Copy the savepoint again or take a new one.")
            return buf

        if len(parts) <= 1:
            # the response's own buffer, not a copy: copying it into fresh memory cost more than the download
            # (the kernel hands out every page of the copy at first touch)
            return np.frombuffer(got(parts[0]), np.uint8) if parts else np.zeros(0, np.uint8)
        out = np.empty(hi - lo, np.uint8)

        def fetch(part: tuple[int, int]) -> None:
            out[part[0] - lo: part[1] - lo] = np.frombuffer(got(part), np.uint8)

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(_PARALLEL, len(parts)), thread_name_prefix="statekit-fetch") as pool:
            list(pool.map(fetch, parts))
        out.flags.writeable = False
        return out

    def download(self, target: Path) -> int:
        """Stream the object into the new local file `target` (created exclusively); the bytes copied."""
        n = 0
        with translated(self):
            with self.fs.open_input_stream(self.path) as src, open(target, "xb") as dst:
                while chunk := src.read(_COPY_CHUNK):
                    dst.write(chunk)
                    n += len(chunk)
        self.stats.add_read(n)
        return n

    # -- writes ----------------------------------------------------------------------------------
    def upload(self, source: Path) -> int:
        """Stream the local file `source` into this object (a multipart upload for large files); the bytes sent."""
        n = 0
        forget_handles(self.path)
        with translated(self, writing=True):
            with open(source, "rb") as src, self.fs.open_output_stream(self.path) as dst:
                while chunk := src.read(_COPY_CHUNK):
                    dst.write(chunk)
                    n += len(chunk)
        self.stats.add_written(n)
        return n

    def create(self) -> "ObjectWriter":
        """A new object at this path, written sequentially and streamed to the store as written (`ObjectWriter`)."""
        return ObjectWriter(self)

    def copy_from(self, source: "StoragePath") -> int:
        """Make this object a copy of `source`: on the same store a server-side copy (S3 CopyObject: no byte passes
        through this process), else streamed through; the bytes copied."""
        forget_handles(self.path)
        if source.fs is self.fs:
            n = source.stat().st_size
            try:
                with translated(self, writing=True):
                    self.fs.copy_file(source.path, self.path)
            except NotImplementedError:  # a store without its own copy: streamed below
                pass
            else:
                self.stats.add_copied(n)
                return n
        with translated(source), source.fs.open_input_stream(source.path) as src, self.create() as dst:
            while chunk := src.read(_COPY_CHUNK):
                dst.write(chunk)
            return dst.close()

    def write_bytes(self, data: bytes) -> None:
        forget_handles(self.path)
        with translated(self, writing=True):
            with self.fs.open_output_stream(self.path) as dst:
                dst.write(data)
        self.stats.add_written(len(data))

    def delete(self) -> None:
        """Delete this one object (what statekit staged); a missing one is fine."""
        forget_handles(self.path)
        try:
            with translated(self, writing=True):
                self.fs.delete_file(self.path)
        except StorageNotFoundError:
            pass

    def bucket_exists(self) -> bool:
        """Whether the bucket (container, first path component) of an object-store path exists."""
        bucket = self.path.strip("/").split("/")[0]
        with translated(self):
            return self.fs.get_file_info(bucket).type != pafs.FileType.NotFound


class ObjectWriter:
    """A new object written sequentially, streamed to the store as written (multipart uploads of bounded parts).

    It takes what a file object takes (``write(bytes)``, ``tell``, ``flush``) and what `DirectFile` takes
    (``write([piece, ...])``, ``size``, ``close() -> size``), so the writers of local files write objects too.
    ``close`` completes the object; used as a context manager, an exception deletes what was written instead.
    """

    def __init__(self, where: StoragePath) -> None:
        self.where = where
        self.size = 0
        self.closed = False
        forget_handles(where.path)
        with translated(where, writing=True):
            self._out = where.fs.open_output_stream(where.path)

    def write(self, data: Any) -> int:
        pieces = data if isinstance(data, (list, tuple)) else (data,)
        n = 0
        with translated(self.where, writing=True):
            for piece in pieces:
                self._out.write(piece)
                n += memoryview(piece).nbytes
        self.size += n
        return n

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass  # parts are sent as they fill; `close` sends the rest

    def writable(self) -> bool:
        return True

    def close(self) -> int:
        """Complete the object; its size."""
        if not self.closed:
            self.closed = True
            with translated(self.where, writing=True):
                self._out.close()
            self.where.stats.add_written(self.size)
        return self.size

    def __enter__(self) -> "ObjectWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        self.closed = True
        try:  # pyarrow's streams cannot abort a multipart upload: complete it, then delete the object
            self._out.close()
        except OSError:
            pass
        try:
            self.where.delete()
        except StorageError:
            pass  # the writer's clean-up (the whole new prefix) tries again


_ACCESS = re.compile(r"ACCESS_DENIED|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|Forbidden|403|"
                     r"UNAUTHORIZED|Unauthorized|401|INVALID_ACCESS_KEY|SIGNATURE_DOES_NOT_MATCH", re.I)
_MISSING_BUCKET = re.compile(r"NO_SUCH_BUCKET|NoSuchBucket|bucket does not exist", re.I)
_UNAVAILABLE = re.compile(r"Couldn't connect|connect|NETWORK_CONNECTION|Connection refused|timed out|"
                          r"SERVICE_UNAVAILABLE|503|500|INTERNAL_FAILURE|SLOW_DOWN|curlCode|Broken pipe|reset", re.I)


@contextmanager
def translated(where: StoragePath, *, writing: bool = False) -> Iterator[None]:
    """Turn a filesystem's `OSError` at `where` into a typed `StorageError` naming the URI and the fix (credentials removed)."""
    try:
        yield
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error(exc, where, writing=writing) from None


def storage_error(exc: BaseException, where: object, *, writing: bool = False) -> StorageError:
    """The typed error for a filesystem failure at `where`."""
    msg = redact(str(exc))
    if isinstance(exc, FileNotFoundError) or "NOT_FOUND" in msg or "NoSuchKey" in msg or "does not exist" in msg and \
            not _MISSING_BUCKET.search(msg):
        return StorageNotFoundError(f"{where} does not exist ({msg}). Check the path (bucket, prefix, key).")
    if _MISSING_BUCKET.search(msg):
        return StorageNotFoundError(f"{where}: the bucket does not exist ({msg}). Create it, or correct the bucket "
                                    "name in the URI.")
    if _ACCESS.search(msg):
        what = "write to" if writing else "read"
        return StorageAccessError(
            f"{where}: access denied ({msg}). The credentials in use are wrong or may not {what} it: check "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or the storage options) and the bucket's policy."
        )
    if _UNAVAILABLE.search(msg):
        return StorageUnavailableError(
            f"{where}: the storage service is unavailable ({msg}); retried with backoff and gave up. Check the "
            "endpoint (AWS_ENDPOINT_URL or endpoint_url=) and the network, then retry."
        )
    return StorageError(f"{where}: {msg}. Check the URI, the credentials and the storage service, then retry.")
