"""Offline repartitioning of a Spark Structured Streaming checkpoint: the same state in M partitions.

Spark fixes a stateful query's state partitions at its first run (the offset log's
``spark.sql.shuffle.partitions`` wins over the session's on every restart). `repartition` writes a
new checkpoint whose every stateful operator holds the state of the latest committed batch ``b``
as version ``b + 1`` in M partitions: each stored entry moves, byte for byte, to the partition
Spark's hash gives its key (`statekit.format.spark.murmur`), written in the query's provider (an
HDFS snapshot, or a RocksDB zip with fresh SSTs) with new ``.crc`` side files; the operator
metadata says M, every offset log entry's ``spark.sql.shuffle.partitions`` is M, the commit log,
sources and schemas are copied (transformWithState schema paths point into the new checkpoint).
Restarted with ``spark.sql.shuffle.partitions=M`` the query continues from batch ``b + 1``.

The source is never modified. A checkpoint whose offset log holds a batch beyond the last commit
(a running query, or one stopped inside a batch) is refused: its next batch may still write state.
The output appears atomically: written under a temporary sibling, renamed into place last.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError, OutputExistsError
from statekit.format.flink.gather import gather_values
from statekit.format.spark import providers, sst
from statekit.format.spark.errors import RunningQueryError, UnsupportedStateFormatError
from statekit.format.spark.layout import SHUFFLE_PARTITIONS, CheckpointLayout, OperatorInfo, read_log
from statekit.format.spark.murmur import partition_ids
from statekit.format.spark.schema import ColumnFamily
from statekit.format.spark.types import Struct, arrow_type
from statekit.format.spark.unsaferow import row_decoder
from statekit.format.spark.vector import decode_buffer, decode_columns, supported
from statekit.format.spark.writers import write_hdfs_snapshot, write_rocksdb_checkpoint
from statekit.savepoint.spark_checkpoint import SparkCheckpoint

_I = struct.Struct("<i")


@dataclass
class RepartitionSummary:
    """What `repartition` wrote: per operator and store, entries per new partition."""

    source: str
    target: str
    batch: int
    partitions_before: int
    partitions: int
    entries: dict[str, list[int]] = field(default_factory=dict)  # "<op>/<store>" -> entries per new partition

    def lines(self) -> list[str]:
        """The summary as text lines (the CLI prints these)."""
        out = [f"{self.target}: batch {self.batch} state in {self.partitions} partitions (was "
               f"{self.partitions_before}); restart the query on it with spark.sql.shuffle.partitions="
               f"{self.partitions}"]
        out += [f"  operator {k}: {sum(v)} entries, per partition {' / '.join(map(str, v))}"
                for k, v in self.entries.items()]
        return out


def repartition(checkpoint: str | os.PathLike[str], target: str | os.PathLike[str], *,
                partitions: int, rewrite: Any = None) -> RepartitionSummary:
    """Write `target`: `checkpoint`'s latest committed state in `partitions` state partitions.

    `rewrite(sp, stores, stage, partitions)`, when given, writes the stores' new partitions under `stage`
    and returns the entries per new partition by ``"<op>/<store>"`` instead of this process:
    `statekit.spark.streaming_repartition.repartition` passes the one that runs Spark tasks on the
    executors; the metadata and logs are written here, last, either way.

    Examples
    --------
    >>> repartition("/chk/orders", "/chk/orders-16", partitions=16).partitions   # doctest: +SKIP
    16
    """
    src, out = Path(checkpoint), Path(target)
    if partitions < 1:
        raise InvalidArgumentError(f"--partitions must be at least 1, not {partitions}.")
    if out.exists():
        raise OutputExistsError(f"{out} exists; repartition writes a new checkpoint. Choose a path that does not exist.")
    refuse_running(CheckpointLayout(src), src, "repartition")
    sp = SparkCheckpoint.open(src)
    before = {o.num_partitions for o in sp.spark_operators}
    summary = RepartitionSummary(str(src), str(out), sp.batch, max(before, default=0), partitions)
    stores = [(info, s) for info in sp.spark_operators
              for s in (["default"] if sp.is_tws(info.id) else [x.name for x in info.stores])]
    stage = out.with_name(f".{out.name}.statekit-{uuid.uuid4().hex[:8]}")
    try:
        stage.mkdir(parents=True)
        if rewrite is not None:
            summary.entries.update(rewrite(sp, stores, stage, partitions))
        else:
            for info, store in stores:
                summary.entries[f"{info.id}/{store}"] = _rewrite_store(sp, info, store, stage, partitions)
        for info in sp.spark_operators:  # the metadata and the logs last (they name the new partition count)
            _copy_operator_files(sp, info, stage, out, partitions)
        _copy_logs(src, stage, partitions)
        os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return summary


def refuse_running(layout: CheckpointLayout, src: Path, what: str) -> None:
    """Raise `RunningQueryError` if the offset log holds a batch beyond the last commit (the query may still write)."""
    pending = layout.uncommitted()
    if pending:
        raise RunningQueryError(
            f"{src}: batch {pending[0]} is in the offset log but not committed (offsets/{pending[0]} without "
            f"commits/{pending[0]}): the query is running, or stopped inside that batch. Stop the query and let it "
            f"finish (or restart and stop it once) so that its last batch is committed, then {what}."
        )


def _copy_logs(src: Path, stage: Path, partitions: int) -> None:
    """metadata, commits, sources as they are; offsets with ``spark.sql.shuffle.partitions`` = `partitions`."""
    stage.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name == "state" or (entry.name.startswith(".") and entry.name.endswith(".crc")):
            continue  # state is rewritten; Hadoop's local .crc files are optional and would not match rewrites
        if entry.name == "offsets":
            (stage / "offsets").mkdir()
            for f in entry.iterdir():
                if f.name.startswith("."):
                    continue
                lines = read_log(f, f"{src}: offsets/{f.name}")
                meta = json.loads(lines[0])
                meta.setdefault("conf", {})[SHUFFLE_PARTITIONS] = str(partitions)
                text = "v1\n" + json.dumps(meta, separators=(",", ":")) + "".join("\n" + x for x in lines[1:])
                (stage / "offsets" / f.name).write_text(text, "utf-8")
        elif entry.is_dir():
            shutil.copytree(entry, stage / entry.name, ignore=shutil.ignore_patterns(".*.crc"))
        else:
            shutil.copyfile(entry, stage / entry.name)


def schema_paths_into(doc: dict[str, Any], final: Path, op_id: int) -> None:
    """Point the ``stateSchemaFilePaths`` of operator metadata v2 `doc` (absolute URIs) at the schema files of the
    checkpoint at `final`: a copy must not depend on the files of the checkpoint it was made from."""
    for store in doc.get("stateStoreInfo", []):
        if "stateSchemaFilePaths" in store:
            store["stateSchemaFilePaths"] = [
                "file:" + str(final.resolve() / "state" / str(op_id) / "_stateSchema" / Path(p).parent.name / Path(p).name)
                for p in store["stateSchemaFilePaths"]]


def _copy_operator_files(sp: SparkCheckpoint, info: OperatorInfo, stage: Path, final: Path, partitions: int) -> None:
    """Operator metadata (numPartitions = `partitions`), schema files; v2 metadata names the new schema paths."""
    src_op = sp.path / "state" / str(info.id)
    dst_op = stage / "state" / str(info.id)
    dst_op.mkdir(parents=True, exist_ok=True)
    if (src_op / "_stateSchema").is_dir():
        shutil.copytree(src_op / "_stateSchema", dst_op / "_stateSchema", ignore=shutil.ignore_patterns(".*.crc"))
    meta_dir = src_op / "_metadata"
    for f in sorted(meta_dir.rglob("*")):
        if f.is_dir() or f.name.startswith("."):
            continue
        rel = f.relative_to(src_op)
        lines = read_log(f, str(f))
        doc = json.loads(lines[0])
        for store in doc.get("stateStoreInfo", []):
            store["numPartitions"] = partitions
        schema_paths_into(doc, final, info.id)
        (dst_op / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst_op / rel).write_text(f"{f.read_text('utf-8').split(chr(10))[0]}\n" + json.dumps(doc, separators=(",", ":"))
                                  + "".join("\n" + x for x in lines[1:]), "utf-8")
    for s in info.stores:  # v2 store schemas live under partition 0 only
        schema = sp.layout.store_dir(info.id, 0, s.name) / "_metadata" / "schema"
        if schema.is_file():
            dst = (dst_op / "0" / ("" if s.name == "default" else s.name) / "_metadata" / "schema")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(schema, dst)


def _rewrite_store(sp: SparkCheckpoint, info: OperatorInfo, store: str, stage: Path, partitions: int) -> list[int]:
    """Every entry of `store` (all source partitions) written into `partitions` new partitions; entries per partition."""
    keys: list[list[np.ndarray]] = [[] for _ in range(partitions)]
    values: list[list[np.ndarray]] = [[] for _ in range(partitions)]
    cf_meta: dict = {}
    for p in range(info.num_partitions):
        placed, meta = placed_entries(sp, info, store, p, partitions)
        cf_meta = same_families(cf_meta, meta, sp, info)
        for q, (ks, vs) in enumerate(placed.by_partition(partitions)):
            keys[q].append(ks)
            values[q].append(vs)
    counts = []
    for q in range(partitions):
        new_keys, new_values = listed(keys[q]), listed(values[q])
        keys[q] = values[q] = []  # (the lists hold them now)
        write_partition(sp, info, store, stage, q, new_keys, new_values, cf_meta)
        counts.append(len(new_keys))
    return counts


@dataclass
class Placed:
    """The entries of one source partition and the new partition of each: ``keys[i]: values[i]`` goes to ``to[i]``.

    Keys and values are byte strings as stored, in arrays: rows of one width (a void dtype: copied as plain memory
    until `listed` makes them bytes objects, once, for the writer) or bytes objects (dtype object).
    """

    to: np.ndarray
    keys: np.ndarray
    values: np.ndarray

    def by_partition(self, partitions: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(keys, values) of each new partition 0..partitions-1, in source order."""
        order = np.argsort(self.to, kind="stable")
        bounds = np.searchsorted(self.to[order], np.arange(partitions + 1))
        keys, values = self.keys[order], self.values[order]
        return [(keys[a:b], values[a:b]) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]

    @staticmethod
    def empty() -> Placed:
        return Placed(np.zeros(0, np.int64), _objects([]), _objects([]))


def listed(parts: list[np.ndarray]) -> list[bytes]:
    """The byte strings of arrays of them (`Placed`), one after another, as one list of bytes objects."""
    if parts and all(a.dtype == parts[0].dtype for a in parts):
        return np.concatenate(parts).tolist()  # (a void array's items are bytes objects of its width)
    return [b for a in parts for b in a.tolist()]


def _objects(items: list[bytes]) -> np.ndarray:
    out = np.empty(len(items), object)
    out[:] = items
    return out


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if all(a.dtype == parts[0].dtype for a in parts) else _objects(listed(parts))


def _rows(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``buf[starts[i]:ends[i]]`` in an array (`Placed`): rows of one length in one gather, as plain memory."""
    lengths = ends - starts
    if len(starts) and int(lengths.min()) == int(lengths.max()) > 0:
        size = int(lengths[0])
        return gather_values(buf, starts, f"V{size}")
    return _objects([buf[a:b].tobytes() for a, b in zip(starts.tolist(), ends.tolist())])


def _sst_placed(sp: SparkCheckpoint, info: OperatorInfo, store: str, p: int, partitions: int,
                where: str) -> tuple[Placed, dict] | None:
    """`placed_entries` of a plain RocksDB store partition read straight from its SSTs, or None when they must be
    opened with RocksDB (`providers.sst_entries`) or a key does not decode column by column."""
    shape = sp.shape(info.id, store)
    n_key = len(sp.grouping_key(info.id).fields)

    def decode(e: sst.Entries) -> Placed | None:
        columns = decode_buffer(e.keys, e.key_starts, e.key_ends, shape.key, skip=1, stride=e.key_stride)
        if columns is None:
            return None
        return Placed(partition_ids(list(columns[:n_key]), partitions), _rows(e.keys, e.key_starts, e.key_ends),
                      _rows(e.values, e.value_starts, e.value_ends))

    data = providers.StoreData({})
    chunks = providers.sst_entries(sp.layout.store_dir(info.id, p, store), sp.version, sp.conf, where=where,
                                   decode=decode, into=data)
    if chunks is None or any(c is None for c, _ in chunks):
        return None
    parts = [c if live is None else Placed(c.to[live], c.keys[live], c.values[live])
             for c, live in chunks if c is not None]
    meta = _families(data)
    if not parts:
        return Placed.empty(), meta
    return Placed(np.concatenate([c.to for c in parts]), _joined([c.keys for c in parts]),
                  _joined([c.values for c in parts])), meta


def placed_entries(sp: SparkCheckpoint, info: OperatorInfo, store: str, p: int, partitions: int) -> tuple[Placed, dict]:
    """Source partition `p` of `store`: each entry with its new partition, and its RocksDB column family metadata
    (``{}`` without column families). A plain RocksDB store is read straight from its SSTs when it can be."""
    where = f"{sp.path}: operator {info.id} partition {p} store {store}"
    if sp.provider == "rocksdb" and not sp.is_tws(info.id) and supported(sp.shape(info.id, store).key):
        direct = _sst_placed(sp, info, store, p, partitions, where)
        if direct is not None:
            return direct
    data = sp.load(info.id, p, store)
    meta = _families(data)
    if not data.entries:
        return Placed.empty(), meta
    keys = list(data.entries)
    schema = sp.grouping_key(info.id)
    columns = None
    if not sp.is_tws(info.id):  # plain stores: the key's leading columns, decoded with numpy
        columns = decode_columns(keys, sp.shape(info.id, store).key, skip=1 if sp.provider == "rocksdb" else 0)
    if columns is None:
        grouping = grouping_rows(sp, info, store, keys, data, where)
        table = pa.Table.from_pylist(grouping, schema=pa.schema([pa.field(f.name, arrow_type(f.type))
                                                                   for f in schema.fields]))
        columns = [table.column(i) for i in range(table.num_columns)]
    placed = partition_ids(list(columns[:len(schema.fields)]), partitions)
    return Placed(placed, _objects(keys), _objects(list(data.entries.values()))), meta


def _families(data: providers.StoreData) -> dict:
    """A store partition's RocksDB column family metadata (``{}`` without column families)."""
    return data.rocks_metadata if data.rocks_metadata and data.column_families else {}


def same_families(have: dict, meta: dict, sp: SparkCheckpoint, info: OperatorInfo) -> dict:
    """The column family metadata of the partitions merged so far (`have`) with one more partition's (`meta`)."""
    if have and meta and have.get("columnFamilyMapping") != meta.get("columnFamilyMapping"):
        raise UnsupportedStateFormatError(
            f"{sp.path}: operator {info.id}'s partitions number their column families differently "
            f"({have.get('columnFamilyMapping')} vs {meta.get('columnFamilyMapping')}); "
            "statekit cannot merge them into one partition.")
    return meta or have


def write_partition(sp: SparkCheckpoint, info: OperatorInfo, store: str, stage: Path, q: int, keys: list[bytes],
                    values: list[bytes], cf_meta: dict) -> None:
    """New partition `q` of `store` under `stage` holding ``keys[i]: values[i]`` (each key once): a snapshot (HDFS)
    or a checkpoint zip (RocksDB) at the version."""
    directory = stage / "state" / str(info.id) / str(q) / ("" if store == "default" else store)
    directory.mkdir(parents=True, exist_ok=True)
    if sp.provider == "hdfs":
        codec = sp.conf.get("spark.sql.streaming.stateStore.compression.codec", "lz4")
        write_hdfs_snapshot(directory, sp.version, keys, values, codec)
    else:
        write_rocksdb_checkpoint(directory, sp.version, keys, values, cf_meta)


def grouping_rows(sp: SparkCheckpoint, info: OperatorInfo, store: str, keys: list[bytes],
                   data: providers.StoreData, where: str) -> list[dict]:
    """The partitioning key of each stored key (grouping columns, join keys, dedup columns), as dicts."""
    grouping = sp._grouping_key(info)
    if not sp.is_tws(info.id):
        dec = row_decoder(sp.shape(info.id, store).key)
        skip = 1 if sp.provider == "rocksdb" else 0
        n = len(grouping.fields)
        out = []
        for k in keys:
            row = dec(k[skip:], 0, len(k) - skip)
            out.append(dict(list(row.items())[:n]))
        return out
    families: dict[str, ColumnFamily] = sp._tws(info)["families"]
    by_id = {i: families.get(name) for name, i in data.column_families.items()}
    decoders: dict[int, object] = {}
    out = []
    for k in keys:
        cf_id = int.from_bytes(k[:2], "little", signed=True)
        cf = by_id.get(cf_id)
        if cf is None or cf.name == "default":
            raise UnsupportedStateFormatError(f"{where}: an entry of column family {cf_id} "
                                              f"({cf.name if cf else 'not in the schema file'}) has no known "
                                              "grouping key; statekit cannot place it.")
        if cf_id not in decoders:
            decoders[cf_id] = _tws_key_decoder(cf, grouping)
        out.append(decoders[cf_id](k[2:]))  # type: ignore[operator]
    return out


def _tws_key_decoder(cf: ColumnFamily, grouping: Struct):
    """A function from a column family's encoded key to its grouping key (dict)."""
    def pick(row: dict) -> dict:
        inner = row.get("key") if "key" in row and set(row) != set(grouping.names) else row
        return dict(inner or {})

    if cf.kind == "NoPrefixKeyStateEncoderSpec":
        dec = row_decoder(cf.key)
        return lambda k: pick(dec(k, 1, len(k) - 1))
    if cf.kind == "PrefixKeyScanStateEncoderSpec":
        pdec = row_decoder(Struct(cf.key.fields[:cf.prefix_columns]))
        return lambda k: pick(pdec(k, 5, _I.unpack_from(k, 0)[0] - 1))
    if cf.kind == "RangeKeyScanStateEncoderSpec":
        ordinals = set(cf.encoder.get("orderingOrdinals", []))
        rest = row_decoder(Struct(tuple(f for i, f in enumerate(cf.key.fields) if i not in ordinals)))

        def ranged(k: bytes) -> dict:
            n = _I.unpack_from(k, 0)[0]
            return pick(rest(k, 4 + n + 1, len(k) - 4 - n - 1))
        return ranged
    raise UnsupportedStateFormatError(f"column family {cf.name!r} uses key encoder {cf.kind}; statekit places "
                                      "NoPrefix, PrefixKeyScan and RangeKeyScan keys.")
