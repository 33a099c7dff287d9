"""Whole-process measurements run as an installed statekit runs: with Python's bytecode cache.

`pip install` compiles every module of a package, and Python caches the bytecode of an editable
install on first import. Some machines (sandboxes, containers) set ``PYTHONDONTWRITEBYTECODE``, so
that every fresh interpreter compiles statekit's modules from source again (~0.1-0.2 s per process,
more than a one-key read costs). The benchmarks compile once, as an install does, and run their
child processes without that variable; the whole-process figures they print are measured so.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def installed_env() -> dict[str, str]:
    """The environment for a timed child process (statekit's modules compiled once, bytecode cache on)."""
    for package in ("statekit", "cli"):
        compileall.compile_dir(ROOT / package, quiet=1)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env
