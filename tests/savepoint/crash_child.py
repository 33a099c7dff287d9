"""Child process of the crash tests: runs one savepoint write and SIGKILLs itself at its k-th file-system step.

    python crash_child.py OPERATION SOURCE TARGET_PREFIX

It reads kill points ``k`` from stdin, one a line; for each it forks a process (imports are done
once, before any fork, while this process is still single-threaded) that writes
``TARGET_PREFIX-k`` and answers ``k STATUS STEPS`` where STATUS is ``killed``, ``done`` or
``failed``. A step is a call that changes the file system or its durability: ``os.open``/``open`` for writing,
``mkdir``, ``rename``/``replace``, ``link``, ``unlink``/``rmdir`` and ``fsync``. The process kills
itself (a real ``SIGKILL``: no cleanup, no ``finally``) just before step ``k`` runs; with ``k`` 0
it runs to the end and reports how many steps it took.
"""

from __future__ import annotations

import builtins
import io
import os
import signal
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def install(kill_at: int) -> list[int]:
    """Wrap the file-system functions; returns the (shared) step counter."""
    count = [0]
    lock = threading.Lock()

    def step() -> None:
        with lock:
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    def counted(fn, is_step=lambda *a, **k: True):
        def wrapper(*args, **kwargs):
            if is_step(*args, **kwargs):
                step()
            return fn(*args, **kwargs)
        return wrapper

    def writes_flags(path, flags, *a, **k):
        return bool(flags & _WRITE_FLAGS)

    def writes_mode(file, mode="r", *a, **k):
        return isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wxa+")

    os.open = counted(os.open, writes_flags)
    builtins.open = io.open = counted(io.open, writes_mode)
    for name in ("mkdir", "rename", "replace", "link", "unlink", "rmdir", "fsync"):
        setattr(os, name, counted(getattr(os, name)))
    return count


def run(operation: str, source: Path, target: Path) -> None:
    from statekit.savepoint.transforms import change_operator_identifier, remove_operator, with_max_parallelism

    if operation == "build":
        sys.path.insert(0, str(HERE.parent / "golden"))
        import make_golden

        make_golden.build(target)
    elif operation == "rename-uid":
        change_operator_identifier(source, target, "counter", "counter-v2")
    elif operation == "remove-operator":
        remove_operator(source, target, "broadcast-rules")
    elif operation == "set-max-parallelism":
        with_max_parallelism(source, target, "counter", 256)
    elif operation == "rename-native":
        change_operator_identifier(source, target, "native", "native-v2")
    else:
        raise SystemExit(f"unknown operation {operation}")


def serve(op: str, source: Path, prefix: str) -> None:
    import shutil
    import traceback

    # One run here first loads every module the write imports lazily, so the forked runs only write.
    # (Arrow and jemalloc re-initialise their thread pools in a forked child.)
    warm = Path(f"{prefix}-warm-up")
    run(op, source, warm)
    shutil.rmtree(warm)

    for line in sys.stdin:
        k = int(line)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the process that is killed
            os.close(r)
            try:
                counter = install(k)
                run(op, source, Path(f"{prefix}-{k}"))
                os.write(w, str(counter[0]).encode())
                os._exit(0)
            except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
                traceback.print_exc()
                os._exit(1)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        steps = os.read(r, 64).decode() or "-"
        os.close(r)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            outcome = "killed"
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            outcome = "done"
        else:
            outcome = "failed"
        print(k, outcome, steps, flush=True)


if __name__ == "__main__":
    import pyarrow.parquet  # noqa: F401 - imported once, before any fork; imports are not steps of a write

    import statekit.savepoint.transforms  # noqa: F401

    serve(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
