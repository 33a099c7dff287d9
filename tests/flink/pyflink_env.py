"""A python with PyFlink for the `flink` suite: `STATEKIT_PYFLINK_PYTHON`, else a venv cached outside the checkout
(created once with `apache-flink` from PyPI), so the PyFlink restore runs wherever the suite runs.

Run as a script (`python tests/flink/pyflink_env.py`) it creates the venv ahead of the suite and prints its python
(and, on stderr, how long the install took).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: The Flink release the fixtures were made with and the restore job targets.
APACHE_FLINK = "apache-flink==2.3.0"


def cache_dir() -> Path:
    """statekit's cache (the compiled pruning rule lives there too): `$STATEKIT_CACHE_DIR` or ~/.cache/statekit."""
    return Path(os.environ.get("STATEKIT_CACHE_DIR") or Path.home() / ".cache" / "statekit")


def venv_dir() -> Path:
    """Where the cached PyFlink venv lives: outside every checkout, shared by all of them."""
    return cache_dir() / f"pyflink-venv-{APACHE_FLINK.split('==')[1]}"


def _ready(python: Path) -> bool:
    return python.exists() and subprocess.run([str(python), "-c", "import pyflink"], capture_output=True).returncode == 0


def ensure_pyflink_python(log=print) -> tuple[str, float | None]:
    """(a python that imports pyflink, seconds spent installing it or None when it was there already).

    `STATEKIT_PYFLINK_PYTHON` wins; otherwise the cached venv, created on first use (one process at a time, under a
    lock; a venv whose install did not complete is made again: the `.complete` mark is written last).
    """
    env = os.environ.get("STATEKIT_PYFLINK_PYTHON")
    if env:
        return env, None
    venv = venv_dir()
    python = venv / "bin" / "python"
    mark = venv / ".complete"
    if mark.exists() and _ready(python):
        return str(python), None
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run creating it: wait for it instead of a second install
        if mark.exists() and _ready(python):
            return str(python), None
        if venv.exists():
            shutil.rmtree(venv)  # an interrupted install of ours (no .complete mark)
        log(f"creating {venv} with {APACHE_FLINK} from PyPI (once; about 850 MB)")
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", APACHE_FLINK], check=True)
        seconds = time.monotonic() - start
        if not _ready(python):
            raise RuntimeError(f"{python} cannot import pyflink after installing {APACHE_FLINK}")
        mark.write_text(f"{APACHE_FLINK} installed in {seconds:.0f} s\n")
        return str(python), seconds


if __name__ == "__main__":  # stdout: the python alone (`PY=$(python tests/flink/pyflink_env.py)`); notes on stderr
    found, took = ensure_pyflink_python(log=lambda line: print(line, file=sys.stderr))
    if took is not None:
        print(f"installed {APACHE_FLINK} in {took:.0f} s", file=sys.stderr)
    print(found)
