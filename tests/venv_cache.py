"""Virtual environments the suite needs beside its own (PyFlink; statekit's core install without extras), created
once from PyPI and cached outside every checkout (`$STATEKIT_CACHE_DIR` or ~/.cache/statekit), so re-runs are fast."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence


def cache_dir() -> Path:
    """statekit's cache (the compiled pruning rule lives there too): `$STATEKIT_CACHE_DIR` or ~/.cache/statekit."""
    return Path(os.environ.get("STATEKIT_CACHE_DIR") or Path.home() / ".cache" / "statekit")


def venv_path(name: str, requirements: Sequence[str]) -> Path:
    """Where the venv of `requirements` lives: named after them, so a changed list gets a venv of its own."""
    digest = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:10]
    return cache_dir() / f"{name}-{digest}"


def cached_venv(name: str, requirements: Sequence[str], *, probe: str,
                log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> tuple[Path, float | None]:
    """(the venv's python, seconds spent creating it or None when it was cached).

    Created under a lock (a parallel run waits instead of installing twice); its `.complete` mark is written last,
    so a venv whose install was interrupted is made again. `probe` is Python code that must run in it.
    """
    venv = venv_path(name, requirements)
    python = venv / "bin" / "python"
    mark = venv / ".complete"

    def ready() -> bool:
        return mark.exists() and python.exists() and subprocess.run(
            [str(python), "-c", probe], capture_output=True).returncode == 0

    if ready():
        return python, None
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready():
            return python, None
        if venv.exists():
            shutil.rmtree(venv)  # an interrupted install of ours (no .complete mark)
        log(f"creating {venv} with {' '.join(requirements)} from PyPI (once)")
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
        seconds = time.monotonic() - start
        mark.write_text(f"{' '.join(requirements)}: installed in {seconds:.0f} s\n")
        if not ready():
            raise RuntimeError(f"{python} cannot run {probe!r} after installing {' '.join(requirements)}")
        return python, seconds
