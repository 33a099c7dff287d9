"""RocksDB SSTs read straight with numpy (statekit/format/spark/sst.py) give exactly what RocksDB itself gives."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import rocksdict
from spark_corpus import CASES, copy_case, copy_with_sst_crcs, hadoop_crc

from statekit.errors import CorruptSavepointError
from statekit.format.spark import providers, sst
from statekit.format.spark.errors import StateChecksumMismatchError
from statekit.savepoint.spark_checkpoint import SparkCheckpoint

ROCKSDB_CASES = [c for c in CASES if "rocksdb" in c]


def _as_dict(chunks: list[sst.Entries]) -> dict[bytes, bytes]:
    out = {e.keys[a:b].tobytes(): e.values[c:d].tobytes() for e in chunks
           for a, b, c, d in zip(e.key_starts, e.key_ends, e.value_starts, e.value_ends)}
    assert len(out) == sum(map(len, chunks))  # no user key twice
    return out


@pytest.mark.parametrize("case", ROCKSDB_CASES)
def test_every_store_partition_equals_rocksdb(case, tmp_path):
    cp = SparkCheckpoint.open(copy_with_sst_crcs(case, tmp_path))
    direct = 0
    for d in sorted({p.parent.parent for p in cp.path.glob("state/**/SSTs/*.sst")}):
        got = providers.sst_entries(d, cp.version, cp.conf, where=str(d), decode=lambda e: e)
        if got is None:  # changelogs after the zip, or merge operands (list state): RocksDB opens it
            continue
        direct += 1
        assert _as_dict([e.where(live) for e, live in got]) == \
            providers.load(d, cp.version, cp.conf, where=str(d)).entries, d
    assert direct, f"{case}: no store partition was read directly"


@pytest.mark.parametrize("case", ["agg-rocksdb", "window_agg-rocksdb", "dedup-rocksdb", "join-rocksdb"])
def test_keyed_table_the_same_either_way(case, tmp_path):
    plain = SparkCheckpoint.open(copy_case(case, tmp_path / "plain"))  # no side files: RocksDB opens every SST
    checked = SparkCheckpoint.open(copy_with_sst_crcs(case, tmp_path / "crc"))
    for op in range(len(plain.operators)):
        for store in plain.tables(op):
            want = plain.keyed_table(op, store=store)
            got = checked.keyed_table(op, store=store)
            assert got.schema == want.schema and sorted(map(repr, got.to_pylist())) == \
                sorted(map(repr, want.to_pylist())), (op, store)


def _options(*, restart: int = 16, block_size: int = 4096):
    """Spark's RocksDB (rocksdbjni 9.x) writes table format_version 5 (rocksdict's newer RocksDB: 6)."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(5)
    table.set_block_restart_interval(restart)
    table.set_block_size(block_size)
    opts.set_block_based_table_factory(table)
    return opts


@pytest.mark.parametrize("chunk", [2048, 1])  # 1: every data block its own chunk, versions of a key across chunks
def test_overwrites_deletions_and_variable_keys(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(sst, "_CHUNK", chunk)
    opts = _options()
    opts.set_disable_auto_compactions(True)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    db = rocksdict.Rdict(str(tmp_path / "db"), options=opts)
    want: dict[bytes, bytes] = {}
    for flush in range(3):  # three overlapping L0 files: later puts and deletes must win
        for i in range(flush, 3000, 2 + flush):
            k, v = b"k%d" % (i * 7919 % 3001) + b"x" * (i % 40), b"v%d-%d" % (flush, i) * (1 + i % 5)
            db[k] = v
            want[k] = v
        for i in range(0, 3000, 11 + flush):
            k = b"k%d" % (i * 7919 % 3001) + b"x" * (i % 40)
            del db[k]
            want.pop(k, None)
        db.flush()
    db.close()
    ssts = sorted((tmp_path / "db").glob("*.sst"))
    assert len(ssts) == 3
    with pytest.raises(sst.Unsupported, match="side file"):
        sst.live_entries(ssts)
    for f in ssts:
        hadoop_crc(f)
    assert _as_dict(sst.live_entries(ssts)) == want


def test_long_values_are_left_to_rocksdb(tmp_path):
    opts = _options()
    db = rocksdict.Rdict(str(tmp_path / "db"), options=opts)
    db[b"a"] = b"y" * 300
    db.flush()
    db.close()
    ssts = sorted((tmp_path / "db").glob("*.sst"))
    for f in ssts:
        hadoop_crc(f)
    with pytest.raises(sst.Unsupported, match="128 bytes"):
        sst.live_entries(ssts)


def test_damaged_sst_with_side_file_is_refused(tmp_path):
    cp = copy_with_sst_crcs("agg-rocksdb", tmp_path)
    victim = next(cp.glob("state/0/1/SSTs/*.sst"))
    data = bytearray(victim.read_bytes())
    data[40] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(StateChecksumMismatchError, match=victim.name):
        SparkCheckpoint.open(cp).keyed_table(0)


def _block_kinds(ssts: list[Path]) -> set[int]:
    """The compression types of the SSTs' data blocks (0 none, 1 Snappy, 4 LZ4)."""
    out = set()
    for f in ssts:
        t = sst._table(f)
        out |= {t.data[o + n] for o, n in zip(t.offsets.tolist(), t.sizes.tolist())}
    return out


@pytest.mark.parametrize(("compression", "restart", "kinds"), [
    ("lz4", 16, {0, 4}),  # incompressible values: RocksDB stores those blocks raw, beside LZ4 ones
    ("snappy", 3, {0, 1}),
    ("none", 1, {0}),  # every entry a restart point: nothing shared
    ("lz4", 64, {0, 4}),  # segments longer than a block holds
])
@pytest.mark.parametrize("chunk", [2048, 3])  # 3: chunks end inside an SST, between any two blocks
def test_block_kinds_restart_intervals_and_long_shared_prefixes(tmp_path, monkeypatch, compression, restart, kinds,
                                                               chunk):
    """Keys of 9-110 bytes sharing up to 100 (several words of a key taken from the entry before), overwritten
    and deleted across three SSTs, in small blocks of every kind: the direct read is RocksDB's."""
    import random

    monkeypatch.setattr(sst, "_CHUNK", chunk)
    rng = random.Random(restart)
    opts = _options(restart=restart, block_size=512)
    opts.set_disable_auto_compactions(True)
    opts.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
    db = rocksdict.Rdict(str(tmp_path / "db"), options=opts)
    want: dict[bytes, bytes] = {}
    prefixes = [b"p" * 100, b"p" * 40 + b"q" * 60, b"r" * 9, b""]
    for flush in range(3):
        for i in range(1500):
            k = rng.choice(prefixes)[:rng.randrange(101)] + b"%d" % rng.randrange(900)
            v = rng.randbytes(rng.randrange(1, 100)) if i % 2 else b"v%d" % flush * rng.randrange(1, 20)
            db[k] = v
            want[k] = v
        for k in rng.sample(sorted(want), 100):
            del db[k]
            del want[k]
        db.flush()
    db.close()
    ssts = sorted((tmp_path / "db").glob("*.sst"))
    assert len(ssts) == 3
    for f in ssts:
        hadoop_crc(f)
    assert _block_kinds(ssts) == kinds  # the kinds this case is about are really there
    assert _as_dict(sst.live_entries(ssts)) == want


@pytest.mark.parametrize("size", [0, 1, 511, 512, 513, 4096 * 3 + 7, 512 * 1025, 512 * 1023 + 100])
def test_crc32_combined_is_the_crc32_of_the_whole(size):
    import random

    from statekit.format.spark.codec import crc32_combined

    data = random.Random(size).randbytes(size)
    pieces = np.array([zlib.crc32(data[i:i + 512]) for i in range(0, size, 512)], np.uint32)
    assert crc32_combined(pieces, 512, size) == zlib.crc32(data)


@pytest.mark.parametrize("chunk", [512, 1000])  # 1000: not a power of two, each chunk checked on its own
def test_hadoop_side_file_finds_damage(tmp_path, chunk):
    from statekit.format.spark.layout import hadoop_checked

    f = tmp_path / "x.sst"
    data = bytearray(random_bytes := bytes(range(256)) * 40)
    f.write_bytes(data)
    sums = b"".join(zlib.crc32(data[i:i + chunk]).to_bytes(4, "big") for i in range(0, len(data), chunk))
    f.with_name(".x.sst.crc").write_bytes(b"crc\0" + chunk.to_bytes(4, "big") + sums)
    assert hadoop_checked(f, random_bytes)
    for damage in ([5], [5, 3 * chunk + 1], [len(data) - 1]):  # one chunk, two chunks, the short last chunk
        bad = bytearray(data)
        for i in damage:
            bad[i] ^= 0x40
        with pytest.raises(StateChecksumMismatchError):
            hadoop_checked(f, bytes(bad))


def test_equal_hashes_of_different_keys_are_left_to_rocksdb(tmp_path, monkeypatch):
    """Versions of a key are found by equal 64-bit hashes, then checked byte by byte: different keys whose hashes
    are equal (forced here) are not taken for versions of one key."""
    opts = _options()
    db = rocksdict.Rdict(str(tmp_path / "db"), options=opts)
    for i in range(50):
        db[b"k%d" % i] = b"v"
    db.flush()
    db[b"k7"] = b"w"  # a second version in a second SST: its hash is held twice
    db.flush()
    db.close()
    ssts = sorted((tmp_path / "db").glob("*.sst"))
    for f in ssts:
        hadoop_crc(f)
    assert _as_dict(sst.live_entries(ssts)) == {b"k%d" % i: b"w" if i == 7 else b"v" for i in range(50)}
    parse = sst._parse

    def colliding(*a):
        chunk, entries = parse(*a)
        chunk.h = chunk.h & np.uint64(0xFF)  # 50 keys, 256 hashes: some different keys share one
        return chunk, entries
    monkeypatch.setattr(sst, "_parse", colliding)
    with pytest.raises(sst.Unsupported, match="collision"):
        sst.live_entries(ssts)


def _lz4_only(path: Path, keys: int = 3000) -> tuple[list[Path], dict[bytes, bytes]]:
    """One SST whose data blocks are all LZ4 (compressible values; Spark's own setting), and what it holds."""
    opts = _options(block_size=1024)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    db = rocksdict.Rdict(str(path), options=opts)
    want = {b"key-%06d" % i: b"value %d " % (i % 7) * 6 for i in range(keys)}
    for k, v in want.items():
        db[k] = v
    db.flush()
    db.close()
    ssts = sorted(path.glob("*.sst"))
    for f in ssts:
        hadoop_crc(f)
    assert _block_kinds(ssts) == {4}
    return ssts, want


@pytest.mark.parametrize("chunk", [1024, 7])
def test_lz4_blocks_decompressed_as_one_frame(tmp_path, monkeypatch, chunk):
    """All-LZ4 chunks are decompressed in one call (the blocks as one LZ4 frame): the same bytes as block by block."""
    monkeypatch.setattr(sst, "_CHUNK", chunk)
    ssts, want = _lz4_only(tmp_path / "db")
    assert _as_dict(sst.live_entries(ssts)) == want
    t = sst._table(ssts[0])
    framed = sst._decompress(t, 0, len(t.offsets))
    monkeypatch.setattr(sst, "_FRAME_BLOCK", 0)  # every block on its own
    alone = sst._decompress(t, 0, len(t.offsets))
    assert all(np.array_equal(a, b) for a, b in zip(framed, alone))


def test_lz4_block_that_does_not_decompress_is_damage(tmp_path):
    ssts, _ = _lz4_only(tmp_path / "db")
    t = sst._table(ssts[0])
    o, n = int(t.offsets[2]), int(t.sizes[2])
    data = bytearray(ssts[0].read_bytes())
    _, head = sst._varint(data, o)  # (the block's uncompressed size)
    data[head:o + n] = b"\xff" * (o + n - head)  # a literal run longer than the block
    ssts[0].write_bytes(bytes(data))
    hadoop_crc(ssts[0])  # consistent with its side file: the LZ4 decoder is what finds it
    with pytest.raises(CorruptSavepointError, match="does not decompress"):
        sst.live_entries(ssts)
