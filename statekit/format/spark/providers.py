"""One state store partition at one version, as raw entries: HDFS (snapshot + deltas) and RocksDB (zip + SSTs + changelogs).

HDFSBackedStateStoreProvider: load version v = newest ``<s>.snapshot`` with s <= v, then
``<s+1>.delta`` ... ``<v>.delta`` in order. RocksDBStateStoreProvider: newest ``<z>.zip`` with z <= v
(its RocksDB checkpoint, whose SSTs live in ``SSTs/``), then ``<z+1>.changelog`` ... ``<v>.changelog``.
The RocksDB files are rebuilt into a scratch directory and opened read-only with rocksdict; the
checkpoint itself is never opened by RocksDB. Files of versions after v are ignored.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from statekit.errors import CorruptSavepointError
from statekit.extras import require
from statekit.format.spark import records, sst
from statekit.format.spark.codec import decompress
from statekit.format.spark.errors import MissingStateFileError, UnsupportedStateFormatError
from statekit.format.spark.layout import HDFS, ROCKSDB, read_checked

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
_VERSIONED = re.compile(r"(\d+)\.(delta|snapshot|zip|changelog)")
_ZIP_MEMBER = re.compile(r"(metadata|CURRENT|MANIFEST-\d+|OPTIONS-\d+|\d+\.log|IDENTITY)")


@dataclass
class StoreData:
    """The entries of one store partition at one version (keys and values as the provider stores them)."""

    entries: dict[bytes, bytes]
    files: list[Path] = field(default_factory=list)  # the files read, in order
    column_families: dict[str, int] = field(default_factory=dict)  # RocksDB zip metadata: name -> virtual cf id
    internal: dict[str, bool] = field(default_factory=dict)
    rocks_metadata: dict = field(default_factory=dict)


def provider_kind(conf: dict[str, str], where: str) -> str:
    """``hdfs`` or ``rocksdb``: the provider the offset log's conf names."""
    cls = conf.get("spark.sql.streaming.stateStore.providerClass", HDFS)
    if cls == HDFS:
        return "hdfs"
    if cls == ROCKSDB:
        return "rocksdb"
    raise UnsupportedStateFormatError(f"{where}: state store provider {cls}; statekit reads Spark's "
                                      "HDFSBackedStateStoreProvider and RocksDBStateStoreProvider.")


def versions(directory: Path) -> dict[str, set[int]]:
    """The versions present per file kind (delta, snapshot, zip, changelog) in a store directory."""
    out: dict[str, set[int]] = {"delta": set(), "snapshot": set(), "zip": set(), "changelog": set()}
    if directory.is_dir():
        for p in directory.iterdir():
            m = _VERSIONED.fullmatch(p.name)
            if m:
                out[m.group(2)].add(int(m.group(1)))
    return out


def _missing(directory: Path, name: str, version: int) -> MissingStateFileError:
    return MissingStateFileError(
        f"{directory}/{name} is missing: version {version} of this store needs it (no newer snapshot covers it). "
        "The checkpoint is incomplete; restore the file from a copy of the checkpoint."
    )


def load(directory: Path, version: int, conf: dict[str, str], *, where: str) -> StoreData:
    """The store partition in `directory` at `version` (= committed batch + 1)."""
    kind = provider_kind(conf, where)
    codec = conf.get("spark.sql.streaming.stateStore.compression.codec", "lz4")
    have = versions(directory)
    if kind == "hdfs":
        return _load_hdfs(directory, version, codec, have)
    _check_rocksdb(conf, where)
    return _load_rocksdb(directory, version, codec, have)


def _check_rocksdb(conf: dict[str, str], where: str) -> None:
    fmt = conf.get("spark.sql.streaming.stateStore.rocksdb.formatVersion", "5")
    if fmt != "5":
        raise UnsupportedStateFormatError(f"{where}: RocksDB state format version {fmt}; statekit reads version 5 "
                                          "(Spark 3.4-4.1).")
    enc = conf.get("spark.sql.streaming.stateStore.encodingFormat", "unsaferow")
    if enc != "unsaferow":
        raise UnsupportedStateFormatError(f"{where}: RocksDB state encoding {enc!r}; statekit reads 'unsaferow' "
                                          "(Spark's default).")


def _load_hdfs(directory: Path, version: int, codec: str, have: dict[str, set[int]]) -> StoreData:
    base = max((s for s in have["snapshot"] if s <= version), default=0)
    data = StoreData({})
    if base:
        path = directory / f"{base}.snapshot"
        records.apply(data.entries, records.read_v1(decompress(read_checked(path, str(path)), codec, str(path)),
                                                    str(path), floor_values=True))
        data.files.append(path)
    for v in range(base + 1, version + 1):
        if v not in have["delta"]:
            raise _missing(directory, f"{v}.delta", version)
        path = directory / f"{v}.delta"
        records.apply(data.entries, records.read_v1(decompress(read_checked(path, str(path)), codec, str(path)),
                                                    str(path), floor_values=True))
        data.files.append(path)
    return data


def _load_rocksdb(directory: Path, version: int, codec: str, have: dict[str, set[int]]) -> StoreData:
    base = max((z for z in have["zip"] if z <= version), default=0)
    data = StoreData({})
    if base:
        _read_zip(directory, base, data)
    for v in range(base + 1, version + 1):
        if v not in have["changelog"]:
            raise _missing(directory, f"{v}.changelog", version)
        path = directory / f"{v}.changelog"
        raw = decompress(read_checked(path, str(path)), codec, str(path))
        recs = records.read_v2(raw, str(path)) if raw[:4] == b"\x00\x02v2" else records.read_v1(raw, str(path))
        records.apply(data.entries, recs)
        data.files.append(path)
    return data


def _zip_members(directory: Path, version: int, data: StoreData) -> tuple[zipfile.ZipFile, list[tuple[str, Path]]]:
    """The zip of `version` (its metadata recorded in `data`) and its SSTs as (local name, checked path)."""
    path = directory / f"{version}.zip"
    blob = read_checked(path, str(path))
    try:
        archive = zipfile.ZipFile(io.BytesIO(blob))
        names = archive.namelist()
    except zipfile.BadZipFile:
        raise CorruptSavepointError(f"{path} is not a zip archive; the RocksDB checkpoint is damaged. Restore it from "
                                    "a copy of the checkpoint.") from None
    bad = [n for n in names if not _ZIP_MEMBER.fullmatch(n)]
    if bad or "metadata" not in names:
        raise CorruptSavepointError(f"{path} holds {bad[:3] or 'no metadata'}; it is not one of Spark's RocksDB "
                                    "checkpoint zips. Restore it from a copy of the checkpoint.")
    lines = archive.read("metadata").decode("utf-8").split("\n")
    if lines[0] != "v1":
        raise UnsupportedStateFormatError(f"{path}: RocksDB checkpoint metadata {lines[0][:10]!r}; statekit reads v1.")
    meta = json.loads(lines[1])
    data.rocks_metadata = meta
    data.column_families = {str(k): int(v) for k, v in (meta.get("columnFamilyMapping") or {}).items()}
    data.internal = {str(k): bool(v) for k, v in (meta.get("columnFamilyTypeMap") or {}).items()}
    data.files.append(path)
    ssts = []
    for entry in meta.get("sstFiles", []):
        local, dfs, size = str(entry["localFileName"]), str(entry["dfsSstFileName"]), int(entry["sizeBytes"])
        if "/" in local or "/" in dfs or not local.endswith(".sst"):
            raise CorruptSavepointError(f"{path}: metadata names SST {dfs!r} as {local!r}; it is damaged.")
        src = directory / "SSTs" / dfs
        if not src.is_file():
            raise MissingStateFileError(
                f"{src} is missing: version {version}'s RocksDB checkpoint ({path.name}) needs it. The checkpoint "
                "is incomplete; restore the SST from a copy of the checkpoint.")
        if src.stat().st_size != size:
            raise CorruptSavepointError(f"{src} holds {src.stat().st_size} bytes but {path.name} says {size}; the "
                                        "SST is damaged. Restore it from a copy of the checkpoint.")
        ssts.append((local, src))
        data.files.append(src)
    return archive, ssts


def sst_entries(directory: Path, version: int, conf: dict[str, str], *, where: str,
                decode: Callable[[sst.Entries], T],
                into: StoreData | None = None) -> list[tuple[T, np.ndarray | None]] | None:
    """The RocksDB store partition at `version` read straight from its SSTs (`statekit.format.spark.sst.read`:
    chunks given to `decode`, with which of their rows are live), or None when RocksDB itself must open it:
    changelogs to replay after the zip, a write-ahead log with writes in it, or an SST feature the direct reader
    leaves to RocksDB. `into`, when given, receives the zip's metadata and the files read (not the entries)."""
    if provider_kind(conf, where) != "rocksdb":
        return None
    have = versions(directory)
    base = max((z for z in have["zip"] if z <= version), default=0)
    if base != version:
        return None
    _check_rocksdb(conf, where)
    data = into if into is not None else StoreData({})
    archive, ssts = _zip_members(directory, version, data)
    if any(i.filename.endswith(".log") and i.file_size for i in archive.infolist()):
        return None
    try:
        return sst.read([p for _, p in sorted(ssts, key=lambda s: s[0])], decode, live_keys=_live_keys(data.rocks_metadata))
    except sst.Unsupported:
        return None


def _live_keys(meta: dict) -> int | None:
    """The number of live keys a RocksDB checkpoint's metadata records, when it counts every key of its SSTs
    exactly; else None.

    Spark's RocksDB counts a key when a put finds none before it and uncounts it when a removal finds one
    (``trackTotalNumberOfRows``, on by default; off, it writes -1), so ``numKeys`` is the live keys of a store
    without column families. With column families (transformWithState) the keys are split between ``numKeys``
    and ``numInternalKeys`` by family, and Spark's own count of removals there has not always been exact: such a
    store gets None. statekit's writer (`writers.write_rocksdb_checkpoint`) counts the keys it writes, each once.
    """
    n = meta.get("numKeys")
    if meta.get("columnFamilyMapping") or meta.get("numInternalKeys", 0) != 0 or not isinstance(n, int) or n < 0:
        return None
    return n


def _read_zip(directory: Path, version: int, data: StoreData) -> None:
    archive, ssts = _zip_members(directory, version, data)
    if not ssts:
        return
    require("rocksdb", "Reading Spark's RocksDB state store")
    import rocksdict  # deferred: only RocksDB state needs it

    path = directory / f"{version}.zip"
    tmp = Path(tempfile.mkdtemp(prefix="statekit-spark-rocksdb-"))
    try:
        for name in archive.namelist():
            if name != "metadata":
                (tmp / name).write_bytes(archive.read(name))
        for local, src in ssts:
            shutil.copyfile(src, tmp / local)
        try:
            opts, cf_opts = rocksdict.Options.load_latest(str(tmp), ignore_unknown_options=True)
            db = rocksdict.Rdict(str(tmp), options=opts, column_families=cf_opts,
                                 access_type=rocksdict.AccessType.read_only())
        except Exception as exc:  # rocksdict raises plain exceptions
            raise CorruptSavepointError(f"{path}: RocksDB cannot open this checkpoint: "
                                        f"{str(exc).replace(str(tmp) + '/', '')}. Restore it from a copy.") from None
        try:
            data.entries.update(db.items())  # type: ignore[arg-type]  # iterated in Rust, not key()/value()/next() in Python
        finally:
            db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
