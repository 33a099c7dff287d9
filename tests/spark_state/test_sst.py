"""RocksDB SSTs read straight with numpy (statekit/format/spark/sst.py) give exactly what RocksDB itself gives."""

from __future__ import annotations

import dataclasses
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


def test_lz4_blocks_out_of_file_order_are_still_each_block(tmp_path):
    """The frame is built from the blocks where they lie (each size written over the bytes before its block): handles
    that do not follow one another in the file (never written by RocksDB) take the block-by-block path."""
    ssts, _ = _lz4_only(tmp_path / "db")
    t = sst._table(ssts[0])
    assert len(t.offsets) > 2
    buf, bases, n = sst._decompress(t, 0, len(t.offsets))
    backwards = dataclasses.replace(t, offsets=t.offsets[::-1].copy(), sizes=t.sizes[::-1].copy())
    rbuf, rbases, rn = sst._decompress(backwards, 0, len(t.offsets))
    assert np.array_equal(rn, n[::-1])
    for i in range(len(n)):
        j = len(n) - 1 - i
        assert np.array_equal(rbuf[rbases[i]:rbases[i] + rn[i]], buf[bases[j]:bases[j] + n[j]])


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


def _flushes(path: Path, batches: list[dict[bytes, bytes | None]]) -> tuple[list[Path], dict[bytes, bytes]]:
    """One SST per batch (None: a deletion), with Hadoop side files, and what the store then holds."""
    opts = _options(block_size=512)
    opts.set_disable_auto_compactions(True)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    db = rocksdict.Rdict(str(path), options=opts)
    want: dict[bytes, bytes] = {}
    for batch in batches:
        for k, v in batch.items():
            if v is None:
                del db[k]
                want.pop(k, None)
            else:
                db[k] = v
                want[k] = v
        db.flush()
    db.close()
    ssts = sorted(path.glob("*.sst"))
    assert len(ssts) == len(batches)
    for f in ssts:
        hadoop_crc(f)
    return ssts, want


def _spy(monkeypatch) -> list[str]:
    """Which reading each chunk took: "dedup" (keys hashed, versions resolved) or "distinct"."""
    took: list[str] = []
    parse, puts = sst._parse, sst._parse_puts
    monkeypatch.setattr(sst, "_parse", lambda *a: (took.append("dedup"), parse(*a))[1])
    monkeypatch.setattr(sst, "_parse_puts", lambda *a: (took.append("distinct"), puts(*a))[1])
    return took


def _disjoint(path: Path) -> tuple[list[Path], dict[bytes, bytes]]:
    """Three SSTs of different keys of several lengths, no deletion: every entry a distinct live key."""
    return _flushes(path, [{b"k%d-" % i + b"x" * (i % 9): b"v%d" % i * (1 + i % 3) for i in range(f, 4000, 3)}
                           for f in range(3)])


@pytest.mark.parametrize("chunk", [1024, 5])
def test_distinct_entries_read_without_dedup_the_same(tmp_path, monkeypatch, chunk):
    """Σ num.entries == the live keys and no deletion: no hashing, and the same entries as the deduplicating read."""
    monkeypatch.setattr(sst, "_CHUNK", chunk)
    ssts, want = _disjoint(tmp_path / "db")
    took = _spy(monkeypatch)
    assert _as_dict(sst.live_entries(ssts, live_keys=len(want))) == want
    assert took and set(took) == {"distinct"}
    took.clear()
    assert _as_dict(sst.live_entries(ssts)) == want
    assert took and set(took) == {"dedup"}


@pytest.mark.parametrize("off", [-1, 1])
def test_a_count_that_is_not_the_entries_keeps_the_dedup(tmp_path, monkeypatch, off):
    """Versions of keys across SSTs (no deletion) and a count of live keys other than Σ num.entries: deduplicated,
    never read as distinct. The count is the store's real one for -1, a wrong one for +1."""
    ssts, want = _flushes(tmp_path / "db", [{b"k%04d" % i: b"a" for i in range(900)},
                                              {b"k%04d" % i: b"b" for i in range(0, 900, 3)}])
    entries = sum(sst._table(f).entries for f in ssts)
    assert entries == len(want) + 300
    took = _spy(monkeypatch)
    got = sst.live_entries(ssts, live_keys=len(want) if off < 0 else entries + off)
    assert _as_dict(got) == want  # (a user key twice fails `_as_dict`)
    assert set(took) == {"dedup"}
    took.clear()  # and the count that would prove it: only a wrong count could make it take the shortcut
    assert sum(map(len, sst.live_entries(ssts, live_keys=entries))) == entries and set(took) == {"distinct"}


def test_deletions_keep_the_dedup(tmp_path, monkeypatch):
    ssts, want = _flushes(tmp_path / "db", [{b"k%04d" % i: b"a" for i in range(500)},
                                              {b"k%04d" % i: None for i in range(0, 500, 2)}])
    entries = sum(sst._table(f).entries for f in ssts)
    took = _spy(monkeypatch)
    for count in (len(want), entries):
        assert _as_dict(sst.live_entries(ssts, live_keys=count)) == want
    assert set(took) == {"dedup"}


def test_properties_that_do_not_match_the_data_are_refused(tmp_path, monkeypatch):
    """The shortcut checks what it parses against the properties it trusted: entries of another type than put, or
    another number of entries, raise `Unsupported` (RocksDB opens the store) instead of a wrong answer."""
    ssts, want = _flushes(tmp_path / "db", [{b"k%04d" % i: b"a" for i in range(500)},
                                              {b"k%04d" % i: None for i in range(0, 500, 2)}])
    table = sst._table

    def no_deletions(path):
        t = table(path)
        t.deletions = 0
        return t
    monkeypatch.setattr(sst, "_table", no_deletions)
    with pytest.raises(sst.Unsupported, match="other than a put"):
        sst.live_entries(ssts, live_keys=sum(sst._table(f).entries for f in ssts))
    ssts, want = _disjoint(tmp_path / "db2")

    def one_more(path):
        t = table(path)
        t.entries += 1
        return t
    monkeypatch.setattr(sst, "_table", one_more)
    with pytest.raises(sst.Unsupported, match="properties block counts"):
        sst.live_entries(ssts, live_keys=len(want) + len(ssts))


def _store_dirs(cp: SparkCheckpoint) -> list[Path]:
    return sorted({p.parent.parent for p in cp.path.glob("state/**/SSTs/*.sst")})


@pytest.mark.parametrize("case", ROCKSDB_CASES)
def test_corpus_reads_the_same_with_and_without_the_count(case, tmp_path, monkeypatch):
    """Each store of the Spark corpus: the read given its zip's numKeys (distinct where it proves so) is the read
    without it, and RocksDB's."""
    cp = SparkCheckpoint.open(copy_with_sst_crcs(case, tmp_path))
    took = _spy(monkeypatch)
    for d in _store_dirs(cp):
        data = providers.StoreData({})
        got = providers.sst_entries(d, cp.version, cp.conf, where=str(d), decode=lambda e: e, into=data)
        if got is None:
            continue
        with_count = _as_dict([e.where(live) for e, live in got])
        ssts = [p for p in data.files if p.suffix == ".sst"]
        ssts.sort(key=lambda p: p.name.split("-")[0])  # (local file names: the dfs name's prefix)
        assert with_count == _as_dict(sst.live_entries(ssts))
        assert with_count == providers.load(d, cp.version, cp.conf, where=str(d)).entries, d
    if case == "agg-rocksdb":  # partition 2's SSTs hold distinct keys; 0's hold versions of keys, no deletion
        assert "distinct" in took and "dedup" in took


def test_repartitioned_rocksdb_store_counts_its_keys(tmp_path):
    """statekit's writer records numKeys as Spark does, the live keys RocksDB reads back, each once: the count the
    shortcut trusts. (Its SSTs are RocksDB's table format 6, which RocksDB itself reads.)"""
    from statekit.savepoint.spark_repartition import repartition

    repartition(copy_case("agg-rocksdb", tmp_path / "src"), tmp_path / "out", partitions=3)
    cp = SparkCheckpoint.open(tmp_path / "out")
    for d in _store_dirs(cp):
        data = providers.load(d, cp.version, cp.conf, where=str(d))
        assert providers._live_keys(data.rocks_metadata) == len(data.entries) > 0
