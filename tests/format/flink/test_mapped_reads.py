"""State files read through a memory mapping give exactly what copied reads give, and damaged ones the same typed errors."""

from __future__ import annotations

import pytest

from statekit.errors import CorruptSavepointError
from statekit.format.flink import files
from statekit.savepoint import Savepoint

from . import test_bad_input as bad
from .conftest import ALL_CASES, savepoint


def _read_all(path, monkeypatch, min_bytes: int) -> tuple[dict, dict, int]:
    monkeypatch.setattr(files, "MAP_MIN_BYTES", min_bytes)
    maps = []
    real_map = files.pa.memory_map
    monkeypatch.setattr(files.pa, "memory_map", lambda *a: maps.append(a) or real_map(*a))
    sp = Savepoint.open(path)
    out = {}
    for meta in sp.operators:
        if meta.key_type is not None:
            out[meta.uid_hash] = (sp.keyed_table(meta.identifier, with_key_group=True), sp.timers(meta.identifier))
    return out, dict(sp.stats.states), len(maps)


@pytest.mark.parametrize("case", ALL_CASES)
def test_mapped_and_copied_reads_are_equal(case, monkeypatch):
    mapped, mapped_paths, maps = _read_all(savepoint(case), monkeypatch, 0)
    copied, copied_paths, no_maps = _read_all(savepoint(case), monkeypatch, 1 << 62)
    assert mapped.keys() == copied.keys() and mapped
    # canonical state in files is mapped; inline state and native RocksDB files never are
    assert (maps > 0) == (case not in ("string-hashmap-canonical-inline", "string-rocksdb-native")) and not no_maps
    for uid, (table, timers) in mapped.items():
        assert table.equals(copied[uid][0]), uid
        assert timers.equals(copied[uid][1]), uid
        assert table.num_rows
    assert mapped_paths == copied_paths


def test_mapped_columns_outlive_the_mapping(monkeypatch):
    """Columns hold no pointer into the mapping: they read the same after everything else is gone."""
    import gc

    monkeypatch.setattr(files, "MAP_MIN_BYTES", 0)
    case = "string-hashmap-canonical"
    sp = Savepoint.open(savepoint(case))
    table = sp.keyed_table("counter", with_key_group=True)
    expected = table.to_pylist()
    del sp
    gc.collect()
    assert table.to_pylist() == expected


@pytest.mark.parametrize("damage", [
    bad.test_state_file_shorter_than_its_handle, bad.test_offset_past_the_end, bad.test_corrupted_key_group_length,
    bad.test_bad_snappy_key_group, bad.test_state_file_missing,
], ids=lambda f: f.__name__.removeprefix("test_"))
@pytest.mark.parametrize("threaded", [False, True], ids=["one-batch", "threaded-batches"])
def test_damaged_files_through_the_mapping(damage, threaded, copy_case, monkeypatch):
    """The typed errors of `test_bad_input`, also when small batches are decoded on threads (as a large read is)."""
    from statekit.format.flink import reader

    monkeypatch.setattr(files, "MAP_MIN_BYTES", 0)
    if threaded:
        monkeypatch.setattr(reader, "BATCH_BYTES", 512)
        monkeypatch.setattr(reader, "_THREADS", 3)
    damage(copy_case)


def test_file_truncated_after_open_through_the_mapping(copy_case, monkeypatch):
    """Shortened between `Savepoint.open` and the read: a typed error, not a crash (SIGBUS) or a short decode."""
    monkeypatch.setattr(files, "MAP_MIN_BYTES", 0)
    sp_path = copy_case(bad.CASE)
    sp = Savepoint.open(sp_path)
    f = sp_path / bad.counter_handle(sp_path).delegate.path
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CorruptSavepointError, match="truncated"):
        sp.keyed_table("counter")


@pytest.mark.parametrize("case", ALL_CASES)
def test_batched_threaded_reads_equal_one_batch(case, monkeypatch):
    """Key groups decoded in many small batches on threads (as a large read is): the same tables, in order."""
    from statekit.format.flink import reader

    one, one_paths, _ = _read_all(savepoint(case), monkeypatch, 0)
    monkeypatch.setattr(reader, "BATCH_BYTES", 512)
    monkeypatch.setattr(reader, "_THREADS", 3)
    many, many_paths, _ = _read_all(savepoint(case), monkeypatch, 0)
    for uid, (table, timers) in one.items():
        assert many[uid][0].equals(table), uid
        assert many[uid][1].equals(timers), uid
    assert many_paths == one_paths
