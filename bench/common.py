"""What the benchmarks share: the machine's load, best-of-N timing, and private copies of read-only generators."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable


def load() -> str:
    """The 1-minute load average as printed beside every figure (the machine is shared), or "?" where unknown."""
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def best(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """The shortest of `repeat` timed calls of `fn`, and the last call's result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def private_copy(source: Path, target: Path) -> bool:
    """Copy the Maven project `source` (shared, read-only) to `target` once, writable, so builds never run inside
    the shared one; whether it was copied now (False: `target` already held it)."""
    if (target / "pom.xml").exists():
        return False
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("target"))
    for p in target.rglob("*"):
        p.chmod(0o755 if p.is_dir() or p.suffix == ".sh" else 0o644)
    target.chmod(0o755)
    return True
