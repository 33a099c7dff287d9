"""Which format a repair writes: its source's (Flink in, Flink out; statekit in, statekit out) unless told otherwise.

Boundary: every local write call that derives a savepoint from another (`patch.repair`, the transforms'
`change_operator_identifier` / `remove_operator` / `with_max_parallelism`) builds statekit's format with
`SavepointBuilder`; for a Flink output that savepoint is built in a scratch directory of this process
(removed afterwards, swept if the process dies) and written as a Flink savepoint by `flink_out.write_flink`
(serializer snapshots and operator coordinators' states carried - a Kafka source's enumerator - and the
source's Flink version). The target appears only when the whole write
succeeded: nothing is left behind by a failure, and the source is never touched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, Mapping, cast

from statekit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from statekit.format.storage import StoragePath
    from statekit.savepoint.reader import Savepoint

OutputFormat = Literal["statekit", "flink"]
FORMATS: tuple[OutputFormat, ...] = ("statekit", "flink")

__all__ = ["FORMATS", "OutputFormat", "describe", "output_format", "write_as"]


def output_format(source: "Savepoint", to: str | None) -> OutputFormat:
    """The format a write from `source` produces: `to` if given, else the source's own."""
    if to is None:
        from statekit.savepoint.kinds import is_flink_source

        return "flink" if is_flink_source(source) else "statekit"
    if to not in FORMATS:
        raise InvalidArgumentError(f"the output format must be 'statekit' or 'flink', not {to!r}.")
    return to  # type: ignore[return-value]


def describe(fmt: OutputFormat, source: "Savepoint", flink_version: str | None = None) -> str:
    """How the summary names what was written: ``statekit savepoint`` or ``Flink savepoint (Flink 2.3, ...)``."""
    if fmt == "statekit":
        return "statekit savepoint"
    from statekit.savepoint.flink_out import target_version

    return f"Flink savepoint for {target_version(source, flink_version).describe()}"


def write_as(fmt: OutputFormat, source: "Savepoint", target: "str | os.PathLike[str] | StoragePath",
             build: Callable[[Path], None], *, flink_version: str | None = None,
             renamed: Mapping[str, str] | None = None) -> Path:
    """Write `target` in `fmt`: `build(path)` writes statekit's format at a path that must not exist; for Flink
    it writes into a scratch directory first, which `write_flink` then turns into the Flink savepoint.

    `target` may be a URI or a `StoragePath` (object storage): `SavepointBuilder` and `write_flink` stream each
    file under it and write the manifest last (`statekit.format.publish`); the scratch is then a hidden sibling
    prefix on the same store (`scratch_beside`), deleted afterwards: nothing of the savepoint on this machine's disk.

    A Flink source's operator coordinators' states (a new-style source's split enumerator) are carried to the
    Flink output, following the operators `renamed` gives new uid hashes (``{old hash: new hash}``)."""
    from statekit.format.storage import StoragePath, as_path

    where = cast(Path, as_path(target))  # a StoragePath offers the Path operations the writers use
    if fmt == "statekit":
        build(where)
        return where
    from statekit.savepoint.flink_out import coordinator_states, target_version, write_flink
    from statekit.tempdirs import owned_temp_dir, release

    version = target_version(source, flink_version)
    # the scratch copy has no coordinator state: a Flink source's (its sources' enumerators) is carried over
    carried = {(renamed or {}).get(h, h): data for h, data in coordinator_states(source).items()}
    if isinstance(where, StoragePath):
        from statekit.format.publish import refuse_existing, remove_written, scratch_beside

        refuse_existing(where)  # before the scratch is written
        remote = cast(StoragePath, scratch_beside(where, "statekit"))
        try:
            build(cast(Path, remote))
            return write_flink(remote, where, flink_version=version, coordinators=carried)
        finally:
            remove_written(remote)
    scratch = owned_temp_dir("statekit-repair-")
    try:
        staged = scratch / "savepoint"
        build(staged)
        return write_flink(staged, where, flink_version=version, coordinators=carried)
    finally:
        release(scratch)
