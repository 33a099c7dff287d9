"""Child process of the fuzz test: runs every reader, check() and every repair over one (damaged) savepoint.

    python fuzz_child.py TIMEOUT_SECONDS WARM_UP_SAVEPOINT WARM_UP_SCRATCH

It reads lines ``SAVEPOINT SCRATCH`` from stdin; for each it forks a process (imports done once,
before any fork) that runs every entry point over SAVEPOINT, repairs writing under SCRATCH, and
answers one JSON line: ``{"outcome": "ok" | "typed" | "untyped" | "hang", "errors": [...]}``. A
case still running after TIMEOUT_SECONDS is killed and reported as a hang.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path


def entry_points(path: Path, scratch: Path):
    """(name, thunk) for everything a user can run over a savepoint."""
    from statekit.savepoint import Savepoint, check
    from statekit.savepoint.transforms import change_operator_identifier, remove_operator, with_max_parallelism

    yield "check", lambda: check(path)
    yield "check-quick", lambda: check(path, deep=False)
    try:
        sp = Savepoint.open(path)
    except Exception:  # noqa: BLE001 - the open step below reports it
        sp = None
    yield "open", lambda: Savepoint.open(path)
    if sp is None:
        return
    for op in sp.operators:
        ident = op.identifier
        yield f"keyed_table {op.display_name}", lambda ident=ident: sp.keyed_table(ident)
        yield f"timers {op.display_name}", lambda ident=ident: sp.timers(ident)

        def get_first(ident=ident):
            table = sp.keyed_table(ident)
            if table.num_rows:
                sp.get(ident, _python_key(table.column("key")[0].as_py()))
        yield f"get {op.display_name}", get_first
        for info in op.operator_states:
            if info.redistribution == "broadcast":
                yield f"broadcast {info.name}", lambda ident=ident, n=info.name: sp.broadcast_state(ident, n)
            else:
                yield f"list {info.name}", lambda ident=ident, n=info.name: sp.list_state(ident, n)
                yield f"lists {info.name}", lambda ident=ident, n=info.name: sp.operator_state_lists(ident, n)
                if info.redistribution == "union":
                    yield f"union {info.name}", lambda ident=ident, n=info.name: sp.union_state(ident, n)
    ops = sp.operators
    if ops:
        yield "rename-uid", lambda: change_operator_identifier(path, scratch / "renamed", ops[0].identifier, "fuzz-new-uid")
        yield "remove-operator", lambda: remove_operator(path, scratch / "removed", ops[-1].identifier)
        keyed = [op for op in ops if op.key_type is not None]
        if keyed:
            yield "set-max-parallelism", lambda: with_max_parallelism(
                path, scratch / "rehashed", keyed[0].identifier, 256)


def _python_key(value):
    return tuple(value.values()) if isinstance(value, dict) else value


def run_case(path: Path, scratch: Path) -> dict:
    from statekit.errors import StatekitError

    typed, untyped = [], []
    for name, thunk in entry_points(path, scratch):
        try:
            thunk()
        except StatekitError as exc:
            typed.append(f"{name}: {type(exc).__name__}")
        except Exception as exc:  # noqa: BLE001 - exactly what the fuzz test looks for
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            untyped.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]} at {tb.filename}:{tb.lineno}")
    outcome = "untyped" if untyped else "typed" if typed else "ok"
    return {"outcome": outcome, "errors": untyped or typed}


def serve(timeout: float) -> None:
    for line in sys.stdin:
        path, scratch = (Path(p) for p in line.rstrip("\n").split("\t"))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                result = run_case(path, scratch)
            except BaseException as exc:  # noqa: BLE001
                result = {"outcome": "untyped", "errors": [f"harness: {type(exc).__name__}: {exc}"]}
            data = json.dumps(result).encode()
            while data:
                data = data[os.write(w, data):]
            os._exit(0)
        os.close(w)
        deadline = time.monotonic() + timeout
        chunks = []
        os.set_blocking(r, False)
        status = None
        while True:  # drain the pipe while waiting, so a large answer cannot block the child
            try:
                chunk = os.read(r, 1 << 16)
                if chunk:
                    chunks.append(chunk)
            except BlockingIOError:
                pass
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = None
                break
            time.sleep(0.01)
        if status is not None:
            os.set_blocking(r, True)
            while chunk := os.read(r, 1 << 16):
                chunks.append(chunk)
        os.close(r)
        if status is None:
            answer = {"outcome": "hang", "errors": [f"still running after {timeout} s"]}
        elif not chunks:
            answer = {"outcome": "untyped", "errors": [f"the case process died (status {status})"]}
        else:
            answer = json.loads(b"".join(chunks))
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    import pyarrow.parquet  # noqa: F401 - imported once, before any fork

    import statekit.backends.rocksdb  # noqa: F401
    import statekit.savepoint.check  # noqa: F401
    import statekit.savepoint.transforms  # noqa: F401
    import statekit.types  # noqa: F401

    run_case(Path(sys.argv[2]), Path(sys.argv[3]))  # loads what the entry points import lazily, once
    serve(float(sys.argv[1]))
