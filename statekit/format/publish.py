"""Publishing a savepoint on object storage: data files first, the manifest last.

Every writer streams its files straight under the new prefix (`SavepointBuilder`, `FlinkStaging`, Spark tasks;
unchanged files copied there by the server), ends with `put_manifest`, and on failure `remove_written` deletes
what it wrote there.

Object stores have no atomic rename of a directory, so a savepoint is published as Flink publishes its
own: every data file is written under the new savepoint's prefix, then the manifest (statekit's
``_metadata.json`` or Flink's ``_metadata``) last. Readers trust only a savepoint with its manifest, so
until the last write completes there is no savepoint at the target. An existing target (any object
at or under it) is refused before anything is written and again before the manifest; on any failure
every object under the new prefix is deleted (best effort: if the store cannot be reached any more,
the error names the prefix left without a manifest).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from statekit.errors import SavepointExistsError, StorageError, StorageNotFoundError
from statekit.format.storage import StoragePath

__all__ = ["MANIFEST_NAMES", "put_manifest", "refuse_existing", "remove_written", "scratch_beside"]

#: the files a reader needs to see a savepoint at all: uploaded last
MANIFEST_NAMES = ("_metadata.json", "_metadata")


def scratch_beside(target: "Path | StoragePath", what: str) -> "Path | StoragePath":
    """Where an intermediate savepoint of a write to `target` is staged: a hidden sibling on the same filesystem or
    store (for a URI target a sibling prefix, never this machine's disk), removed by the writer afterwards."""
    return target.parent / f".{target.name}.{what}-{uuid.uuid4().hex[:12]}"


def refuse_existing(target: StoragePath) -> None:
    """Refuse a target that already holds an object (at or under it), or whose bucket does not exist."""
    if not target.bucket_exists():
        raise StorageNotFoundError(f"cannot write {target}: its bucket does not exist. Create the bucket or correct "
                                   "its name in the URI; nothing was written.")
    if target.is_file() or any(True for _ in target.iter_files(limit=1)):
        raise SavepointExistsError(f"{target} already exists; savepoints are immutable and never overwritten. Choose "
                                   "a new path.")


def _remove(objects: list[StoragePath], target: StoragePath) -> int:
    """Delete `objects` (what a failed write put under `target`) and the empty directory markers their deletion leaves under
    `target` (pyarrow keeps a deleted file's parent as an empty ``dir/`` object); the number not deleted."""
    failed = 0
    for obj in objects:
        try:
            obj.delete()
        except (StorageError, OSError):
            failed += 1
    if failed:
        return failed
    base = target.path.rstrip("/")
    dirs = {p.path for obj in objects for p in obj.parents if p.path == base or p.path.startswith(base + "/")}
    for d in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
        try:
            here = target.at(d)
            if not any(True for _ in here.iter_files(limit=1)):
                here.fs.delete_dir(d)
        except (StorageError, OSError):
            pass  # an empty marker is no savepoint; the objects themselves are gone
    return 0


def put_manifest(target: StoragePath, name: str, data: bytes) -> None:
    """Write the manifest `name` of a savepoint whose data files are already under `target`: the last object, so
    that a reader sees the savepoint only now. Refused if a manifest appeared there meanwhile (another writer)."""
    if any((target / n).exists() for n in MANIFEST_NAMES):
        raise SavepointExistsError(f"{target} appeared while writing; not overwriting it.")
    (target / name).write_bytes(data)


def remove_written(target: StoragePath, error: BaseException | None = None) -> BaseException | None:
    """Delete every object under `target`: what a failed direct write put there (the target was refused if it held
    anything, so all of it is the writer's; a Spark task that failed or was retried reports nothing, hence the
    listing). Returns `error` with a note of what was removed when it is a `StorageError`, else `error`."""
    try:
        objects = list(target.iter_files())
    except (StorageError, OSError):
        objects = None
    left = 0 if objects is None else _remove(objects, target)
    if objects is None:
        note = (f" Nothing was published, but objects under {target} may remain (the store failed): no reader sees "
                "them as a savepoint (no manifest); delete that prefix.")
    elif left:
        note = (f" Nothing was published, but {left} object(s) under {target} could not be removed (the store "
                "failed): no reader sees them as a savepoint (no manifest); delete that prefix.")
    else:
        note = f" Nothing was published; the {len(objects)} object(s) written were removed."
    if isinstance(error, StorageError):
        return type(error)(f"{error}{note}")
    return error
