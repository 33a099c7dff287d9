"""Damaged Flink savepoints fail with typed errors naming the fault, and are never modified."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from statekit.errors import CorruptSavepointError, StatekitError, UnsupportedFormatError
from statekit.format.flink.metadata import SAVEPOINT_KEY_GROUPS_HANDLE, read_metadata
from statekit.savepoint import Savepoint, check

CASE = "string-hashmap-canonical"


def digest(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def read_everything(path: Path) -> None:
    sp = Savepoint.open(path)
    for meta in sp.operators:
        if meta.key_type is not None:
            sp.keyed_table(meta.identifier)
            sp.timers(meta.identifier)
        for s in meta.operator_states:
            sp.list_state(meta.identifier, s.name) if s.redistribution == "split" else None


def counter_handle(path: Path):
    md = read_metadata(path)
    return md.operator("0da08f51eaa85fc298e176a139b3649a").subtasks[0].managed_keyed


def expect(path: Path, error: type[StatekitError], *words: str) -> None:
    before = digest(path)
    with pytest.raises(error) as info:
        read_everything(path)
    for w in words:
        assert w in str(info.value)
    assert digest(path) == before, "the savepoint was modified"
    assert not check(path).ok


def test_truncated_metadata(copy_case):
    sp = copy_case(CASE)
    data = (sp / "_metadata").read_bytes()
    (sp / "_metadata").write_bytes(data[:700])
    expect(sp, CorruptSavepointError, "truncated")


def test_unknown_metadata_version(copy_case):
    sp = copy_case(CASE)
    data = bytearray((sp / "_metadata").read_bytes())
    data[4:8] = struct.pack(">i", 99)
    (sp / "_metadata").write_bytes(bytes(data))
    expect(sp, UnsupportedFormatError, "version 99", "3, 4, 5, 6")


def test_state_file_missing(copy_case):
    sp = copy_case(CASE)
    (sp / counter_handle(sp).delegate.path).unlink()
    expect(sp, CorruptSavepointError, "missing")


def test_state_file_shorter_than_its_handle(copy_case):
    sp = copy_case(CASE)
    f = sp / counter_handle(sp).delegate.path
    f.write_bytes(f.read_bytes()[:-40])
    expect(sp, CorruptSavepointError, "truncated")


def test_offset_past_the_end(copy_case):
    sp = copy_case(CASE)
    h = counter_handle(sp)
    last = max(h.offsets)
    data = (sp / "_metadata").read_bytes()
    needle = struct.pack(">q", last)
    assert data.count(needle) == 1
    (sp / "_metadata").write_bytes(data.replace(needle, struct.pack(">q", 10_000_000)))
    expect(sp, CorruptSavepointError, "past its end")


def test_corrupted_key_group_length(copy_case):
    sp = copy_case(CASE)
    h = counter_handle(sp)
    f = sp / h.delegate.path
    data = bytearray(f.read_bytes())
    first = min(o for o in h.offsets if o)
    data[first + 2 : first + 6] = struct.pack(">i", 0x7FFF0000)  # the first entry's key length
    f.write_bytes(bytes(data))
    expect(sp, CorruptSavepointError, "key group is damaged")


def test_unsupported_handle_type_changelog(copy_case):
    sp = copy_case(CASE)
    data = bytearray((sp / "_metadata").read_bytes())
    at = data.find(bytes([SAVEPOINT_KEY_GROUPS_HANDLE]) + struct.pack(">ii", 0, 64))
    assert at > 0
    data[at] = 13  # CHANGELOG_HANDLE_V2
    (sp / "_metadata").write_bytes(bytes(data))
    expect(sp, UnsupportedFormatError, "CHANGELOG_HANDLE_V2", "canonical")


def test_bad_snappy_key_group(copy_case):
    sp = copy_case("string-hashmap-canonical-snappy")
    h = counter_handle(sp)
    f = sp / h.delegate.path
    data = bytearray(f.read_bytes())
    first = min(o for o in h.offsets if o)
    data[first + 10 + 8 : first + 10 + 20] = b"\xff" * 12  # inside the first compressed chunk
    f.write_bytes(bytes(data))
    expect(sp, CorruptSavepointError)
