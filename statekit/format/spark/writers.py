"""Spark state files written from raw entries: HDFS snapshots and RocksDB checkpoints (zip + SSTs), with `.crc` side files.

A store partition's complete state at version v is one ``<v>.snapshot`` (HDFS) or one ``<v>.zip``
plus its ``SSTs/<n>-<uuid>.sst`` (RocksDB): Spark loads v from the newest snapshot or zip at or
below it and replays nothing after. Entries are written as the provider stored them (already
encoded keys and values), so the bytes Spark reads back are the bytes it wrote.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import uuid
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statekit.extras import require
from statekit.format.spark import records
from statekit.format.spark.codec import compress
from statekit.format.spark.layout import checksum_doc


def write_with_checksum(path: Path, data: bytes) -> None:
    """`data` at `path` and Spark 4.1's ``<path>.crc`` side file beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.with_name(path.name + ".crc").write_bytes(checksum_doc(data))


def write_hdfs_snapshot(directory: Path, version: int, keys: Sequence[bytes], values: Sequence[bytes],
                        codec: str) -> Path:
    """``<version>.snapshot`` holding every entry ``keys[i]: values[i]`` (bare UnsafeRow keys and values, each key
    once), compressed as Spark does."""
    path = directory / f"{version}.snapshot"
    write_with_checksum(path, compress(records.write_v1(iter(sorted(zip(keys, values)))), codec))
    return path


def write_rocksdb_checkpoint(directory: Path, version: int, keys: Sequence[bytes], values: Sequence[bytes],
                             meta: dict[str, Any]) -> list[Path]:
    """``<version>.zip`` (metadata, CURRENT, MANIFEST, OPTIONS, WAL) and its ``SSTs/`` holding every entry
    ``keys[i]: values[i]`` (each key once).

    `meta` is the source zip's metadata for the column family fields (mapping, types, max id);
    ``numKeys`` and ``numInternalKeys`` are recounted.
    """
    require("rocksdb", "Writing Spark's RocksDB state store")
    import rocksdict  # deferred: only RocksDB state needs it

    tmp = Path(tempfile.mkdtemp(prefix="statekit-spark-rocksdb-out-"))
    written: list[Path] = []
    try:
        db_dir = tmp / "db"
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_compression_type(rocksdict.DBCompressionType.lz4())  # Spark's default SST compression
        db = rocksdict.Rdict(str(db_dir), opts)
        try:
            wo = rocksdict.WriteOptions()
            wo.disable_wal = True  # type: ignore[assignment,method-assign]  # a property in rocksdict, a method in its stub
            batch = rocksdict.WriteBatch(raw_mode=True)
            for k, v in zip(keys, values):  # (in any order: the memtable sorts them, and the SST holds them sorted)
                batch.put(k, v)
            db.write(batch, wo)
            db.flush()
        finally:
            db.close()
        ssts = sorted(p for p in db_dir.iterdir() if p.suffix == ".sst")
        (directory / "SSTs").mkdir(parents=True, exist_ok=True)
        sst_files = []
        for p in ssts:
            dfs = f"{p.stem}-{uuid.uuid4()}.sst"
            shutil.copyfile(p, directory / "SSTs" / dfs)
            written.append(directory / "SSTs" / dfs)
            sst_files.append({"localFileName": p.name, "dfsSstFileName": dfs, "sizeBytes": p.stat().st_size})
        mapping = {str(k): int(v) for k, v in (meta.get("columnFamilyMapping") or {}).items()}
        internal = {str(k): bool(v) for k, v in (meta.get("columnFamilyTypeMap") or {}).items()}
        internal_ids = {i for n, i in mapping.items() if internal.get(n)}
        n_internal = sum(1 for k in keys if int.from_bytes(k[:2], "little", signed=True) in internal_ids) if mapping else 0
        doc = {"sstFiles": sst_files, "numKeys": len(keys) - n_internal, "numInternalKeys": n_internal,
               "columnFamilyMapping": mapping, "columnFamilyTypeMap": internal,
               "maxColumnFamilyId": int(meta.get("maxColumnFamilyId", 0))}
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(db_dir.iterdir()):
                if p.name == "CURRENT" or p.name.startswith(("MANIFEST-", "OPTIONS-")) or p.suffix == ".log":
                    z.writestr(p.name, p.read_bytes())
            z.writestr("metadata", "v1\n" + json.dumps(doc, separators=(",", ":")))
        path = directory / f"{version}.zip"
        write_with_checksum(path, buf.getvalue())
        written.append(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written
