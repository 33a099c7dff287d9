"""Spark Python data sources ``statekit`` (one savepoint table) and ``statekit-metadata`` (its operators).

``spark.read.format("statekit").option("uid", "counter").option("table", "keyed").load(path)``,
or in SQL ``CREATE TEMPORARY VIEW v USING statekit OPTIONS (path '...', uid 'counter', table 'keyed')``.

Options of ``statekit``
-----------------------
==============  ======  ==========  ===================================================================
name            type    default     meaning
==============  ======  ==========  ===================================================================
path            string  (required)  savepoint or checkpoint directory (the one holding _metadata.json), a
                                    local path or a URI (``s3://``, ``s3a://``, ``gs://``, ...)
storage.<name>  string  --          a storage option of a URI (``storage.endpoint_url``, ``storage.region``,
                                    ``storage.profile``, ...; `statekit.format.stores.filesystem_for`).
                                    Without them each task uses its executor's environment and profiles
uid             string  --          operator uid; give this or ``uid_hash``
uid_hash        string  --          operator uid hash, 32 hex chars (for operators without a uid)
table           string  ``keyed``   ``keyed``, ``timers``, ``logical`` (a Flink SQL operator, with
                                    ``plan``), or the name of an operator state (list, union or
                                    broadcast state; its kind comes from the manifest)
with_key_group  bool    ``false``   add the ``key_group`` column (keyed and timers tables)
trust_pickled   bool    ``false``   open the savepoint trusting pickled state (columns stay ``binary``)
plan            string  --          a Flink SQL job's compiled plan (JSON file): the query's column
                                    names, and the ``logical`` table
==============  ======  ==========  ===================================================================

Options of ``statekit-metadata``: ``path`` and ``storage.<name>``.

Savepoints on object storage: each task opens the store itself (nothing passes through the driver), with
the executors' credentials (``AWS_*`` variables, ``~/.aws`` profiles, instance roles; on a cluster e.g.
``spark.executorEnv.AWS_PROFILE``) unless ``storage.*`` options are given. `SavepointReader` passes its
``storage_options`` that way; Spark redacts option values whose names match ``spark.redaction.regex``
(``secret``, ``token``, ``access.key``, ``url`` ...) from plans and the UI, and statekit's errors name the URI only.

Tables: ``keyed`` has ``key``, [``namespace``] and one column per keyed state; ``timers`` has
``key``, [``namespace``], ``timestamp``, ``domain``; list state ``subtask``, ``idx``, ``value``;
union state one copy as ``idx``, ``value``; broadcast state ``key``, ``value``.

Partitions follow the manifest: one per group of keyed files with disjoint key-group ranges (one
per subtask for native RocksDB checkpoints); each yields Arrow record batches read and verified by
`statekit.savepoint.Savepoint`. Filters on ``key`` prune files (see `statekit.spark.filters` for
the rule): ``key = 42`` reads only the files covering key 42's key group; on a Flink SQL operator,
``key.user_name = 'alice'`` (keyed table) or ``user_name = 'alice'`` (logical table) fixing every
field of the key reads only that key row's key group.

PySpark 4.1 caveat: a scan that pushes no filter reuses the plan of the last scan of the same
relation that did (PySpark keeps it on the relation; fixed in later Spark). So after
``SELECT ... FROM v WHERE key = 1``, a plain ``SELECT count(*) FROM v`` would see only key 1.
statekit therefore claims ``key IS NOT NULL`` (keys are never null) and every DataFrame from
`SavepointReader` carries that filter, so each of its scans is planned afresh. For SQL views over
keyed or timer tables, wrap the data source view the same way::

    CREATE TEMPORARY VIEW proc_raw USING statekit OPTIONS (path '...', uid 'proc', table 'keyed');
    CREATE TEMPORARY VIEW proc AS SELECT * FROM proc_raw WHERE key IS NOT NULL;
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence
from urllib.parse import urlparse
from urllib.request import url2pathname

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from statekit.errors import InvalidArgumentError
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import OperatorMetadata, Savepoint
from statekit.spark.filters import key_pruning, struct_key_rows
from statekit.spark.metadata import METADATA_SCHEMA, metadata_table
from statekit.spark.scan import ScanTask, TableSpec, plan_tasks, read_task, resolve_table, spark_ddl, table_schema
from statekit.types import parse_ddl

__all__ = ["StatekitDataSource", "StatekitMetadataDataSource", "register_data_sources", "parse_options", "storage_options",
           "storage_source_options"]

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def _flag(options: dict[str, str], name: str) -> bool:
    raw = str(options.get(name, "false")).strip().lower()
    if raw not in _TRUE | _FALSE:
        raise InvalidArgumentError(f"option {name!r} must be true or false, got {options.get(name)!r}.")
    return raw in _TRUE


def _path(options: dict[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise InvalidArgumentError("the statekit data source needs a path: .load('<savepoint dir>') or OPTIONS (path '...').")
    if path.startswith("file:"):
        # Catalog tables (SavepointReader.register) store the path qualified as a file: URI.
        return url2pathname(urlparse(path).path)
    return path


#: the data source options that carry storage options (``storage.endpoint_url`` -> ``endpoint_url``)
STORAGE_PREFIX = "storage."


def storage_options(options: dict[str, str]) -> dict[str, str]:
    """The ``storage.<name>`` options of `options` (lower-cased keys) as storage options."""
    return {k[len(STORAGE_PREFIX):]: v for k, v in options.items() if k.startswith(STORAGE_PREFIX)}


def storage_source_options(storage: dict[str, str] | None) -> dict[str, str]:
    """`storage` as data source options (the inverse of `storage_options`)."""
    return {STORAGE_PREFIX + k: str(v) for k, v in (storage or {}).items()}


def parse_options(options: dict[str, str]) -> tuple[Savepoint, OperatorMetadata, TableSpec]:
    """Open the savepoint named by data source `options` and resolve its operator and table.

    Raises the typed errors of `Savepoint.open` (not a savepoint, corrupt manifest, unsupported
    version) and `UnknownOperatorError` / `UnknownStateError` listing what the savepoint holds.
    """
    options = {k.lower(): v for k, v in options.items()}
    trust = _flag(options, "trust_pickled")
    plan = options.get("plan") or None
    if plan is not None:
        from pathlib import Path

        plan = str(Path(_path({"path": plan})).resolve())
    storage = storage_options(options)
    sp = Savepoint.open(_path(options), trust_pickled=trust, plan=plan, storage_options=storage or None)
    uid, uid_hash = options.get("uid"), options.get("uid_hash")
    if (uid is None) == (uid_hash is None):
        have = ", ".join(f"{m.uid or '<no uid>'} ({m.uid_hash})" for m in sp.operators) or "no operators"
        raise InvalidArgumentError(f"give exactly one of the options uid and uid_hash; the savepoint holds: {have}.")
    if uid is not None:
        ident = OperatorIdentifier.for_uid(uid)
    else:
        assert uid_hash is not None  # exactly one of the two is given (checked above)
        ident = OperatorIdentifier.for_uid_hash(uid_hash)
    meta = sp.operator(ident)
    kind, state = resolve_table(meta, options.get("table", "keyed"))
    spec = TableSpec(str(sp.path.resolve()), meta.uid_hash, kind, state, _flag(options, "with_key_group"), trust, plan,
                     storage=tuple(sorted(storage.items())))
    return sp, meta, spec


class _TaskPartition(InputPartition):
    """One Spark partition: a `ScanTask`."""


class StatekitReader(DataSourceReader):
    """Plans partitions from the manifest and prunes them with pushed key filters."""

    def __init__(self, meta: OperatorMetadata, spec: TableSpec) -> None:
        self.meta = meta
        self.spec = spec
        self.keys: frozenset | None = None
        self.key_groups: frozenset[int] | None = None

    def pushFilters(self, filters: Sequence[Any]) -> Iterator[Any]:
        # Reset first: the reader object may be reused from an earlier query (see module docstring).
        self.keys = None
        self.key_groups = None
        if self.spec.kind not in ("keyed", "timers", "logical"):
            yield from filters
            return
        self.key_groups = self._row_key_groups(filters)
        if self.spec.kind == "logical":
            yield from filters  # only key groups are pruned: Spark applies every filter to the rows
            return
        pruning = key_pruning(filters, self.meta.key_type)
        self.keys = pruning.keys
        for i, f in enumerate(filters):
            if i not in pruning.handled:
                yield f

    def _row_key_groups(self, filters: Sequence[Any]) -> frozenset[int] | None:
        """A Flink SQL operator's struct key fixed by the filters: the key groups of its key rows (else None)."""
        meta = self.meta
        if meta.keyed_format != "flink" or meta.stored_key_groups or self.spec.kind == "timers":
            return None
        key_type = meta.key_type or ""
        if not key_type.startswith("struct<"):
            return None
        fields = [f.name for f in parse_ddl(key_type)]
        rows = struct_key_rows(filters, fields, ("key",) if self.spec.kind == "keyed" else ())
        if rows is None:
            return None
        from statekit.savepoint.flink import FlinkSavepoint  # here: only Flink operators get this far

        sp = self.spec.open()
        if not isinstance(sp, FlinkSavepoint):
            return None
        groups = {sp.key_group_of(meta.identifier, row) for row in rows}
        return None if None in groups else frozenset(g for g in groups if g is not None)

    def partitions(self) -> Sequence[InputPartition]:
        tasks = plan_tasks(self.meta, self.spec, self.keys, key_groups=self.key_groups)
        return [_TaskPartition(t) for t in tasks] or [_TaskPartition(ScanTask())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_task(self.spec, partition.value)


class StatekitDataSource(DataSource):
    """``format("statekit")``: one table of one operator of a savepoint (options in the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "statekit"

    def _resolve(self) -> tuple[OperatorMetadata, TableSpec]:
        _, meta, spec = parse_options(dict(self.options))
        return meta, spec

    def schema(self) -> str:
        meta, spec = self._resolve()
        return spark_ddl(table_schema(meta, spec))

    def reader(self, schema: Any) -> DataSourceReader:
        meta, spec = self._resolve()
        return StatekitReader(meta, spec)


class _MetadataReader(DataSourceReader):
    def __init__(self, path: str, storage: dict[str, str]) -> None:
        self.path = path
        self.storage = storage

    def __repr__(self) -> str:  # the storage options stay out of any log
        return f"_MetadataReader({self.path!r})"

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from metadata_table(Savepoint.open(self.path, storage_options=self.storage or None)).to_batches()


class StatekitMetadataDataSource(DataSource):
    """``format("statekit-metadata")``: one row per operator (see `statekit.spark.metadata`)."""

    @classmethod
    def name(cls) -> str:
        return "statekit-metadata"

    def schema(self) -> str:
        return spark_ddl(METADATA_SCHEMA)

    def reader(self, schema: Any) -> DataSourceReader:
        options = {k.lower(): v for k, v in self.options.items()}
        storage = storage_options(options)
        sp = Savepoint.open(_path(options), storage_options=storage or None)  # refuse a damaged manifest while planning
        return _MetadataReader(str(sp.path.resolve()), storage)


def register_data_sources(spark: Any) -> None:
    """Register ``statekit`` and ``statekit-metadata`` with `spark` (idempotent)."""
    spark.dataSource.register(StatekitDataSource)
    spark.dataSource.register(StatekitMetadataDataSource)
