"""Processes end cleanly: no native thread (pyarrow, RocksDB) left to abort the interpreter's exit.

The failure this guards against is a race ("terminate called without an active exception",
SIGABRT after all work is done), so each check runs a fresh interpreter many times: a few under
the default run, more under ``-m slow``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.savepoint import SavepointBuilder
from statekit.state import ValueStateDescriptor

RUNTIME_TESTS = Path(__file__).parent / "runtime"

# Point reads of many files from several threads, then exit at once: before the fix a dataset
# scan's fragment, freed on an Arrow pool thread after the read returned, took the GIL during
# finalization to free the Python bytes it wrapped and aborted the process (~5% of runs).
READS = """
import sys, threading
from statekit.savepoint import Savepoint
sp = Savepoint.open(sys.argv[1])
keys = [f"user-{i:06d}" for i in range(0, 60_000, 2_500)]
threads = [threading.Thread(target=sp.get, args=("accounts", k)) for k in keys]
for t in threads: t.start()
for t in threads: t.join()
print(sp.get("accounts", "user-000042")["balance"])
"""

ROCKSDB_JOB = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from jobs import build, events
from statekit.runtime import EmbeddedRocksDBStateBackend, StreamExecutionEnvironment
from statekit.savepoint import Savepoint
out = Path(sys.argv[1])
env = StreamExecutionEnvironment(parallelism=2, state_backend=EmbeddedRocksDBStateBackend(True))
env.enable_checkpointing(every_records=300)
env.get_checkpoint_config().set_checkpoint_storage_dir(out / "chk")
client = build(env, events(2000)).add_sink(lambda v: None)
env.execute("rocks", final_savepoint=out / "sp")
print(Savepoint.open(out / "sp").keyed_table("sum").num_rows)
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONFAULTHANDLER="1", TMPDIR=str(cwd)))


def _assert_all_clean(runs: list[subprocess.CompletedProcess]) -> None:
    bad = [(r.returncode, r.stderr[-500:]) for r in runs if r.returncode != 0]
    assert not bad, f"{len(bad)} of {len(runs)} runs did not exit 0: {bad[:3]}"


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("exit") / "sp"
    n = 60_000
    with SavepointBuilder(path, rows_per_file=1_000) as b:
        op = b.add_operator("accounts", parallelism=1, max_parallelism=128, key_type="string",
                            keyed_states=[ValueStateDescriptor("balance", "double")])
        op.write_keyed(pa.table({"key": [f"user-{i:06d}" for i in range(n)], "balance": [float(i) for i in range(n)]}))
    return path


@pytest.mark.parametrize("runs", [pytest.param(12, id="12"), pytest.param(150, id="150", marks=pytest.mark.slow)])
def test_threaded_reads_then_exit(many_files, tmp_path, runs):
    results = [_run([sys.executable, "-c", READS, str(many_files)], tmp_path) for _ in range(runs)]
    _assert_all_clean(results)
    assert all(r.stdout.strip() == "42.0" for r in results)


@pytest.mark.parametrize("runs", [pytest.param(2, id="2"), pytest.param(30, id="30", marks=pytest.mark.slow)])
def test_rocksdb_job_then_exit(tmp_path, runs):
    results = [_run([sys.executable, "-c", ROCKSDB_JOB, str(tmp_path / f"r{i}"), str(RUNTIME_TESTS)], tmp_path)
               for i in range(runs)]
    _assert_all_clean(results)


@pytest.mark.slow
def test_demo_then_exit_30_times(tmp_path):
    """`statekit demo` (without Spark: one JVM per run would take the machine) in fresh directories."""
    cli = Path(sys.executable).with_name("statekit")
    results = [_run([str(cli), "demo", "--no-spark", "--out", str(tmp_path / f"demo-{i}")], tmp_path)
               for i in range(30)]
    _assert_all_clean(results)
    assert all("OK" in r.stdout and "MISMATCH" not in r.stdout for r in results)


def test_demo_then_exit(tmp_path):
    cli = Path(sys.executable).with_name("statekit")
    _assert_all_clean([_run([str(cli), "demo", "--no-spark", "--out", str(tmp_path / "demo")], tmp_path)])


def test_forgotten_async_job_is_ended_at_exit(tmp_path):
    """A job started with execute_async and never waited for is cancelled and closed by an atexit hook,
    before its working directory goes (not cut off inside RocksDB while the interpreter finalizes)."""
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        sys.path.insert(0, sys.argv[2])
        from jobs import build, events
        from statekit.runtime import EmbeddedRocksDBStateBackend, SinkFunction, StreamExecutionEnvironment

        class Marker(SinkFunction):
            def invoke(self, value, context):
                pass

            def close(self):
                (Path(sys.argv[1]) / "closed").write_text("closed")

        env = StreamExecutionEnvironment(parallelism=2, state_backend=EmbeddedRocksDBStateBackend())
        build(env, events(300_000)).add_sink(Marker()).set_parallelism(1)
        client = env.execute_async("forgotten")
        client.trigger_savepoint(sys.argv[1] + "/sp").result(120)  # the job is well under way
        print("leaving", client.get_job_status())
    """)
    r = _run([sys.executable, "-c", script, str(tmp_path), str(RUNTIME_TESTS)], tmp_path)
    _assert_all_clean([r])
    assert "leaving RUNNING" in r.stdout
    assert (tmp_path / "closed").read_text() == "closed"
    assert not list(tmp_path.glob("statekit-job-*"))
