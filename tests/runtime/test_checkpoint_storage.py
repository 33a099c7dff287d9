"""Checkpoint storage: one live job per directory, ids never reused, no checkpoint deleted by another, no half-deleted checkpoint."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from jobs import build, events
from storage_child import N, env_on

from statekit.errors import CheckpointStorageInUseError
from statekit.runtime import MapFunction, latest_checkpoint
from statekit.savepoint import Savepoint, check

CHILD = str(Path(__file__).parent / "storage_child.py")


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def checkpoints(storage: Path) -> dict[str, str]:
    return {p.name: tree_hash(p) for p in sorted(storage.glob("chk-*"))}


def counts(savepoint: Path) -> dict[str, int]:
    return {r["key"]: r["count"] for r in Savepoint.open(savepoint).keyed_table("sum").to_pylist()}


def expected_counts(n: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, _seq in events(n):
        out[key] = out.get(key, 0) + 1
    return out


def child(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, CHILD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_rerun_on_old_storage_keeps_the_old_runs_checkpoints(tmp_path):
    storage = tmp_path / "chk"
    build(env_on(storage, retained=2), events(N)).execute_and_collect("first")
    old = checkpoints(storage)
    assert list(old) == ["chk-2", "chk-3"]
    # The second run takes checkpoints 1, 2, 3 again in today's numbering: they must get new ids and
    # leave the first run's alone (before, chk-2 failed as existing and was then deleted as failed).
    result = build(env_on(storage, retained=2), events(N)).execute_and_collect("second").job_execution_result
    assert result.failed_checkpoints == []
    assert [cid for cid, _ in result.completed_checkpoints] == [5, 6]
    now = checkpoints(storage)
    assert {k: now[k] for k in old} == old
    assert set(now) == {"chk-2", "chk-3", "chk-5", "chk-6"}
    assert latest_checkpoint(storage) == storage / "chk-6"


GATE = threading.Event()  # module level: user functions are deep-copied, a reference by name is not


class Gate(MapFunction):
    def map(self, value):
        if value[1] == 250:
            GATE.wait(120)
        return value


def test_two_live_jobs_in_one_process_are_refused(tmp_path):
    storage = tmp_path / "chk"
    GATE.clear()
    env = env_on(storage, retained=5)
    build(env, events(N)).map(Gate()).uid("gate").add_sink(lambda v: None)
    first = env.execute_async("first")
    try:
        with pytest.raises(CheckpointStorageInUseError, match="'first'"):
            build(env_on(storage), events(N)).execute_and_collect("second")
    finally:
        GATE.set()
    first.wait(120)
    assert sorted(checkpoints(storage)) == ["chk-1", "chk-2", "chk-3"]
    # Ended, the first job released the storage.
    build(env_on(storage), events(N)).execute_and_collect("third")


def test_a_second_job_is_refused_while_the_first_lives_and_runs_once_it_is_killed(tmp_path):
    storage = tmp_path / "chk"
    holder = child("park", str(storage))
    try:
        parked = written = False
        while not (parked and written):  # parked inside its input, after a checkpoint completed
            line = holder.stdout.readline()
            assert line, holder.stderr.read()
            parked = parked or line.startswith("parked ")
            written = written or line.startswith("checkpoint ")
        held = checkpoints(storage)
        assert held
        with pytest.raises(CheckpointStorageInUseError, match="in use by a running job"):
            build(env_on(storage), events(N)).execute_and_collect("intruder")
        assert checkpoints(storage) == held
        holder.kill()
        assert holder.wait() == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for f in (holder.stdin, holder.stdout, holder.stderr):
            f.close()
    # The dead holder's flock went with it: the next job runs, numbering past its checkpoints.
    result = build(env_on(storage, retained=5), events(N)).execute_and_collect("next").job_execution_result
    first_new = min(cid for cid, _ in result.completed_checkpoints)
    assert first_new > max(int(name[4:]) for name in held)
    now = checkpoints(storage)
    assert {k: now[k] for k in held} == held


def test_sigkill_at_every_unlink_of_a_checkpoint_deletion_leaves_no_half_checkpoint(tmp_path):
    """Retention deletes chk-1 when chk-2 completes; SIGKILL the process before each of its unlinks."""
    killed = 0
    for k in range(1, 40):
        storage = tmp_path / f"k{k}"
        proc = child("delete", str(storage), str(k))
        _out, err = proc.communicate(timeout=300)
        if proc.returncode == 0:
            break  # k is past the deletion's last unlink
        assert proc.returncode == -signal.SIGKILL, err
        killed += 1
        # No directory with a manifest may miss files: it would pass for a checkpoint.
        for chk in storage.glob("chk-*"):
            if (chk / "_metadata.json").exists():
                assert check(chk).ok, f"kill before unlink {k} left a half-deleted checkpoint {chk.name}: {check(chk)}"
        latest = latest_checkpoint(storage)
        assert latest is not None and latest.name in ("chk-2", "chk-3")
        # Killed before its first unlink chk-1 is still whole; after it, recovery finishes the deletion.
        assert not (storage / "chk-1").exists() or (k == 1 and check(storage / "chk-1").ok)
        final = tmp_path / f"final-{k}"
        build(env_on(tmp_path / f"resumed-{k}"), events(N)).execute_and_collect("resumed", restore_from=latest, final_savepoint=final)
        assert counts(final) == expected_counts(N)
    assert killed >= 3  # the deletion has several files: the manifest and data files of every operator


def test_latest_checkpoint_skips_and_removes_a_checkpoint_missing_files(tmp_path):
    """A manifest over missing files (as an interrupted deletion of older statekit versions left) is no checkpoint."""
    storage = tmp_path / "chk"
    build(env_on(storage, retained=2), events(N)).execute_and_collect("job")
    newest = storage / "chk-3"
    victim = next(p for p in newest.rglob("*.parquet"))
    victim.unlink()
    assert latest_checkpoint(storage) == storage / "chk-2"
    assert not newest.exists()
