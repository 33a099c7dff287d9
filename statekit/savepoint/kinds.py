"""The kinds of savepoint `Savepoint.open` tells apart (statekit's own, Flink's, Spark checkpoints): one registry.

`Savepoint.open` asks this registry which kind a path holds and lets that kind open it, so the base reader
(``statekit.savepoint.reader``) names none of the classes built on it: each kind registers itself from the
package (``statekit/savepoint/__init__.py``), above the modules that define them, and its module is loaded only
when a savepoint of that kind is opened (opening a statekit savepoint never loads Flink's reader).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, TypeGuard, cast

from statekit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pathlib import Path

    from statekit.format.storage import StoragePath
    from statekit.savepoint.flink import FlinkSavepoint
    from statekit.savepoint.reader import Savepoint


class SavepointKind(NamedTuple):
    """One kind of savepoint: whether a location holds one (cheap: a file or two looked at), and how to open it."""

    name: str
    recognizes: Callable[["Path"], bool]
    #: (located path, trust_pickled=, pyflink_types=, plan=, sql=) -> the opened savepoint
    open: Callable[..., "Savepoint"]


_KINDS: list[SavepointKind] = []


def register(kind: SavepointKind) -> None:
    """Add `kind`; kinds are asked in the order they were registered, and the first one opens what none
    recognizes (statekit's own format, whose reader names what is missing)."""
    if any(k.name == kind.name for k in _KINDS):
        raise InvalidArgumentError(f"a savepoint kind named {kind.name!r} is registered already.")
    _KINDS.append(kind)


def registered() -> tuple[str, ...]:
    """The names of the registered kinds, in the order they are asked."""
    return tuple(k.name for k in _KINDS)


def open_savepoint(path: "str | os.PathLike[str] | StoragePath", *, storage_options: dict[str, Any] | None = None,
                   filesystem: Any = None, **options: Any) -> "Savepoint":
    """Open the savepoint or checkpoint at `path` (a local path or URI) as the kind that recognizes it
    (`Savepoint.open` documents the options)."""
    from statekit.format.storage import locate  # pyarrow's filesystems: loaded by the first open, not the package

    where = cast("Path", locate(path, storage_options=storage_options, filesystem=filesystem))
    kind = next((k for k in _KINDS if k.recognizes(where)), _KINDS[0])
    return kind.open(where, **options)


def opened(source: "str | os.PathLike[str] | StoragePath | Savepoint") -> "Savepoint":
    """`source` itself when it is an opened savepoint, else the savepoint at that path or URI."""
    from statekit.format.storage import StoragePath

    if isinstance(source, (str, os.PathLike, StoragePath)):
        return open_savepoint(source)
    return source


def is_flink_source(sp: "Savepoint") -> TypeGuard["FlinkSavepoint"]:
    """Whether `sp` was read from a Flink savepoint (without importing Flink's reader when it was not loaded)."""
    mod = sys.modules.get("statekit.savepoint.flink")
    return mod is not None and isinstance(sp, mod.FlinkSavepoint)


def holds_flink_metadata(path: "Path | StoragePath") -> bool:
    """Whether `path` holds a Flink savepoint's or checkpoint's ``_metadata`` (checked where no statekit manifest is)."""
    # Imported only when there is no statekit manifest: the Flink reader is not loaded to open a statekit savepoint.
    from statekit.format.flink.metadata import is_flink_metadata

    return is_flink_metadata(cast("Path", path))


def holds_spark_checkpoint(path: "Path | StoragePath") -> bool:
    """Whether `path` is a Spark Structured Streaming checkpoint (local ones: the Spark reader reads files in place)."""
    from pathlib import Path

    if not isinstance(path, Path):
        return False
    from statekit.format.spark.layout import is_spark_checkpoint

    return is_spark_checkpoint(path)
