"""RocksDB native checkpoints: equal to canonical snapshots, incremental (shared SSTs), corruption typed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.backends.rocksdb import NATIVE_SIDECAR, RocksDBKeyedStateBackend, native_to_arrow
from statekit.errors import CorruptSavepointError, InvalidArgumentError, StatekitError
from statekit.keygroups import KeyGroupRange, assign_to_key_group
from statekit.state import ListStateDescriptor, MapStateDescriptor, StateTtlConfig, ValueStateDescriptor
from statekit.types import PICKLED

COUNT = ValueStateDescriptor("count", "bigint")
TAGS = ListStateDescriptor("tags", "string")
ATTRS = MapStateDescriptor("attrs", "bigint", "struct<a:double,b:string>")
BLOB = ValueStateDescriptor("blob", PICKLED)


def make(tmp_path: Path, clock, name: str = "db", **kw) -> RocksDBKeyedStateBackend:
    kw.setdefault("key_group_range", KeyGroupRange(0, 127))
    return RocksDBKeyedStateBackend(
        key_type=pa.string(), max_parallelism=128, clock=clock, directory=tmp_path / name, **kw
    )


def scope(b, key, ns=None):
    b.set_current_key(key, assign_to_key_group(key, 128, pa.string()))
    b.set_current_namespace(ns)


def fill(b, n: int, *, start: int = 0) -> None:
    count, tags, attrs, blob = (b.get_state(d) for d in (COUNT, TAGS, ATTRS, BLOB))
    for i in range(start, start + n):
        scope(b, f"k{i}")
        count.update(i)
        if i % 3 == 0:
            tags.add_all([f"t{i}", "x"])
        if i % 5 == 0:
            attrs.put(i, {"a": i / 2, "b": None})
            attrs.put(-i, {"a": None, "b": "neg"})
        if i % 7 == 0:
            blob.update({"i": i})
    scope(b, "win", (0, 100))
    tags.add("windowed")


def read_native(b, snap, **kw) -> pa.Table:
    return native_to_arrow(snap.native_dir, key_type="string", infos=snap.infos, max_parallelism=128, **kw)


def test_native_equals_canonical(tmp_path, clock):
    b = make(tmp_path, clock)
    fill(b, 500)
    canonical = b.snapshot(1).table()
    snap = b.snapshot(2, native=True, target_dir=tmp_path / "chk-2")
    assert snap.native_dir == tmp_path / "chk-2" and NATIVE_SIDECAR in snap.native_files
    assert any(f.endswith(".sst") for f in snap.native_files) and "CURRENT" in snap.native_files
    with pytest.raises(ValueError):
        snap.table()
    native = read_native(b, snap)
    assert native.equals(canonical)
    assert "namespace" in native.column_names and native.schema.field("blob").type == pa.binary()
    b.close()


def test_native_key_group_range(tmp_path, clock):
    b = make(tmp_path, clock)
    fill(b, 300)
    snap = b.snapshot(1, native=True, target_dir=tmp_path / "chk")
    full = read_native(b, snap)
    part = read_native(b, snap, key_groups=KeyGroupRange(10, 60))
    kgs = full.column("key_group").to_pylist()
    assert part.num_rows == sum(10 <= k <= 60 for k in kgs) > 0
    assert set(part.column("key_group").to_pylist()) <= set(range(10, 61))


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_native_to_arrow_never_modifies_the_checkpoint(tmp_path, clock):
    b = make(tmp_path, clock)
    fill(b, 100)
    snap = b.snapshot(1, native=True, target_dir=tmp_path / "chk")
    b.close()
    before = _digest(snap.native_dir)
    read_native(b, snap)
    assert _digest(snap.native_dir) == before


def test_incremental_checkpoints_share_sst_files(tmp_path, clock):
    b = make(tmp_path, clock)
    fill(b, 20_000)
    first = b.snapshot(1, native=True, target_dir=tmp_path / "chk-1")
    count = b.get_state(COUNT)
    for i in range(20):  # a few changes
        scope(b, f"k{i}")
        count.update(-i)
    second = b.snapshot(2, native=True, target_dir=tmp_path / "chk-2")
    inodes = {os.stat(first.native_dir / f).st_ino for f in first.native_files}
    ssts = [second.native_dir / f for f in second.native_files if f.endswith(".sst")]
    shared = [p for p in ssts if os.stat(p).st_ino in inodes]
    new_bytes = sum(p.stat().st_size for p in ssts if p not in shared)
    total = sum(p.stat().st_size for p in ssts)
    assert shared, "no SST file was hard-linked from the previous checkpoint"
    assert new_bytes < 0.2 * total, (new_bytes, total)
    rows = {r["key"]: r["count"] for r in read_native(b, second).to_pylist()}
    assert rows["k5"] == -5 and rows["k100"] == 100
    rows1 = {r["key"]: r["count"] for r in read_native(b, first).to_pylist()}
    assert rows1["k5"] == 5  # the first checkpoint is unaffected


def test_truncated_sst_raises_corrupt(tmp_path, clock):
    b = make(tmp_path, clock)
    fill(b, 2_000)
    snap = b.snapshot(1, native=True, target_dir=tmp_path / "chk")
    b.close()
    sst = max((snap.native_dir / f for f in snap.native_files if f.endswith(".sst")), key=lambda p: p.stat().st_size)
    data = sst.read_bytes()
    os.unlink(sst)  # break the hard link first: damage this copy only
    sst.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptSavepointError, match="cannot be read"):
        read_native(b, snap)


def test_flipped_bytes_raise_corrupt(tmp_path, clock):
    b = make(tmp_path, clock)
    fill(b, 2_000)
    snap = b.snapshot(1, native=True, target_dir=tmp_path / "chk")
    b.close()
    sst = max((snap.native_dir / f for f in snap.native_files if f.endswith(".sst")), key=lambda p: p.stat().st_size)
    data = bytearray(sst.read_bytes())
    os.unlink(sst)
    for i in range(100, len(data) // 2, 997):
        data[i] ^= 0xFF
    sst.write_bytes(bytes(data))
    with pytest.raises(StatekitError):
        read_native(b, snap)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CorruptSavepointError, match="not a RocksDB checkpoint"):
        native_to_arrow(tmp_path, key_type="string", infos=[], max_parallelism=128)


def test_native_target_must_be_new(tmp_path, clock):
    b = make(tmp_path, clock)
    fill(b, 10)
    b.snapshot(1, native=True, target_dir=tmp_path / "chk")
    with pytest.raises(InvalidArgumentError):
        b.snapshot(2, native=True, target_dir=tmp_path / "chk")
    with pytest.raises(InvalidArgumentError):
        b.snapshot(3, native=True)


def test_native_leaves_out_expired_ttl_entries(tmp_path, clock):
    b = make(tmp_path, clock)
    h = b.get_state(ValueStateDescriptor("v", "bigint", ttl=StateTtlConfig(100)))
    scope(b, "old")
    h.update(1)
    clock.advance(60)
    scope(b, "new")
    h.update(2)
    clock.advance(50)
    snap = b.snapshot(1, native=True, target_dir=tmp_path / "chk")
    assert read_native(b, snap).to_pylist() == b.snapshot(2).table().to_pylist()
    assert [r["key"] for r in read_native(b, snap).to_pylist()] == ["new"]


def test_restored_unregistered_state_is_in_native_checkpoint(tmp_path, clock):
    a = make(tmp_path, clock, "a")
    fill(a, 50)
    table = a.snapshot(1).table()
    b = make(tmp_path, clock, "b", trust_pickled=True)
    b.restore([table], a.state_infos())
    snap = b.snapshot(2, native=True, target_dir=tmp_path / "chk")
    assert read_native(b, snap).equals(table)


def test_working_directory_is_reset_and_removed(tmp_path, clock):
    b = make(tmp_path, clock)
    fill(b, 10)
    b.close()
    assert not (tmp_path / "db" / "db").exists()
    c = make(tmp_path, clock)  # a fresh backend in a used directory starts empty
    c.get_state(COUNT)
    assert c.snapshot(1).table().num_rows == 0
    tmp_backend = RocksDBKeyedStateBackend(
        key_type=pa.string(), max_parallelism=128, key_group_range=KeyGroupRange(0, 127), clock=clock
    )
    own = tmp_backend.directory
    assert own.exists()
    tmp_backend.close()
    assert not own.exists()
