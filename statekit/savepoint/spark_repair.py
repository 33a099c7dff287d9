"""Repairs of a Spark streaming checkpoint (set, delete-key, rm-state), written as one new batch the restarted query picks up.

The checkpoint's latest committed batch ``b`` holds state version ``v = b + 1``. `repair` writes a
copy at the target with one more batch, ``b + 1``, whose state (version ``v + 1``) is the edited
state: an HDFS delta per partition holding exactly the edited entries (puts and delete markers;
an empty delta where nothing changed), or, for RocksDB, a checkpoint zip per partition (edited
partitions rebuilt with fresh SSTs, the others the same zip as version ``v``), each with Spark's
``.crc`` side file. Its offset log entry repeats batch ``b``'s source offsets (no new input) with
the watermark batch ``b`` committed; its commit log entry is written last. The query restarted on
the target runs batch ``b + 2`` from the edited state: a set key continues from the set value, a
deleted key starts over.

RocksDB gets a zip, not a changelog: whether changelog checkpointing is on is a setting of the
restarted session (not recorded in the checkpoint), and a zip at the version is what Spark loads in
both modes. The source is never modified: the target is a copy (logs and metadata copied, state
files hard-linked — Spark never rewrites a state file, it writes new ones and deletes old ones),
written under a temporary sibling and renamed into place last, so it appears whole or not at all.
A checkpoint whose offset log holds an uncommitted batch (a running query) is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa

from statekit.errors import InvalidArgumentError, SavepointExistsError, UnknownStateError
from statekit.format.spark import providers, records
from statekit.format.spark.codec import compress
from statekit.format.spark.layout import OperatorInfo
from statekit.format.spark.tables import TIMERS, list_elements, sub_struct
from statekit.format.spark.types import Struct, arrow_type
from statekit.format.spark.unsaferow import row_decoder, row_encoder
from statekit.format.spark.writers import write_rocksdb_checkpoint, write_with_checksum
from statekit.savepoint.spark_checkpoint import SparkCheckpoint
from statekit.savepoint.spark_repartition import grouping_rows, refuse_running, schema_paths_into
from statekit.savepoint.transforms import TransformPlan

_JOIN = "symmetricHashJoin"
_STATE_FILE = (".delta", ".snapshot", ".zip", ".changelog", ".sst", ".crc")


@dataclass
class _Partition:
    """One store partition being edited: its state at version v, and the edits (key -> new value, None = delete)."""

    data: providers.StoreData
    edits: dict[bytes, bytes | None] = field(default_factory=dict)

    def current(self) -> dict[bytes, bytes]:
        out = dict(self.data.entries)
        for k, v in self.edits.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out


def is_checkpoint(path: Any) -> bool:
    """Whether `path` is a local Spark streaming checkpoint (the repairs of this module apply to it)."""
    from statekit.format.spark.layout import is_spark_checkpoint

    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else ""
    return bool(text) and "://" not in text and is_spark_checkpoint(Path(text))


def repair(source: str | os.PathLike[str], target: str | os.PathLike[str], edits: Sequence[Any], *,
           dry_run: bool = False, to: str | None = None) -> TransformPlan:
    """Apply `edits` (`statekit.savepoint.patch` SetValue, DeleteKeys, RemoveState) to the checkpoint `source`,
    writing `target`: a copy with one new batch holding the edited state.

    Operators are named by id or name; `SetValue.state` (and `RemoveState.state`) name the store or
    transformWithState variable (``default`` when None); keys are dicts of the grouping fields (or a
    tuple / one value); `SetValue.value` is a dict of the value's fields (fields not given keep the stored
    value; a new key needs them all) or, for a one-field value, the value itself. Timestamps are
    microseconds since the epoch. Edits that change nothing are reported as such; if nothing changes,
    nothing is written. `to` (the output format of other repairs) can only be None.

    Examples
    --------
    >>> from statekit.savepoint.patch import SetValue
    >>> repair("/chk/q", "/chk/q-fixed", [SetValue(0, {"k": "a"}, None, {"count": 0})]).written  # doctest: +SKIP
    True
    """
    src, out = Path(source), Path(target)
    if to not in (None, "spark"):
        raise InvalidArgumentError(f"a Spark streaming checkpoint is repaired into a Spark checkpoint, not {to!r}; "
                                   "drop --to.")
    if out.exists():
        raise SavepointExistsError(f"{out} already exists; repairs never overwrite. Choose a new target path.")
    sp = SparkCheckpoint.open(src)
    refuse_running(sp.layout, src, "repair")
    plan = TransformPlan(src, out)
    plan.output = f"Spark streaming checkpoint with new batch {sp.batch + 1} (state version {sp.version + 1})"
    noops: list[str] = []
    editor = _Editor(sp)
    for edit in edits:
        editor.plan(edit, plan.changes, noops)
    editor.check_joins()
    plan.noops = noops  # type: ignore[attr-defined]
    if not plan.changes or dry_run:
        return plan
    stage = out.with_name(f".{out.name}.statekit-{uuid.uuid4().hex[:8]}")
    try:
        _copy_tree(src, stage)
        _schema_paths(sp, stage, out)
        editor.write(stage)
        _append_batch(sp, stage)
        os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    plan.written = True
    return plan


class _Editor:
    """The planned edits of one checkpoint, per store partition."""

    def __init__(self, sp: SparkCheckpoint) -> None:
        self.sp = sp
        self.parts: dict[tuple[int, str, int], _Partition] = {}
        self.removed_join_stores: dict[int, set[str]] = {}

    def part(self, info: OperatorInfo, store: str, p: int) -> _Partition:
        d = "default" if self.sp.is_tws(info.id) else store
        if (info.id, d, p) not in self.parts:
            self.parts[(info.id, d, p)] = _Partition(self.sp.load(info.id, p, d))
        return self.parts[(info.id, d, p)]

    def plan(self, edit: Any, changes: list[str], noops: list[str]) -> None:
        from statekit.savepoint.edits import DeleteKeys, RemoveState, SetValue

        info = self.sp.spark_operator(edit.op)
        name = f"operator {info.id} ({info.name})"
        if isinstance(edit, SetValue):
            self._set(info, edit.key, edit.state or "default", edit.value, name, changes, noops)
        elif isinstance(edit, DeleteKeys):
            for key in edit.keys:
                self._delete(info, key, name, changes, noops)
        elif isinstance(edit, RemoveState):
            self._remove(info, edit.state or "default", name, changes, noops)
        else:
            raise InvalidArgumentError(
                f"{type(edit).__name__} does not apply to a Spark streaming checkpoint: its repairs are set, "
                "delete-key and rm-state (statekit repartition changes its partitions).")

    # -- keys ---------------------------------------------------------------------------------------------
    def _grouping(self, info: OperatorInfo) -> Struct:
        return self.sp.grouping_key(info.id)

    def _key(self, info: OperatorInfo, key: Any) -> dict[str, Any]:
        """`key` as a dict of the grouping fields, checked against their types."""
        fields = self._grouping(info)
        if isinstance(key, dict):
            extra = set(key) - set(fields.names)
            if extra or len(key) != len(fields.names):
                raise InvalidArgumentError(f"operator {info.id}'s key has the fields {fields.names}; got {key!r}.")
            values = dict(key)
        elif isinstance(key, (tuple, list)) and len(key) == len(fields.names):
            values = dict(zip(fields.names, key))
        elif len(fields.names) == 1 and not isinstance(key, (tuple, list)):
            values = {fields.names[0]: key}
        else:
            raise InvalidArgumentError(f"operator {info.id}'s key has the fields {fields.names}; got {key!r}.")
        _normalized([values], fields, f"key {key!r} of operator {info.id}")
        return values

    def _matching(self, info: OperatorInfo, store: str, part: _Partition, key: dict[str, Any]) -> list[bytes]:
        """The stored keys of `part` (current state) whose grouping key is `key`."""
        current = part.current()
        if not current:
            return []
        keys = list(current)
        data = providers.StoreData(current, column_families=part.data.column_families)
        rows = grouping_rows(self.sp, info, store, keys, data, f"{self.sp.path}: operator {info.id} store {store}")
        fields = self._grouping(info)
        want = _normalized([key], fields, "key")[0]
        got = _normalized(rows, fields, f"{self.sp.path}: operator {info.id} store {store}")
        return [k for k, g in zip(keys, got) if g == want]

    # -- set ------------------------------------------------------------------------------------------------
    def _set(self, info: OperatorInfo, key: Any, store: str, value: Any, name: str, changes: list[str],
             noops: list[str]) -> None:
        sp = self.sp
        if info.name == _JOIN:
            self._set_join(info, key, store, value, name, changes, noops)
            return
        if sp.is_tws(info.id) and sp._var(info, store)[0] == "MapState":
            self._set_map_entry(info, key, store, value, name, changes, noops)
            return
        k = self._key(info, key)
        p = sp.partition_of(info.id, k)
        if sp.is_tws(info.id):
            kind, cf = sp._var(info, store)
            if kind == "ListState":
                self._set_list(info, k, p, store, cf, value, name, changes, noops)
                return
            if kind != "ValueState":
                raise InvalidArgumentError(f"set on {name} variable {store!r}: it is a {kind}; statekit sets value, "
                                           "list and map variables (delete the key, or rm-state, for timers).")
            key_schema, value_schema = cf.key, cf.value
            prefix = _cf_prefix(self.part(info, store, p), cf.name, name) + b"\0"  # column family, encoding version
        else:
            if store not in sp.tables(info.id):
                raise UnknownStateError(f"{name} has no store {store!r}; it has {', '.join(sp.tables(info.id))}.")
            shape = sp.shape(info.id, store)
            key_schema, value_schema = shape.key, shape.value
            prefix = b"\0" if sp.provider == "rocksdb" else b""
        part = self.part(info, store, p)
        found = self._matching(info, store, part, k) if not sp.is_tws(info.id) else \
            [x for x in self._matching(info, store, part, k) if x.startswith(prefix)]
        old = None
        if found:
            raw = part.current()[found[0]]
            skip = 1 if sp.provider == "rocksdb" else 0
            old = row_decoder(value_schema)(raw, skip, len(raw) - skip)
        new = _value(value, value_schema, old, f"set on {name} {store} key {_text(k)}")
        if old is not None and _normalized([old], value_schema, "")[0] == _normalized([new], value_schema, "")[0]:
            noops.append(f"{name} {store} key {_text(k)} already holds {_text(new)}")
            return
        if found:
            key_bytes = found[0]
        else:
            if key_schema.names != self._grouping(info).names and not sp.is_tws(info.id):
                raise InvalidArgumentError(f"set on {name}: key {_text(k)} has no state and this store's key "
                                           f"({key_schema.names}) is more than the grouping key; statekit only "
                                           "changes existing keys here.")
            key_bytes = prefix + row_encoder(key_schema)(k)
        value_bytes = (b"\0" if sp.provider == "rocksdb" else b"") + row_encoder(value_schema)(new)
        part.edits[key_bytes] = value_bytes
        was = _text(old) if old is not None else "no state"
        changes.append(f"set {name} {store} key {_text(k)} (partition {p}): {was} -> {_text(new)}")

    def _set_list(self, info: OperatorInfo, k: dict[str, Any], p: int, store: str, cf: Any, value: Any, name: str,
                  changes: list[str], noops: list[str]) -> None:
        """ListState: the key's whole list replaced by `value` (a list of element objects; [] deletes it), and its
        ``$rowCounter_`` entry set to the new length."""
        where = f"set on {name} list variable {store!r} key {_text(k)}"
        if not isinstance(value, list):
            raise InvalidArgumentError(f"{where}: give the whole list, a JSON array of elements with the fields "
                                       f"{cf.value.names} (the key's list is replaced; [] empties it).")
        new_list = [_value(e, cf.value, None, f"{where} element {i}") for i, e in enumerate(value)]
        part = self.part(info, store, p)
        key_row = row_encoder(cf.key)(k)
        list_key = _cf_prefix(part, cf.name, name) + b"\0" + key_row
        raw = part.current().get(list_key)
        old = [row_decoder(cf.value)(e, 0, len(e)) for e in list_elements(raw, where)] if raw is not None else []
        if _normalized(old, cf.value, where) == _normalized(new_list, cf.value, where):
            noops.append(f"{name} {store} key {_text(k)} already holds {_text(old)}")
            return
        enc = row_encoder(cf.value)
        part.edits[list_key] = b",".join(len(b := b"\0" + enc(e)).to_bytes(4, "little", signed=True) + b
                                         for e in new_list) if new_list else None
        counter = _column_families(self.sp, info).get(f"$rowCounter_{store}")
        if counter is not None:  # Spark keeps the element count beside the list (ListStateMetricsImpl)
            count_key = _cf_prefix(part, counter.name, name) + b"\0" + key_row
            part.edits[count_key] = (b"\0" + row_encoder(counter.value)({counter.value.names[0]: len(new_list)})
                                     if new_list else None)
        changes.append(f"set {name} {store} key {_text(k)} (partition {p}): {len(old)} elements -> "
                       f"{len(new_list)} {_text(new_list)}")

    def _set_map_entry(self, info: OperatorInfo, key: Any, store: str, value: Any, name: str, changes: list[str],
                       noops: list[str]) -> None:
        """MapState: one map entry, named by the grouping key's fields and the map key's fields together (the
        table's key columns); `value` its value's fields (merged into a stored entry)."""
        sp = self.sp
        kind, cf = sp._var(info, store)
        grouping, user = sub_struct(cf.key, "key"), sub_struct(cf.key, "userKey")
        want = [*grouping.names, *user.names]
        if not isinstance(key, dict) or sorted(key) != sorted(want):
            raise InvalidArgumentError(f"set on {name} map variable {store!r}: the key is an object of the grouping "
                                       f"key's fields {grouping.names} and the map key's fields {user.names}; got "
                                       f"{key!r}.")
        k = self._key(info, {n: key[n] for n in grouping.names})
        u = {n: key[n] for n in user.names}
        _normalized([u], user, f"map key {u!r} of {name} {store!r}")
        p = sp.partition_of(info.id, k)
        part = self.part(info, store, p)
        prefix_schema, rest_schema = Struct(cf.key.fields[:cf.prefix_columns]), Struct(cf.key.fields[cf.prefix_columns:])
        head = b"\0" + row_encoder(prefix_schema)({"key": k})
        entry_key = (_cf_prefix(part, cf.name, name) + len(head).to_bytes(4, "little", signed=True) + head + b"\0"
                     + row_encoder(rest_schema)({"userKey": u}))
        raw = part.current().get(entry_key)
        old = row_decoder(cf.value)(raw, 1, len(raw) - 1) if raw is not None else None
        new = _value(value, cf.value, old, f"set on {name} {store} key {_text(key)}")
        if old is not None and _normalized([old], cf.value, "")[0] == _normalized([new], cf.value, "")[0]:
            noops.append(f"{name} {store} key {_text(key)} already holds {_text(new)}")
            return
        part.edits[entry_key] = b"\0" + row_encoder(cf.value)(new)
        changes.append(f"set {name} {store} key {_text(key)} (partition {p}): "
                       f"{_text(old) if old is not None else 'no entry'} -> {_text(new)}")

    def _set_join(self, info: OperatorInfo, key: Any, store: str, value: Any, name: str, changes: list[str],
                  noops: list[str]) -> None:
        """A stream-stream join: one side's rows of a join key replaced (``<side>-keyWithIndexToValue``, or just
        ``<side>``), its ``<side>-keyToNumValues`` count set to match; [] removes the key from that side."""
        sp = self.sp
        side = store.split("-", 1)[0]
        rows_store, count_store = f"{side}-keyWithIndexToValue", f"{side}-keyToNumValues"
        if side not in ("left", "right") or store not in (side, rows_store):
            raise InvalidArgumentError(
                f"set on {name} store {store!r}: a join key's state is its rows on one side; set them with --state "
                f"left-keyWithIndexToValue or right-keyWithIndexToValue (or left/right) and a JSON array of rows. The "
                "count in <side>-keyToNumValues follows the rows, it is not set on its own.")
        shape = sp.shape(info.id, rows_store)
        fields = [f for f in shape.value.names if f != "matched"]
        where = f"set on {name} {rows_store} key {key!r}"
        if not isinstance(value, list):
            raise InvalidArgumentError(f"{where}: give the side's rows of the key, a JSON array of objects with the "
                                       f"fields {fields} and optionally 'matched' (false when omitted); [] removes "
                                       "the key from this side.")
        rows = [_value({"matched": False, **r} if isinstance(r, dict) else r, shape.value, None, f"{where} row {i}")
                for i, r in enumerate(value)]
        k = self._key(info, key)
        p = sp.partition_of(info.id, k)
        pre = b"\0" if sp.provider == "rocksdb" else b""
        rows_part, count_part = self.part(info, rows_store, p), self.part(info, count_store, p)
        skip = len(pre)
        stored = {}
        current = rows_part.current()
        for kb in self._matching(info, rows_store, rows_part, k):
            index = row_decoder(shape.key)(kb, skip, len(kb) - skip)["index"]
            stored[index] = row_decoder(shape.value)(current[kb], skip, len(current[kb]) - skip)
        old = [stored[i] for i in sorted(stored)]
        if _normalized(old, shape.value, where) == _normalized(rows, shape.value, where):
            noops.append(f"{name} {side} key {_text(k)} already holds {_text(old)}")
            return
        for kb in self._matching(info, rows_store, rows_part, k):
            rows_part.edits[kb] = None
        key_enc, value_enc = row_encoder(shape.key), row_encoder(shape.value)
        for i, r in enumerate(rows):
            rows_part.edits[pre + key_enc({**k, "index": i})] = pre + value_enc(r)
        count_shape = sp.shape(info.id, count_store)
        found = self._matching(info, count_store, count_part, k)
        count_key = found[0] if found else pre + row_encoder(count_shape.key)(k)
        for kb in found[1:]:
            count_part.edits[kb] = None
        count_part.edits[count_key] = (pre + row_encoder(count_shape.value)({count_shape.value.names[0]: len(rows)})
                                       if rows else None)
        changes.append(f"set {name} {side} key {_text(k)} (partition {p}): {len(old)} rows -> {len(rows)} "
                       f"{_text(rows)}")

    # -- delete-key --------------------------------------------------------------------------------------------
    def _delete(self, info: OperatorInfo, key: Any, name: str, changes: list[str], noops: list[str]) -> None:
        k = self._key(info, key)
        p = self.sp.partition_of(info.id, k)
        stores = ["default"] if self.sp.is_tws(info.id) else [s.name for s in info.stores]
        n = 0
        for store in stores:
            part = self.part(info, store, p)
            for kb in self._matching(info, store, part, k):
                part.edits[kb] = None
                n += 1
        if n:
            changes.append(f"delete {name} key {_text(k)} (partition {p}): {n} entries")
        else:
            noops.append(f"{name} key {_text(k)} has no state")

    # -- rm-state ----------------------------------------------------------------------------------------------
    def _remove(self, info: OperatorInfo, store: str, name: str, changes: list[str], noops: list[str]) -> None:
        sp = self.sp
        if store not in sp.tables(info.id):
            raise UnknownStateError(f"{name} has no table {store!r}; it has {', '.join(sp.tables(info.id))}.")
        if sp.is_tws(info.id):
            families = _companions(sp, info, store)
        if info.name == _JOIN:
            self.removed_join_stores.setdefault(info.id, set()).add(store)
        n = 0
        for p in range(info.num_partitions):
            part = self.part(info, store, p)
            for kb in part.current():
                if sp.is_tws(info.id) and int.from_bytes(kb[:2], "little", signed=True) not in families[p]:
                    continue
                part.edits[kb] = None
                n += 1
        if n:
            changes.append(f"empty {name} {store}: {n} entries removed")
        else:
            noops.append(f"{name} {store} is already empty")

    def check_joins(self) -> None:
        for op, stores in self.removed_join_stores.items():
            every = {s.name for s in self.sp.spark_operator(op).stores}
            if stores != every:
                raise InvalidArgumentError(
                    f"rm-state on join operator {op}: its stores {sorted(every)} hold one state together (key counts "
                    f"and indexed rows); remove all of them in one repair, not only {sorted(stores)}.")

    # -- writing -------------------------------------------------------------------------------------------------
    def write(self, stage: Path) -> None:
        """State version v + 1 in every store partition of every operator under `stage`."""
        sp = self.sp
        v = sp.version
        codec = sp.conf.get("spark.sql.streaming.stateStore.compression.codec", "lz4")
        for info in sp.spark_operators:
            stores = ["default"] if sp.is_tws(info.id) else [s.name for s in info.stores]
            for store in stores:
                for p in range(info.num_partitions):
                    directory = stage / "state" / str(info.id) / str(p) / ("" if store == "default" else store)
                    part = self.parts.get((info.id, store, p))
                    for f in directory.glob(f"{v + 1}.*"):  # files of a batch that never committed: replaced, and
                        f.unlink()  # unlinked first, never written through (they may be links to the source's)
                    if sp.provider == "hdfs":
                        edits = sorted(part.edits.items()) if part else []
                        write_with_checksum(directory / f"{v + 1}.delta", compress(records.write_v1(iter(edits)), codec))
                    elif part is None and (directory / f"{v}.zip").is_file():
                        write_with_checksum(directory / f"{v + 1}.zip", (directory / f"{v}.zip").read_bytes())
                    else:
                        part = part or self.part(info, store, p)
                        current = part.current()
                        write_rocksdb_checkpoint(directory, v + 1, list(current), list(current.values()),
                                                 part.data.rocks_metadata)


def _companions(sp: SparkCheckpoint, info: OperatorInfo, store: str) -> dict[int, set[int]]:
    """Per partition, the column family ids holding variable `store` (with its internal families) of a TWS operator."""
    families = sp._tws(info)["families"]
    if store == TIMERS:
        names = {n for n in families if "Timers_" in n}
    else:
        names = {store} | {n for n in families if n.startswith(("$")) and n.endswith("_" + store)}
    out: dict[int, set[int]] = {}
    for p in range(info.num_partitions):
        ids = sp.load(info.id, p, "default").column_families
        out[p] = {ids[n] for n in names if n in ids}
    return out


def _column_families(sp: SparkCheckpoint, info: OperatorInfo) -> dict[str, Any]:
    """Every column family of a transformWithState operator's schema (internal ones too), by name."""
    return sp._tws(info)["families"]  # type: ignore[no-any-return]


def _cf_prefix(part: _Partition, family: str, name: str) -> bytes:
    ids = part.data.column_families
    if family not in ids:
        raise InvalidArgumentError(f"set on {name}: the partition's RocksDB has no column family {family!r} yet "
                                   "(the variable was never written there); statekit cannot create it.")
    return int(ids[family]).to_bytes(2, "little", signed=True)


def _normalized(rows: list[dict[str, Any]], schema: Struct, where: str) -> list[dict[str, Any]]:
    """Rows as Arrow gives them back for `schema`'s types (so that stored and given keys compare)."""
    arrow = pa.schema([pa.field(f.name, arrow_type(f.type)) for f in schema.fields])
    try:
        return pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=arrow).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgumentError(f"{where}: does not fit the types {dict(zip(schema.names, map(str, arrow.types)))} "
                                   f"({exc}); timestamps are microseconds since the epoch.") from None


def _value(value: Any, schema: Struct, old: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """The new value row: `value`'s fields over the stored row `old` (a new key must give every field)."""
    if not isinstance(value, dict):
        if len(schema.fields) != 1:
            raise InvalidArgumentError(f"{where}: the value has the fields {schema.names}; give them as a JSON object.")
        value = {schema.names[0]: value}
    unknown = set(value) - set(schema.names)
    if unknown:
        raise InvalidArgumentError(f"{where}: the value has no field {sorted(unknown)}; its fields are {schema.names}.")
    if old is None and set(value) != set(schema.names):
        raise InvalidArgumentError(f"{where}: the key has no state yet, so every field of the value is needed; "
                                   f"missing {[n for n in schema.names if n not in value]}.")
    new = {**(old or {}), **value}
    _normalized([new], schema, where)
    return {n: new.get(n) for n in schema.names}


def _text(row: Any) -> str:
    return json.dumps(row, ensure_ascii=False, default=str, separators=(", ", ": "))


def _copy_tree(src: Path, stage: Path) -> None:
    """`src` at `stage`: state files hard-linked (copied where linking fails), everything else copied."""
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        (stage / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            if f.startswith(".") and f.endswith(".crc"):
                continue  # Hadoop's local checksum files: optional, and they would not match the new logs
            a, b = Path(root) / f, stage / rel / f
            if rel.parts[:1] == ("state",) and f.endswith(_STATE_FILE) and "_metadata" not in rel.parts:
                try:
                    os.link(a, b)
                    continue
                except OSError:
                    pass
            shutil.copyfile(a, b)


def _schema_paths(sp: SparkCheckpoint, stage: Path, final: Path) -> None:
    """transformWithState operator metadata (v2) names its schema files by absolute path: point them into the copy."""
    for info in sp.spark_operators:
        for f in sorted((stage / "state" / str(info.id) / "_metadata").rglob("*")):
            if f.is_dir() or f.name.startswith(".") or f.name.endswith(".crc"):
                continue
            lines = f.read_text("utf-8").split("\n")
            doc = json.loads(lines[1]) if lines[0] == "v2" and len(lines) > 1 else None
            if not doc or not any("stateSchemaFilePaths" in st for st in doc.get("stateStoreInfo", [])):
                continue
            schema_paths_into(doc, final, info.id)
            f.unlink()  # a fresh file, never written through anything shared with the source
            f.write_text("\n".join([lines[0], json.dumps(doc, separators=(",", ":")), *lines[2:]]), "utf-8")


def _append_batch(sp: SparkCheckpoint, stage: Path) -> None:
    """offsets/<b + 1> (batch b's source offsets, the watermark b committed), then commits/<b + 1> last."""
    b = sp.batch
    meta, sources = sp.layout.offsets(b)
    watermark = sp.layout.commit(b).get("nextBatchWatermarkMs", meta.get("batchWatermarkMs", 0))
    meta = {**meta, "batchWatermarkMs": watermark}
    (stage / "offsets" / str(b + 1)).write_text("v1\n" + "\n".join([json.dumps(meta, separators=(",", ":"))] + sources),
                                                "utf-8")
    commit = {"nextBatchWatermarkMs": watermark}
    (stage / "commits" / str(b + 1)).write_text("v1\n" + json.dumps(commit, separators=(",", ":")), "utf-8")
