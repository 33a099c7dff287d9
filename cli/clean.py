"""`statekit clean`: list (and with --apply remove) what killed writers and jobs left under a directory."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
import os
from pathlib import Path

import typer

from statekit_cli.common import JSON, err, fail, out

HELP = """List what killed processes left under PATH, and remove it with --apply: savepoint staging
directories (.NAME.inprogress-*) whose writer is dead, incomplete checkpoints (chk-N without a
manifest or missing files) in checkpoint storage no running job holds, and FileSink in-progress files
of dead processes. Nothing a live process holds is listed; complete savepoints are never touched, nor
FileSink .pending files (a restore from a checkpoint commits them).

Complete checkpoints in storage no running job holds (those of a killed or finished run) are retained
checkpoints, as in Flink: they are listed, marked (newest) for the newest of each storage, and kept.
--checkpoints --apply removes them too, except the newest of each storage (what a restore would use);
--newest removes that one as well."""


def find_leftovers(root: Path, *, include_unlocked: bool) -> list[tuple[str, Path]]:
    """(kind, path) of every leftover under `root` that no live process holds.

    Kinds: ``staging``, ``inprogress``, ``checkpoint`` (incomplete), and the complete checkpoints of
    storage no live job holds: ``retained``, and ``newest`` for the newest of each storage.
    """
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
        # Only when no running job holds the storage: a live job's retention may be mid-deletion, and
        # it may have restored from one of the old checkpoints.
        lock = StorageLock.try_acquire(here, "statekit clean") if chks and os.access(here, os.W_OK) else None
        if lock is not None:
            with lock:
                complete = [p for _, p in sorted(chks.items()) if is_complete(p)]
                found += [("checkpoint", p) for _, p in sorted(chks.items()) if p not in complete]
                found += [("retained", p) for p in complete[:-1]] + [("newest", p) for p in complete[-1:]]
        staged = {p for _, p in found}
        dirnames[:] = [d for d in dirnames if here / d not in staged and not d.startswith("chk-")]
    return found


def _discard_checkpoints(paths: list[Path]) -> int:
    """Delete checkpoints, each storage under its lock (a job started since the listing keeps its own)."""
    from statekit.runtime.storage import StorageLock, discard_checkpoint

    removed = 0
    for storage in sorted({p.parent for p in paths}):
        lock = StorageLock.try_acquire(storage, "statekit clean")
        if lock is None:
            err().print(f"{storage}: a job started on this storage; its checkpoints are left alone", markup=False)
            continue
        with lock:
            for p in (p for p in paths if p.parent == storage):
                discard_checkpoint(p)
                removed += 1
    return removed


def clean(
    path: Path = typer.Argument(..., help="Directory to look under (savepoints, checkpoint storage, sink output).",
                                show_default=False),
    apply: bool = typer.Option(False, "--apply", help="Remove what is listed (default: only list it)."),
    older: bool = typer.Option(False, "--include-unlocked", help="Also staging directories of statekit versions "
                               "before writers held a lock (make sure no such writer still runs)."),
    checkpoints: bool = typer.Option(False, "--checkpoints", help="With --apply, also remove retained complete "
                                     "checkpoints of runs that are not running, except the newest of each storage."),
    newest: bool = typer.Option(False, "--newest", help="With --checkpoints, remove the newest one too."),
    json: bool = JSON,
) -> None:
    """List (or with --apply remove) what killed writers and jobs left behind."""
    if not path.is_dir():
        fail(f"{path} is not a directory.")
    if newest and not checkpoints:
        fail("--newest only goes with --checkpoints (it says which retained checkpoints to remove).")
    found = find_leftovers(path, include_unlocked=older)
    chosen = {"staging", "inprogress", "checkpoint"} | ({"retained"} if checkpoints else set()) \
        | ({"newest"} if newest else set())
    removed = 0
    if apply:
        from statekit.savepoint.staging import remove_abandoned_staging

        for kind, p in found:
            if kind == "staging":
                removed += len([q for q in remove_abandoned_staging(p.parent, include_unlocked=older) if q == p])
            elif kind == "inprogress":
                p.unlink(missing_ok=True)
                removed += 1
        removed += _discard_checkpoints([p for kind, p in found if kind in chosen - {"staging", "inprogress"}])
    if json:
        from statekit_cli.render import dumps

        items = [{"kind": "retained" if k == "newest" else k, "path": str(p),
                  **({"newest": k == "newest", "removable": k in chosen} if k in ("retained", "newest") else {})}
                 for k, p in found]
        out().print(dumps({"leftovers": items, "removed": removed if apply else 0}), markup=False)
        return
    for kind, p in found:
        mark = "  (newest)" if kind == "newest" else ""
        out().print(f"{'retained' if kind == 'newest' else kind:<11} {p}{mark}", markup=False)
    retained = sum(1 for k, _ in found if k in ("retained", "newest"))
    leftovers = len(found) - retained
    verb = f"removed {removed}" if apply else "nothing removed (pass --apply to remove them)"
    note = f"{leftovers} leftover(s); {verb}"
    if retained:
        kept = sum(1 for k, _ in found if k in ("retained", "newest") and k not in chosen)
        note += (f"; {retained} retained checkpoint(s), {kept} kept (--checkpoints --apply removes all but the "
                 "newest of each storage, --newest that one too)")
    err().print(note, markup=False, style="dim")


clean.__doc__ = HELP


def register(app: typer.Typer) -> None:
    """Add the clean command to the app."""
    app.command("clean", help=HELP, short_help="List or remove what killed writers and jobs left behind.")(clean)


