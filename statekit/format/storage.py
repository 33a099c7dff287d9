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

import configparser
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

if TYPE_CHECKING:
    import numpy as np

__all__ = ["StoragePath", "TransferStats", "as_path", "is_remote", "locate", "parse_storage_options", "redact"]

#: schemes served by pyarrow's own filesystems; any other scheme goes to fsspec (when installed)
S3_SCHEMES = ("s3", "s3a", "s3n")
GCS_SCHEMES = ("gs", "gcs")
AZURE_SCHEMES = ("abfs", "abfss", "az")
HDFS_SCHEMES = ("hdfs", "viewfs")
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: transient failures (HTTP 500/503, throttling, dropped connections) are retried this many times with backoff
DEFAULT_MAX_ATTEMPTS = 4
_COPY_CHUNK = 8 << 20
#: long ranged reads are split into `_PARALLEL` requests (at least this long each) sent at once (memory: the range itself)
_PART = 8 << 20
_PARALLEL = 4

_SECRETS: set[str] = set()  # every credential statekit was given or read, removed from messages by `redact`
_SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_CLIENT_SECRET",
               "AZURE_STORAGE_SAS_TOKEN", "GOOGLE_OAUTH_ACCESS_TOKEN")
_SECRET_OPTIONS = ("access_key", "aws_access_key_id", "key", "secret", "secret_key", "secret_access_key", "aws_secret_access_key", "token", "session_token",
                   "aws_session_token", "account_key", "sas_token", "client_secret", "access_token")
_fs_cache: dict[tuple, pafs.FileSystem] = {}
_cache_lock = threading.Lock()


def _remember_secret(value: object) -> None:
    if isinstance(value, str) and len(value) >= 4:
        _SECRETS.add(value)


def redact(text: str) -> str:
    """`text` with every credential statekit knows of replaced by ``***`` (for errors and logs)."""
    for name in _SECRET_ENV:
        _remember_secret(os.environ.get(name))
    for s in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def is_remote(path: object) -> bool:
    """Whether `path` is a URI of a non-local filesystem (``file://`` and plain paths are local)."""
    if isinstance(path, StoragePath):
        return True
    m = _URI.match(str(path)) if isinstance(path, str) else None
    return m is not None and m.group(1).lower() != "file"


def as_path(path: "str | os.PathLike[str] | StoragePath") -> "Path | StoragePath":
    """`path` as a local `Path`, or a `StoragePath` for a URI (its credentials from the environment) or one given."""
    return path if isinstance(path, StoragePath) else locate(path)


def parse_storage_options(items: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` strings (the CLI's ``--storage-option``) as a dict; a malformed one is refused without echoing its value."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgumentError("a storage option is not KEY=VALUE (not shown: it may hold a secret); write "
                                       "it as e.g. --storage-option endpoint_url=http://127.0.0.1:9000.")
        out[key.strip()] = value
    return out


@dataclass
class TransferStats:
    """Bytes and requests read through `StoragePath`s sharing this counter (what a one-key `get` transferred)."""

    bytes_read: int = 0
    reads: int = 0
    bytes_written: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_read(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n
            self.reads += 1

    def add_written(self, n: int) -> None:
        with self._lock:
            self.bytes_written += n


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
        fs = _wrap_fsspec(filesystem)
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
    return StoragePath(fs, inner, scheme)


def _wrap_fsspec(filesystem: Any) -> pafs.FileSystem:
    if isinstance(filesystem, pafs.FileSystem):
        return filesystem
    return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))


def _pop(opts: dict[str, Any], *names: str) -> Any:
    got = None
    for n in names:
        if n in opts:
            v = opts.pop(n)
            got = v if got is None else got
    return got


def _bool(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).strip().lower() in ("1", "true", "yes", "on")


def _aws_profile(name: str) -> dict[str, str]:
    """Credentials, region and endpoint of an AWS profile from ``~/.aws/credentials`` and ``~/.aws/config``."""
    out: dict[str, str] = {}
    creds = os.environ.get("AWS_SHARED_CREDENTIALS_FILE", os.path.expanduser("~/.aws/credentials"))
    config = os.environ.get("AWS_CONFIG_FILE", os.path.expanduser("~/.aws/config"))
    for file, section in ((config, "default" if name == "default" else f"profile {name}"), (creds, name)):
        cp = configparser.RawConfigParser()
        try:
            cp.read(file)
        except configparser.Error:
            continue
        if cp.has_section(section):
            out.update({k: v for k, v in cp.items(section)})
    if not out:
        raise InvalidArgumentError(f"AWS profile {name!r} is in neither {creds} nor {config}; name a profile "
                                   "that exists (or give the credentials as storage options).")
    return out


def filesystem_for(scheme: str, authority: str, path: str, options: dict[str, Any]) -> tuple[pafs.FileSystem, str]:
    """The filesystem (cached per scheme, authority and options) and the path inside it for one URI.

    S3 options (``s3://``, ``s3a://``): ``access_key``/``aws_access_key_id``, ``secret_key``/
    ``aws_secret_access_key``, ``session_token``, ``region``, ``endpoint_url`` (``http://host:port`` for an
    S3-compatible store; default ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``), ``profile`` (default
    ``AWS_PROFILE``), ``anonymous``, ``max_attempts`` (default 4), ``force_virtual_addressing``. GCS:
    ``anonymous``, ``access_token``, ``project_id``, ``endpoint_url``. Azure (``abfs://container@account…``):
    ``account_name``, ``account_key``, ``sas_token``, ``endpoint_url``; the rest from Azure's environment.
    HDFS: ``user``, ``kerb_ticket``, ``replication``. Any other scheme is handed to fsspec with the options.
    """
    opts = dict(options)
    for k, v in opts.items():
        if k.lower() in _SECRET_OPTIONS:
            _remember_secret(v)
    key = (scheme, authority, tuple(sorted((k, str(v)) for k, v in opts.items())))
    inner = (authority + "/" + path.strip("/")).strip("/")
    with _cache_lock:
        if key in _fs_cache:
            fs = _fs_cache[key]
            return fs, _inner_path(scheme, authority, path, inner)
    if scheme in S3_SCHEMES:
        fs = _s3(opts)
    elif scheme in GCS_SCHEMES:
        fs = _gcs(opts)
    elif scheme in AZURE_SCHEMES:
        fs = _azure(authority, opts)
    elif scheme in HDFS_SCHEMES:
        fs = _hdfs(scheme, authority, opts)
    else:
        fs = _fsspec(scheme, opts)
    with _cache_lock:
        _fs_cache[key] = fs
    return fs, _inner_path(scheme, authority, path, inner)


def _inner_path(scheme: str, authority: str, path: str, inner: str) -> str:
    if scheme in AZURE_SCHEMES:  # abfs://container@account.dfs.core.windows.net/dir: container/dir
        return (authority.partition("@")[0] + "/" + path.strip("/")).strip("/")
    if scheme in HDFS_SCHEMES:
        return "/" + path.strip("/")
    return inner


def _s3(opts: dict[str, Any]) -> pafs.FileSystem:
    profile = _pop(opts, "profile", "aws_profile") or (os.environ.get("AWS_PROFILE") if not (
        "access_key" in opts or "aws_access_key_id" in opts or "key" in opts) else None)
    from_profile = _aws_profile(profile) if profile else {}
    for k in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token"):
        _remember_secret(from_profile.get(k))
    access = _pop(opts, "access_key", "aws_access_key_id", "key") or from_profile.get("aws_access_key_id")
    secret = _pop(opts, "secret_key", "aws_secret_access_key", "secret", "secret_access_key") or \
        from_profile.get("aws_secret_access_key")
    token = _pop(opts, "session_token", "aws_session_token", "token") or from_profile.get("aws_session_token")
    region = _pop(opts, "region", "region_name", "aws_region") or from_profile.get("region") or \
        os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    endpoint = _pop(opts, "endpoint_url", "endpoint", "endpoint_override", "aws_endpoint_url") or \
        from_profile.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    attempts = int(_pop(opts, "max_attempts", "retries") or DEFAULT_MAX_ATTEMPTS)
    kw: dict[str, Any] = {"region": region, "allow_bucket_creation": False, "allow_bucket_deletion": False,
                          "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=attempts),
                          "connect_timeout": float(_pop(opts, "connect_timeout") or 5.0),
                          "request_timeout": float(_pop(opts, "request_timeout") or 30.0)}
    if _bool(_pop(opts, "anonymous", "anon") or False):
        kw["anonymous"] = True
    elif access or secret:
        if not (access and secret):
            raise InvalidArgumentError("S3 credentials need both an access key and a secret key; give both as storage "
                                       "options (access_key=..., secret_key=...) or neither (the AWS environment).")
        kw.update(access_key=access, secret_key=secret, session_token=token)
    if endpoint:
        ep = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        kw.update(endpoint_override=ep.netloc, scheme=ep.scheme or "https")
    if "force_virtual_addressing" in opts:
        kw["force_virtual_addressing"] = _bool(opts.pop("force_virtual_addressing"))
    _no_leftovers("s3", opts)
    return pafs.S3FileSystem(**kw)


def _gcs(opts: dict[str, Any]) -> pafs.FileSystem:
    kw: dict[str, Any] = {}
    if _bool(_pop(opts, "anonymous", "anon") or False):
        kw["anonymous"] = True
    token = _pop(opts, "access_token", "token")
    if token:
        import datetime as _dt

        kw.update(access_token=token, credential_token_expiration=_dt.datetime.now(_dt.timezone.utc)
                  + _dt.timedelta(hours=1))
    project = _pop(opts, "project_id", "project")
    if project:
        kw["project_id"] = project
    endpoint = _pop(opts, "endpoint_url", "endpoint_override")
    if endpoint:
        ep = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        kw.update(endpoint_override=ep.netloc, scheme=ep.scheme or "https")
    _no_leftovers("gs", opts)
    return pafs.GcsFileSystem(**kw)


def _azure(authority: str, opts: dict[str, Any]) -> pafs.FileSystem:
    account = _pop(opts, "account_name") or (authority.partition("@")[2].split(".")[0] if "@" in authority else None) \
        or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT")
    if not account:
        raise InvalidArgumentError("an Azure URI needs its storage account: write abfs://container@ACCOUNT.dfs.core."
                                   "windows.net/path, or give account_name= (or AZURE_STORAGE_ACCOUNT_NAME).")
    kw: dict[str, Any] = {"account_name": account}
    key = _pop(opts, "account_key") or os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
    if key:
        kw["account_key"] = key
    sas = _pop(opts, "sas_token")
    if sas:
        kw["sas_token"] = sas
    endpoint = _pop(opts, "endpoint_url", "blob_storage_authority")
    if endpoint:
        ep = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        kw.update(blob_storage_authority=ep.netloc, dfs_storage_authority=ep.netloc, blob_storage_scheme=ep.scheme,
                  dfs_storage_scheme=ep.scheme)
    _no_leftovers("abfs", opts)
    try:
        return pafs.AzureFileSystem(**kw)
    except (AttributeError, TypeError) as exc:
        raise StorageError(f"this pyarrow has no usable Azure filesystem ({exc}); upgrade pyarrow (>= 16) or pass an "
                           "fsspec filesystem (adlfs) as filesystem=.") from None


def _hdfs(scheme: str, authority: str, opts: dict[str, Any]) -> pafs.FileSystem:
    host, _, port = authority.partition(":")
    kw: dict[str, Any] = {"host": host or "default", "port": int(port or 0)}
    for k in ("user", "kerb_ticket", "replication"):
        if k in opts:
            kw[k] = opts.pop(k)
    _no_leftovers(scheme, opts)
    try:
        return pafs.HadoopFileSystem(**kw)
    except OSError as exc:
        raise StorageUnavailableError(
            f"{scheme}://{authority}: cannot connect to HDFS ({redact(str(exc))}). Install Hadoop's libhdfs and set "
            "HADOOP_HOME, JAVA_HOME and CLASSPATH (hadoop classpath --glob), then retry."
        ) from None


def _fsspec(scheme: str, opts: dict[str, Any]) -> pafs.FileSystem:
    try:
        import fsspec
    except ImportError:
        raise InvalidArgumentError(f"{scheme}:// is not a scheme statekit serves by itself (s3, s3a, gs, abfs, az, "
                                   "hdfs, file); install fsspec and its implementation of that scheme, or pass "
                                   "filesystem=.") from None
    try:
        return _wrap_fsspec(fsspec.filesystem(scheme, **opts))
    except (ImportError, ValueError) as exc:
        raise InvalidArgumentError(f"{scheme}://: fsspec cannot serve this scheme ({redact(str(exc))}); install its "
                                   "implementation or pass filesystem=.") from None


def _no_leftovers(scheme: str, opts: dict[str, Any]) -> None:
    if opts:
        raise InvalidArgumentError(f"unknown storage option(s) for {scheme}://: {', '.join(sorted(opts))}; see "
                                   "statekit.format.storage.filesystem_for for the ones each store takes.")


_handles: "OrderedDict[tuple[int, str], Any]" = OrderedDict()
_HANDLES = 64


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
    """Drop the kept input files under `path_prefix` (after a write or a delete there)."""
    with _cache_lock:
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
            data = self._raw.read() if n is None or n < 0 else self._raw.read(n)
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

    __slots__ = ("fs", "path", "scheme", "stats")

    def __init__(self, fs: pafs.FileSystem, path: str, scheme: str, stats: TransferStats | None = None) -> None:
        self.fs = fs
        self.path = path
        self.scheme = scheme
        self.stats = stats if stats is not None else TransferStats()

    def at(self, path: str) -> "StoragePath":
        """The path `path` (inside the filesystem, no scheme) on the same filesystem, sharing `stats`."""
        return StoragePath(self.fs, path, self.scheme, self.stats)

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
        with translated(self):
            with self.fs.open_input_stream(self.path) as f:
                data = f.read()
        self.stats.add_read(len(data))
        return data

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def read_buffer(self, size: int | None = None) -> pa.Buffer:
        """The whole object in Arrow memory (at most `size` + 1 bytes when `size` is given)."""
        with translated(self):
            with self.fs.open_input_stream(self.path) as f:
                buf = f.read_buffer() if size is None else f.read_buffer(size + 1)
        self.stats.add_read(buf.size)
        return buf

    def read_range(self, start: int, length: int) -> pa.Buffer:
        """Bytes [start, start + length) in one ranged request (fewer at the object's end)."""
        with translated(self):
            got = _input_file(self.fs, self.path).read_at(length, start)
        buf = got if isinstance(got, pa.Buffer) else pa.py_buffer(got)
        self.stats.add_read(buf.size)
        return buf

    def read_range_array(self, lo: int, hi: int) -> "np.ndarray":
        """Bytes [lo, hi) as a read-only uint8 array: one request when short, else up to `_PARALLEL` ranged
        requests at once into one buffer (a single stream is slower than the store serves)."""
        import numpy as np

        out = np.empty(hi - lo, np.uint8)
        step = max(_PART, -(-(hi - lo) // _PARALLEL))  # one request per thread, none smaller than _PART
        parts = [(a, min(a + step, hi)) for a in range(lo, hi, step)]

        def fetch(part: tuple[int, int]) -> None:
            a, b = part
            buf = self.read_range(a, b - a)
            if buf.size != b - a:
                raise StorageError(f"{self}: holds fewer bytes than asked for ({a + buf.size} < {b}); it changed "
                                   "or was truncated while being read. Copy the savepoint again or take a new one.")
            out[a - lo: b - lo] = np.frombuffer(buf, np.uint8)

        if len(parts) <= 1:
            for part in parts:
                fetch(part)
        else:
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
