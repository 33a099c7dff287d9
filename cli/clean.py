"""`statekit clean`: list (and with --apply remove) what killed writers and jobs left under a directory."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
import os
from pathlib import Path

import typer

from statekit_cli.common import JSON, err, fail, out

HELP = """List what killed processes left under PATH, and remove it with --apply: savepoint staging
directories (.NAME.inprogress-*) whose writer is dead, incomplete checkpoints (chk-N without a
manifest or missing files) in checkpoint storage no running job holds, and FileSink in-progress files
of dead processes. Nothing a live process holds is listed; complete savepoints and checkpoints are
never touched, nor FileSink .pending files (a restore from a checkpoint commits them)."""


def find_leftovers(root: Path, *, include_unlocked: bool) -> list[tuple[str, Path]]:
    """(kind, path) of every leftover under `root` that no live process holds."""
    from statekit.runtime.sinks import dead_inprogress
    from statekit.runtime.storage import StorageLock, checkpoint_dirs, is_complete
    from statekit.savepoint.staging import abandoned_staging

    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, _files in os.walk(root):
        here = Path(dirpath)
        if (here / "_metadata.json").is_file():
            dirnames[:] = []  # a savepoint or checkpoint: nothing of ours is inside
            continue
        found += [("staging", p) for p in abandoned_staging(here, include_unlocked=include_unlocked)]
        found += [("inprogress", p) for p in dead_inprogress(here)]
        chks = checkpoint_dirs(here)
        if chks and any(not is_complete(p) for p in chks.values()):
            # Only when no running job holds the storage (a live job's retention may be mid-deletion).
            lock = StorageLock.try_acquire(here, "statekit clean") if os.access(here, os.W_OK) else None
            if lock is not None:
                with lock:
                    found += [("checkpoint", p) for _, p in sorted(chks.items()) if not is_complete(p)]
        staged = {p for _, p in found}
        dirnames[:] = [d for d in dirnames if here / d not in staged and not d.startswith("chk-")]
    return found


def clean(
    path: Path = typer.Argument(..., help="Directory to look under (savepoints, checkpoint storage, sink output).",
                                show_default=False),
    apply: bool = typer.Option(False, "--apply", help="Remove what is listed (default: only list it)."),
    older: bool = typer.Option(False, "--include-unlocked", help="Also staging directories of statekit versions "
                               "before writers held a lock (make sure no such writer still runs)."),
    json: bool = JSON,
) -> None:
    """List (or with --apply remove) what killed writers and jobs left behind."""
    if not path.is_dir():
        fail(f"{path} is not a directory.")
    from statekit.runtime.storage import discard_checkpoint

    found = find_leftovers(path, include_unlocked=older)
    removed = 0
    if apply:
        from statekit.savepoint.staging import remove_abandoned_staging

        for kind, p in found:
            if kind == "staging":
                removed += len([q for q in remove_abandoned_staging(p.parent, include_unlocked=older) if q == p])
            elif kind == "checkpoint":
                discard_checkpoint(p)
                removed += 1
            elif kind == "inprogress":
                p.unlink(missing_ok=True)
                removed += 1
    if json:
        from statekit_cli.render import dumps

        out().print(dumps({"leftovers": [{"kind": k, "path": str(p)} for k, p in found],
                           "removed": removed if apply else 0}), markup=False)
        return
    for kind, p in found:
        out().print(f"{kind:<11} {p}", markup=False)
    verb = f"removed {removed}" if apply else "nothing removed (pass --apply to remove them)"
    err().print(f"{len(found)} leftover(s); {verb}", markup=False, style="dim")


clean.__doc__ = HELP


def register(app: typer.Typer) -> None:
    """Add the clean command to the app."""
    app.command("clean", help=HELP, short_help="List or remove what killed writers and jobs left behind.")(clean)


