"""The bulk Flink writer of the regular layout: a statekit savepoint read file by file, encoded with strided numpy fills,
writes exactly the bytes of the whole-table and per-state general paths; damaged input is refused with nothing written."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.errors import CorruptSavepointError
from statekit.format import direct_file as D
from statekit.format import files as F
from statekit.format.files import checksum
from statekit.format.flink import regular_out as R
from statekit.format.flink import writer as W
from statekit.format.keyed_stream import KeyedFiles
from statekit.format.manifest import FileEntry
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.flink_out import write_flink
from statekit.state import ValueStateDescriptor

TYPES = {"a": "bigint", "i": "int", "s": "smallint", "t": "tinyint", "f": "float", "d": "double", "ok": "boolean"}


def build(path: Path, *, max_parallelism: int, parallelism: int, rows_per_file: int, nulls: bool = True,
          timers: bool = False) -> Path:
    """A statekit savepoint of every primitive state type (some with nulls), over several files and row groups;
    with `timers`, event and processing timers (several per key, negative timestamps, keys without state too)."""
    keys = list(range(-3000, 3000, 3))
    n = len(keys)

    def col(name, values, typ):
        if nulls and name in ("a", "ok"):
            values = [None if j % (7 if name == "a" else 5) == 0 else v for j, v in enumerate(values)]
        return pa.array(values, typ)

    table = pa.table({
        "key": pa.array(keys, pa.int64()),
        "a": col("a", [k * 11 for k in keys], pa.int64()),
        "i": col("i", [k * 3 for k in keys], pa.int32()),
        "s": col("s", [k % 30000 for k in keys], pa.int16()),
        "t": col("t", [k % 100 for k in keys], pa.int8()),
        "f": col("f", [k / 4 for k in keys], pa.float32()),
        "d": col("d", [k / 7 for k in keys], pa.float64()),
        "ok": col("ok", [k % 2 == 0 for k in keys], pa.bool_()),
    })
    assert table.num_rows == n
    with SavepointBuilder(path, rows_per_file=rows_per_file) as b:
        op = b.add_operator("op", parallelism=parallelism, max_parallelism=max_parallelism, key_type="bigint",
                            keyed_states=[ValueStateDescriptor(k, v) for k, v in TYPES.items()])
        op.write_keyed(table)
        if timers:
            tkeys = [k for k in range(-3100, 3100, 5) for _ in range(1 + (k % 3 == 0))]
            op.write_timers(pa.table({
                "key": pa.array(tkeys, pa.int64()),
                "timestamp": pa.array([k * 1000 - 7 * j for j, k in enumerate(tkeys)], pa.int64()),
                "domain": pa.array(["event" if j % 4 else "processing" for j in range(len(tkeys))]),
            }))
    return path


def normalized(path: Path) -> bytes:
    """`_metadata` with each state file's random name replaced by a digest of its bytes."""
    def digest(m: re.Match) -> bytes:
        return hashlib.sha1((path / m.group(0).decode()).read_bytes()).hexdigest().encode()
    return re.sub(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", digest,
                  (path / "_metadata").read_bytes())


@pytest.mark.parametrize("max_parallelism,parallelism,direct,timers", [
    (128, 3, True, False), (300, 2, True, True), (128, 1, False, True), (128, 2, True, True)])
def test_file_by_file_writes_the_bytes_of_the_whole_table_and_general_paths(tmp_path, monkeypatch, max_parallelism,
                                                                           parallelism, direct, timers):
    """Tiny buffers, blocks and row groups (key groups spanning row groups, buffers refilled inside a key group),
    files whose ranges straddle subtask ranges, nulls, 1- and 2-byte key-group prefixes, direct or buffered
    writes, timers (in key groups with and without keyed rows): three paths, one output."""
    monkeypatch.setattr(F, "ROW_GROUP_ROWS", 9)
    src = build(tmp_path / "sk", max_parallelism=max_parallelism, parallelism=parallelism, rows_per_file=450,
                timers=timers)
    sp = Savepoint.open(src)
    files = sp.keyed_stream("op")
    assert files is not None and len(files.entries) > 3
    monkeypatch.setattr(R, "CHUNK_ROWS", 5)
    monkeypatch.setattr(D, "WRITEBACK_BYTES", 1000)
    monkeypatch.setattr(D, "BLOCK", 2 * D.ALIGN)
    monkeypatch.setattr(D, "USE_DIRECT", direct)
    read = []
    batches = KeyedFiles.batches
    monkeypatch.setattr(KeyedFiles, "batches", lambda self, a, z: read.append((a, z)) or batches(self, a, z))
    streamed = write_flink(src, tmp_path / "streamed")
    assert len(read) == parallelism  # one range per subtask, read file by file
    with monkeypatch.context() as m:
        m.setattr(Savepoint, "keyed_stream", lambda self, op: None)
        whole = write_flink(src, tmp_path / "whole")  # the whole table, then the same bulk encoder
        m.setattr(W, "_all_primitive", lambda *a: False)
        general = write_flink(src, tmp_path / "general")  # per state, `keyed_runs`
    assert normalized(streamed) == normalized(whole) == normalized(general)
    out = Savepoint.open(streamed)
    assert out.keyed_table("op").sort_by("key").to_pylist() == sp.keyed_table("op").sort_by("key").to_pylist()
    order = [("key", "ascending"), ("timestamp", "ascending"), ("domain", "ascending")]
    assert out.timers("op").sort_by(order).to_pylist() == sp.timers("op").sort_by(order).to_pylist()
    if timers:
        assert out.timers("op").num_rows > 1000 and len(set(out.timers("op").column("domain").to_pylist())) == 2


def test_bulk_path_applies_only_to_exact_primitive_columns():
    """A column whose Arrow type is not exactly the serializer's (numpy would convert it silently) takes the
    general path; so do list/map states and window namespaces."""
    from statekit.format.flink.serializers_out import flink_type, keyed_meta_info

    def layout(ddl):
        t = flink_type(ddl)
        return W.KeyedLayoutOut(flink_type("bigint"), (W.KeyedStateOut("v", "value", t, keyed_meta_info("v", "value", t), "v"),),
                                (), 128)

    schema = pa.schema([("key_group", pa.int32()), ("key", pa.int64()), ("v", pa.int64())])
    assert R.is_regular(layout("bigint"), schema)
    assert not R.is_regular(layout("int"), schema)  # int64 values for an Integer serializer
    assert not R.is_regular(layout("string"), schema.set(2, pa.field("v", pa.string())))
    assert not R.is_regular(layout("bigint"), schema.set(1, pa.field("key", pa.int32())))


def _rewrite(sp: Path, rel: str, table: pa.Table) -> None:
    """Replace a data file and patch the manifest's size and checksum, so only its content is wrong."""
    import json

    pq.write_table(table, sp / rel)
    data = (sp / rel).read_bytes()
    m = json.loads((sp / "_metadata.json").read_text())
    for op in m["operators"]:
        for f in op["files"]:
            if f["path"] == rel:
                f.update(bytes=len(data), checksum=checksum(data), rows=table.num_rows)
    (sp / "_metadata.json").write_text(json.dumps(m))


@pytest.mark.parametrize("damage", ["unsorted", "outside"])
def test_rows_out_of_key_group_order_are_refused_and_nothing_is_written(tmp_path, damage):
    src = build(tmp_path / "sk", max_parallelism=128, parallelism=2, rows_per_file=400, nulls=False)
    entries = Savepoint.open(src).keyed_files("op")
    e, nxt = entries[0], entries[1]
    t = pq.read_table(src / e.path)
    if damage == "unsorted":
        bad = pa.concat_tables([t.slice(t.num_rows - 1), t.slice(0, t.num_rows - 1)])
    else:  # a row of the next file's key groups, correctly tagged, in the first file
        bad = pa.concat_tables([t, pq.read_table(src / nxt.path).slice(0, 1)])
    _rewrite(src, e.path, bad)
    with pytest.raises(CorruptSavepointError, match="grouped by ascending key group"):
        write_flink(src, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sk"]


def test_files_sharing_key_groups_are_read_as_one_table():
    def entry(name, a, z):
        return FileEntry(path=name, table="keyed", rows=1, bytes=1, checksum="crc32:0", key_group_start=a,
                         key_group_end=z)

    schema = pa.schema([("key_group", pa.int32())])
    args = (schema, lambda t, w: t, lambda: pa.table({}))
    assert KeyedFiles.of(Path("."), [entry("b", 5, 9), entry("a", 0, 4)], *args) is not None
    assert KeyedFiles.of(Path("."), [entry("b", 4, 9), entry("a", 0, 4)], *args) is None
    assert KeyedFiles.of(Path("."), [entry("a", 0, 4), entry("n", None, None)], *args) is None


@pytest.mark.parametrize("refuse_after", [None, 0, 2])
def test_direct_file_writes_every_byte_in_order(tmp_path, monkeypatch, refuse_after):
    """Pieces of every size and ranges of another file (`copy_range`) across block boundaries, the padded tail cut
    back; a file system that refuses O_DIRECT at open (None: on this one it is accepted) or after some blocks
    continues buffered, same bytes."""
    import errno
    import os
    import random

    monkeypatch.setattr(D, "BLOCK", 2 * D.ALIGN)
    rng = random.Random(7)
    pieces = [bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 5, 4095, 4096, 9000]))) for _ in range(40)]
    if refuse_after is not None:
        real, calls = os.write, []

        def write(fd, data):
            if fcntl_flags(fd) & os.O_DIRECT:
                calls.append(len(data))
                if len(calls) > refuse_after:
                    raise OSError(errno.EINVAL, "Invalid argument")
            return real(fd, data)

        monkeypatch.setattr(D.os, "write", write)
    source = bytes(rng.getrandbits(8) for _ in range(5 * D.ALIGN + 17))
    (tmp_path / "src").write_bytes(source)
    want = []
    with D.DirectFile(tmp_path / "f") as f, open(tmp_path / "src", "rb") as src:
        assert f.direct == D.USE_DIRECT
        for i in range(0, len(pieces), 3):
            f.write(pieces[i : i + 3])
            at, n = rng.randrange(len(source)), rng.choice([0, 1, 4096, 3 * D.ALIGN + 5])
            f.copy_range(src.fileno(), at, min(n, len(source) - at))
            want += [*pieces[i : i + 3], source[at : at + n]]
        size = f.close()
    assert size == sum(map(len, want)) and (tmp_path / "f").read_bytes() == b"".join(want)
    if refuse_after is not None:
        assert not f.direct


def fcntl_flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)


def test_direct_file_refuses_an_existing_path(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        D.DirectFile(tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == b"x"


def test_a_damaged_file_read_ahead_is_refused_and_nothing_is_written(tmp_path):
    """Every file is checksummed whole before it is decoded, also when read ahead on the helper thread."""
    from statekit.errors import ChecksumMismatchError

    src = build(tmp_path / "sk", max_parallelism=128, parallelism=2, rows_per_file=400, nulls=False)
    e = Savepoint.open(src).keyed_files("op")[-1]
    raw = bytearray((src / e.path).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (src / e.path).write_bytes(bytes(raw))
    with pytest.raises(ChecksumMismatchError, match=e.path):
        write_flink(src, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sk"]


def test_a_full_disk_is_a_storage_full_error_and_nothing_is_left(tmp_path, monkeypatch):
    import errno

    from statekit.errors import StorageFullError

    src = build(tmp_path / "sk", max_parallelism=128, parallelism=2, rows_per_file=400)
    monkeypatch.setattr(D, "BLOCK", D.ALIGN)
    real, calls = D.os.write, []

    def write(fd, data):
        calls.append(fd)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(D.os, "write", write)
    with pytest.raises(StorageFullError, match="no space left"):
        write_flink(src, tmp_path / "out")
    assert len(calls) > 3 and sorted(p.name for p in tmp_path.iterdir()) == ["sk"]
