"""The filesystem of one store, built from where its user keeps credentials and endpoints (and `redact`, which keeps them out of text).

S3 (``s3://``, ``s3a://``), GCS (``gs://``), Azure (``abfs://``, ``az://``) and HDFS (``hdfs://``) are
`pyarrow.fs`'s C++ filesystems; any other scheme is fsspec's. Every credential given or read here is
remembered only to be removed from messages (`redact`); none is kept anywhere else.
"""

from __future__ import annotations

import configparser
import os
import threading
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from statekit.errors import InvalidArgumentError, StorageError, StorageUnavailableError

__all__ = ["AZURE_SCHEMES", "DEFAULT_MAX_ATTEMPTS", "GCS_SCHEMES", "HDFS_SCHEMES", "S3_SCHEMES", "filesystem_for",
           "parse_storage_options", "redact", "wrap_filesystem"]

#: schemes served by pyarrow's own filesystems; any other scheme goes to fsspec (when installed)
S3_SCHEMES = ("s3", "s3a", "s3n")
GCS_SCHEMES = ("gs", "gcs")
AZURE_SCHEMES = ("abfs", "abfss", "az")
HDFS_SCHEMES = ("hdfs", "viewfs")
#: transient failures (HTTP 500/503, throttling, dropped connections) are retried this many times with backoff
DEFAULT_MAX_ATTEMPTS = 4

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


def wrap_filesystem(filesystem: Any) -> pafs.FileSystem:
    """A `pyarrow.fs` filesystem as it is, an fsspec one wrapped for Arrow."""
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
        return wrap_filesystem(fsspec.filesystem(scheme, **opts))
    except (ImportError, ValueError) as exc:
        raise InvalidArgumentError(f"{scheme}://: fsspec cannot serve this scheme ({redact(str(exc))}); install its "
                                   "implementation or pass filesystem=.") from None


def _no_leftovers(scheme: str, opts: dict[str, Any]) -> None:
    if opts:
        raise InvalidArgumentError(f"unknown storage option(s) for {scheme}://: {', '.join(sorted(opts))}; see "
                                   "statekit.format.storage.filesystem_for for the ones each store takes.")
