"""A helper process that decodes partitions of Spark checkpoints beside the caller: two interpreters, so two GILs.

Why: a partition decodes as numpy loops between short Python steps. Two threads of one interpreter
overlap the loops but queue for each other's Python steps (the GIL), and a full read of 4 partitions
on 2 threads took 0.85 s where one thread in the caller and one in this helper took 0.72 s, the
hand-back included (`bench/spark_streaming.py`, 10M keys).

Lifetime: one helper per process, started by the second read large enough to want it (`helper`): a process
that reads once (a CLI command) never pays its start-up, and the read that starts it does not wait for
it (it decodes on threads while the helper imports); later reads share it.
It is a fresh interpreter (``python -m statekit.savepoint.spark_decoder``), never a fork of the
caller: the caller may hold a JVM gateway, a Spark session or locks a fork would copy half-taken.
It exits when the caller's end of its socket closes (the caller exits, or forks: a child forgets
its parent's helper). ``STATEKIT_HELPER_PROCESS=0`` turns it off; Linux only (it needs memfd).

Protocol, over a ``SOCK_SEQPACKET`` socket pair: a request is a JSON message (checkpoint path,
batch, operator, store, partition); the reply is a JSON message with, on success, a memfd holding
the partition's table as an Arrow IPC file. The caller maps it: no copy, no pickle. A reply with an
error, or none (the helper died), makes the caller decode that partition itself, so every error a
user sees comes from the caller's own decoder.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

ENV = "STATEKIT_HELPER_PROCESS"
#: bytes of state files a read must hold before a helper is worth its start-up (~0.4 s of CPU once per process)
MIN_BYTES = 32 << 20
MESSAGE = 1 << 16  # the largest request or reply

_lock = threading.Lock()
_helper: Helper | None = None
_disabled = False  # a helper died or could not start: this process decodes on threads from now on
_asked = 0  # large reads so far


class Helper:
    """The helper process and the caller's end of its socket."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # the same statekit as the caller's, and no helper of its own
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **{ENV: "0"})
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "statekit.savepoint.spark_decoder",
                                          str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)
        finally:
            theirs.close()
        self.sock = mine
        self.pid = os.getpid()
        self.busy = threading.Lock()  # one read at a time uses the helper; another read meanwhile uses threads
        self.ready = threading.Event()
        threading.Thread(target=self._await_ready, name="statekit-helper-start", daemon=True).start()

    def _await_ready(self) -> None:
        try:
            if json.loads(self.sock.recv(MESSAGE) or b"{}").get("ready"):
                self.ready.set()
                return
        except (OSError, ValueError):
            pass
        _give_up(self)

    def decode(self, request: dict[str, Any], schema: pa.Schema) -> pa.Table | None:
        """The table the helper decoded for `request`, or None (it failed, or is gone: the caller decodes)."""
        try:
            self.sock.send(json.dumps(request).encode())
            msg, fds, _, _ = socket.recv_fds(self.sock, MESSAGE, 1)
        except OSError:
            _give_up(self)
            return None
        if not msg:  # the helper exited
            _give_up(self)
            return None
        if not fds:
            return None  # it could not decode this partition: the caller's decoder names why
        try:
            table = pa.ipc.open_file(pa.memory_map(f"/proc/self/fd/{fds[0]}")).read_all()
        finally:
            os.close(fds[0])  # (the map keeps the memory)
        return table if table.schema.equals(schema) else None

    def close(self) -> None:
        self.sock.close()  # a ready helper sees the end of its socket and exits
        if not self.ready.is_set():
            self.proc.kill()  # still importing: the caller's exit does not wait for that
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _give_up(h: Helper) -> None:
    global _helper, _disabled
    with _lock:
        _disabled = True
        if _helper is h:
            _helper = None
    try:
        h.sock.close()
    except OSError:
        pass


def available() -> bool:
    """Whether this process may have a helper at all (Linux, two cores, not turned off, none died)."""
    return not _disabled and os.environ.get(ENV) != "0" and hasattr(os, "memfd_create") and (os.cpu_count() or 1) >= 2 \
        and bool(sys.executable)


def helper() -> Helper | None:
    """This process's helper when it is ready, else None (starting it on the second call)."""
    global _helper, _asked
    if not available():
        return None
    with _lock:
        _asked += 1
        if _helper is None and _asked >= 2:
            try:
                _helper = Helper()
            except OSError:
                return None
        h = _helper
    return h if h is not None and h.ready.is_set() else None


def _forget() -> None:
    """In a forked child: the parent's helper is the parent's (its socket closed here, the helper left running)."""
    global _helper, _lock
    _lock = threading.Lock()
    if _helper is not None:
        _helper.sock.close()
        _helper = None


def _close() -> None:
    h = _helper
    if h is not None and h.pid == os.getpid():
        h.close()


atexit.register(_close)
os.register_at_fork(after_in_child=_forget)


def shared_map(h: Helper, local: Callable[[int], pa.Table], request: Callable[[int], dict[str, Any]],
               schema: pa.Schema, items: Sequence[int]) -> list[pa.Table]:
    """``[local(i) for i in items]``, the items shared between the calling thread and the helper as each is free."""
    out: list[pa.Table | None] = [None] * len(items)
    left = iter(range(len(items)))
    take = threading.Lock()
    failed: list[BaseException] = []

    def next_index() -> int | None:
        with take:
            return None if failed else next(left, None)  # (after an error, nothing more is started)

    def feed(i: int | None) -> None:  # the helper's share, fed from a thread that waits on its socket (no GIL held)
        try:
            while i is not None:
                got = h.decode(request(items[i]), schema)
                out[i] = got if got is not None else local(items[i])
                i = next_index()
        except BaseException as exc:  # (re-raised by the caller)
            failed.append(exc)

    # (the helper's first item is its own before the caller takes any: it never finds the work gone)
    feeder = threading.Thread(target=feed, args=(next_index(),), name="statekit-helper-feed", daemon=True)
    feeder.start()
    try:
        while (i := next_index()) is not None:
            out[i] = local(items[i])
    except BaseException as exc:
        failed.append(exc)
        raise
    finally:
        feeder.join()
    if failed:
        raise failed[0]
    return out  # type: ignore[return-value]
