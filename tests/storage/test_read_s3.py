"""Reading savepoints on a real S3 server: every corpus Flink savepoint, retained checkpoints and a statekit savepoint
read exactly as from local disk; a one-key `get` transfers only its key group's bytes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.errors import (
    CorruptSavepointError,
    NotASavepointError,
    StatekitError,
    StorageAccessError,
    StorageError,
)
from statekit.format.storage import locate
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.state import ListStateDescriptor, ValueStateDescriptor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flink"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if re.fullmatch(r"\d+\.\d+\.\d+", p.name))
VERSION_CASES = [(v, p.name) for v in VERSIONS for p in sorted((FIXTURES / v).iterdir()) if p.is_dir()]
OTHER_CASES = [(kind, p.name) for kind in ("sql/2.3.0", "avro", "pyflink", "pyflink-thread", "pyflink-ttl")
               if (FIXTURES / kind).is_dir() for p in sorted((FIXTURES / kind).iterdir())
               if (p / "savepoint" / "_metadata").is_file()]


def _read(fn, *args):
    """A table, or the kind of error reading it gives (the same savepoint fails the same way wherever it lives)."""
    try:
        return fn(*args)
    except StatekitError as exc:
        if isinstance(exc, (StorageError,)) or "missing" in str(exc) or "truncated" in str(exc):
            raise
        return type(exc).__name__


def everything(sp) -> dict:
    """Every table of every operator, and the metadata, of an opened savepoint."""
    out: dict = {"checkpoint_id": sp.checkpoint_id, "kind": sp.kind}
    for op in sp.operators:
        ident = op.identifier
        entry: dict = {"meta": json.dumps(op.to_json(), sort_keys=True, default=str)}
        if op.key_type is not None:
            entry["keyed"] = _read(sp.keyed_table, ident)
            entry["timers"] = _read(sp.timers, ident)
        for s in op.operator_states:
            entry[s.name] = _read(sp.broadcast_state if s.redistribution == "broadcast" else sp.list_state, ident,
                                  s.name)
        out[ident.uid_hash] = entry
    return out


def assert_same(local, remote) -> None:
    a, b = everything(local), everything(remote)
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            assert a[k].keys() == b[k].keys(), k
            for t in a[k]:
                x, y = a[k][t], b[k][t]
                assert (x.equals(y) if isinstance(x, pa.Table) else x == y), (k, t)
        else:
            assert a[k] == b[k], k


def _upload(s3_server, local: Path, name: str) -> str:
    return s3_server.upload_dir(local, name)


@pytest.mark.parametrize("version,case", VERSION_CASES)
def test_corpus_flink_savepoints_read_as_from_disk(s3_server, version, case):
    local = FIXTURES / version / case / "savepoint"
    uri = _upload(s3_server, local, f"corpus/{version}/{case}")
    remote = Savepoint.open(uri, storage_options=s3_server.options())
    assert str(remote.path) == uri
    assert_same(Savepoint.open(local), remote)


@pytest.mark.parametrize("kind,case", OTHER_CASES)
def test_sql_avro_and_pyflink_savepoints_read_as_from_disk(s3_server, kind, case):
    local = FIXTURES / kind / case / "savepoint"
    uri = _upload(s3_server, local, f"other/{kind}/{case}")
    assert_same(Savepoint.open(local), Savepoint.open(uri, storage_options=s3_server.options()))


def _relocated_checkpoints(tmp_path: Path, case: str, uri_base: str) -> Path:
    """A copy of a retained-checkpoint fixture whose job directory is then uploaded to `uri_base`."""
    job = tmp_path / case
    shutil.copytree(FIXTURES / "checkpoints" / case / "job", job)
    return job


@pytest.mark.parametrize("case", ["hashmap-full", "hashmap-snappy", "rocksdb-incremental", "rocksdb-claim"])
def test_retained_checkpoints_with_absolute_paths(s3_server, case):
    """`chk-N/_metadata` written by the job names absolute paths of another machine: they are found on the store."""
    base = FIXTURES / "checkpoints" / case
    jobs = [p for p in base.rglob("_metadata") if p.parent.name.startswith("chk-")]
    assert jobs
    uri = _upload(s3_server, base, f"checkpoints/{case}")
    opts = s3_server.options()
    for md in jobs:
        rel = md.parent.relative_to(base).as_posix()
        assert_same(Savepoint.open(md.parent), Savepoint.open(f"{uri}/{rel}", storage_options=opts))


def _statekit_savepoint(path: Path) -> Path:
    with SavepointBuilder(path, checkpoint_id=7, rows_per_file=40) as b:
        op = b.add_operator("counter", parallelism=2, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("count", "bigint"),
                                          ListStateDescriptor("seen", "string")])
        op.write_keyed(pa.table({"key": list(range(200)), "count": list(range(200)),
                                 "seen": [[str(i)] for i in range(200)]}))
        op.write_timers(pa.table({"key": [1, 2], "timestamp": [10, 20], "domain": ["event", "event"]}))
    return path


def test_statekit_savepoint_reads_as_from_disk(s3_server, tmp_path):
    local = _statekit_savepoint(tmp_path / "sp")
    uri = _upload(s3_server, local, "statekit/sp")
    remote = Savepoint.open(uri, storage_options=s3_server.options())
    assert_same(Savepoint.open(local), remote)
    assert remote.get("counter", 5) == {"count": 5, "seen": ["5"]}
    assert check(remote).ok


def test_one_key_get_reads_only_its_key_group(s3_server):
    local = FIXTURES / "2.3.0" / "long-hashmap-canonical" / "savepoint"
    uri = _upload(s3_server, local, "get/long-hashmap")
    sp = Savepoint.open(uri, storage_options=s3_server.options())
    expect = Savepoint.open(local)
    op = sp.operators[0].identifier
    key = expect.keyed_table(op).column("key")[0].as_py()
    stats = sp.path.stats
    before = stats.bytes_read
    assert sp.get(op, key) == expect.get(op, key)
    got = stats.bytes_read - before
    files = sp.flink.files
    handle = next(h for h in sp.flink.keyed_handles(sp.flink_operator(op)))
    total = files.size(handle.delegate)
    assert 0 < got < total, (got, total)  # a ranged read: less than its file


def test_native_rocksdb_downloads_into_a_removed_temp_dir(s3_server, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    local = FIXTURES / "2.3.0" / "string-rocksdb-native" / "savepoint"
    uri = _upload(s3_server, local, "native/string-rocksdb")
    sp = Savepoint.open(uri, storage_options=s3_server.options())
    assert_same(Savepoint.open(local), sp)
    del sp
    import gc

    gc.collect()
    assert not list(tmp_path.glob("statekit-flink-rocksdb-*"))


def test_missing_truncated_and_not_a_savepoint(s3_server, tmp_path):
    local = FIXTURES / "2.3.0" / "long-hashmap-canonical" / "savepoint"
    uri = _upload(s3_server, local, "damaged/missing")
    opts = s3_server.options()
    state_files = [p for p in local.iterdir() if p.name != "_metadata"]
    assert state_files
    s3_server.client().delete_object(Bucket="statekit-test", Key=f"damaged/missing/{state_files[0].name}")
    with pytest.raises(CorruptSavepointError, match="missing") as e:
        everything(Savepoint.open(uri, storage_options=opts))
    assert uri in str(e.value)
    uri = _upload(s3_server, local, "damaged/truncated")
    data = state_files[0].read_bytes()
    s3_server.client().put_object(Bucket="statekit-test", Key=f"damaged/truncated/{state_files[0].name}",
                                  Body=data[: len(data) // 2])
    with pytest.raises(CorruptSavepointError, match="truncated|past its end"):
        everything(Savepoint.open(uri, storage_options=opts))
    with pytest.raises(NotASavepointError):
        Savepoint.open("s3://statekit-test/nothing-here", storage_options=opts)
    with pytest.raises(NotASavepointError, match="bucket"):
        Savepoint.open("s3://no-such-bucket-x/sp", storage_options=opts)
    sk = _upload(s3_server, _statekit_savepoint(tmp_path / "sk"), "damaged/statekit")
    first = next(k for k in s3_server.keys("damaged/statekit/") if k.endswith(".parquet"))
    s3_server.client().put_object(Bucket="statekit-test", Key=first, Body=b"PAR1short")
    sp = Savepoint.open(sk, storage_options=opts)
    assert not check(sp).ok
    with pytest.raises(CorruptSavepointError):
        sp.keyed_table("counter")


def test_wrong_credentials_when_opening(s3_server):
    uri = _upload(s3_server, FIXTURES / "2.3.0" / "long-hashmap-canonical" / "savepoint", "auth/long")
    bad = {**s3_server.options(), "secret_key": "NotTheSecret0000"}
    with pytest.raises(StorageAccessError) as e:
        Savepoint.open(uri, storage_options=bad)
    assert "NotTheSecret0000" not in str(e.value) and uri in str(e.value)


def test_locate_with_open_storage_path(s3_server):
    uri = _upload(s3_server, FIXTURES / "2.3.0" / "long-hashmap-canonical" / "savepoint", "located/long")
    where = locate(uri, storage_options=s3_server.options())
    assert Savepoint.open(where).operators


def test_full_read_in_many_batches_reuses_buffers_and_reads_as_from_disk(s3_server, tmp_path, monkeypatch):
    """Batches far smaller than the savepoint: each fetched into a buffer a decoded batch gave back, and the tables
    equal the local read's (a column pointing into a reused buffer would show a later batch's bytes)."""
    from statekit.format.flink import reader
    from statekit.savepoint.flink_out import write_flink

    src = tmp_path / "sk"
    n = 3000
    with SavepointBuilder(src) as b:
        for uid, keys in (("runs", [f"key-{i:05d}" for i in range(n)]),  # strided runs: cut from views
                          ("scanned", [f"key-{i}" + "x" * (i % 11) for i in range(n)])):  # located one by one
            op = b.add_operator(uid, parallelism=2, max_parallelism=128, key_type="string",
                                keyed_states=[ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "string")])
            op.write_keyed(pa.table({"key": pa.array(keys), "a": pa.array(range(n), pa.int64()),
                                     "b": pa.array([k * 2 for k in keys])}))
    local = write_flink(src, tmp_path / "flink")
    uri = _upload(s3_server, local, "batches/sp")
    monkeypatch.setattr(reader, "BATCH_BYTES", 2048)
    allocated = []
    real = reader.allocate
    monkeypatch.setattr(reader, "allocate", lambda size, dtype: allocated.append(size) or real(size, dtype))
    for uid in ("runs", "scanned"):
        allocated.clear()
        remote = Savepoint.open(uri, storage_options=s3_server.options())
        got = remote.keyed_table(uid, with_key_group=True)
        assert got.equals(Savepoint.open(local).keyed_table(uid, with_key_group=True)), uid
        batches = len(remote.flink.key_group_batches(remote.flink_operator(uid)))
        assert batches > 3 * reader._WINDOW and 0 < len(allocated) < batches // 2, (uid, batches, len(allocated))
