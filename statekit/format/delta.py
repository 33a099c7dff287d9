"""A Delta Lake table's files at one version, read from its transaction log without Spark (for `FileSource.delta`).

The log is replayed as the Delta protocol defines it: the newest classic checkpoint at or before
the version (``_delta_log/<v>.checkpoint[.<part>.<parts>].parquet``), then the JSON commits after
it; ``add`` actions add files, ``remove`` actions remove them. Partition values come from the log
(typed by the table schema). Tables whose files need more than Parquet to read are refused with
`SourceError`: deletion vectors, column mapping, V2 checkpoints.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq

from statekit.errors import SourceError

__all__ = ["DeltaFile", "DeltaSnapshot", "delta_snapshot"]

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_V2_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-f-]{36}\.(json|parquet)$")


@dataclass(frozen=True)
class DeltaFile:
    """One data file of the snapshot and the partition values of its rows."""

    path: Path
    partition_values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DeltaSnapshot:
    """The files of one Delta table version and its partition columns."""
    version: int
    files: list[DeltaFile]
    partition_columns: list[str]


def _typed(value: str | None, spark_type: str) -> Any:
    """A partition value (always a string in the log) as the column's type."""
    if value is None:
        return None
    if spark_type in ("byte", "short", "integer", "long"):
        return int(value)
    if spark_type in ("float", "double"):
        return float(value)
    if spark_type == "boolean":
        return value.lower() == "true"
    if spark_type == "date":
        return date.fromisoformat(value)
    if spark_type in ("timestamp", "timestamp_ntz"):
        ts = datetime.fromisoformat(value.replace(" ", "T"))
        return ts.replace(tzinfo=timezone.utc) if spark_type == "timestamp" and ts.tzinfo is None else ts
    if spark_type == "string":
        return value
    if spark_type.startswith("decimal"):
        from decimal import Decimal

        return Decimal(value)
    return value


def _file_key(action: dict) -> tuple:
    """The protocol's logical file identity: its path and the id of its deletion vector, if any.

    (A DELETE with deletion vectors adds ``(path, dv)`` and removes ``(path, None)`` in one commit.)
    """
    dv = action.get("deletionVector")
    dv_id = None if not dv else (dv.get("storageType"), dv.get("pathOrInlineDv"), dv.get("offset"))
    return action["path"], dv_id


def _pairs(mapping: Any) -> dict:
    # Checkpoints hold maps, which pyarrow gives as lists of (key, value) pairs.
    if mapping is None:
        return {}
    return dict(mapping) if isinstance(mapping, list) else mapping


def delta_snapshot(table: str | Path, version: int | None = None) -> DeltaSnapshot:
    """The files of the Delta table at `table` as of `version` (the latest when None).

    Raises
    ------
    SourceError
        Not a Delta table, the version does not exist, a file path leaves the table, or the table
        uses a feature this reader does not support.
    """
    root = Path(table)
    log = root / "_delta_log"
    if not log.is_dir():
        raise SourceError(f"{root} is not a Delta table (no _delta_log directory); check the path.")
    names = [p.name for p in log.iterdir()]
    commits = sorted(int(m.group(1)) for n in names if (m := _COMMIT.match(n)))
    if not commits:
        raise SourceError(f"{root}: the Delta log has no commits; the table is empty or damaged.")
    latest = commits[-1]
    if version is None:
        version = latest
    if not 0 <= version <= latest:
        raise SourceError(f"{root}: version {version} does not exist; the table has versions up to {latest}.")
    if any(_V2_CHECKPOINT.match(n) for n in names):
        raise SourceError(f"{root}: the table uses V2 checkpoints, which statekit's Delta reader does not read; "
                          "read it with Spark and write Parquet for the job.")  # fmt: skip
    checkpoints: dict[int, list[str]] = {}
    for n in names:
        m = _CHECKPOINT.match(n)
        if m and int(m.group(1)) <= version:
            checkpoints.setdefault(int(m.group(1)), []).append(n)
    files: dict[tuple, dict] = {}
    meta: dict | None = None
    start = 0
    for cp in sorted(checkpoints, reverse=True):
        parts = sorted(checkpoints[cp])
        expected = int(_CHECKPOINT.match(parts[0]).group(3) or 1)  # type: ignore[union-attr]
        if len(parts) != expected:
            continue  # an incomplete multi-part checkpoint: use an older one
        for part in parts:
            for row in pq.read_table(log / part, columns=["add", "metaData", "protocol"]).to_pylist():
                if row.get("add"):
                    files[_file_key(row["add"])] = row["add"]
                if row.get("metaData"):
                    meta = row["metaData"]
                if row.get("protocol"):
                    _check_protocol(root, row["protocol"])
        start = cp + 1
        break
    for v in range(start, version + 1):
        commit = log / f"{v:020d}.json"
        if not commit.exists():
            raise SourceError(f"{root}: commit {commit.name} is missing from the Delta log; the log is damaged.")
        for line in commit.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                files[_file_key(action["add"])] = action["add"]
            elif "remove" in action:
                files.pop(_file_key(action["remove"]), None)
            elif "metaData" in action:
                meta = action["metaData"]
            elif "protocol" in action:
                _check_protocol(root, action["protocol"])
    if meta is None:
        raise SourceError(f"{root}: the Delta log has no table metadata up to version {version}; it is damaged.")
    config = _pairs(meta.get("configuration"))
    if config.get("delta.columnMapping.mode", "none") != "none":
        raise SourceError(f"{root}: the table uses column mapping, which statekit's Delta reader does not read; "
                          "read it with Spark and write Parquet for the job.")  # fmt: skip
    types = {f["name"]: f["type"] if isinstance(f["type"], str) else "struct"
             for f in json.loads(meta["schemaString"])["fields"]}  # fmt: skip
    partition_columns = list(meta.get("partitionColumns") or [])
    out = []
    for key in sorted(files, key=lambda k: (k[0], repr(k[1]))):
        add = files[key]
        rel = add["path"]
        if add.get("deletionVector"):
            raise SourceError(f"{root}: file {rel} has a deletion vector (rows deleted in place), which statekit's "
                              "Delta reader does not apply; run OPTIMIZE/REORG (PURGE) first, or read with Spark.")  # fmt: skip
        values = _pairs(add.get("partitionValues"))
        typed = {c: _typed(values.get(c), types.get(c, "string")) for c in partition_columns}
        out.append(DeltaFile(_inside(root, rel), typed))
    return DeltaSnapshot(version, out, partition_columns)


def _check_protocol(root: Path, protocol: dict) -> None:
    # Deletion vectors and column mapping matter only when used: they are checked per file / in metadata.
    unsupported = {"v2Checkpoint"} & set(protocol.get("readerFeatures") or [])
    if unsupported or int(protocol.get("minReaderVersion", 1)) > 3:
        raise SourceError(f"{root}: the table needs Delta reader features {sorted(unsupported) or protocol} that "
                          "statekit's Delta reader does not support; read it with Spark.")  # fmt: skip


def _inside(root: Path, rel: str) -> Path:
    """A data file path of the log, which must stay inside the table directory."""
    parsed = urlparse(rel)
    if parsed.scheme and parsed.scheme != "file":
        raise SourceError(f"{root}: data file {rel!r} is not a local file; statekit's Delta reader reads local tables.")
    path = Path(unquote(parsed.path)) if parsed.scheme else root / unquote(rel)
    full = path.resolve()
    if not full.is_relative_to(root.resolve()):
        raise SourceError(f"{root}: data file {rel!r} lies outside the table directory; refusing to read it.")
    return full
