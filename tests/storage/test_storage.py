"""The filesystem layer (`statekit.format.storage`) against a real S3 server: resolution, reads, writes, errors, secrets."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest
from s3_server import BUCKET, FaultProxy

from statekit.errors import (
    InvalidArgumentError,
    StorageAccessError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from statekit.format.storage import StoragePath, is_remote, locate, parse_storage_options, redact


def test_local_paths_stay_paths(tmp_path):
    assert locate(str(tmp_path)) == tmp_path
    assert locate(f"file://{tmp_path}") == tmp_path
    assert not is_remote(str(tmp_path)) and not is_remote(f"file://{tmp_path}")
    assert is_remote("s3://b/k") and is_remote("gs://b/k") and is_remote("abfs://c@acct.dfs.core.windows.net/k")


def test_schemes_resolve_to_pyarrow_filesystems():
    s3 = locate("s3a://bucket/a/b", storage_options={"endpoint_url": "http://127.0.0.1:1", "access_key": "AKIAEXAMPLE1",
                                                    "secret_key": "secret-example-1"})
    assert isinstance(s3, StoragePath) and isinstance(s3.fs, pafs.S3FileSystem)
    assert s3.path == "bucket/a/b" and str(s3) == "s3a://bucket/a/b"
    assert (s3 / "x" / "_metadata").name == "_metadata" and str(s3.parent) == "s3a://bucket/a"
    assert str((s3 / "../c").resolve()) == "s3a://bucket/a/c"
    gs = locate("gs://bucket/p", storage_options={"anonymous": "true"})
    assert isinstance(gs.fs, pafs.GcsFileSystem) and gs.path == "bucket/p"


def test_fsspec_filesystem_is_accepted(tmp_path):
    import fsspec

    (tmp_path / "f.bin").write_bytes(b"0123456789")
    p = locate(str(tmp_path), filesystem=fsspec.filesystem("file"))
    assert isinstance(p, StoragePath)
    assert (p / "f.bin").read_range(2, 3).to_pybytes() == b"234"
    assert [q.name for q in p.iter_files()] == ["f.bin"]


def test_bad_options_are_refused_without_echoing_values():
    with pytest.raises(InvalidArgumentError, match="unknown storage option") as e:
        locate("s3://b/k", storage_options={"colour": "blue-secret-value"})
    assert "blue-secret-value" not in str(e.value)
    with pytest.raises(InvalidArgumentError) as e:
        locate("s3://AKIAUSER:topsecretvalue@bucket/k")
    assert "topsecretvalue" not in str(e.value) and "AKIAUSER" not in str(e.value)
    with pytest.raises(InvalidArgumentError) as e:
        parse_storage_options(["secretnoequals"])
    assert parse_storage_options(["a=b=c", "endpoint_url=http://x"]) == {"a": "b=c", "endpoint_url": "http://x"}


def test_ranged_reads_listing_writes_and_deletes(s3_server, s3_prefix):
    root = locate(s3_prefix, storage_options=s3_server.options())
    (root / "d" / "one.bin").write_bytes(bytes(range(256)) * 4)
    (root / "two.bin").write_bytes(b"two")
    assert root.is_dir() and (root / "two.bin").is_file() and not (root / "three").exists()
    assert sorted(p.relative_to(root) for p in root.iter_files()) == ["d/one.bin", "two.bin"]
    assert (root / "d" / "one.bin").stat().st_size == 1024
    before = root.stats.bytes_read
    assert (root / "d" / "one.bin").read_range(300, 10).to_pybytes() == bytes(range(44, 54))
    assert root.stats.bytes_read - before == 10
    with (root / "d" / "one.bin").open() as f:
        f.seek(1020)
        assert f.read() == bytes(range(252, 256))
    (root / "two.bin").delete()
    (root / "never-there").delete()  # a missing object is not an error
    assert sorted(p.relative_to(root) for p in root.iter_files()) == ["d/one.bin"]


def test_download_and_upload_stream(s3_server, s3_prefix, tmp_path):
    root = locate(s3_prefix, storage_options=s3_server.options())
    src = tmp_path / "big.bin"
    src.write_bytes(b"x" * (20 << 20))  # more than one part of a multipart upload
    assert (root / "big.bin").upload(src) == 20 << 20
    assert (root / "big.bin").download(tmp_path / "back.bin") == 20 << 20
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()


def test_credentials_from_the_environment(s3_server, s3_prefix, monkeypatch):
    opts = s3_server.options()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", opts["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", opts["secret_key"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", opts["endpoint_url"])
    root = locate(s3_prefix)
    (root / "env.txt").write_bytes(b"from the environment")
    assert (root / "env.txt").read_bytes() == b"from the environment"


def test_credentials_from_a_profile(s3_server, s3_prefix, tmp_path, monkeypatch):
    opts = s3_server.options()
    creds = tmp_path / "credentials"
    creds.write_text(f"[test]\naws_access_key_id = {opts['access_key']}\naws_secret_access_key = {opts['secret_key']}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    root = locate(s3_prefix, storage_options={"profile": "test", "endpoint_url": opts["endpoint_url"]})
    (root / "p.txt").write_bytes(b"profile")
    assert (root / "p.txt").read_bytes() == b"profile"


def _no_secret(text: str, *secrets: str) -> None:
    for s in secrets:
        assert s not in text


def test_wrong_credentials_are_typed_and_secret_free(s3_server, s3_prefix):
    good = s3_server.options()
    bad = {**good, "secret_key": "WrongSecretValue12345"}
    root = locate(s3_prefix, storage_options=bad)
    with pytest.raises(StorageAccessError) as e:
        (root / "x").read_bytes()
    assert s3_prefix in str(e.value) and "AWS_SECRET_ACCESS_KEY" in str(e.value)
    _no_secret(str(e.value), "WrongSecretValue12345", good["access_key"])
    assert redact(f"key {good['secret_key']} here") == "key *** here"


def test_no_write_permission(s3_server, s3_prefix):
    root = locate(s3_prefix, storage_options=s3_server.options("reader"))
    with pytest.raises(StorageAccessError, match="may not write") as e:
        (root / "x").write_bytes(b"nope")
    _no_secret(str(e.value), s3_server.reader["secret_key"], s3_server.reader["access_key"])


def test_missing_object_and_bucket(s3_server, s3_prefix):
    root = locate(s3_prefix, storage_options=s3_server.options())
    with pytest.raises(StorageNotFoundError, match="does not exist"):
        (root / "missing").read_bytes()
    other = locate("s3://no-such-bucket-here/x", storage_options=s3_server.options())
    assert not other.bucket_exists()
    with pytest.raises(StorageNotFoundError, match="bucket does not exist"):
        (other / "y").write_bytes(b"1")


def test_transient_503_is_retried_then_bounded(s3_server, s3_prefix):
    root = locate(s3_prefix, storage_options=s3_server.options())
    (root / "r.bin").write_bytes(b"retry me")
    proxy = FaultProxy(s3_server.port, fail=2)
    try:
        flaky = locate(s3_prefix, storage_options=s3_server.options(endpoint=proxy.endpoint))
        assert (flaky / "r.bin").read_bytes() == b"retry me"
        assert proxy.failed == 2
    finally:
        proxy.close()
    proxy = FaultProxy(s3_server.port, fail=1000)
    try:
        down = locate(s3_prefix, storage_options={**s3_server.options(endpoint=proxy.endpoint), "max_attempts": "3"})
        with pytest.raises(StorageUnavailableError, match="retried"):
            (down / "r.bin").read_bytes()
        assert 3 <= proxy.failed <= 4  # bounded
    finally:
        proxy.close()


def test_stopped_server_is_unavailable(s3_prefix):
    root = locate(f"s3://{BUCKET}/x", storage_options={"endpoint_url": "http://127.0.0.1:9", "access_key": "AKIAX0",
                                                       "secret_key": "sekret-zero", "max_attempts": "2",
                                                       "connect_timeout": "1"})
    with pytest.raises(StorageUnavailableError) as e:
        (root / "y").read_bytes()
    assert "sekret-zero" not in str(e.value)


def test_local_path_has_no_storage_options(tmp_path):
    with pytest.raises(InvalidArgumentError, match="local path"):
        locate(str(Path(tmp_path)), storage_options={"region": "x"})
