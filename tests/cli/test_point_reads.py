"""`get` / `show --key` read one key group's row groups, and a damaged byte anywhere in that file still fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from statekit.format import files as F
from statekit.keygroups import assign_to_key_group
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.state import ListStateDescriptor, ValueStateDescriptor

ROWS = 4_000
MAX_PARALLELISM = 8


@pytest.fixture(scope="module")
def small_groups(tmp_path_factory) -> Path:
    """A savepoint written with row groups of at most 200 rows (key groups hold ~500 rows each)."""
    path = tmp_path_factory.mktemp("point") / "sp"
    keys = np.arange(ROWS, dtype=np.int64) * 7 - 1000
    table = pa.table({"key": keys, "count": keys * 2,
                      "seen": pa.array([[int(k)] * (int(k) % 3) for k in keys], pa.list_(pa.int64()))})
    mp = pytest.MonkeyPatch()
    mp.setattr(F, "ROW_GROUP_ROWS", 200)
    try:
        with SavepointBuilder(path, rows_per_file=2_500) as b:
            b.add_operator("counter", parallelism=2, max_parallelism=MAX_PARALLELISM, key_type="bigint",
                           keyed_states=[ValueStateDescriptor("count", "bigint"), ListStateDescriptor("seen", "bigint")]
                           ).write_keyed(table)
    finally:
        mp.undo()
    return path


def _groups(sp: Path):
    meta = Savepoint.open(sp).operator("counter")
    for entry in meta.files_of("keyed"):
        md = pq.ParquetFile(sp / entry.path).metadata
        for i in range(md.num_row_groups):
            st = md.row_group(i).column(0).statistics
            yield entry, i, md.row_group(i).num_rows, st.min, st.max


def test_row_groups_are_cut_at_key_groups(small_groups):
    groups = list(_groups(small_groups))
    assert all(lo == hi for _, _, _, lo, hi in groups)  # ~500-row key groups: never two in one row group
    assert all(rows <= 200 for _, _, rows, _, _ in groups)
    assert len(groups) > 2 * MAX_PARALLELISM


def test_get_selects_the_row_groups_of_its_key_group(small_groups):
    sp = Savepoint.open(small_groups)
    entry = sp.operator("counter").files_of("keyed")[0]
    md = pq.ParquetFile(small_groups / entry.path).metadata
    kg = entry.key_group_start
    chosen = F.row_groups_holding(md, kg)
    assert 0 < len(chosen) < md.num_row_groups
    assert all(md.row_group(i).column(0).statistics.min == kg for i in chosen)
    table = sp.keyed_table("counter")
    for key in (-1000, -993, 7 * (ROWS - 1) - 1000, 5):
        rows = table.filter(pc.equal(table.column("key"), key)).to_pylist()
        expected = None if not rows else {"count": rows[0]["count"], "seen": rows[0]["seen"]}
        assert sp.get("counter", key) == expected


def _damage(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("where", ["own row group", "another row group", "footer"])
def test_a_damaged_byte_in_the_file_of_the_key_fails_get(cli, small_groups, tmp_path, where):
    sp = tmp_path / "sp"
    shutil.copytree(small_groups, sp)
    key = -1000
    expected = Savepoint.open(sp).get("counter", key)
    ok = cli(["get", sp, "--uid", "counter", "--key", str(key), "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout) == expected
    kg = assign_to_key_group(key, MAX_PARALLELISM, "bigint")
    entry = next(e for e in Savepoint.open(sp).operator("counter").files_of("keyed") if e.covers(kg))
    file = sp / entry.path
    md = pq.ParquetFile(file).metadata
    own = [i for i in range(md.num_row_groups) if md.row_group(i).column(0).statistics.min == kg]
    other = [i for i in range(md.num_row_groups) if i not in own]
    if where == "footer":
        offset = file.stat().st_size - 8 - md.serialized_size // 2
    else:
        rg = md.row_group(own[0] if where == "own row group" else other[-1])
        col = rg.column(rg.num_columns - 1)
        offset = col.data_page_offset + col.total_compressed_size // 2
    _damage(file, offset)
    for args in (["get", sp, "--uid", "counter", "--key", str(key)],
                 ["show", sp, "--uid", "counter", "--key", str(key), "--values"]):
        result = cli(args)
        assert result.exit_code == 1, result.output
        assert "ChecksumMismatchError" in result.stderr and entry.path in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.fixture(scope="module")
def with_timers(tmp_path_factory) -> Path:
    """Three keyed files and a timer file per key-group range, so a one-key repair has files to leave alone."""
    path = tmp_path_factory.mktemp("patch") / "sp"
    keys = np.arange(3_000, dtype=np.int64)
    with SavepointBuilder(path, rows_per_file=1_000) as b:
        w = b.add_operator("counter", parallelism=2, max_parallelism=MAX_PARALLELISM, key_type="bigint",
                           keyed_states=[ValueStateDescriptor("count", "bigint"), ListStateDescriptor("seen", "bigint")])
        w.write_keyed(pa.table({"key": keys, "count": keys + 1}))
        for part in range(2):  # two timer files
            ks = keys[part::2]
            w.write_timers(pa.table({"key": ks, "timestamp": ks * 10, "domain": ["event"] * len(ks)}))
        b.add_operator("other", parallelism=1, max_parallelism=MAX_PARALLELISM, key_type="string",
                       keyed_states=[ValueStateDescriptor("v", "string")]
                       ).write_keyed(pa.table({"key": ["a", "b"], "v": ["x", "y"]}))
    return path


def _inodes(sp: Path) -> dict[str, int]:
    return {e.path.split("/", 1)[1] + f"@{m.uid}": (sp / e.path).stat().st_ino
            for m in Savepoint.open(sp).operators for e in m.files}


@pytest.mark.parametrize("repair", ["set", "set-new-key", "delete-key"])
def test_a_one_key_repair_rewrites_only_its_key_groups_files(cli, digest, with_timers, tmp_path, repair):
    before = digest(with_timers)
    target = tmp_path / "out"
    key = {"set": 1234, "set-new-key": 10**12 + 7, "delete-key": 1234}[repair]
    args = (["delete-key", with_timers, target, "--uid", "counter", "--key", str(key), "--apply"]
            if repair == "delete-key" else
            ["set", with_timers, target, "--uid", "counter", "--key", str(key), "--state", "count", "--value", "-5",
             "--apply"])
    result = cli(args)
    assert result.exit_code == 0, result.output
    assert digest(with_timers) == before  # the source is untouched
    src, out = Savepoint.open(with_timers), Savepoint.open(target)
    kg = assign_to_key_group(key, MAX_PARALLELISM, "bigint")
    old, new = _inodes(with_timers), _inodes(target)
    assert old.keys() == new.keys() or repair == "delete-key"
    changed = {name for name in new if old.get(name) != new[name]}
    holds = {e.path.split("/", 1)[1] + "@counter" for e in src.operator("counter").files
             if e.table == "keyed" and e.covers(kg)}
    timers = {e.path.split("/", 1)[1] + "@counter" for e in src.operator("counter").files_of("timers") if e.covers(kg)}
    if repair == "set-new-key" and not holds:  # a key group without rows: its nearest file takes it
        assert len([n for n in changed if n.startswith("keyed/")]) == 1
    else:
        assert {n for n in changed if n.startswith("keyed/")} == holds
    assert {n for n in changed if n.startswith("timers/")} == (timers if repair == "delete-key" else set())
    assert not any(n.endswith("@other") for n in changed)
    assert cli(["check", target]).exit_code == 0
    expected = src.keyed_table("counter").to_pylist()
    expected = [r for r in expected if r["key"] != key]
    if repair != "delete-key":
        expected.append({"key": key, "count": -5, "seen": None})
    assert sorted(out.keyed_table("counter").to_pylist(), key=lambda r: r["key"]) == \
        sorted(expected, key=lambda r: r["key"])
    timers_after = out.timers("counter").column("key").to_pylist()
    assert (key in timers_after) == (repair == "set")
    assert sorted(timers_after) == sorted(k for k in src.timers("counter").column("key").to_pylist()
                                          if repair != "delete-key" or k != key)


def test_set_on_a_window_operator_is_a_typed_refusal(cli, tmp_path):
    sp = tmp_path / "windows"
    with SavepointBuilder(sp) as b:
        b.add_operator("win", parallelism=1, max_parallelism=MAX_PARALLELISM, key_type="bigint",
                       keyed_states=[ValueStateDescriptor("window-contents", "bigint")],
                       namespace_type="struct<start:bigint,end:bigint>",
                       ).write_keyed(pa.table({"key": [1], "namespace": [{"start": 0, "end": 10}],
                                               "window-contents": [5]}))
    target = tmp_path / "out"
    result = cli(["set", sp, target, "--uid", "win", "--key", "1", "--state", "window-contents", "--value", "6",
                  "--apply"])
    assert result.exit_code == 2 and "InvalidArgumentError" in result.stderr and "window" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not target.exists()
    deleted = cli(["delete-key", sp, target, "--uid", "win", "--key", "1", "--apply"])  # deleting a key works
    assert deleted.exit_code == 0, deleted.output
    assert Savepoint.open(target).keyed_table("win").num_rows == 0


def test_the_executable_builds_only_the_invoked_command_yet_helps_with_all(small_groups):
    import subprocess
    import sys

    exe = str(Path(sys.executable).parent / "statekit")
    listing = subprocess.run([exe, "--help"], capture_output=True, text=True, env={"COLUMNS": "200", "PATH": ""})
    assert listing.returncode == 0 and all(c in listing.stdout for c in ("rename-uid", "get", "query", "repair"))
    typo = subprocess.run([exe, "gett"], capture_output=True, text=True)
    assert typo.returncode == 2 and "get" in typo.stderr
    one = subprocess.run([exe, "--debug", "inspect", str(small_groups)], capture_output=True, text=True)
    assert one.returncode == 0 and "counter" in one.stdout
