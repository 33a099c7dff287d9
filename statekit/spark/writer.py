"""`SavepointWriter`: new or modified savepoints from Spark (Flink's State Processor API, write side)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from statekit.errors import InvalidArgumentError, UnknownOperatorError
from statekit.format.flink.versions import FlinkVersion
from statekit.format.storage import StoragePath, locate
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import check_max_parallelism
from statekit.savepoint import OperatorMetadata, Savepoint, SavepointBuilder
from statekit.savepoint.evolve import StateTransform, check_result_type, evolve_states
from statekit.savepoint.flink_out import TypeHints
from statekit.savepoint.transforms import link_operator, refuse_target_inside
from statekit.spark.bootstrap_tasks import BootstrapTransformation
from statekit.spark.rewrite import evolve_with_spark, rehash_with_spark, rekey_with_spark
from statekit.spark.session import prepare_session
from statekit.types import parse_ddl

__all__ = ["SavepointWriter"]

OpLike = OperatorIdentifier | str


@dataclass
class _Entry:
    ident: OperatorIdentifier
    existing: OperatorMetadata | None = None
    transformation: BootstrapTransformation | None = None
    max_parallelism: int | None = None
    new_key: Any = None  # a Column, SQL expression or Python function of the old key (rekey)
    new_key_type: str | None = None
    merge: Any = None  # rekey: SQL aggregate(s) or a Python function for keys that collide
    transforms: list = field(default_factory=list)  # with_state_transform steps (StateTransform), in order


class SavepointWriter:
    """Builds a savepoint from bootstrap transformations and/or an existing savepoint's operators.

    Every method but `write` only records what to do, checking its arguments at once; `write`
    runs the Spark jobs and publishes the savepoint atomically (nothing appears at the path unless
    everything succeeded). Existing operators that are not changed are hard-linked, byte for byte;
    the source savepoint is never modified.

    Examples
    --------
    >>> from statekit.spark import OperatorTransformation, SavepointWriter          # doctest: +SKIP
    >>> t = OperatorTransformation.bootstrap_with(df).key_by("user").columns(
    ...     ValueStateDescriptor("balance", "double"))                                # doctest: +SKIP
    >>> SavepointWriter.new_savepoint(spark).with_operator("accounts", t).write(path)  # doctest: +SKIP
    """

    def __init__(self, spark: SparkSession, *, source: Savepoint | None, max_parallelism: int) -> None:
        self.spark = spark
        self.source = source
        self.max_parallelism = check_max_parallelism(max_parallelism)
        self._entries: dict[str, _Entry] = {}
        self._renames: dict[str, OperatorIdentifier] = {}  # old uid hash -> new identifier, applied by write()
        if source is not None:
            for meta in source.operators:
                self._entries[meta.uid_hash] = _Entry(meta.identifier, existing=meta)

    @classmethod
    def new_savepoint(cls, spark: SparkSession, *, max_parallelism: int = 128) -> "SavepointWriter":
        """An empty savepoint; `max_parallelism` is the default of the operators added to it."""
        prepare_session(spark)
        return cls(spark, source=None, max_parallelism=max_parallelism)

    @classmethod
    def from_existing_savepoint(cls, spark: SparkSession, path: str | os.PathLike[str], *,
                                storage_options: dict[str, str] | None = None) -> "SavepointWriter":
        """Start from the operators of the savepoint at `path` (new operators default to the largest
        max parallelism found there, or 128). `path` may be a URI (``s3://...``; `storage_options` as for
        `SavepointReader.read`): the executors read the source's state from the store themselves."""
        prepare_session(spark)
        source = Savepoint.open(path, storage_options=storage_options)
        max_parallelism = max((m.max_parallelism for m in source.operators if m.key_type), default=128)
        return cls(spark, source=source, max_parallelism=max_parallelism)

    # -- what to write -----------------------------------------------------------------------------
    def _find(self, op: OpLike) -> _Entry:
        ident = OperatorIdentifier.coerce(op)
        entry = self._entries.get(ident.uid_hash)
        if entry is None:  # an operator may also be named by the identifier a pending rename gives it
            entry = next((self._entries[h] for h, new in self._renames.items() if new == ident), None)
        if entry is None:
            known = ", ".join(str(e.ident) for e in self._entries.values()) or "none"
            raise UnknownOperatorError(f"operator {ident} is not in this savepoint writer (operators: {known}).")
        return entry

    def _check_free(self, ident: OperatorIdentifier) -> None:
        if ident.uid_hash in self._entries:
            raise InvalidArgumentError(
                f"operator {ident} is already in the savepoint; remove_operator() it first or choose another uid."
            )

    def with_operator(self, op: OpLike, transformation: BootstrapTransformation) -> "SavepointWriter":
        """Add an operator whose state `transformation` bootstraps (`OperatorTransformation`)."""
        if not isinstance(transformation, BootstrapTransformation):
            raise InvalidArgumentError(
                f"{transformation!r} is not a bootstrap transformation; build one with "
                "OperatorTransformation.bootstrap_with(df)...transform(fn) or ....columns(...)."
            )
        ident = OperatorIdentifier.coerce(op)
        self._check_free(ident)
        self._entries[ident.uid_hash] = _Entry(ident, transformation=transformation)
        return self

    def remove_operator(self, op: OpLike) -> "SavepointWriter":
        """Drop operator `op` and all its state."""
        h = self._find(op).ident.uid_hash
        del self._entries[h]
        self._renames.pop(h, None)
        return self

    def change_operator_identifier(self, old: OpLike, new: OpLike) -> "SavepointWriter":
        """Give operator `old` the identifier `new` when the savepoint is written; its state is carried over unchanged.

        As in Flink, the renames of one writer are collected and applied together by `write`, each
        to the operator that has the old identifier here (in the source savepoint, or added with
        `with_operator`). So two operators can swap identifiers (``A -> B`` and ``B -> A``), and
        renames do not chain: ``A -> B`` plus ``B -> C`` gives A's state the identifier B and B's
        state C (each operator is looked up once, not A -> B -> C). Other methods name an operator by
        its identifier here, or by its new one when no other operator has it.

        Raises
        ------
        UnknownOperatorError
            No operator has identifier `old` (at once; or at `write`, if it was removed since).
        InvalidArgumentError
            `old` is already renamed. `write` raises it too when two operators would end up with
            one identifier.
        """
        entry = self._entries.get(OperatorIdentifier.coerce(old).uid_hash)
        if entry is None:
            known = ", ".join(str(e.ident) for e in self._entries.values()) or "none"
            raise UnknownOperatorError(
                f"cannot rename operator {OperatorIdentifier.coerce(old)}: it is not in this savepoint writer "
                f"(operators: {known}). Renames name operators by their identifier before any rename."
            )
        if entry.ident.uid_hash in self._renames:
            raise InvalidArgumentError(
                f"operator {entry.ident} is already renamed to {self._renames[entry.ident.uid_hash]}; rename each operator once."
            )
        self._renames[entry.ident.uid_hash] = OperatorIdentifier.coerce(new)
        return self

    def _resolved(self) -> list[_Entry]:
        """The operators to write, with the collected renames applied together (see `change_operator_identifier`)."""
        out: dict[str, _Entry] = {}
        before: dict[str, OperatorIdentifier] = {}  # resolved uid hash -> the identifier it had here
        for h, entry in self._entries.items():
            new = self._renames.get(h)
            resolved = entry if new is None else replace(entry, ident=new)
            target = resolved.ident.uid_hash
            if target in out:
                raise InvalidArgumentError(
                    f"after the renames, operators {before[target]} and {entry.ident} would both have identifier "
                    f"{resolved.ident}; rename the other one too (renames apply together, so A -> B and B -> A swap "
                    "them) or remove it."
                )
            out[target], before[target] = resolved, entry.ident
        return list(out.values())

    def with_max_parallelism(self, op: OpLike, max_parallelism: int) -> "SavepointWriter":
        """Write operator `op` with `max_parallelism` key groups (existing keyed state is re-hashed)."""
        entry = self._find(op)
        check_max_parallelism(max_parallelism)
        if entry.existing is not None and entry.existing.key_type is None:
            raise InvalidArgumentError(
                f"operator {entry.ident} has no keyed state; max parallelism only matters for keyed state."
            )
        entry.max_parallelism = max_parallelism
        return self

    def rekey(
        self, op: OpLike, new_key: Column | str | Callable[[Any], Any], *, key_type: str | None = None,
        merge: str | dict[str, str] | Callable[[Any, list[dict]], dict] | None = None,
    ) -> "SavepointWriter":
        """Replace every key of operator `op` (keyed state and timers) by `new_key` of the old key.

        `new_key` is a Spark `Column` over ``key`` (``F.lower("key")``), a SQL expression
        (``"concat('user-', key)"``) or a Python function of one key (then `key_type` is required).
        It is evaluated once per distinct key with Spark; the new keys are hashed into their key
        groups (the operator's max parallelism, or the one `with_max_parallelism` gives). `key_type`
        (DDL) defaults to the expression's type. Two keys with state must not become one key
        (`DuplicateKeyError` names them), unless `merge` says how to merge their state; nor may a key
        become null.

        `merge` (for keys that collide; operators outside windows):

        * a SQL aggregate function name applied to every state, e.g. ``"sum"``, ``"max"``;
        * ``{state: SQL aggregate expression}`` for every state, e.g.
          ``{"count": "sum(count)", "seen": "flatten(collect_list(seen))"}`` (cast to the state's type);
        * a Python function ``merge(new_key, states) -> dict``, `states` holding one ``{state: value}``
          dict per colliding old key.

        Spark evaluates SQL merges per new key that several keys become. A merge giving null (or
        null for a state the colliding keys had) raises `InvalidMergeError`, one of the wrong type
        likewise; nothing is written.
        """
        entry = self._find(op)
        if entry.existing is None or entry.existing.key_type is None:
            raise InvalidArgumentError(
                f"operator {entry.ident} has no keyed state in the source savepoint, so it has no keys to replace."
            )
        if entry.transforms:
            raise InvalidArgumentError(f"operator {entry.ident} has state transforms in this writer; re-key it in a second writer.")
        if callable(new_key) and not isinstance(new_key, Column) and key_type is None:
            raise InvalidArgumentError("rekey with a Python function needs key_type= (a DDL type such as 'string').")
        if not isinstance(new_key, (Column, str)) and not callable(new_key):
            raise InvalidArgumentError(f"new_key must be a Column, a SQL expression or a function, not {new_key!r}.")
        if merge is not None:
            states = [st.name for st in entry.existing.keyed_states]
            if isinstance(merge, dict):
                missing = [n for n in states if n not in merge]
                unknown = [n for n in merge if n not in states]
                if missing or unknown:
                    raise InvalidArgumentError(
                        f"merge= needs one SQL aggregate per state of {entry.ident} ({states}); "
                        f"missing {missing}, unknown {unknown}."
                    )
            elif not isinstance(merge, str) and not callable(merge):
                raise InvalidArgumentError(
                    f"merge must be a SQL aggregate name, a dict of SQL aggregates per state or a function, not {merge!r}."
                )
        entry.new_key, entry.new_key_type, entry.merge = new_key, key_type, merge
        return self

    def with_state_transform(
        self,
        op: OpLike,
        state: str,
        value: Column | str | Callable[[dict], Any] | None,
        new_type: str | None = None,
        *,
        kind: Literal["value", "list", "map"] | None = None,
    ) -> "SavepointWriter":
        """Evolve keyed state `state` of operator `op`: change its values, type or kind, add it, or drop it.

        `value` gives the state's new value per row of the keyed table (per key, and per window of
        window operators): a Spark `Column` or SQL expression over the row's columns (``key``,
        [``namespace``], the states as they are at this step), or a Python function of the row
        as a dict; ``None`` drops the state. `new_type` (DDL) is the state's new type (default: its
        current type, or for a new state required); `kind` its kind (default: kept, or for a new
        state from the type: ``array<T>`` -> list, ``map<K,V>`` -> map, else value). The manifest
        follows; timers and operator state are carried over; rows left with no state are dropped.
        Several transforms of one writer apply in order.

        >>> (SavepointWriter.from_existing_savepoint(spark, "sp-1")               # doctest: +SKIP
        ...  .with_state_transform("counter", "count", "CAST(count AS BIGINT)", "bigint")     # int -> bigint
        ...  .with_state_transform("counter", "profile", "named_struct('name', profile.name, 'tier', 'basic')",
        ...                        "struct<name:string,tier:string>")            # a struct gains a field
        ...  .with_state_transform("counter", "seen", "array(last_seen)", "array<string>")  # value -> list
        ...  .with_state_transform("counter", "flag", F.lit(False), "boolean")  # a new state with a default
        ...  .with_state_transform("counter", "last_seen", None)                # drop a state
        ...  .write("sp-2"))

        Moving a state to another operator is a bootstrap plus a drop: bootstrap the new operator
        from ``SavepointReader.read_keyed_state(op).select("key", state)`` with ``columns(...)`` and
        drop the state here (the tests show splitting one operator into two and merging two).

        Raises
        ------
        UnknownStateError, InvalidArgumentError, StateTypeError
            At once for a state to drop that does not exist, a new state without a type, a kind
            that does not fit the type; when writing (before anything is written) for values
            that are not of the declared type.
        """
        entry = self._find(op)
        if entry.existing is None:
            raise InvalidArgumentError(
                f"operator {entry.ident} is bootstrapped by this writer; declare its states in the bootstrap instead."
            )
        if entry.new_key is not None:
            raise InvalidArgumentError(f"operator {entry.ident} is re-keyed by this writer; transform its state in a second writer.")
        if value is not None and not isinstance(value, (Column, str)) and not callable(value):
            raise InvalidArgumentError(f"value must be a Column, a SQL expression, a function or None, not {value!r}.")
        step = StateTransform(state, value, new_type, kind)
        evolve_states(entry.existing, [*entry.transforms, step])  # check at once
        entry.transforms.append(step)
        return self

    def _evolved_frame(self, entry: _Entry, *, grouped: bool) -> DataFrame:
        """The entry's keyed table after its state transforms, a Spark DataFrame (Python functions per Arrow batch).

        `grouped`: read with ``key_group`` so that partitions hold disjoint key-group ranges (whole
        files) and the result is written without a shuffle (`parts.write_grouped_parts`).
        """

        from statekit.savepoint.evolve import apply_python_transforms
        from statekit.spark.reader import SavepointReader
        from statekit.spark.scan import struct_type

        assert self.source is not None and entry.existing is not None
        meta = entry.existing
        reader = SavepointReader(self.spark, self.source)
        # grouped: Spark's Parquet scan when it can, read one file per partition while writing
        # (`jvm_parts.one_file_per_partition`), or statekit's data source (one task per group of files)
        df = reader.read_keyed_state(meta.identifier, with_key_group=True) if grouped \
            else reader.read_keyed_state(meta.identifier)  # fmt: skip
        done: list[StateTransform] = []
        for t in entry.transforms:
            infos = {s.name: s for s in evolve_states(meta, [*done, t])}
            done.append(t)
            if t.drops:
                df = df.drop(t.state)
                continue
            ddl = infos[t.state].type
            if isinstance(t.value, (Column, str)):
                df = df.withColumn(t.state, F.expr(t.value) if isinstance(t.value, str) else t.value)
                check_result_type(t.state, parse_ddl(df.schema[t.state].dataType.simpleString()), ddl)
                df = df.withColumn(t.state, F.col(t.state).cast(ddl))
                continue
            fields = [f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema if f.name != t.state]
            schema = struct_type(", ".join([*fields, f"`{t.state}` {ddl}"]))
            step, step_infos, order = t, tuple(infos.values()), schema.fieldNames()

            def run(batches: Any, step: Any = step, step_infos: Any = step_infos, order: Any = order) -> Any:
                for b in batches:
                    table = pa.Table.from_batches([b])
                    kg = table.column("key_group") if "key_group" in table.column_names else None
                    if kg is not None:  # the function sees key, [namespace] and the states, as documented
                        table = table.drop_columns(["key_group"])
                    out = apply_python_transforms(table, [step], step_infos)
                    if kg is not None:
                        out = out.append_column("key_group", kg)
                    yield from out.select(order).to_batches()

            df = df.mapInArrow(run, schema)
        return df

    def _new_key_expr(self, entry: _Entry) -> Column:
        new_key = entry.new_key
        if isinstance(new_key, str):
            expr = F.expr(new_key)
        elif isinstance(new_key, Column):
            expr = new_key
        else:
            assert entry.new_key_type is not None  # rekey() refuses a function without key_type=
            expr = F.udf(new_key, entry.new_key_type)(F.col("key"))
        return expr if entry.new_key_type is None else expr.cast(entry.new_key_type)

    # -- writing -----------------------------------------------------------------------------------
    def _write_from_flink(self, path: "Path | StoragePath") -> "Path | StoragePath":
        """A Flink source is first converted to statekit's format beside the target (its serializers carried
        in the manifest), so that every operator - changed or not - is written from statekit tables."""
        from statekit.savepoint.convert import convert_to_statekit

        _check_new(path)
        source = self.source
        assert source is not None
        refuse_target_inside(source.path, path)
        staged = _scratch(path, "from-flink")
        entries = dict(self._entries)
        try:
            converted = Savepoint.open(convert_to_statekit(source.path, staged, include_stateless=True))
            self.source = converted
            for key, e in entries.items():
                if e.existing is not None:
                    self._entries[key] = replace(e, existing=converted.operator(
                        OperatorIdentifier.for_uid_hash(e.existing.uid_hash)))
            return self.write(path, format="statekit")
        finally:
            self.source, self._entries = source, entries
            _remove_scratch(path, staged)

    def _direct_flink(self, path: "Path | StoragePath", types: TypeHints | None, version: FlinkVersion) -> Path | None:
        """Columnar bootstraps of fixed-width keys and values go straight to Flink's format (no statekit staging);
        None when the writer holds anything else."""
        from statekit.format.flink.versions import check_serializers
        from statekit.format.flink.writer import FlinkStaging, metadata_bytes, serializers_of
        from statekit.savepoint.flink_out import keyed_layout
        from statekit.spark.flink_columnar import regular, write_columnar
        from statekit.spark.flink_jvm import jvm_writable, write_jvm

        if self.source is not None or self._renames or isinstance(path, StoragePath):  # these write local files
            return None
        plans = []
        for e in self._entries.values():
            t = e.transformation
            if t is None or t.columnar is None:
                return None
            keyed_t, pairs = t.columnar
            if not isinstance(keyed_t.key, str):
                return None
            maxp = e.max_parallelism or self.max_parallelism
            par = min(keyed_t.source.parallelism or keyed_t.source.df.rdd.getNumPartitions() or 1, maxp)
            meta = OperatorMetadata(identifier=e.ident, name=e.ident.uid or e.ident.uid_hash, parallelism=par,
                                    max_parallelism=maxp, key_type=keyed_t.key_type, keyed_states=t.keyed_states)
            layout = keyed_layout(meta, None, types, max_parallelism=maxp, has_timers=False)
            columns = [(c, d.name) for c, d in pairs]
            # in the JVM when the session can (no row reaches Python), else fixed-width layouts in Python
            jvm = jvm_writable(keyed_t.source.df, keyed_t.key, columns, layout)
            if not jvm and not regular(layout):
                return None
            plans.append((keyed_t, columns, layout, e.ident, par, jvm))
        check_serializers(version, (p for _, _, layout, ident, _, _ in plans
                                    for p in serializers_of(ident.uid or ident.uid_hash, layout, ())))
        with FlinkStaging(path) as staging:
            outs = [write_jvm(kt.source.df, kt.key, columns, layout, ident.uid, ident.uid_hash, par, staging.dir)
                    if jvm else write_columnar(kt.source.df, kt.key, kt.key_type, columns, layout, ident.uid,
                                               ident.uid_hash, par, staging.dir)
                    for kt, columns, layout, ident, par, jvm in plans]
            return staging.commit(metadata_bytes(0, outs, flink_version=version))

    def _write_flink(self, path: "Path | StoragePath", types: TypeHints | None,
                     flink_version: str | FlinkVersion | None) -> "Path | StoragePath":
        from statekit.savepoint.flink_out import target_version
        from statekit.spark.flink_writer import write_flink_spark

        _check_new(path)
        if self.source is not None:
            refuse_target_inside(self.source.path, path)
        version = target_version(self.source, flink_version)  # asked for, else where the state came from
        direct = self._direct_flink(path, types, version)
        if direct is not None:
            return direct
        # The statekit savepoint is staged beside the target (Parquet on the executors), then converted; state
        # that came from a Flink savepoint carries its serializers in the staged manifest (field `flink`).
        staged = _scratch(path, "statekit")
        # the staged copy keeps no coordinator state: a Flink source's (its sources' enumerators) is carried over,
        # following renamed operators
        from statekit.savepoint.flink_out import coordinator_states

        coordinators = {(self._renames[h].uid_hash if h in self._renames else h): data
                        for h, data in (coordinator_states(self.source) if self.source is not None else {}).items()}
        try:
            self.write(staged, format="statekit")
            return write_flink_spark(self.spark, staged, path, types=types, flink_version=version,
                                     coordinators=coordinators)
        finally:
            _remove_scratch(path, staged)

    def write(self, path: "str | os.PathLike[str] | StoragePath", *, format: Literal["statekit", "flink"] | None = None,
              types: TypeHints | None = None, flink_version: str | FlinkVersion | None = None,
              storage_options: dict[str, str] | None = None) -> "Path | StoragePath":
        """Run the bootstrap jobs and publish the savepoint at `path`, atomically.

        ``format`` is by default the source's (`from_existing_savepoint` of a Flink savepoint writes a Flink
        savepoint, of a statekit one statekit's format; a new savepoint is statekit's), as every repair does.

        ``format="flink"`` writes a canonical Flink savepoint for `flink_version` ("1.20", "2.0", "2.3", ...;
        by default the version the source's state came from, else the newest) that a Flink job with the same uids,
        key types and state descriptors restores: state files are written by Spark tasks (one per
        operator subtask's key-group range), the driver writes only `_metadata`. Serializers read
        from a Flink source are reused unchanged; new state maps DDL types to Flink's serializers
        (struct -> Row unless `types` gives ``{uid: {state: FlinkTuple() | FlinkPojo(cls, fields)}}``).

        `path` may be a URI (``s3://bucket/sp``; `storage_options` as for `SavepointReader.read`, else each
        executor's environment): each Spark task opens the store itself and streams its files under the new
        prefix (an intermediate savepoint, when one is needed, under a hidden sibling prefix that is deleted
        afterwards); the driver writes the manifest last and, on failure, deletes what is under the prefix.
        Nothing is staged on the driver's disk.

        Raises `SavepointExistsError` (before any Spark job runs) if `path` exists. On any failure
        nothing is left at `path` nor beside it.
        """
        path = locate(path, storage_options=storage_options)
        if format is None:
            from statekit.savepoint.output import output_format

            format = output_format(self.source, None) if self.source is not None else "statekit"
        if format == "flink":
            return self._write_flink(path, types, flink_version)
        if flink_version is not None:
            raise InvalidArgumentError("flink_version applies to format='flink' only.")
        if format != "statekit":
            raise InvalidArgumentError(f"format must be 'statekit' or 'flink', not {format!r}.")
        from statekit.savepoint.flink import FlinkSavepoint

        if isinstance(self.source, FlinkSavepoint):
            return self._write_from_flink(path)
        if not self._entries:
            raise InvalidArgumentError("the savepoint would have no operators; add one with with_operator().")
        entries = self._resolved()  # refuses clashing renames before any Spark job runs
        src = self.source
        if src is not None:
            refuse_target_inside(src.path, path)  # a write into its own source would change the source
        with SavepointBuilder(path, checkpoint_id=src.checkpoint_id if src else 0,
                              job_name=src.job_name if src else None) as builder:
            for entry in entries:
                meta = entry.existing
                if meta is not None:
                    assert src is not None
                    name = entry.ident.uid or meta.name if entry.ident.uid_hash != meta.uid_hash else None
                    if entry.transforms:  # executors write the parts (as for rekey and max parallelism)
                        grouped = entry.max_parallelism in (None, meta.max_parallelism)  # same key groups
                        evolve_with_spark(self.spark, builder, src, meta, entry.ident,
                                          self._evolved_frame(entry, grouped=grouped),
                                          evolve_states(meta, entry.transforms), max_parallelism=entry.max_parallelism,
                                          name=name)  # fmt: skip
                    elif entry.new_key is not None:
                        rekey_with_spark(self.spark, builder, src, meta, entry.ident, self._new_key_expr(entry),
                                         key_type=entry.new_key_type, max_parallelism=entry.max_parallelism,
                                         name=name, merge=entry.merge)  # fmt: skip
                    elif entry.max_parallelism in (None, meta.max_parallelism):
                        link_operator(builder, src, meta, entry.ident, name=name)
                    else:
                        rehash_with_spark(self.spark, builder, src, meta, entry.ident, entry.max_parallelism, name=name)
                else:
                    assert entry.transformation is not None
                    entry.transformation.write_into(builder, entry.ident, entry.max_parallelism or self.max_parallelism)
        return path


def _check_new(path: "Path | StoragePath") -> None:
    """Refuse an existing target before any Spark job runs (a local path also needs its parent directory)."""
    if isinstance(path, StoragePath):
        from statekit.format.publish import refuse_existing

        refuse_existing(path)
    else:
        from statekit.format.flink.writer import check_target

        check_target(path)


def _scratch(path: "Path | StoragePath", what: str) -> "Path | StoragePath":
    """Where an intermediate savepoint is staged: hidden beside the target (for a URI target a sibling prefix the
    executors write to and read from; never the driver's disk)."""
    from statekit.format.publish import scratch_beside

    return scratch_beside(path, what)


def _remove_scratch(path: "Path | StoragePath", staged: "Path | StoragePath") -> None:
    if isinstance(staged, StoragePath):
        from statekit.format.publish import remove_written

        remove_written(staged)
        return
    shutil.rmtree(staged, ignore_errors=True)
