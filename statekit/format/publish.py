"""Publishing a savepoint on object storage: data files first, the manifest last.

Two ways: `publish` uploads a savepoint staged on local disk; writers that stream their files straight under
the new prefix (`SavepointBuilder`, `FlinkStaging(direct=True)`, Spark tasks) end with `put_manifest`, and on
failure `remove_written` deletes what they wrote there.

Object stores have no atomic rename of a directory, so a savepoint is published as Flink publishes its
own: every data file is uploaded under the new savepoint's prefix, then the manifest (statekit's
``_metadata.json`` or Flink's ``_metadata``) last. Readers trust only a savepoint with its manifest, so
until the last upload completes there is no savepoint at the target. An existing target (any object
at or under it) is refused before anything is uploaded and again before the manifest; on any failure
every object this call uploaded is deleted (best effort: if the store cannot be reached any more,
the error names the prefix left without a manifest).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from statekit.errors import SavepointExistsError, StatekitError, StorageError, StorageNotFoundError
from statekit.format.storage import StoragePath

__all__ = ["MANIFEST_NAMES", "publish", "put_manifest", "refuse_existing", "remove_written"]

#: the files a reader needs to see a savepoint at all: uploaded last
MANIFEST_NAMES = ("_metadata.json", "_metadata")
_PARALLEL = 4


def refuse_existing(target: StoragePath) -> None:
    """Refuse a target that already holds an object (at or under it), or whose bucket does not exist."""
    if not target.bucket_exists():
        raise StorageNotFoundError(f"cannot write {target}: its bucket does not exist. Create the bucket or correct "
                                   "its name in the URI; nothing was written.")
    if target.is_file() or any(True for _ in target.iter_files(limit=1)):
        raise SavepointExistsError(f"{target} already exists; savepoints are immutable and never overwritten. Choose "
                                   "a new path.")


def publish(staged: Path, target: StoragePath) -> StoragePath:
    """Upload the savepoint directory `staged` to `target` (data files in parallel, the manifest last)."""
    files = sorted(p for p in staged.rglob("*") if p.is_file())
    rel = {p: p.relative_to(staged).as_posix() for p in files}
    manifests = [p for p in files if rel[p] in MANIFEST_NAMES]
    if len(manifests) != 1:
        raise StatekitError(f"{staged} holds {len(manifests)} manifests; a staged savepoint holds exactly one.")
    data = [p for p in files if p not in manifests]
    refuse_existing(target)
    started: list[StoragePath] = []
    try:
        def put(p: Path) -> None:
            obj = target / rel[p]
            started.append(obj)  # before the request: a partly written object is removed too
            obj.upload(p)

        pool = ThreadPoolExecutor(_PARALLEL, thread_name_prefix="statekit-upload")
        try:
            for f in [pool.submit(put, p) for p in data]:
                f.result()
        finally:  # after a failure: no further uploads start; those under way end before the clean-up
            pool.shutdown(wait=True, cancel_futures=True)
        if (target / rel[manifests[0]]).exists():  # another writer published here meanwhile
            raise SavepointExistsError(f"{target} appeared while writing; not overwriting it.")
        obj = target / rel[manifests[0]]
        started.append(obj)
        obj.upload(manifests[0])
    except BaseException as exc:
        left = _remove(started, target)
        if isinstance(exc, StorageError):
            note = (f" Nothing was published; the {len(started) - left} object(s) uploaded were removed." if not left
                    else f" Nothing was published, but {left} uploaded object(s) under {target} could not be removed "
                    "(the store failed): no reader sees them as a savepoint (no manifest); delete that prefix.")
            raise type(exc)(f"{exc}{note}") from None
        raise
    return target


def _remove(objects: list[StoragePath], target: StoragePath) -> int:
    """Delete `objects` (what this publish uploaded) and the empty directory markers their deletion leaves under
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
