"""`SparkCheckpoint`: a Spark Structured Streaming checkpoint read as a statekit database, without a JVM.

One namespace per stateful operator (its id and name from the operator metadata), one table per
store or state variable: ``default``; a stream-stream join's four stores; each transformWithState
variable (value, list, map) and ``$timers``. `keyed_table` gives one row per stored entry:
``partition_id``, the key's fields, the value's fields (list and map variables one element per
row, as Spark's ``statestore`` source does), at any committed batch (default the latest).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError, UnknownOperatorError, UnknownStateError
from statekit.format.manifest import Manifest, OperatorMetadata
from statekit.format.spark import providers, sst
from statekit.format.spark.errors import MissingStateFileError, UnsupportedStateFormatError
from statekit.format.spark.layout import CheckpointLayout, OperatorInfo
from statekit.format.spark.murmur import partition_ids
from statekit.format.spark.schema import ColumnFamily, read_v2, read_v3
from statekit.format.spark.tables import (
    TIMERS,
    TableShape,
    by_family,
    plain_rows,
    sub_struct,
    to_rows,
    variable_rows,
    variable_shape,
)
from statekit.format.spark.types import Struct, arrow_type, ddl
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import spark_helper
from statekit.savepoint.reader import Savepoint

OpRef = int | str | OperatorIdentifier
#: transformWithState internal column families that are not user state (list counters, TTL indexes, the
#: timestamp-ordered copy of the timers)
_INTERNAL = ("$rowCounter_", "$ttl_", "$eventTimers_timestampToKey", "$procTimers_timestampToKey", "$count_", "$min_")


#: (operator names, offset-log conf, the state format versions statekit decodes)
_STATE_FORMATS = (
    (("stateStoreSave",), "spark.sql.streaming.aggregation.stateFormatVersion", {"2"}),
    (("symmetricHashJoin",), "spark.sql.streaming.join.stateFormatVersion", {"2"}),
    (("flatMapGroupsWithState", "applyInPandasWithState"), "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
     {"2"}),
)


class SparkCheckpoint(Savepoint):
    """A Spark streaming checkpoint at one committed batch (`Savepoint.open` returns one for a checkpoint).

    Operators are named by their operator id (``0``, ``"0"``) or operator name (``"stateStoreSave"``);
    `tables` lists an operator's stores and state variables.
    """

    def __init__(self, path: Path, layout: CheckpointLayout, batch: int) -> None:
        self.layout = layout
        self.batch = batch
        self.conf = layout.conf(batch)
        self.spark_operators = [layout.operator(i, batch) for i in layout.operator_ids()]
        super().__init__(path, _manifest(layout, batch, self.spark_operators))
        self._schemas: dict[int, dict[str, Any]] = {}
        self._check_formats()

    def _check_formats(self) -> None:
        """Refuse operators whose state format version statekit does not decode (offset log conf, per operator kind)."""
        for o in self.spark_operators:
            for names, conf, known in _STATE_FORMATS:
                version = self.conf.get(conf, "2")
                if o.name in names and version not in known:
                    raise UnsupportedStateFormatError(
                        f"{self.path}: operator {o.id} ({o.name}) keeps state format version {version} ({conf} in "
                        f"offsets/{self.batch}); statekit decodes version {', '.join(sorted(known))} (Spark 3.x-4.1's "
                        "default). Read it with Spark's statestore source."
                    )

    @classmethod
    def open(cls, path: "str | os.PathLike[str] | Path", *, batch: int | None = None,  # type: ignore[override]
             **_: Any) -> "SparkCheckpoint":
        """The checkpoint at `path` at committed `batch` (default: the latest committed one)."""
        layout = CheckpointLayout(Path(path))
        return cls(Path(path), layout, layout.batch(batch))

    def at_batch(self, batch: int) -> "SparkCheckpoint":
        """The same checkpoint at another committed batch."""
        return SparkCheckpoint(self.path, self.layout, self.layout.batch(batch))

    @property
    def version(self) -> int:
        """The state store version of the batch (batch + 1)."""
        return self.batch + 1

    @cached_property
    def provider(self) -> str:
        return providers.provider_kind(self.conf, str(self.path))

    def __repr__(self) -> str:
        return f"SparkCheckpoint({str(self.path)!r}, batch={self.batch}, operators={len(self.spark_operators)})"

    # -- operators and tables ------------------------------------------------------------------------
    def spark_operator(self, op: OpRef) -> OperatorInfo:
        """The operator `op`: its id (int or digits) or its name (unique in the query)."""
        if isinstance(op, OperatorIdentifier):
            op = op.uid or op.uid_hash
        for o in self.spark_operators:
            if (isinstance(op, int) and o.id == op) or str(o.id) == str(op):
                return o
        named = [o for o in self.spark_operators if o.name == op]
        if len(named) == 1:
            return named[0]
        have = ", ".join(f"{o.id} ({o.name})" for o in self.spark_operators) or "none"
        if named:
            raise UnknownOperatorError(f"{self.path}: {len(named)} operators are named {op!r}; name one by its id "
                                       f"({', '.join(str(o.id) for o in named)}).")
        raise UnknownOperatorError(f"{self.path}: no stateful operator {op!r} at batch {self.batch}; operators: {have}.")

    def operator(self, op: OpRef) -> OperatorMetadata:  # type: ignore[override]
        info = self.spark_operator(op)
        return next(m for m in self.manifest.operators if m.uid == str(info.id))

    def _tws(self, info: OperatorInfo) -> dict[str, Any]:
        """transformWithState: variable name -> (kind, column family) from the newest v3 schema file."""
        if info.id not in self._schemas:
            base = self.path / "state" / str(info.id) / "_stateSchema" / "default"
            files = sorted((p for p in base.iterdir() if p.name.split("_", 1)[0].isdigit()
                            and int(p.name.split("_", 1)[0]) <= self.batch),
                           key=lambda p: int(p.name.split("_", 1)[0])) if base.is_dir() else []
            if not files:
                raise MissingStateFileError(f"{base}: operator {info.id} ({info.name}) has no state schema file for "
                                            f"batch {self.batch}; the checkpoint is incomplete.")
            families = {cf.name: cf for cf in read_v3(files[-1].read_bytes(), str(files[-1]))}
            kinds = {v["stateName"]: v["stateVariableType"] for v in info.properties.get("stateVariables", [])}
            out: dict[str, tuple[str, ColumnFamily]] = {}
            for name, cf in families.items():
                if name == "default" or name.startswith(_INTERNAL):
                    continue
                if name.endswith("Timers_keyToTimestamp"):
                    out[TIMERS] = ("TimerState", cf)
                    continue
                kind = kinds.get(name) or ("MapState" if cf.user_key is not None else
                                           "ListState" if f"$rowCounter_{name}" in families else "ValueState")
                out[name] = (kind, cf)
            self._schemas[info.id] = {"vars": out, "families": families}
        return self._schemas[info.id]

    def is_tws(self, op: OpRef) -> bool:
        return self.spark_operator(op).metadata_version == 2

    def tables(self, op: OpRef) -> list[str]:
        """The stores (``default``, a join's four) or state variables (transformWithState, with ``$timers``)."""
        info = self.spark_operator(op)
        if self.is_tws(info.id):
            return list(self._tws(info)["vars"])
        return [s.name for s in info.stores]

    def shape(self, op: OpRef, store: str = "default") -> TableShape:
        """The key and value fields of a table (from the state schema files)."""
        info = self.spark_operator(op)
        if self.is_tws(info.id):
            kind, cf = self._var(info, store)
            return variable_shape(kind, cf)
        self._store(info, store)
        d = self.layout.store_dir(info.id, 0, store) / "_metadata" / "schema"
        if not d.is_file():
            raise MissingStateFileError(f"{d} is missing: the state schema of operator {info.id} store {store!r}. "
                                        "The checkpoint is incomplete.")
        s = read_v2(d.read_bytes(), str(d))
        return TableShape(s.key, s.value)

    def _var(self, info: OperatorInfo, store: str) -> tuple[str, ColumnFamily]:
        found = self._tws(info)["vars"].get("default" if store is None else store)
        if found is None:
            raise UnknownStateError(f"operator {info.id} ({info.name}) has no state variable {store!r}; it has "
                                    f"{', '.join(self._tws(info)['vars'])}.")
        return found  # type: ignore[no-any-return]

    def _store(self, info: OperatorInfo, store: str) -> None:
        if store not in [s.name for s in info.stores]:
            raise UnknownStateError(f"operator {info.id} ({info.name}) has no store {store!r}; it has "
                                    f"{', '.join(s.name for s in info.stores)}.")

    def table_schema(self, op: OpRef, store: str = "default") -> pa.Schema:
        cols = self.shape(op, store).columns
        return pa.schema([pa.field("partition_id", pa.int32(), nullable=False)]
                         + [pa.field(c.name, arrow_type(c.type)) for c in cols])

    # -- reading ----------------------------------------------------------------------------------
    def keyed_table(self, op: OpRef, *, store: str = "default", partitions: Iterable[int] | None = None,  # type: ignore[override]
                    with_key_group: bool = False, key_groups: Any = None) -> pa.Table:
        """One row per stored entry of `store` of `op`: ``partition_id``, the key's fields, the value's fields.

        `partitions` restricts the read to those state partitions (only their files are opened).
        """
        info = self.spark_operator(op)
        shape = self.shape(info.id, store)
        schema = self.table_schema(info.id, store)
        wanted = list(range(info.num_partitions) if partitions is None else partitions)

        def one(p: int) -> pa.Table:
            fast = None if self.is_tws(info.id) else self._columns(info, store, p, shape, schema)
            return fast if fast is not None else pa.Table.from_pylist(to_rows(self._pairs(info, store, p), shape, p),
                                                                      schema=schema)
        h = self._helper(info, store, wanted)
        if h is not None:  # the caller's thread and the helper process share the partitions (see spark_helper)
            try:
                parts = spark_helper.shared_map(h, one, lambda p: {
                    "path": str(self.path), "batch": self.batch, "op": info.id, "store": store, "partition": p},
                    schema, wanted)
            finally:
                h.busy.release()
        elif len(wanted) > 1:  # numpy releases the GIL in its loops; more threads than cores only thrash memory
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(len(wanted), os.cpu_count() or 1, 4)) as pool:
                parts = list(pool.map(one, wanted))
        else:
            parts = [one(p) for p in wanted]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _helper(self, info: OperatorInfo, store: str, wanted: list[int]) -> spark_helper.Helper | None:
        """The helper process for a read of `wanted` partitions when it pays (a large read of plain stores), taken for
        this read (its `busy` lock held: the caller releases it), else None."""
        if len(wanted) < 2 or not spark_helper.available() or self.is_tws(info.id) \
                or not all(0 <= p < info.num_partitions for p in wanted):
            return None
        size = 0  # (listed only when a helper could take the read)
        for p in wanted:
            for folder, _, files in os.walk(self.layout.store_dir(info.id, p, store)):
                size += sum(os.stat(os.path.join(folder, f)).st_size for f in files)
        if size < spark_helper.MIN_BYTES:
            return None
        h = spark_helper.helper()
        return h if h is not None and h.busy.acquire(blocking=False) else None

    def _columns(self, info: OperatorInfo, store: str, partition: int, shape: TableShape,
                 schema: pa.Schema) -> pa.Table | None:
        """A plain store partition decoded column by column (`statekit.format.spark.vector`), or None if its types
        need the row decoder."""
        from statekit.format.spark.vector import arrow_array, decode_buffer, decode_columns, supported

        if not 0 <= partition < info.num_partitions:
            raise InvalidArgumentError(f"operator {info.id} has partitions 0-{info.num_partitions - 1}, not {partition}")
        self._store(info, store)
        if not supported(shape.key) or not supported(shape.value):
            return None
        skip = 1 if self.provider == "rocksdb" else 0
        directory = self.layout.store_dir(info.id, partition, store)

        def decode(e: sst.Entries) -> pa.Table | None:
            kc = decode_buffer(e.keys, e.key_starts, e.key_ends, shape.key, skip=skip, stride=e.key_stride)
            vc = decode_buffer(e.values, e.value_starts, e.value_ends, shape.value, skip=skip)
            if kc is None or vc is None:
                return None
            return pa.Table.from_arrays([arrow_array(np.full(len(e), partition, np.int32)), *kc, *vc], schema=schema)
        direct = providers.sst_entries(directory, self.version, self.conf, where=str(directory), decode=decode)
        if direct is not None:  # straight from the SSTs: no RocksDB, no Python object per entry
            if any(t is None for t, _ in direct):
                return None
            tables = [t if live is None else t.filter(arrow_array(live)) for t, live in direct]  # type: ignore[union-attr]
            return pa.concat_tables(tables) if tables else schema.empty_table()
        data = self.load(info.id, partition, store)
        keys, values = list(data.entries), list(data.entries.values())  # (decode_columns checks the version byte)
        kc = decode_columns(keys, shape.key, skip=skip)
        vc = decode_columns(values, shape.value, skip=skip)
        if kc is None or vc is None:
            return None
        pid = arrow_array(np.full(len(keys), partition, np.int32))
        return pa.Table.from_arrays([pid, *kc, *vc], schema=schema)

    def _pairs(self, info: OperatorInfo, store: str, partition: int) -> list[tuple[dict, dict]]:
        if not 0 <= partition < info.num_partitions:
            raise InvalidArgumentError(f"operator {info.id} has partitions 0-{info.num_partitions - 1}, not {partition}")
        if self.is_tws(info.id):
            kind, cf = self._var(info, store)
            data = self.load(info.id, partition, "default")
            ids = data.column_families
            if cf.name not in ids:
                return []  # the family was never created in this partition's RocksDB
            items = by_family(data.entries, str(self.layout.store_dir(info.id, partition, "default"))).get(ids[cf.name], [])
            return variable_rows(kind, cf, items, f"{self.path}: operator {info.id} partition {partition} {store}")
        self._store(info, store)
        data = self.load(info.id, partition, store)
        shape = self.shape(info.id, store)
        return plain_rows(data.entries, shape, rocksdb=self.provider == "rocksdb",
                          where=f"{self.path}: operator {info.id} partition {partition} store {store}")

    def load(self, op_id: int, partition: int, store: str) -> providers.StoreData:
        """The raw entries of one store partition at this batch's version."""
        directory = self.layout.store_dir(op_id, partition, store)
        return providers.load(directory, self.version, self.conf, where=str(directory))

    def partition_of(self, op: OpRef, key: Any) -> int:
        """The state partition Spark places `key` in (a dict of the key's fields, a tuple, or one value)."""
        info = self.spark_operator(op)
        cols = self._key_columns(info, key)
        return int(partition_ids(cols, info.num_partitions)[0])

    def _key_columns(self, info: OperatorInfo, key: Any) -> list[pa.Array]:
        fields = self._grouping_key(info)
        if isinstance(key, dict):
            values = [key.get(f.name) for f in fields.fields]
        elif isinstance(key, (tuple, list)):
            values = list(key)
        else:
            values = [key]
        if len(values) != len(fields.fields):
            raise InvalidArgumentError(f"operator {info.id}'s key has fields {fields.names}; got {key!r}.")
        return [pa.array([v], arrow_type(f.type)) for v, f in zip(values, fields.fields)]

    def grouping_key(self, op: OpRef) -> Struct:
        """The fields Spark partitions `op`'s state by (grouping columns, dedup columns, join keys)."""
        return self._grouping_key(self.spark_operator(op))

    def _grouping_key(self, info: OperatorInfo) -> Struct:
        if self.is_tws(info.id):
            for kind, cf in self._tws(info)["vars"].values():  # the grouping key: a value or list variable's key,
                if kind in ("ValueState", "ListState"):  # or the ``key`` struct of a map or timer key
                    return cf.key  # type: ignore[no-any-return]
            return sub_struct(next(iter(self._tws(info)["vars"].values()))[1].key, "key")
        first = info.stores[0].name
        key = self.shape(info.id, first).key
        if first.endswith("keyWithIndexToValue"):
            key = Struct(key.fields[:-1])  # the join's value index is not part of the partitioning key
        return key

    def get(self, op: OpRef, key: Any, *, store: str = "default", namespace: Any = None) -> list[dict[str, Any]]:  # type: ignore[override]
        """The rows of `key` in `store` (several for a list or map variable), reading only the key's partition."""
        info = self.spark_operator(op)
        p = self.partition_of(info.id, key)
        table = self.keyed_table(info.id, store=store, partitions=[p])
        names = self._grouping_key(info).names
        want = {f: v for f, v in zip(names, self._key_values(info, key))}
        return [r for r in table.to_pylist() if all(_same(r.get(f), v) for f, v in want.items())]

    def _key_values(self, info: OperatorInfo, key: Any) -> list[Any]:
        return [c[0].as_py() for c in self._key_columns(info, key)]

    def files_read(self, op: OpRef, store: str, partition: int) -> list[Path]:
        info = self.spark_operator(op)
        return self.load(info.id, partition, "default" if self.is_tws(info.id) else store).files

    def timers(self, op: OpRef) -> pa.Table:  # type: ignore[override]
        return self.keyed_table(op, store=TIMERS)

    def verify_files(self) -> int:
        """Read every state file of this batch (checksums, records, SSTs); the number of files read."""
        n = 0
        for info in self.spark_operators:
            for t in self.tables(info.id):
                for p in range(info.num_partitions):
                    self._pairs(info, t, p)
                    n += len(self.files_read(info.id, t, p))
        return n

    # -- SQL names (DuckDB `statekit.query` and Spark `statekit.spark.streaming_state` use these) -------------
    def sql_tables(self, prefix: str | None = None) -> dict[str, dict[str, tuple[Any, str, str | None]]]:
        """Database -> table -> (operator metadata, ``"spark-state"``, store) for every table.

        An operator's database is its name as an identifier (``stateStoreSave`` -> ``statestoresave``;
        ``<name>_<id>`` when two share a name), after ``<prefix>_``; its tables are ``state`` (the
        ``default`` store), a join's stores (``left_keytonumvalues``...), transformWithState
        variables by name and ``registered_timers`` (``$timers``).
        """
        from statekit.table_names import table_name

        names = [o.name for o in self.spark_operators]
        out: dict[str, dict[str, tuple[Any, str, str | None]]] = {}
        for o in self.spark_operators:
            db = table_name((f"{prefix}_" if prefix else "") + (o.name if names.count(o.name) == 1 else f"{o.name}_{o.id}"))
            out[db] = {sql_table_name(t): (self.operator(o.id), "spark-state", t) for t in self.tables(o.id)}
        return out

    @property
    def metadata(self) -> dict[str, Any]:
        return {
            "format": "spark-streaming-checkpoint", "query_id": self.layout.query_id, "batch": self.batch,
            "committed_batches": self.layout.committed, "provider": self.provider,
            "watermark_ms": self.layout.offsets(self.batch)[0].get("batchWatermarkMs"),
            "operators": [{"id": o.id, "name": o.name, "partitions": o.num_partitions,
                           "tables": {t: {"key": {c.name: ddl(c.type) for c in self.shape(o.id, t).key.fields},
                                          "value": {c.name: ddl(c.type) for c in self.shape(o.id, t).value.fields}}
                                      for t in self.tables(o.id)}}
                          for o in self.spark_operators],
        }


def sql_table_name(store: str) -> str:
    """The SQL table of a store or state variable (``default`` -> ``state``, ``$timers`` -> ``registered_timers``)."""
    from statekit.table_names import table_name

    return {"default": "state", TIMERS: "registered_timers"}.get(store) or table_name(store)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return a == b
    return bool(a == b) if a is not None and b is not None else a is None and b is None


def _manifest(layout: CheckpointLayout, batch: int, ops: list[OperatorInfo]) -> Manifest:
    metas = tuple(OperatorMetadata(OperatorIdentifier.for_uid(str(o.id)), o.name, o.num_partitions,
                                   o.num_partitions) for o in ops)
    try:
        ts = layout.offsets(batch)[0].get("batchTimestampMs", 0)
        created = dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).isoformat()
    except (json.JSONDecodeError, OSError, ValueError):
        created = ""
    return Manifest(batch, "checkpoint", created, layout.query_id, metas)
