"""Child processes of the checkpoint-storage tests: a job SIGKILLed mid-deletion of a checkpoint, or parked holding its storage."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from jobs import build, events

from statekit.runtime import StreamExecutionEnvironment

N = 300


def env_on(storage: Path, retained: int = 1) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment(parallelism=2)
    env.enable_checkpointing(every_records=100)
    # Concurrent checkpoints make their number depend on the input only, not on how fast they are written.
    env.get_checkpoint_config().set_checkpoint_storage_dir(storage).set_num_retained_checkpoints(retained).set_max_concurrent_checkpoints(5)
    return env


def kill_at_unlink(target: Path, k: int) -> None:
    """SIGKILL this process just before its k-th unlink of a file inside `target` (however it is named)."""
    real = os.unlink
    prefix = str(target.resolve()) + os.sep
    seen = [0]

    def unlink(path, *, dir_fd=None):
        base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.getcwd()
        full = os.path.join(base, os.fsdecode(path))
        if full.startswith(prefix):
            seen[0] += 1
            if seen[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(path, dir_fd=dir_fd)

    os.unlink = unlink
    os.remove = unlink


if __name__ == "__main__":
    mode, storage = sys.argv[1], Path(sys.argv[2])
    if mode == "delete":  # checkpoints 1, 2, 3 at retained=1: chk-1 is deleted when chk-2 completes
        kill_at_unlink(storage / "chk-1", int(sys.argv[3]))
        build(env_on(storage), events(N)).execute_and_collect("deleting")
    elif mode == "park":  # hold the storage until killed; "checkpoint N written" lines tell the parent
        import logging

        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger("statekit.runtime.checkpointing").addHandler(handler)
        logging.getLogger("statekit.runtime.checkpointing").setLevel(logging.INFO)
        build(env_on(storage, retained=5), events(N), fail_at=150, mode="park").execute_and_collect("parked")
