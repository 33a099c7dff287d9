"""Logical tables of Flink SQL operators: their state in the query's terms, computed from the named physical tables.

Boundary: given an operator's plan names (`statekit.format.flink.sqlnames.OperatorNames`) and its
keyed and timers tables as `NamedSqlKind` presents them, builds one Arrow table, key columns first:
a group aggregate's results per key (``user_name, cnt, total, ...``, the query's aggregates computed
from the accumulators by `statekit.format.flink.sqlaggs`, plus the values each DISTINCT aggregate
has seen); a window aggregate's pending windows (one row per key and window, with the window's
start/end as the query names them); a deduplication's kept row (keep-first: whether the key has
emitted its row, and the row waiting on its timer); a join's rows per input side, each stored row
repeated by its count. Names are the sink's where the plan's projections only reference or cast
columns (`statekit.format.flink.sqlplan.Plan.sink_names`). Columns are vectorized Arrow, no Python row loop.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import UnsupportedFormatError
from statekit.format.flink.sqlaggs import result
from statekit.format.flink.sqlexpr import evaluate
from statekit.format.flink.sqlnames import OperatorNames
from statekit.format.flink.sqlplan import plain_ref, type_root

__all__ = ["logical_table"]

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def millis(text: str) -> int:
    """An ISO-8601 duration of a plan (``PT10S``, ``P1DT2H``) in milliseconds.

    >>> millis("PT10S"), millis("P1DT1M")
    (10000, 86460000)
    """
    m = _DURATION.match(str(text))
    if not m:
        raise UnsupportedFormatError(f"window size {text!r} of the plan is not an ISO-8601 duration statekit reads")
    d, h, mi, s = m.groups()
    return int(d or 0) * 86_400_000 + int(h or 0) * 3_600_000 + int(mi or 0) * 60_000 + round(float(s or 0) * 1000)


def _local_zone(names: OperatorNames) -> str:
    """The session time zone of the job (``table.local-time-zone`` in the plan; UTC when it does not say)."""
    own = names.node.spec.get("configuration", {}).get("table.local-time-zone")
    if own:
        return str(own)
    for n in names.plan.nodes.values():
        tz = n.spec.get("configuration", {}).get("table.local-time-zone")
        if tz and tz != "default":
            return str(tz)
    return "UTC"


def _as_type(a: Any, plan_type: str | None, zone: str) -> Any:
    """`a` converted to a plan type where the query casts it (timestamps between local time and instants, numbers)."""
    if plan_type is None:
        return a
    import json

    t = json.loads(plan_type) if plan_type.startswith("{") else plan_type
    root, _ = type_root(t)
    at = a.type
    if root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE" and pa.types.is_timestamp(at) and at.tz is None:
        return pc.assume_timezone(a, zone).cast(pa.timestamp(at.unit, "UTC"))
    if root == "TIMESTAMP_WITHOUT_TIME_ZONE" and pa.types.is_timestamp(at) and at.tz is not None:
        return pc.local_timestamp(a.cast(pa.timestamp(at.unit, zone)))
    simple = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "SMALLINT": pa.int16(), "TINYINT": pa.int8(),
              "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "VARCHAR": pa.string(), "BOOLEAN": pa.bool_()}
    if pa.types.is_binary(at):  # a RAW accumulator (user-defined aggregate): its bytes, never decoded as text
        return a
    if root in simple and at != simple[root]:
        try:
            return a.cast(simple[root])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return a
    return a


def _combine(x: Any) -> pa.Array:
    """A column as one array: a single chunk as it is (``combine_chunks`` would copy it)."""
    if not isinstance(x, pa.ChunkedArray):
        return x
    return x.chunk(0) if x.num_chunks == 1 else x.combine_chunks()


def _unwrap(a: pa.Array) -> pa.Array:
    """A TTL-wrapped value column (``struct<last_access,value>``) as its values."""
    if pa.types.is_struct(a.type) and [f.name for f in a.type] == ["last_access", "value"]:
        return a.field("value") if not a.null_count else pc.if_else(pc.is_null(a), pa.scalar(None, a.type.field(1).type),
                                                                     a.flatten()[1])
    return a


def _fields(a: pa.Array) -> dict[str, pa.Array]:
    """A struct column's fields by name (a row's ``row_kind`` included), NULL where the struct is NULL."""
    return {f.name: c for f, c in zip(a.type, a.flatten())}


def _keys(names: OperatorNames, table: pa.Table) -> dict[str, pa.Array]:
    key = _combine(table.column("key"))
    return {c.name: arr for c, arr in zip(names.key, key.flatten())} if pa.types.is_struct(key.type) else {"key": key}


def _sink_order(names: OperatorNames, values: dict[int, pa.Array], keys: dict[int, tuple[str, pa.Array]],
                zone: str, n: int) -> dict[str, pa.Array]:
    """The node's results named and computed as the query's sink receives them, key columns first."""
    out: dict[str, pa.Array] = {}
    traced = names.plan.sink_columns(names.node)
    shown = set()
    for name, e in traced:
        ref = plain_ref(e)
        if ref is not None and ref[0] in keys:
            out[name] = _as_type(keys[ref[0]][1], ref[1], zone)
            shown.add(ref[0])
    for src, (name, arr) in keys.items():  # key columns the sink does not show keep their input names
        if src not in shown and name not in out:
            out[name] = arr
    columns = {**values, **{i: arr for i, (_, arr) in keys.items()}}
    for name, e in traced:
        if name in out:
            continue
        ref = plain_ref(e)
        if ref is not None:
            if ref[0] in values:
                out[name] = _as_type(values[ref[0]], ref[1], zone)
            continue
        out[name] = evaluate(e, columns, n, lambda a, t: _as_type(a, t, zone))
    return out


def _aggregate(names: OperatorNames, table: pa.Table, zone: str) -> tuple[dict[int, pa.Array], pa.Table]:
    """Output index -> result column of an aggregate node's calls, over rows that hold an accumulator."""
    assert names.acc is not None and names.acc_state is not None
    if table.column(names.acc_state).null_count:  # rows without an accumulator (else no copy of every column)
        table = table.filter(pc.is_valid(table.column(names.acc_state)))
    acc = _unwrap(_combine(table.column(names.acc_state)))
    ngroup = len(names.key)
    out: dict[int, pa.Array] = {}
    views = {c: _combine(table.column(c)) for c in table.column_names if c.startswith("agg") and "$" in c}
    for agg in names.acc.aggs:
        if not agg.hidden:
            out[ngroup + agg.index] = result(agg, acc, f"{names.node.uid}", views)
    return out, table


def _distinct_seen(names: OperatorNames, table: pa.Table) -> dict[str, pa.Array]:
    """Per DISTINCT group: the values its aggregates have seen, and whether a NULL was among them."""
    out: dict[str, pa.Array] = {}
    inp = names.plan.input(names.node, 0)
    for i, args in enumerate(names.acc.distinct if names.acc else ()):
        label = "_".join(inp[a].name for a in args)
        col = f"distinctAcc_{i}"
        if col in table.column_names:
            m = _combine(table.column(col))
            entries = m.values.flatten() if len(m) else [pa.array([], m.type.key_type), pa.array([], m.type.item_type)]
            seen = pc.not_equal(pc.fill_null(_unwrap(entries[1]), 0), 0).to_numpy(zero_copy_only=False)
            offsets = m.offsets.to_numpy()
            kept = np.concatenate([[0], np.cumsum(seen)]).astype(np.int32)[offsets]
            parent = np.repeat(np.arange(len(m)), np.diff(offsets))[seen]
            keys = entries[0].filter(pa.array(seen))
            if len(keys) and not pa.types.is_nested(keys.type):  # sorted: the same on every backend
                keys = keys.take(pc.sort_indices(pa.table({"p": parent, "v": keys}),
                                                 sort_keys=[("p", "ascending"), ("v", "ascending")]))
            out[f"distinct_{label}s"] = pa.ListArray.from_arrays(pa.array(kept, pa.int32()), keys,
                                                                 mask=pc.is_null(m) if m.null_count else None)
        if f"{col}_null_state" in table.column_names:
            ns = _unwrap(_combine(table.column(f"{col}_null_state")))
            out[f"null_{label}_seen"] = pc.fill_null(pc.not_equal(ns, 0), False)
    return out


def _group_aggregate(names: OperatorNames, table: pa.Table, zone: str) -> pa.Table:
    values, table = _aggregate(names, table, zone)
    keys = {i: (c.name, arr) for i, (c, arr) in enumerate(zip(names.key, _keys(names, table).values()))}
    cols = _sink_order(names, values, keys, zone, len(table))
    cols.update({k: v for k, v in _distinct_seen(names, table).items() if k not in cols})
    return pa.table(cols)


def _window_aggregate(names: OperatorNames, table: pa.Table, zone: str, watermark: int | None = None) -> pa.Table:
    spec = names.node.spec
    win = spec.get("windowing", {}).get("window", {})
    if win.get("type") in ("HoppingWindow", "CumulativeWindow") and not \
            pa.types.is_struct(table.schema.field("namespace").type):
        table = assemble_windows(names, table, win, watermark)  # slices -> one row per pending window (namespace = end)
    values, table = _aggregate(names, table, zone)
    ns = _combine(table.column("namespace"))
    if pa.types.is_struct(ns.type):  # legacy group window: TimeWindow(start, end)
        start, end = ns.field("start"), ns.field("end")
    else:  # window TVF: the window end (TUMBLE: the slice end)
        if win.get("type") not in ("TumblingWindow", "HoppingWindow", "CumulativeWindow"):
            raise UnsupportedFormatError(
                f"{names.node.uid}: a {win.get('type', 'window')} keeps state statekit does not assemble into windows "
                "(TUMBLE, HOP and CUMULATE it does); its state is in the physical table."
            )
        end = ns
        if win.get("type") == "CumulativeWindow":  # windows of one cycle share their start
            cycle = millis(win.get("maxSize", ""))
            start = pa.array(((ns.to_numpy(zero_copy_only=False) - 1) // cycle) * cycle, pa.int64())
        else:
            start = pc.subtract(ns, millis(win.get("size", "")))
    ngroup, naggs = len(names.key), len(spec.get("aggCalls") or [])
    for j, prop in enumerate(spec.get("namedWindowProperties") or []):
        p = prop.get("property", {})
        kind = p.get("kind")
        millis_col = {"WindowStart": start, "WindowEnd": end, "Rowtime": pc.subtract(end, 1)}.get(kind)
        ts = pa.nulls(len(table), pa.timestamp("us")) if millis_col is None else \
            pc.cast(_combine(millis_col), pa.int64()).cast(pa.timestamp("ms")).cast(pa.timestamp("us"))  # statekit's unit
        out_t = names.plan.output(names.node)[ngroup + naggs + j]
        values[ngroup + naggs + j] = _as_type(ts, out_t.type if out_t.root != "TIMESTAMP_WITHOUT_TIME_ZONE" else None, zone)
    keys = {i: (c.name, arr) for i, (c, arr) in enumerate(zip(names.key, _keys(names, table).values()))}
    return pa.table(_sink_order(names, values, keys, zone, len(table)))


#: how slices' accumulator fields combine into a window's (SUM: NULL only when every slice's is NULL)
_MERGE = {"count1": "sum", "count": "sum", "sum": "sum", "max": "max", "min": "min"}


def assemble_windows(names: OperatorNames, table: pa.Table, win: dict, watermark: int | None) -> pa.Table:
    """HOP/CUMULATE slices (namespace = slice end) merged into one row per key and pending window (namespace = end).

    A slice ending at ``s`` belongs to every window ``[start, end)`` with ``start < s <= end``; the
    window's accumulator merges its slices present in state (CUMULATE keeps fired slices merged
    into the cycle's first one, `CumulativeSliceAssigner.mergeSlices`; HOP keeps each slice until
    its last window fired). Windows whose end timer fired (``end - 1 <= watermark``, the operator's
    union ``watermark`` state) are left out.
    """
    assert names.acc is not None and names.acc_state is not None and names.acc.fields is not None
    if int(millis(win.get("offset", "PT0S")) if win.get("offset") else 0):
        raise UnsupportedFormatError(f"{names.node.uid}: windows with an offset are not assembled by statekit yet")
    if names.acc.distinct:
        raise UnsupportedFormatError(f"{names.node.uid}: DISTINCT aggregates of HOP/CUMULATE windows are not assembled "
                                     "by statekit; their slices are in the physical table.")
    if table.column(names.acc_state).null_count:  # rows without an accumulator (else no copy of every column)
        table = table.filter(pc.is_valid(table.column(names.acc_state)))
    s = _combine(table.column("namespace")).to_numpy(zero_copy_only=False).astype(np.int64)
    if win.get("type") == "HoppingWindow":
        size, slide = millis(win.get("size", "")), millis(win.get("slide", ""))
        first = -(-s // slide) * slide  # the first window end at or after the slice end
        count = np.maximum((s + size - 1 - first) // slide + 1, 0)  # window ends e with e - size < s <= e
        rows = np.repeat(np.arange(len(s)), count)
        k = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
        ends = first[rows] + k * slide
    else:  # CumulativeWindow: the windows of the slice's cycle ending at or after it
        cycle, step = millis(win.get("maxSize", "")), millis(win.get("step", ""))
        cycle_end = ((s - 1) // cycle + 1) * cycle
        count = (cycle_end - s) // step + 1
        rows = np.repeat(np.arange(len(s)), count)
        k = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
        ends = s[rows] + k * step
    if watermark is not None:
        keep = ends - 1 > watermark
        rows, ends = rows[keep], ends[keep]
    acc = _unwrap(_combine(table.column(names.acc_state)))
    fields = [f.name for f in acc.type if f.name != "row_kind"]
    key = _combine(table.column("key"))
    take = pa.array(rows, pa.int64())
    parts = key.flatten() if pa.types.is_struct(key.type) else [key]
    exploded = pa.table({"__row": take, "__end": pa.array(ends, pa.int64()),
                         **{f"__k{i}": c.take(take) for i, c in enumerate(parts)},
                         **{f"__acc{i}": acc.field(f).take(take) for i, f in enumerate(fields)}})
    how = [_MERGE.get(re.sub(r"_\d+$", "", names.acc.fields[i])) or _no_merge(names, names.acc.fields[i])
           for i in range(len(fields))]
    merged = exploded.group_by(["__end", *(f"__k{i}" for i in range(len(parts)))], use_threads=False) \
        .aggregate([*((f"__acc{i}", h) for i, h in enumerate(how)), ("__row", "min")])
    out_acc = pa.StructArray.from_arrays([merged.column(f"__acc{i}_{h}").combine_chunks() for i, h in enumerate(how)],
                                         fields=[acc.type.field(f) for f in fields])
    return pa.table({"key": key.take(merged.column("__row_min")), "namespace": merged.column("__end"),
                     names.acc_state: out_acc})


def _no_merge(names: OperatorNames, field: str) -> str:
    raise UnsupportedFormatError(f"{names.node.uid}: accumulator field {field!r} has no merge statekit knows, so slices "
                                 "cannot be assembled into windows; read the physical table.")


def _row_columns(names: OperatorNames, row: pa.Array, zone: str, keys: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """A stored input row's columns (named as the sink names them where traced), key columns left out."""
    fields = _fields(row)
    kind = fields.pop("row_kind", None)
    idx = {i: arr for i, arr in enumerate(fields.values())}
    unique = [int(i) for i in names.node.spec.get("uniqueKeys", [])]
    traced = {src: (name, cast) for name, src, cast in names.plan.sink_names(names.node)}
    out = {}
    for i, arr in idx.items():
        name, cast = traced.get(i, (list(fields)[i], None))
        if i in unique or name in keys:
            continue
        out[name] = _as_type(arr, cast, zone)
    if kind is not None:
        out["row_kind"] = kind
    return out


def _deduplicate(names: OperatorNames, table: pa.Table, zone: str) -> pa.Table:
    cols = table.column_names
    keys = _keys(names, table)
    if "waiting-to-emit-on-timer" in cols or "already-emitted-state-boolean" in cols:  # keep-first, rowtime
        emitted = _unwrap(_combine(table.column("already-emitted-state-boolean"))) \
            if "already-emitted-state-boolean" in cols else pa.nulls(len(table), pa.bool_())
        out = {**keys, "emitted": pc.fill_null(emitted, False)}
        if "waiting-to-emit-on-timer" in cols:
            row = _row_columns(names, _unwrap(_combine(table.column("waiting-to-emit-on-timer"))), zone, keys)
            row.pop("row_kind", None)
            out.update(row)
        return pa.table(out)
    state = _unwrap(_combine(table.column("deduplicate-state")))
    if pa.types.is_boolean(state.type):  # keep-first, proctime: only the flag is kept
        return pa.table({**keys, "seen": pc.fill_null(state, False)})
    return pa.table({**keys, **_row_columns(names, state, zone, keys)})


def _outer(t: pa.DataType) -> bool:
    """Whether a join state value is an outer join's ``Tuple2<record or count, associations>`` (struct f0, f1 int)."""
    return pa.types.is_struct(t) and [f.name for f in t] == ["f0", "f1"] and pa.types.is_integer(t.field(1).type)


def _strip(rows: pa.Array, associations: pa.Array | None = None) -> pa.StructArray:
    """Stored rows without their row kind; an outer join's rows with the number of rows they joined."""
    rows = _unwrap(rows)
    kept = [(f, c) for f, c in zip(rows.type, rows.flatten()) if f.name != "row_kind"]
    if associations is not None:
        kept.append((pa.field("associations", associations.type), associations))
    return pa.StructArray.from_arrays([c for _, c in kept], fields=[f for f, _ in kept])


def _side_rows(col: pa.Array) -> pa.Array:
    """One join side's stored rows per key as a list of rows (row kinds dropped), each repeated by its count.

    Layouts (`JoinRecordStateViews`, `OuterJoinRecordStateViews`): the join key contains a unique key
    (one row per key; outer: ``Tuple2<row, associations>``), a unique key other than the join key
    (``unique key -> row``; outer: ``-> Tuple2<row, associations>``), no unique key (``row -> count``;
    outer: ``row -> Tuple2<count, associations>``). Outer joins' rows carry ``associations``.
    """
    col = _unwrap(col)
    mask = pc.is_null(col) if col.null_count else None
    if pa.types.is_struct(col.type):  # the join key contains a unique key: one row per key
        if _outer(col.type) and pa.types.is_struct(col.type.field(0).type):
            f0, f1 = col.flatten()
            rows = _strip(f0, f1)
        else:
            rows = _strip(col)
        return pa.ListArray.from_arrays(pa.array(np.arange(len(col) + 1, dtype=np.int32)), rows, mask=mask)
    entries = col.values.flatten() if len(col) else [pa.array([], col.type.key_type), pa.array([], col.type.item_type)]
    offsets = col.offsets.to_numpy()
    key, item = entries[0], _unwrap(entries[1])
    assoc = None
    if _outer(item.type) and pa.types.is_integer(item.type.field(0).type):  # outer, no unique key
        item, assoc = item.flatten()
    if pa.types.is_integer(item.type):  # no unique key: row -> count
        counts = np.maximum(pc.fill_null(item, 0).to_numpy(zero_copy_only=False).astype(np.int64), 0)
        take = pa.array(np.repeat(np.arange(len(key)), counts))
        rows = _strip(key, assoc).take(take)
        ends = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)[offsets]
        return pa.ListArray.from_arrays(pa.array(ends, pa.int32()), rows, mask=mask)
    if _outer(item.type):  # outer, a unique key other than the join key: unique key -> (row, associations)
        f0, f1 = item.flatten()
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), _strip(f0, f1), mask=mask)
    if pa.types.is_struct(item.type):  # a unique key other than the join key: unique key -> row
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), _strip(item), mask=mask)
    raise UnsupportedFormatError(f"join state of type {col.type} is a layout statekit does not present as rows yet")


def _join(names: OperatorNames, table: pa.Table, zone: str) -> pa.Table:
    out: dict[str, Any] = dict(_keys(names, table))
    sides = [names.plan.source_table(names.node, i) for i in (0, 1)]
    if None in sides or sides[0] == sides[1]:
        sides = [f"{s}_{t}" if t else s for s, t in zip(("left", "right"), sides)]
    for state, side in zip(("left-records", "right-records"), sides):
        if state in table.column_names:
            out[str(side)] = _side_rows(_combine(table.column(state)))
    return pa.table(out)


_BUILD = {
    "group aggregate": _group_aggregate,
    "window TVF aggregate": _window_aggregate,
    "legacy group window aggregate": _window_aggregate,
    "deduplication": _deduplicate,
    "regular join": _join,
}


def logical_table(names: OperatorNames, table: pa.Table, timers: pa.Table, where: str, *,
                  watermark: int | None = None) -> pa.Table:
    """The operator's logical table from its named keyed table (see the module docstring); `watermark`: a window
    operator's current watermark (the least of its subtasks'), which says which HOP/CUMULATE windows fired."""
    build = _BUILD.get(names.kind)
    if build is None:
        raise UnsupportedFormatError(f"{where}: a {names.kind} has no logical table in statekit; read its physical one.")
    if names.kind in ("group aggregate", "window TVF aggregate", "legacy group window aggregate") and names.acc and \
            names.acc.fields is None:
        unknown = [a.func for a in names.acc.aggs if a.buffers is None]
        raise UnsupportedFormatError(
            f"{where}: aggregate {', '.join(unknown)} keeps an accumulator statekit does not evaluate (it evaluates "
            "COUNT, SUM, SUM0, AVG, MIN/MAX, FIRST_VALUE/LAST_VALUE and LISTAGG); read the physical table (its accumulator row)."
        )
    zone = _local_zone(names)
    if build is _window_aggregate:
        return _window_aggregate(names, table, zone, watermark)
    if table.num_rows and table.column(0).num_chunks > 1:
        # every output row comes from one stored row: built batch by batch, the decoded columns are never
        # copied into one chunk (combine_chunks of 2M keys' struct columns costs more than the decoding)
        parts = [build(names, pa.Table.from_batches([b]), zone) for b in table.to_batches() if b.num_rows]
        try:
            return pa.concat_tables(parts)
        except pa.ArrowInvalid:  # a batch where a column came out with another type (e.g. all NULL)
            return build(names, table, zone)
    return build(names, table, zone)
