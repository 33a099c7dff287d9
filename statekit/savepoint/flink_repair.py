"""Repairs of Flink savepoints that hold Flink SQL operators: edits planned in the query's terms, written Flink to Flink.

Boundary: `statekit.savepoint.patch.repair` plans every edit; for a Flink savepoint with SQL operators
it asks this module to plan `set` on SQL operators (`plan_set`: keys as rows, a window's value by
its namespace, a query result such as ``cnt`` turned into the accumulator fields behind it with the
compiled plan) and to write (`write`). The write goes straight from the Flink savepoint to a new one
(no statekit-format scratch copy): each operator's decoded tables are edited in Arrow and handed to
`flink_out.operator_data`, which carries the serializer snapshots byte for byte; the keys of SQL
operators keep the key groups they were read with, and new keys get theirs from `BinaryRowData`'s
hash (`statekit.format.flink.sqlwrite`). TTL timestamps stay as they were unless the edit sets them.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import AmbiguousEditError, InvalidArgumentError, StateTypeError, UnknownStateError
from statekit.format.manifest import OperatorMetadata
from statekit.format.storage import StoragePath
from statekit.types import parse_ddl

if TYPE_CHECKING:
    from statekit.savepoint.flink import FlinkSavepoint

__all__ = ["carried", "has_key", "has_sql", "is_sql", "plan_set", "spliced", "sql_key", "write", "write_operators"]

TTL_FIELDS = ["last_access", "value"]


def is_sql(sp: Any, meta: OperatorMetadata) -> bool:
    """Whether `meta` is a Flink SQL operator of Flink savepoint `sp`."""
    from statekit.savepoint.kinds import is_flink_source

    return is_flink_source(sp) and sp.job_kind(meta.identifier) == "sql"


def has_sql(sp: Any) -> bool:
    """Whether Flink savepoint `sp` holds a SQL operator with keyed state."""
    return any(m.key_type is not None and is_sql(sp, m) for m in sp.operators)


def _key_fields(meta: OperatorMetadata) -> list[str]:
    t = parse_ddl(meta.key_type or "")
    return [f.name for f in t] if pa.types.is_struct(t) else []


def sql_key(meta: OperatorMetadata, key: Any) -> tuple:
    """A SQL key as the tuple of its columns: ``'alice'``, ``('alice',)`` and ``{'user_name': 'alice'}`` alike."""
    names = _key_fields(meta)
    if isinstance(key, dict):
        unknown = set(key) - set(names)
        if unknown:
            raise InvalidArgumentError(f"operator {meta.display_name}: key columns {sorted(unknown)} are not among its "
                                       f"key columns {names}.")
        return tuple(key.get(n) for n in names)
    k = tuple(key) if isinstance(key, (tuple, list)) else (key,)
    if len(k) != len(names):
        raise InvalidArgumentError(f"operator {meta.display_name} is keyed by {len(names)} column(s) ({', '.join(names)}); "
                                   f"the key {key!r} gives {len(k)}.")
    return k


def _ttl_wrapped(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and [f.name for f in t] == TTL_FIELDS


def _raw_fields(sp: "FlinkSavepoint", meta: OperatorMetadata, state: str) -> list[str]:
    """Names of the RAW fields (opaque accumulators, MapView placeholders) of a row-valued state."""
    from statekit.savepoint.flink_out import carried_serializers

    carried = carried_serializers(sp, meta)
    got = carried.states.get(state) if carried is not None else None
    if got is None:
        return []
    t = got.value_type
    if t.form == "ttl":
        t = t.children[1]
    if t.form != "row":
        return []
    vt = parse_ddl(meta.keyed_state(state).type)
    if _ttl_wrapped(vt):
        vt = vt.field("value").type
    names = [f.name for f in vt]
    return [names[i] for i, lt in enumerate(t.logical) if lt.root == "RAW"]


def _fit(value: Any, t: pa.DataType, what: str) -> Any:
    try:
        return pa.array([value], t)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError) as exc:
        raise StateTypeError(f"{what}: {value!r} does not fit its type {t} ({exc}).") from None


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- planning `set` ----------------------------------------------------------------------------------
def plan_set(sp: "FlinkSavepoint", e: Any, edit: Any, changes: list[str], noops: list[str]) -> None:
    """Plan a `SetValue` on SQL operator ``e.meta``: a physical state (its fields merged into the stored row, RAW
    fields unchanged, a TTL value's last access kept), or with the compiled plan a column of the query's result
    (``cnt``) written into the accumulator fields behind it. Window operators need the window (``namespace``)."""
    m = e.meta
    name = m.display_name
    key = sql_key(m, edit.key)
    ns = getattr(edit, "namespace", None)
    if m.namespace_type is not None and ns is None:
        raise InvalidArgumentError(
            f"operator {name} keeps window state: a value belongs to a (key, window) pair. Give the window as "
            f"namespace= ({m.namespace_type}; CLI --namespace), one that is pending in the savepoint.")
    if m.namespace_type is None and ns is not None:
        raise InvalidArgumentError(f"operator {name} keeps no windows; set its state without a namespace.")
    current = sp.get(m.identifier, key, namespace=ns) if ns is not None else sp.get(m.identifier, key)
    if ns is not None and current is None:
        raise InvalidArgumentError(f"operator {name}: key {key!r} has no window {ns!r} in the savepoint; statekit "
                                   "sets the values of pending windows only (a new window would have no timer).")
    planned = {(k, s, repr(n)): v for k, s, v, n in e.set_values}  # earlier edits of this key build on each other
    if current is not None:
        current = {**current, **{s: v for (k, s, n), v in planned.items() if k == key and n == repr(ns)}}
    states = [s.name for s in m.keyed_states]
    if edit.state in states:
        state, value = edit.state, _physical(sp, m, key, edit.state, edit.value, current)
        before = None if current is None else current.get(state)
        what = f"{state}: {'no state' if current is None else repr(_shown(before))} -> {_shown(value)!r}"
    else:
        state, value, what = _logical(sp, m, key, edit.state, edit.value, current, states)
        before = current.get(state) if current is not None else None
    if before == value:
        noops.append(f"operator {name}: key {key!r} already has {edit.state} = {edit.value!r}")
        return
    e.set_values = tuple(x for x in e.set_values if (x[0], x[1], repr(x[3])) != (key, state, repr(ns))) \
        + ((key, state, value, ns),)
    where = f" window {ns!r}" if ns is not None else ""
    changes.append(f"operator {name}: key {key!r}{where} {what}")


def _shown(v: Any) -> Any:
    return v["value"] if isinstance(v, dict) and list(v) == TTL_FIELDS else v


def _physical(sp: "FlinkSavepoint", m: OperatorMetadata, key: tuple, state: str, value: Any,
              current: dict | None) -> Any:
    """The new stored value of a physical state: rows merged field by field into the current one."""
    t = parse_ddl(m.keyed_state(state).type)
    what = f"state {state!r} of operator {m.display_name}"
    old = current.get(state) if current is not None else None
    ttl = _ttl_wrapped(t)
    inner_t = t.field("value").type if ttl else t
    old_inner = old["value"] if ttl and old is not None else old
    if ttl and isinstance(value, dict) and set(value) == set(TTL_FIELDS):  # the user sets the last access too
        last, value = value["last_access"], value["value"]
    else:
        last = old["last_access"] if ttl and old is not None else _now_ms()
    if value is not None and pa.types.is_struct(inner_t):
        if not isinstance(value, dict):
            raise StateTypeError(f"{what} holds rows ({inner_t}); give the new value as an object of its fields.")
        unknown = set(value) - {f.name for f in inner_t}
        if unknown:
            raise StateTypeError(f"{what}: fields {sorted(unknown)} are not among its fields "
                                 f"{[f.name for f in inner_t]}.")
        if isinstance(old_inner, dict):
            value = {**old_inner, **value}
        for raw in _raw_fields(sp, m, state):  # a new key's RAW fields are written as given (copy an existing key's)
            before = old_inner.get(raw) if isinstance(old_inner, dict) else None
            if raw in value and value[raw] != before and old_inner is not None:
                raise StateTypeError(
                    f"{what}: field {raw!r} is a RAW value (an opaque accumulator or a MapView placeholder) that statekit "
                    "does not edit; leave it out of the new value.")
    value = _fit(value, inner_t, what)
    return {"last_access": last, "value": value} if ttl and value is not None else value


def _logical(sp: "FlinkSavepoint", m: OperatorMetadata, key: tuple, column: str, value: Any, current: dict | None,
             states: list[str]) -> tuple[str, Any, str]:
    """(accumulator state, its new value, what changed) for setting result column `column` of an aggregate."""
    name = m.display_name
    names = sp.plan_names(m.identifier)
    if names is None or names.acc is None or names.acc_state is None:
        hint = ("open it with the job's compiled plan (plan=, CLI --plan) to set a column of the query's result"
                if names is None else "only aggregates' result columns can be set by name")
        raise UnknownStateError(f"operator {name} has no state {column!r}; its states are: {', '.join(states)} ({hint}).")
    ngroup = len(names.key)
    sink = {n: (i, cast) for n, i, cast in names.plan.sink_names(names.node)}
    computed = [n for n, _ in names.plan.sink_columns(names.node)]
    if column not in sink:
        if column in computed:
            raise AmbiguousEditError(f"operator {name}: column {column!r} is computed by the query from several "
                                     "accumulator fields; set those fields physically (--state "
                                     f"{names.acc_state} with the fields).")
        cols = [n for n, i, _ in names.plan.sink_names(names.node) if i >= ngroup]
        raise UnknownStateError(f"operator {name} has no state or result column {column!r}; its result columns are "
                                f"{', '.join(cols)} and its states {', '.join(states)}.")
    idx = sink[column][0]
    if idx < ngroup:
        raise InvalidArgumentError(f"operator {name}: {column!r} is a key column; keys are changed by rekey, not set.")
    agg = next(a for a in names.acc.aggs if not a.hidden and a.index == idx - ngroup)
    state = names.acc_state
    t = parse_ddl(m.keyed_state(state).type)
    ttl = _ttl_wrapped(t)
    acc_t = t.field("value").type if ttl else t
    old = current.get(state) if current is not None else None
    acc = (old["value"] if ttl else old) if old is not None else None
    if acc is None:
        raise InvalidArgumentError(f"operator {name}: key {key!r} has no accumulator; statekit sets results of "
                                   "existing groups only (a new group is a bootstrap).")
    fields = [f.name for f in acc_t]
    mine = fields[agg.first : agg.first + len(agg.buffers)] if agg.buffers is not None else []
    what = f"{column} ({agg.func}{' DISTINCT' if agg.distinct else ''} in {state} field(s) {', '.join(mine) or '?'})"
    if agg.buffers is None:
        raise AmbiguousEditError(f"operator {name}: {column!r} is {agg.func}, whose accumulator statekit does not "
                                 "know (a RAW or user-defined accumulator); it is not edited.")
    if agg.distinct:
        i = names.acc.distinct.index(agg.args)
        raise AmbiguousEditError(
            f"operator {name}: {column!r} is {agg.func}(DISTINCT ...), kept as the values seen in map state "
            f"'distinctAcc_{i}' (and field {fields[len(names.acc.fields or ()) - len(names.acc.distinct) + i]!r}); a count cannot "
            "be set without naming the values. Edit distinctAcc_{i} instead.".replace("{i}", str(i)))
    ftype = acc_t.field(mine[0]).type
    if pa.types.is_struct(ftype):  # Min/MaxWithRetractAccumulator: values in agg<i>$map; ListAgg's: agg<i>$list
        view = f"list state 'agg{agg.index}$list'" if agg.func == "LISTAGG" else f"map state 'agg{agg.index}$map'"
        raise AmbiguousEditError(f"operator {name}: {column!r} is {agg.func} over retractions; its value comes from "
                                 f"field {mine[0]!r} and {view}, which statekit does not edit.")
    v = _fit(value, ftype, f"{column!r} of operator {name}")
    new = dict(acc)
    what += f": {acc[mine[0]]!r} -> {v!r}"
    if agg.func == "AVG":
        count = acc[mine[1]]
        if not count:
            raise AmbiguousEditError(f"operator {name}: {column!r} is AVG over no rows (fields {mine[0]!r}, "
                                     f"{mine[1]!r} = 0); set both fields physically.")
        new[mine[0]] = _fit(v * count, ftype, f"{column!r} of operator {name}") if v is not None else None
        what += f" ({mine[0]} = {column} x {mine[1]} = {v} x {count})"
    elif agg.func == "SUM" and agg.retract:
        if not acc[mine[1]]:
            raise AmbiguousEditError(f"operator {name}: {column!r} is a SUM over retractions that counts no rows "
                                     f"(field {mine[1]!r} = 0); set {mine[0]!r} and {mine[1]!r} physically.")
        new[mine[0]] = v
    else:
        new[mine[0]] = v
    out = _fit(new, acc_t, f"state {state!r} of operator {name}")
    return state, ({"last_access": old["last_access"], "value": out} if ttl and old is not None else out), what


def has_key(sp: "FlinkSavepoint", m: OperatorMetadata, key: Any) -> bool:
    """Whether SQL key `key` has state (in any window) or a timer in operator `m`."""
    k = sql_key(m, key)
    if m.namespace_type is None and sp.get(m.identifier, k) is not None:
        return True
    for t in ((sp.keyed_table(m.identifier),) if m.namespace_type is not None else ()) + (sp.timers(m.identifier),):
        if t.num_rows and _key_mask(_combined(t, "key"), k).any():
            return True
    return False


# -- writing -------------------------------------------------------------------------------------------
def _key_mask(keys: pa.Array, key: tuple) -> np.ndarray:
    """Rows whose struct key equals `key` (NULL matches NULL, as SQL keys may hold NULL columns)."""
    mask = np.ones(len(keys), bool)
    for i, v in enumerate(key):
        f = keys.field(i)
        m = pc.is_null(f) if v is None else pc.fill_null(pc.equal(f, pa.scalar(v, f.type)), False)
        mask &= m.to_numpy(zero_copy_only=False)
    return mask


def _ns_mask(col: pa.Array, ns: Any) -> np.ndarray:
    if isinstance(ns, dict):
        mask = np.ones(len(col), bool)
        for k, v in ns.items():
            mask &= pc.fill_null(pc.equal(pc.struct_field(col, k), v), False).to_numpy(zero_copy_only=False)
        return mask
    return pc.fill_null(pc.equal(col, pa.scalar(ns, col.type)), False).to_numpy(zero_copy_only=False)


def _combined(t: pa.Table, name: str) -> pa.Array:
    c = t.column(name)
    return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c


def table_edit(meta: OperatorMetadata, e: Any, key_groups: Callable[[pa.Array], np.ndarray]) -> Callable:
    """``(keyed, timers) -> (keyed, timers)`` applying `e`'s dropped states, deleted keys and set values."""
    names = _key_fields(meta)

    def edit(keyed: pa.Table, timers: pa.Table) -> tuple[pa.Table, pa.Table]:
        drop = [s for s in e.drop_states if s in keyed.column_names]
        if drop:
            keyed = keyed.drop_columns(drop)
        for k in e.delete_keys:
            k = sql_key(meta, k)
            if keyed.num_rows:
                keyed = keyed.filter(pa.array(~_key_mask(_combined(keyed, "key"), k)))
            if timers.num_rows:
                timers = timers.filter(pa.array(~_key_mask(_combined(timers, "key"), k)))
        for k, state, value, ns in e.set_values:
            mask = _key_mask(_combined(keyed, "key"), k) if keyed.num_rows else np.zeros(0, bool)
            if ns is not None:
                mask &= _ns_mask(_combined(keyed, "namespace"), ns)
            hit = np.flatnonzero(mask)
            if len(hit):
                row = keyed.take(pa.array(hit[:1])).to_pylist()[0]
            else:
                row = {c: None for c in keyed.column_names}
                row["key"] = dict(zip(names, k))
                row["key_group"] = int(key_groups(pa.array([row["key"]], keyed.schema.field("key").type))[0])
                if ns is not None:
                    row["namespace"] = ns
            row[state] = value
            keyed = pa.concat_tables([keyed.filter(pa.array(~mask)) if len(hit) else keyed,
                                      pa.Table.from_pylist([row], schema=keyed.schema)])
        return keyed, timers

    return edit


def carried(sp: "FlinkSavepoint", meta: OperatorMetadata, *, uid: str | None = None, uid_hash: str | None = None,
            name: str | None = None, flink_version: Any = None) -> Any:
    """`OperatorData` that carries `meta`'s state files as they are (hard-linked into the new savepoint, inline
    streams written out), under a new identity if given; None where that is not possible (native or
    incremental state, raw streams, another `_metadata` version), and then it is re-encoded. A coordinator's
    state is set by the caller (`write`, `write_operators`)."""
    from statekit.format.flink.metadata import KeyGroupsHandle, OperatorStreamHandle
    from statekit.format.flink.writer import OperatorData, SubtaskOut

    if flink_version is not None and str(flink_version) != str(sp.flink_version):
        return None
    fop = sp.flink.metadata.operator(meta.uid_hash)
    if fop is None:
        return None
    for st in fop.subtasks:
        if st.raw_operator is not None or st.raw_keyed is not None:
            return None
        if st.managed_keyed is not None and not (isinstance(st.managed_keyed, KeyGroupsHandle)
                                                 and st.managed_keyed.type == 7):  # a savepoint's canonical handle
            return None
        if st.managed_operator is not None and not isinstance(st.managed_operator, OperatorStreamHandle):
            return None

    def place(staging: Any, handle: Any) -> tuple[str, int]:
        new, _ = staging.new_file()
        if handle.kind == "bytes":
            staging.write_new(new, handle.data or b"")
        else:  # a hard link, or on a store a server-side copy
            staging.carry_file(sp.flink.files.path(handle), new)
        return new, handle.size

    def carry(staging: Any) -> list:
        out = []
        for st in fop.subtasks:
            sub = SubtaskOut(st.index)
            if st.managed_keyed is not None:
                h = st.managed_keyed
                assert isinstance(h, KeyGroupsHandle)
                sub.keyed = (h.start, list(h.offsets), *place(staging, h.delegate))
            if st.managed_operator is not None:
                h2 = st.managed_operator
                states = [(e.name, str(e.mode), list(e.offsets)) for e in h2.states]
                sub.operator = (states, *place(staging, h2.delegate))
            out.append(sub)
        return out

    return OperatorData(uid if uid is not None else meta.uid, uid_hash or meta.uid_hash,
                        name or meta.name or meta.uid or meta.uid_hash, fop.parallelism, fop.max_parallelism,
                        carry=carry)


def _stream_range(src: Any, write: Callable[[bytes], Any], start: int, length: int) -> None:
    """Bytes [start, start + length) of open file `src` passed to `write` in pieces of at most 32 MB (an object on a
    store on either side: no kernel copy between them)."""
    src.seek(start)
    for at in range(0, length, 32 << 20):
        chunk = src.read(min(length - at, 32 << 20))
        if not chunk:
            raise OSError(f"copying {length} bytes stopped after {at}: the source is shorter")
        write(chunk)


class _DirectSink:
    """A spliced subtask file on local disk, written around the page cache (`DirectFile`): hundreds of MB copied
    into the page cache and fsynced cost seconds of system and disk time on a busy machine; direct writes a fraction."""

    def __init__(self, path: Path) -> None:
        from types import SimpleNamespace

        from statekit.format.direct_file import DirectFile

        self.file = DirectFile(path)
        self.out = cast(BinaryIO, SimpleNamespace(write=lambda piece: self.file.write([piece])))

    @property
    def size(self) -> int:
        return self.file.size

    def copy(self, src: Any, start: int, length: int) -> None:
        if isinstance(src, io.BufferedIOBase | io.RawIOBase):  # a local file: copied by the kernel
            self.file.copy_range(src.fileno(), start, length)
        else:  # the source on a store
            _stream_range(src, lambda chunk: self.file.write([chunk]), start, length)

    def close(self) -> int:
        return self.file.close()

    def __enter__(self) -> "_DirectSink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.file.__exit__(*exc)


class _StreamSink:
    """A spliced subtask file as an object on a store, streamed under the target (no local file)."""

    def __init__(self, path: StoragePath) -> None:
        self.file = path.create()
        self.out = cast(BinaryIO, self.file)

    @property
    def size(self) -> int:
        return self.file.tell()

    def copy(self, src: Any, start: int, length: int) -> None:
        _stream_range(src, self.file.write, start, length)

    def close(self) -> int:
        size = self.file.tell()
        self.file.close()
        return size

    def __enter__(self) -> "_StreamSink":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.file.closed:
            self.file.close()


def spliced(sp: "FlinkSavepoint", meta: OperatorMetadata, e: Any, *, uid: str | None = None,
            uid_hash: str | None = None, flink_version: Any = None) -> Any:
    """`OperatorData` for set/delete-key edits of SQL operator `meta` that rewrites only the key groups of the
    edited keys: those are decoded, edited and encoded again, and spliced between the unchanged bytes of their
    subtask's file (copied by the kernel, offsets shifted); every other file is hard-linked. None when that does
    not apply (other edits, compressed or non-canonical state, a key group that holds nothing yet)."""
    from types import SimpleNamespace

    from statekit.format.flink.metadata import KeyGroupsHandle
    from statekit.format.flink.sqlwrite import key_groups
    from statekit.format.flink.writer import SubtaskOut, keyed_runs, write_key_groups
    from statekit.keygroups import KeyGroupRange
    from statekit.savepoint.flink_out import carried_serializers, keyed_layout

    if e.drop_states or e.max_parallelism or e.mapping is not None or not (e.set_values or e.delete_keys):
        return None
    base = carried(sp, meta, uid=uid, uid_hash=uid_hash, flink_version=flink_version)
    stored = carried_serializers(sp, meta)
    if base is None or stored is None or stored.key is None or stored.key.form != "row":
        return None
    fop = sp.flink.metadata.operator(meta.uid_hash)
    assert fop is not None
    names = _key_fields(meta)
    ktype = parse_ddl(meta.key_type or "")
    maxp = meta.max_parallelism
    keys = [sql_key(meta, k) for k in e.delete_keys] + [k for k, _, _, _ in e.set_values]
    kgs = key_groups(pa.array([dict(zip(names, k)) for k in keys], ktype), stored.key, maxp).tolist()
    kg_of = dict(zip(keys, kgs))
    handles = {st.index: st.managed_keyed for st in fop.subtasks}
    touched: dict[int, list[int]] = {}
    for kg in sorted(set(kgs)):
        idx = next((i for i, h in handles.items() if isinstance(h, KeyGroupsHandle) and h.start <= kg <= h.end), None)
        if idx is None:
            return None
        h = handles[idx]
        assert isinstance(h, KeyGroupsHandle)
        if h.offsets[kg - h.start] == 0 or sp.flink.proxy(h).compressed:
            return None  # a key group new to the file, or Snappy-compressed groups: the operator is re-encoded
        touched.setdefault(idx, []).append(kg)
    layout = keyed_layout(meta, stored, None, max_parallelism=maxp, has_timers=bool(stored.timers))
    timer_names = [t.name for t in stored.timers]
    carry_base = base.carry

    def carry(staging: Any) -> list:
        subs = carry_base(staging)
        for idx, kgroups in touched.items():
            h = handles[idx]
            assert isinstance(h, KeyGroupsHandle)
            order = [st.name for st in sp.flink.proxy(h).states]  # state ids as this file numbers them
            ids = [order.index(s.name) for s in layout.states] + [order.index(n) for n in timer_names]
            src_path = sp.flink.files.path(h.delegate)
            offsets = list(h.offsets)
            nonzero = sorted(o for o in offsets if o)
            name, path = staging.new_file()
            sink = _StreamSink(path) if isinstance(path, StoragePath) else _DirectSink(path)
            with src_path.open("rb") as src, sink as dst:
                size = sp.flink.files.size(h.delegate)
                pos_src, shift, new_offsets = 0, 0, list(offsets)
                for kg in kgroups:
                    at = offsets[kg - h.start]
                    end = next((o for o in nonzero if o > at), size)
                    dst.copy(src, pos_src, at - pos_src)
                    part = sp.keyed_table(meta.identifier, key_groups=KeyGroupRange(kg, kg), with_key_group=True)
                    tpart = sp.timers(meta.identifier, key_groups=KeyGroupRange(kg, kg))
                    mine = SimpleNamespace(drop_states=(), delete_keys=tuple(k for k in e.delete_keys
                                                                             if kg_of[sql_key(meta, k)] == kg),
                                           set_values=tuple(v for v in e.set_values if kg_of[v[0]] == kg))
                    part, tpart = table_edit(meta, mine, lambda a: np.full(len(a), kg, np.int32))(part, tpart)
                    runs = sorted((replace(r, sid=ids[r.sid]) for r in keyed_runs(layout, part, tpart)),
                                  key=lambda r: r.sid)
                    written = write_key_groups(dst.out, runs, kg, kg, at + shift)[0]
                    new_len = dst.size - (at + shift)
                    for j, o in enumerate(offsets):  # key groups after this one move by the size difference
                        if o > at:
                            new_offsets[j] = o + shift + new_len - (end - at)
                    new_offsets[kg - h.start] = written
                    shift += new_len - (end - at)
                    pos_src = end
                dst.copy(src, pos_src, size - pos_src)
                new_size = dst.close()
            subs[idx] = replace(subs[idx], keyed=(h.start, new_offsets, name, new_size)) \
                if isinstance(subs[idx], SubtaskOut) else subs[idx]
        return subs

    base.carry = carry
    return base


def _key_grouper(sp: Any, m: OperatorMetadata, key_t: Any) -> Callable[[pa.Array], np.ndarray]:
    """The key groups of new keys of `m`: BinaryRowData's hash for SQL keys, Flink's DataStream hash otherwise."""
    maxp = m.max_parallelism
    if is_sql(sp, m) and key_t is not None and key_t.form == "row":
        from statekit.format.flink.sqlwrite import key_groups

        return lambda keys: key_groups(keys, key_t, maxp)
    from statekit.keygroups import assign_key_groups

    return lambda keys: assign_key_groups(keys, maxp, m.key_type)


def write(sp: "FlinkSavepoint", target: str | os.PathLike[str] | Any, per_op: dict[str, Any], *,
          flink_version: str | None = None) -> Path:
    """Write `sp` with the planned edits (`patch._OperatorEdits` per uid hash) as a Flink savepoint at `target`."""
    from statekit.format.flink.writer import write_flink_savepoint
    from statekit.savepoint.flink_out import carried_serializers, coordinator_states, operator_data, target_version

    ops: list = []
    coordinators = coordinator_states(sp)

    def add(m: OperatorMetadata, op: Any) -> None:
        op.coordinator = coordinators.get(m.uid_hash)  # a source's split enumerator: without it the job re-reads
        ops.append(op)

    for m in sp.operators:
        e = per_op.get(m.uid_hash)
        if e is not None and e.removed:
            continue
        if e is None or not (e.drop_states or e.delete_keys or e.set_values or e.max_parallelism):
            ident = e.new_ident if e is not None else None
            keep = carried(sp, m, uid=ident.uid if ident else None, uid_hash=ident.uid_hash if ident else None,
                           name=(ident.uid or ident.uid_hash) if ident and not is_sql(sp, m) else None,
                           flink_version=flink_version)
            if keep is not None:
                add(m, keep)
                continue
        if e is None:
            add(m, operator_data(sp, m))
            continue
        if is_sql(sp, m):
            ident = e.new_ident
            fast = spliced(sp, m, e, uid=ident.uid if ident else None, uid_hash=ident.uid_hash if ident else None,
                           flink_version=flink_version)
            if fast is not None:
                add(m, fast)
                continue
        if e.mapping is not None:
            raise StateTypeError(f"operator {m.display_name}: statekit does not rekey Flink savepoints with SQL "
                                 "operators; delete-key and set the new keys instead.")
        ident = e.new_ident
        meta = m
        if e.drop_states:
            meta = replace(m, keyed_states=tuple(s for s in m.keyed_states if s.name not in e.drop_states),
                           operator_states=tuple(s for s in m.operator_states if s.name not in e.drop_states))
        edit = None
        if m.key_type is not None and (e.drop_states or e.delete_keys or e.set_values):
            stored = carried_serializers(sp, m)
            edit = table_edit(m, e, _key_grouper(sp, m, stored.key if stored is not None else None))
        add(m, operator_data(sp, meta, uid=ident.uid if ident else None, uid_hash=ident.uid_hash if ident else None,
                             # a SQL operator keeps its name (GroupAggregate[51]): it says which kind it is
                             name=(ident.uid or ident.uid_hash) if ident and not is_sql(sp, m) else None,
                             max_parallelism=e.max_parallelism, edit=edit))
    version = target_version(sp, flink_version)
    return write_flink_savepoint(target, ops, checkpoint_id=sp.checkpoint_id, flink_version=version)


def write_operators(sp: "FlinkSavepoint", target: Any, edits: dict[str, Callable], *,
                    flink_version: str | None = None, replaced: dict[str, tuple[Any, Any]] | None = None) -> Path:
    """Write Flink savepoint `sp` at `target` with the keyed state of some operators changed on the way
    (``{uid hash: (keyed, timers) -> (keyed, timers)}``, see `flink_out.operator_data`); the rest as it is.
    `replaced` (``{uid hash: (other savepoint, its operator)}``): operators whose whole state, coordinator's too,
    is another savepoint's operator's, carried as it is under their identity (`migrate-sql`'s sources)."""
    from statekit.format.flink.writer import write_flink_savepoint
    from statekit.savepoint.flink_out import coordinator_states, operator_data, target_version

    replaced = replaced or {}
    coordinators = coordinator_states(sp)
    ops = []
    for m in sp.operators:
        if m.uid_hash in replaced:
            other, om = replaced[m.uid_hash]
            op = carried(other, om, uid=m.uid, uid_hash=m.uid_hash, name=m.name, flink_version=flink_version)
            if op is None:
                raise InvalidArgumentError(f"the state of {om.display_name} cannot be carried as it is into "
                                           f"{m.display_name}; take a canonical savepoint of the old job.")
            op.coordinator = coordinator_states(other).get(om.uid_hash)
            ops.append(op)
            continue
        op = (carried(sp, m, flink_version=flink_version) if m.uid_hash not in edits else None) \
            or operator_data(sp, m, edit=edits.get(m.uid_hash))
        op.coordinator = coordinators.get(m.uid_hash)
        ops.append(op)
    return write_flink_savepoint(target, ops, checkpoint_id=sp.checkpoint_id,
                                 flink_version=target_version(sp, flink_version))

