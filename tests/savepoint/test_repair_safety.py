"""Repairs never write into their source: colliding target names, targets inside the source, odd targets, full disks."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from statekit.errors import InvalidTargetError, SavepointExistsError, StatekitError, StorageFullError
from statekit.format.manifest import MANIFEST_NAME
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.savepoint.transforms import change_operator_identifier, remove_operator, with_max_parallelism
from statekit.state import ListStateDescriptor, ValueStateDescriptor
from statekit.testing import tree_digest
from statekit_cli.app import app

REPAIRS = {
    "rename-uid": lambda src, dst: change_operator_identifier(src, dst, "accounts", "accounts-v2"),
    "remove-operator": lambda src, dst: remove_operator(src, dst, "other"),
    "set-max-parallelism": lambda src, dst: with_max_parallelism(src, dst, "other", 256),
}


def _write(path: Path, *, users: int = 400, rows_per_file: int = 100, payload: int = 0) -> Path:
    """Keyed 'accounts' split over several files, plus a keyed 'other' operator; `payload` random bytes per key."""
    rng = np.random.default_rng(7)
    states = [ValueStateDescriptor("balance", "double"), ListStateDescriptor("recent", "bigint")]
    cols = {"key": [f"user-{i:05d}" for i in range(users)], "balance": [float(i) for i in range(users)],
            "recent": [[i, i + 1] for i in range(users)]}
    if payload:
        states.append(ValueStateDescriptor("blob", "binary"))
        cols["blob"] = [rng.bytes(payload) for _ in range(users)]
    with SavepointBuilder(path, checkpoint_id=3, rows_per_file=rows_per_file) as b:
        op = b.add_operator("accounts", parallelism=2, max_parallelism=128, key_type="string", keyed_states=states)
        op.write_keyed(pa.table(cols))
        other = b.add_operator("other", parallelism=1, max_parallelism=128, key_type="bigint",
                               keyed_states=[ValueStateDescriptor("n", "bigint")])
        other.write_keyed(pa.table({"key": list(range(50)), "n": list(range(50))}))
    return path


def _colliding(path: Path) -> Path:
    """The real scenario of the data loss: two keyed files of one operator whose paths differ only in the
    first component (a valid savepoint: check() passes)."""
    _write(path)
    manifest = json.loads((path / MANIFEST_NAME).read_text())
    files = [f for f in manifest["operators"][0]["files"] if f["table"] == "keyed"]
    assert len(files) >= 2
    first, second = files[0]["path"], files[1]["path"]
    moved = "elsewhere/" + first.split("/", 1)[1]
    (path / moved).parent.mkdir(parents=True)
    os.rename(path / second, path / moved)
    files[1]["path"] = moved
    (path / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert check(path).ok, check(path)
    return path


@pytest.mark.parametrize("repair", sorted(REPAIRS))
def test_colliding_target_names_never_write_into_the_source(tmp_path, repair):
    src = _colliding(tmp_path / "src")
    before = tree_digest(src)
    REPAIRS[repair](src, tmp_path / "out")
    assert tree_digest(src) == before, "the repair wrote into its source"
    assert check(src).ok
    report = check(tmp_path / "out")
    assert report.ok, report
    out, orig = Savepoint.open(tmp_path / "out"), Savepoint.open(src)
    op = "accounts-v2" if repair == "rename-uid" else "accounts"
    assert out.keyed_table(op).sort_by("key").equals(orig.keyed_table("accounts").sort_by("key"))
    paths = [f.path for f in out.operator(op).files]
    assert len(set(paths)) == len(paths) == len(orig.operator("accounts").files)


def test_colliding_names_copied_across_file_systems(tmp_path, small_disk):
    """On another file system a hard link is impossible: the copy goes into a new file, never through a link."""
    src = _colliding(tmp_path / "src")
    before = tree_digest(src)
    target = small_disk("20m") / "out"
    change_operator_identifier(src, target, "accounts", "accounts-v2")
    assert tree_digest(src) == before
    assert check(target).ok
    assert Savepoint.open(target).keyed_table("accounts-v2").num_rows == 400
    assert all(os.stat(p).st_nlink == 1 for p in target.rglob("*.parquet"))


@pytest.mark.parametrize("where", ["equal", "inside", "inside-through-symlink", "equal-through-symlink"])
@pytest.mark.parametrize("repair", sorted(REPAIRS))
def test_target_inside_or_equal_to_the_source_is_refused(tmp_path, repair, where):
    src = _write(tmp_path / "src")
    (tmp_path / "alias").symlink_to(src)
    target = {"equal": src, "inside": src / "op-x" / "new", "inside-through-symlink": tmp_path / "alias" / "new",
              "equal-through-symlink": tmp_path / "alias"}[where]
    before = tree_digest(src)
    with pytest.raises(InvalidTargetError, match="source"):
        REPAIRS[repair](src, target)
    assert tree_digest(src) == before
    assert check(src).ok


def test_target_under_a_file_or_at_a_dangling_symlink(tmp_path):
    src = _write(tmp_path / "src")
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for target in (tmp_path / "file" / "sp", tmp_path / "file" / "a" / "b", tmp_path / "dangling"):
        with pytest.raises(InvalidTargetError):
            SavepointBuilder(target)
        for repair in REPAIRS.values():
            with pytest.raises(InvalidTargetError):
                repair(src, target)
    assert not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "file", "src"]
    with pytest.raises(SavepointExistsError):
        SavepointBuilder(tmp_path / "file")


# --- full disks ------------------------------------------------------------------------------------


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != "filler" and p.name != "lost+found")


def test_builder_on_a_full_disk_raises_storage_full_and_leaves_nothing(tmp_path, small_disk):
    disk = small_disk("20m")
    with pytest.raises(StorageFullError, match="no space left"):
        _write(disk / "sp", users=30_000, rows_per_file=5_000, payload=1024)
    assert _leftovers(disk) == []
    assert shutil.disk_usage(disk).used < 1 << 20


@pytest.mark.parametrize("repair", sorted(REPAIRS))
def test_repairs_on_a_full_disk(tmp_path, small_disk, repair):
    src = _write(tmp_path / "src", users=30_000, rows_per_file=5_000, payload=1024)
    before = tree_digest(src)
    disk = small_disk("20m")
    with pytest.raises(StorageFullError):
        REPAIRS[repair](src, disk / "out")
    assert _leftovers(disk) == []
    assert tree_digest(src) == before


@pytest.mark.parametrize("command", [
    ["rename-uid", "--from", "accounts", "--to", "acc2"],
    ["remove-operator", "--uid", "other"],
    ["set-max-parallelism", "--uid", "other", "--max", "256"],
])
def test_cli_repairs_on_a_full_disk_print_a_typed_error(tmp_path, small_disk, command):
    src = _write(tmp_path / "src", users=30_000, rows_per_file=5_000, payload=1024)
    before = tree_digest(src)
    disk = small_disk("20m")
    result = CliRunner().invoke(app, [command[0], str(src), str(disk / "out"), *command[1:], "--apply"])
    assert result.exit_code == 1, result.output  # the repair failed; the arguments were fine (2 is bad usage)
    assert "StorageFullError" in result.output and "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    assert _leftovers(disk) == []
    assert tree_digest(src) == before


def _fill(disk: Path, leave: int) -> None:
    """Fill `disk` until about `leave` bytes remain free."""
    free = shutil.disk_usage(disk).free
    with open(disk / "filler", "wb") as fh:
        try:
            fh.write(b"\0" * max(free - leave, 0))
        except OSError:
            pass


def test_every_amount_of_free_space_gives_a_complete_savepoint_or_storage_full(tmp_path, small_disk):
    """A small savepoint written with 0..N pages left: each attempt publishes a complete savepoint or raises
    `StorageFullError` and leaves nothing; no other outcome."""
    disk = small_disk("4m")
    outcomes = {"complete": 0, "typed": 0, "untyped": 0}
    src = _write(tmp_path / "src")
    for leave in range(0, 160 * 1024, 8 * 1024):
        _fill(disk, leave)
        for name, write in [("build", lambda t: _write(t)), ("rename", lambda t: change_operator_identifier(src, t, "accounts", "a2")),
                            ("rehash", lambda t: with_max_parallelism(src, t, "accounts", 512))]:
            target = disk / f"{name}-{leave}"
            try:
                write(target)
            except StorageFullError:
                outcomes["typed"] += 1
                assert not target.exists()
            except Exception as exc:  # noqa: BLE001 - counted, then failed below
                outcomes["untyped"] += 1
                print("untyped:", name, leave, type(exc).__name__, exc)
            else:
                outcomes["complete"] += 1
                assert check(target).ok
                shutil.rmtree(target)
            assert _leftovers(disk) == [], (name, leave)
        os.unlink(disk / "filler")
    print(f"disk-full cases: {sum(outcomes.values())}, typed: {outcomes['typed']}, untyped: {outcomes['untyped']}, "
          f"complete: {outcomes['complete']}")
    assert outcomes["untyped"] == 0 and outcomes["typed"] > 0 and outcomes["complete"] > 0


def test_errors_are_statekit_errors():
    assert issubclass(StorageFullError, StatekitError) and issubclass(InvalidTargetError, StatekitError)


def test_cli_refuses_a_target_inside_the_source_as_a_usage_error(tmp_path):
    src = _write(tmp_path / "src")
    before = tree_digest(src)
    for target in (src, src / "inside"):
        result = CliRunner().invoke(app, ["remove-operator", str(src), str(target), "--uid", "other", "--apply"])
        assert result.exit_code == 2, result.output
        assert "InvalidTargetError" in result.output and "Traceback" not in result.output
    assert tree_digest(src) == before
