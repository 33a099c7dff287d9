"""Temporary directories statekit creates are removed at exit, and swept after a killed process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

JOB = textwrap.dedent("""
    import os, sys, tempfile
    from statekit.runtime import StreamExecutionEnvironment
    env = StreamExecutionEnvironment(parallelism=1)
    env.from_collection([1, 2, 3]).uid("src").map(lambda v: v).uid("m")
    env.execute_async("left-running")          # a job still running when the process ends
    from statekit.runtime.job import JobRunner
    JobRunner(env, "never-run")                 # a job created but never run
    print(len([p for p in os.listdir(tempfile.gettempdir()) if p.startswith("statekit-job-")]), flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), 9)
""")


def _job_dirs(tmp):
    return sorted(p for p in os.listdir(tmp) if p.startswith("statekit-job-"))


def test_job_dirs_go_at_exit_and_after_a_kill(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", JOB, "exit"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[0]) >= 1 and _job_dirs(tmp_path) == []
    killed = subprocess.run([sys.executable, "-c", JOB, "kill"], env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert _job_dirs(tmp_path), "a killed process cannot clean up"
    # The next process that makes a job sweeps what the dead one left.
    again = subprocess.run([sys.executable, "-c", JOB, "exit"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert _job_dirs(tmp_path) == []
