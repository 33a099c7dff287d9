"""Leftovers of killed processes: removed by the next write or run, listed and removed by `statekit clean`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from typer.testing import CliRunner

from statekit.runtime import latest_checkpoint
from statekit.savepoint import SavepointBuilder, check
from statekit.state import ValueStateDescriptor
from statekit_cli.app import app

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))  # jobs.py, shared with the runtime tests

HERE = Path(__file__).parent
RUNTIME = HERE.parent / "runtime"


def _child(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(RUNTIME), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(proc: subprocess.Popen, *prefixes: str) -> None:
    seen = set()
    while len(seen) < len(prefixes):
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        seen |= {p for p in prefixes if line.startswith(p)}


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    assert proc.wait() == -signal.SIGKILL
    for f in (proc.stdin, proc.stdout, proc.stderr):
        f.close()


def _write(path: Path) -> None:
    with SavepointBuilder(path) as b:
        op = b.add_operator("counter", key_type="bigint", keyed_states=[ValueStateDescriptor("count", "bigint")])
        op.write_keyed(pa.table({"key": [1], "count": [1]}))


def _clean(*args: str) -> dict:
    result = CliRunner().invoke(app, ["clean", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _hidden(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_staging_of_a_killed_write_is_kept_while_alive_then_removed_by_the_next_write(tmp_path):
    child = _child([str(HERE / "clean_child.py"), str(tmp_path / "a")])
    try:
        _wait_for(child, "staged")
        staged = _hidden(tmp_path)
        assert len(staged) == 2  # the staging directory and its lock
        _write(tmp_path / "b")  # a write next to a live one leaves it alone
        assert _hidden(tmp_path) == staged
        assert _clean(str(tmp_path))["leftovers"] == []
    finally:
        _kill(child)
    _write(tmp_path / "c")  # the next write removes what the dead one left
    assert _hidden(tmp_path) == []
    assert check(tmp_path / "b").ok and check(tmp_path / "c").ok


def test_clean_lists_then_removes_leftovers_of_killed_processes(tmp_path):
    # A killed savepoint write.
    child = _child([str(HERE / "clean_child.py"), str(tmp_path / "sp")])
    _wait_for(child, "staged")
    _kill(child)
    # A killed job with a FileSink (in-progress output) and checkpoints in its own storage.
    out, chk = tmp_path / "out", tmp_path / "chk"
    job = _child([str(RUNTIME / "jobs.py"), "heap", "3000", str(out), str(chk), str(tmp_path / "final"), "1500"])
    _wait_for(job, "parked", "checkpoint ")
    _kill(job)
    # A checkpoint whose deletion was cut off (what older statekit left: manifest kept, a file gone).
    newest = latest_checkpoint(chk)
    assert newest is not None
    broken = chk / "chk-999"
    os.rename(newest, broken)
    next(broken.rglob("*.parquet")).unlink()
    (broken / "_metadata.json").unlink()

    listed = _clean(str(tmp_path))
    kinds = sorted(item["kind"] for item in listed["leftovers"])
    assert kinds == ["checkpoint", "inprogress", "inprogress", "staging"], listed
    assert listed["removed"] == 0 and broken.exists()
    before = sorted(p.name for p in out.iterdir())

    applied = _clean(str(tmp_path), "--apply")
    assert applied["removed"] == 4
    assert _clean(str(tmp_path))["leftovers"] == []
    assert _hidden(tmp_path) == [] and not broken.exists()
    after = sorted(p.name for p in out.iterdir())
    assert [n for n in before if not n.startswith(".inprogress-")] == after  # .pending and part files stay


def test_next_run_removes_the_dead_runs_inprogress_files(tmp_path):
    from jobs import run_to_files

    out, chk = tmp_path / "out", tmp_path / "chk"
    job = _child([str(RUNTIME / "jobs.py"), "heap", "3000", str(out), str(chk), str(tmp_path / "final"), "1500"])
    _wait_for(job, "parked", "checkpoint ")
    _kill(job)
    assert [p for p in out.iterdir() if p.name.startswith(".inprogress-")]
    run_to_files("heap", 3000, out, chk, tmp_path / "final2", restore=latest_checkpoint(chk))
    assert not [p for p in out.iterdir() if p.name.startswith(".inprogress-")]


def _complete(chk: Path) -> list[Path]:
    from statekit.runtime.storage import checkpoint_dirs, is_complete

    return [p for _, p in sorted(checkpoint_dirs(chk).items()) if is_complete(p)]


def test_retained_checkpoints_of_old_runs_are_kept_listed_and_removed_only_when_asked(tmp_path):
    """As in Flink, a killed (or finished) run's complete checkpoints are the user's: a re-run on the same
    storage keeps them, `clean` lists them, and only --checkpoints --apply removes them (never the newest
    of a storage unless --newest says so, never while a job holds the storage)."""
    from jobs import run_to_files

    from statekit.runtime.storage import StorageLock

    out, chk = tmp_path / "out", tmp_path / "chk"
    job = _child([str(RUNTIME / "jobs.py"), "heap", "3000", str(out), str(chk), str(tmp_path / "final"), "1500"])
    _wait_for(job, "parked", "checkpoint ")
    _kill(job)
    killed_runs = _complete(chk)
    assert killed_runs
    run_to_files("heap", 3000, tmp_path / "out2", chk, tmp_path / "final2", restore=latest_checkpoint(chk))
    retained = _complete(chk)
    assert set(killed_runs) < set(retained)  # the re-run kept the killed run's checkpoints and added its own

    listed = [i for i in _clean(str(chk))["leftovers"] if i["kind"] == "retained"]
    assert [Path(i["path"]) for i in listed] == retained
    assert [i["newest"] for i in listed] == [False] * (len(retained) - 1) + [True]
    assert _clean(str(chk), "--apply")["removed"] == 0 and _complete(chk) == retained

    with StorageLock.acquire(chk, "a live job"):  # a running job's storage: nothing of it is listed or removed
        assert _clean(str(chk))["leftovers"] == []
        assert _clean(str(chk), "--checkpoints", "--newest", "--apply")["removed"] == 0
    assert _complete(chk) == retained

    result = CliRunner().invoke(app, ["clean", str(chk)])
    assert result.exit_code == 0 and f"{retained[-1]}  (newest)" in result.stdout
    assert f"{len(retained)} retained checkpoint(s), {len(retained)} kept" in result.stderr

    assert _clean(str(chk), "--checkpoints", "--apply")["removed"] == len(retained) - 1
    assert _complete(chk) == [retained[-1]] and check(retained[-1]).ok
    assert latest_checkpoint(chk) == retained[-1]
    assert sorted(p.name for p in chk.iterdir() if p.name.startswith("chk-")) == [retained[-1].name]

    assert CliRunner().invoke(app, ["clean", str(chk), "--newest", "--apply"]).exit_code == 2
    assert _clean(str(chk), "--checkpoints", "--newest", "--apply")["removed"] == 1
    assert _complete(chk) == [] and latest_checkpoint(chk) is None
