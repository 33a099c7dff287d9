"""A python with PyFlink for the `flink` suite: `STATEKIT_PYFLINK_PYTHON`, else a venv cached outside the checkout
(created once with `apache-flink` from PyPI), so the PyFlink restore runs wherever the suite runs.

Run as a script (`python tests/flink/pyflink_env.py`) it creates the venv ahead of the suite and prints its python
(and, on stderr, how long the install took).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: venv_cache, also when run as a script

from venv_cache import cached_venv, venv_path  # noqa: E402

#: The Flink release the fixtures were made with and the restore job targets.
APACHE_FLINK = "apache-flink==2.3.0"


def venv_dir() -> Path:
    """Where the cached PyFlink venv lives: outside every checkout, shared by all of them."""
    return venv_path("pyflink-venv", [APACHE_FLINK])


def ensure_pyflink_python(log=lambda line: print(line, file=sys.stderr)) -> tuple[str, float | None]:
    """(a python that imports pyflink, seconds spent installing it or None when it was there already)."""
    env = os.environ.get("STATEKIT_PYFLINK_PYTHON")
    if env:
        return env, None
    python, seconds = cached_venv("pyflink-venv", [APACHE_FLINK], probe="import pyflink", log=log)
    return str(python), seconds


if __name__ == "__main__":  # stdout: the python alone (`PY=$(python tests/flink/pyflink_env.py)`); notes on stderr
    found, took = ensure_pyflink_python()
    if took is not None:
        print(f"installed {APACHE_FLINK} in {took:.0f} s", file=sys.stderr)
    print(found)
