"""Failure injection: exceptions in user code and SIGKILLed processes; results equal a failure-free run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from jobs import build, events, make_env, run_to_files

from statekit.runtime import latest_checkpoint, read_file_sink
from statekit.savepoint import Savepoint

N = 1_200
N_KILL = 3_000


def keyed_state(savepoint: Path) -> list[dict]:
    table = Savepoint.open(savepoint).keyed_table("sum")
    return sorted(table.to_pylist(), key=lambda r: r["key"])


def timers(savepoint: Path) -> list[dict]:
    return sorted(Savepoint.open(savepoint).timers("sum").to_pylist(), key=lambda r: (r["key"], r["timestamp"]))


def run_collect(backend: str, tmp: Path, fail_at: int | None) -> tuple[list, Path]:
    env = make_env(backend, 2, tmp / "chk")
    sp = tmp / "final"
    out = build(env, events(N), fail_at=fail_at).execute_and_collect("job", final_savepoint=sp)
    assert out.job_execution_result.restarts == (0 if fail_at is None else 1)
    assert out.job_execution_result.failed_checkpoints == []
    return list(out), sp


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The failure-free run per backend: output and final state."""
    cache = {}

    def get(backend: str):
        if backend not in cache:
            tmp = tmp_path_factory.mktemp(f"ref-{backend}")
            out, sp = run_collect(backend, tmp, None)
            cache[backend] = (out, keyed_state(sp), timers(sp))
        return cache[backend]

    return get


def _points(count: int, seed: int) -> list[int]:
    return sorted(random.Random(seed).sample(range(N), count))


def _check_exception(backend, reference, tmp_path, at):
    out, sp = run_collect(backend, tmp_path / str(at), at)
    ref_out, ref_state, ref_timers = reference(backend)
    assert out == ref_out
    assert keyed_state(sp) == ref_state
    assert timers(sp) == ref_timers


@pytest.mark.parametrize("at", [0, 1, 399, 777, N - 1])
def test_exception_in_user_function(backend, reference, tmp_path, at):
    _check_exception(backend, reference, tmp_path, at)


@pytest.mark.slow
@pytest.mark.parametrize("at", _points(20, seed=4))
def test_exception_at_20_random_points(backend, reference, tmp_path, at):
    _check_exception(backend, reference, tmp_path, at)


# -- killed child process ------------------------------------------------------------------------------

JOBS = str(Path(__file__).with_name("jobs.py"))


@pytest.fixture(scope="module")
def file_reference(tmp_path_factory):
    cache = {}

    def get(backend: str):
        if backend not in cache:
            tmp = tmp_path_factory.mktemp(f"fileref-{backend}")
            run_to_files(backend, N_KILL, tmp / "out", tmp / "chk", tmp / "sp")
            cache[backend] = (sorted(read_file_sink(tmp / "out")), keyed_state(tmp / "sp"))
        return cache[backend]

    return get


def _check_kill(backend, file_reference, tmp_path, at):
    """Kill the child at element `at` after it wrote a checkpoint; resume from the latest one; compare."""
    out, chk, sp = tmp_path / "out", tmp_path / "chk", tmp_path / "sp"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen(
        [sys.executable, JOBS, backend, str(N_KILL), str(out), str(chk), str(sp), str(at)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        # Read (blocking, no sleeping) until the child is parked at `at` and has written a
        # checkpoint; it keeps writing checkpoints in flight while parked, so one always comes.
        parked = written = False
        while not (parked and written):
            line = child.stdout.readline()
            assert line, f"the child ended early: {child.stderr.read()}"
            parked = parked or line.startswith("parked ")
            written = written or line.startswith("checkpoint ")
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
        child.stdin.close()
    assert not sp.exists()
    restore = latest_checkpoint(chk)
    run_to_files(backend, N_KILL, out, tmp_path / "chk2", sp, restore=restore)
    ref_lines, ref_state = file_reference(backend)
    assert sorted(read_file_sink(out)) == ref_lines
    assert keyed_state(sp) == ref_state
    return restore


@pytest.mark.parametrize("at", [150, 2900])
def test_killed_child_process(backend, file_reference, tmp_path, at):
    assert _check_kill(backend, file_reference, tmp_path, at) is not None


@pytest.mark.slow
@pytest.mark.parametrize("at", sorted(random.Random(9).sample(range(100, N_KILL), 20)))
def test_killed_child_process_at_20_random_points(backend, file_reference, tmp_path, at):
    _check_kill(backend, file_reference, tmp_path, at)


def test_output_lines_are_json(backend, file_reference):
    lines, _ = file_reference(backend)
    assert lines and all(isinstance(json.loads(line), list) for line in lines)
