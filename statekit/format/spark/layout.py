"""The layout of a Spark streaming checkpoint: offset and commit logs, operators, stores, partitions, side files.

``<checkpoint>/metadata`` ({"id": query uuid}), ``offsets/<b>`` and ``commits/<b>`` (``v1`` + JSON),
``state/<opId>/_metadata/metadata`` (operator metadata v1) or ``_metadata/v2/<b>`` (v2,
transformWithState), ``state/<opId>/<partition>[/<store>]/`` the state files. The state of committed
batch ``b`` is store version ``b + 1``.
"""

from __future__ import annotations

import json
import mmap
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekit.errors import CorruptSavepointError, NotASavepointError
from statekit.format.spark.codec import crc32_combined, crc32c, to_signed32
from statekit.format.spark.errors import (
    MissingStateFileError,
    StateChecksumMismatchError,
    UnknownBatchError,
    UnsupportedStateFormatError,
)

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_BATCH = re.compile(r"\d+")
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def is_spark_checkpoint(path: Path) -> bool:
    """Whether `path` looks like a Spark streaming checkpoint (``metadata`` with a query id, and ``offsets/``)."""
    try:
        if not (path / "offsets").is_dir() or not (path / "metadata").is_file():
            return False
        return "id" in json.loads((path / "metadata").read_text("utf-8").splitlines()[0])
    except (OSError, ValueError, IndexError, AttributeError, TypeError):
        return False


def read_log(path: Path, where: str) -> list[str]:
    """A ``v1`` log entry (offsets, commits, operator metadata) as its lines after the version line."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise MissingStateFileError(f"{where}: {path.name} is missing; the checkpoint is incomplete.") from None
    lines = text.split("\n")
    if not lines or lines[0] not in ("v1", "v2"):
        raise UnsupportedStateFormatError(
            f"{where}: {path} starts with {lines[0][:20]!r}; statekit reads log entries of version v1 (Spark 3.x-4.1)."
        )
    return lines[1:]


def batches(directory: Path) -> list[int]:
    """The batch ids named by the files of a log directory, ascending."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if _BATCH.fullmatch(p.name))


@dataclass(frozen=True)
class StoreInfo:
    """One store of an operator (its operator metadata entry)."""

    name: str
    num_partitions: int
    prefix_columns: int = 0
    schema_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class OperatorInfo:
    """One stateful operator: id, name, stores and partition count (from its operator metadata)."""

    id: int
    name: str
    stores: tuple[StoreInfo, ...]
    metadata_version: int
    properties: dict[str, Any] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        return self.stores[0].num_partitions if self.stores else 0


class CheckpointLayout:
    """The logs and directories of one checkpoint (nothing is decoded beyond JSON)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        if not is_spark_checkpoint(root):
            raise NotASavepointError(f"{root} is not a Spark streaming checkpoint (no metadata file with a query id "
                                     "and no offsets/ directory).")
        self.query_id = str(json.loads((root / "metadata").read_text("utf-8").splitlines()[0])["id"])
        self.committed = batches(root / "commits")
        self.offset_batches = batches(root / "offsets")

    def latest_batch(self) -> int:
        if not self.committed:
            raise UnknownBatchError(f"{self.root}: no batch of this query was committed (commits/ is empty); it holds "
                                    "no state yet.")
        return self.committed[-1]

    def batch(self, batch: int | None) -> int:
        if batch is None:
            return self.latest_batch()
        if batch not in self.committed:
            have = f"{self.committed[0]}-{self.committed[-1]}" if self.committed else "none"
            raise UnknownBatchError(f"{self.root}: batch {batch} was not committed (committed batches: {have}); "
                                    "pick one of those.")
        return batch

    def uncommitted(self) -> list[int]:
        """Batches planned in the offset log but not committed: a running query, or one stopped inside a batch."""
        last = self.committed[-1] if self.committed else -1
        return [b for b in self.offset_batches if b > last]

    def offsets(self, batch: int) -> tuple[dict[str, Any], list[str]]:
        """Batch `batch`'s offset metadata (watermark, timestamp, conf) and its source offset lines."""
        where = f"{self.root}: offsets/{batch}"
        lines = read_log(self.root / "offsets" / str(batch), where)
        try:
            meta = json.loads(lines[0])
        except (ValueError, IndexError):
            raise CorruptSavepointError(f"{where} has no offset metadata line; the offset log is damaged.") from None
        return meta, lines[1:]

    def conf(self, batch: int) -> dict[str, str]:
        return dict(self.offsets(batch)[0].get("conf", {}))

    def commit(self, batch: int) -> dict[str, Any]:
        lines = read_log(self.root / "commits" / str(batch), f"{self.root}: commits/{batch}")
        return dict(json.loads(lines[0])) if lines and lines[0] else {}

    def operator_ids(self) -> list[int]:
        state = self.root / "state"
        return sorted(int(p.name) for p in state.iterdir() if _BATCH.fullmatch(p.name)) if state.is_dir() else []

    def operator(self, op_id: int, batch: int) -> OperatorInfo:
        base = self.root / "state" / str(op_id) / "_metadata"
        v2 = [b for b in batches(base / "v2") if b <= batch]
        if v2:
            path, version = base / "v2" / str(v2[-1]), 2
        elif (base / "metadata").is_file():
            path, version = base / "metadata", 1
        else:
            raise MissingStateFileError(f"{self.root}: operator {op_id} has no operator metadata (state/{op_id}/"
                                        "_metadata); the checkpoint is incomplete or was written before Spark 4.0.")
        lines = read_log(path, f"{self.root}: operator {op_id}")
        doc = json.loads(lines[0])
        info = doc["operatorInfo"]
        stores = tuple(StoreInfo(s["storeName"], int(s["numPartitions"]), int(s.get("numColsPrefixKey", 0)),
                                 tuple(s.get("stateSchemaFilePaths", ()))) for s in doc["stateStoreInfo"])
        props = json.loads(doc["operatorPropertiesJson"]) if doc.get("operatorPropertiesJson") else {}
        return OperatorInfo(int(info["operatorId"]), str(info["operatorName"]), stores, version, props)

    def store_dir(self, op_id: int, partition: int, store: str) -> Path:
        d = self.root / "state" / str(op_id) / str(partition)
        return d if store == "default" else d / store


def read_checked(path: Path, where: str) -> bytes:
    """A state file's bytes, checked against its Spark ``<file>.crc`` side file when there is one (as Spark does)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MissingStateFileError(f"{where}: {path} is missing; the checkpoint is incomplete. Restore the file "
                                    "from a copy of the checkpoint.") from None
    side = path.with_name(path.name + ".crc")
    if side.is_file():
        try:
            doc = json.loads(side.read_text("utf-8"))
            value, size = int(doc["value"]), int(doc["mainFileSize"])
        except (ValueError, KeyError, TypeError):
            raise StateChecksumMismatchError(f"{where}: the checksum file {side} is not Spark's JSON; restore it or "
                                             "delete it (Spark then only warns).") from None
        if doc.get("algorithm", "CRC32C") != "CRC32C":
            raise UnsupportedStateFormatError(f"{side}: checksum algorithm {doc.get('algorithm')!r}; statekit "
                                              "verifies CRC32C (Spark 4.1).")
        if size != len(data) or to_signed32(crc32c(data)) != value:
            raise StateChecksumMismatchError(
                f"{where}: {path} does not match its checksum file {side.name} (size {len(data)} vs {size}, or CRC32C). "
                "The file is damaged; restore it from a copy of the checkpoint (Spark refuses it too)."
            )
    return data


def hadoop_checked(path: Path, data: bytes | mmap.mmap) -> bool:
    """Whether `data` (the bytes of `path`) was verified against Hadoop's ``.<name>.crc`` side file: False when
    there is none; a mismatch raises.

    Hadoop's ChecksumFileSystem (Spark's local checkpoint files, e.g. RocksDB SSTs) writes ``"crc\\0"``, the
    bytes per checksum (int32 BE), then the CRC32 (BE) of every chunk. Checked as one CRC32 of the whole file
    against the chunks' CRCs combined (`codec.crc32_combined`; one call that releases the GIL instead of one per
    512 bytes): damage within one chunk is found exactly as by its own CRC, damage spread over several chunks
    with the certainty of a CRC32 of the file.
    """
    import zlib

    side = path.with_name(f".{path.name}.crc")
    if not side.is_file():
        return False
    doc = side.read_bytes()
    chunk = int.from_bytes(doc[4:8], "big") if len(doc) >= 8 and doc[:4] == b"crc\0" else 0
    import numpy as np

    count = (len(data) + chunk - 1) // chunk if chunk > 0 else -1
    if count < 0 or len(doc) != 8 + 4 * count:
        ok = False
    elif chunk & (chunk - 1) == 0:  # a power of two (Hadoop's default 512)
        ok = crc32_combined(np.frombuffer(doc, ">u4", count, 8), chunk, len(data)) == zlib.crc32(data)
    else:
        view = memoryview(data)
        ok = np.array_equal(np.fromiter(map(zlib.crc32, (view[i:i + chunk] for i in range(0, len(data), chunk))),
                                        np.uint32, count), np.frombuffer(doc, ">u4", count, 8))
    if not ok:
        raise StateChecksumMismatchError(
            f"{path} does not match its checksum file {side.name} (Hadoop CRC32 per {chunk or '?'} bytes). The file "
            "is damaged; restore it from a copy of the checkpoint.")
    return True


def checksum_doc(data: bytes) -> bytes:
    """The ``<file>.crc`` side file Spark 4.1 writes for `data` (ChecksumCheckpointFileManager)."""
    import time

    doc = {"algorithm": "CRC32C", "value": to_signed32(crc32c(data)), "mainFileSize": len(data),
           "timestampMs": int(time.time() * 1000), "creator": {"tool": "statekit"}}
    return json.dumps(doc, separators=(",", ":")).encode()
