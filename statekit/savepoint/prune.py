"""Expired state dropped: every TTL-wrapped entry whose time to live has run out at a given time, written as a new savepoint.

Boundary: Flink keeps state with a TTL as ``(last access time, value)`` (`TtlSerializer`; Flink SQL's
``table.exec.state.ttl`` and the compiled plan's per-state ``ttl``, DataStream's `StateTtlConfig`) and
drops an entry only when it is touched or compacted after it expired. `prune_expired` drops them all
at once, as of `now`: an entry expired when ``last_access + ttl <= now`` (Flink's `TtlUtils.expired`).
Values of value states and each entry of a map state are judged on their own. The savepoint does not
store the TTL itself (the serializer snapshot does not hold it), so it comes from the user (`ttl`, one
duration or one per operator / state) or from the job's compiled plan. The output is a Flink savepoint
written Flink to Flink (`flink_out.operator_data`, serializers carried, kept entries' last access times
unchanged unless `touch` sets them); operators without expired entries are written unchanged.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.errors import InvalidArgumentError, SavepointExistsError, UnsupportedFormatError
from statekit.format.manifest import OperatorMetadata
from statekit.format.storage import as_path
from statekit.savepoint.reader import Savepoint

__all__ = ["PruneReport", "StatePruned", "parse_duration", "prune_expired"]

TTL_FIELDS = ["last_access", "value"]
_UNITS = {"ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000,
          "second": 1000, "seconds": 1000, "min": 60_000, "minute": 60_000, "minutes": 60_000, "h": 3_600_000,
          "hour": 3_600_000, "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}


def parse_duration(text: Any) -> int:
    """A duration in milliseconds: an int (ms), a `timedelta`, or Flink's notation (``1 d``, ``36 h``, ``500 ms``).

    >>> parse_duration("1 d"), parse_duration("90 s"), parse_duration(250)
    (86400000, 90000, 250)
    """
    if isinstance(text, dt.timedelta):
        return int(text.total_seconds() * 1000)
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(text).lower())
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise InvalidArgumentError(f"TTL {text!r} is not a duration; write it as Flink does: '1 d', '12 h', "
                                   "'30 min', '90 s', '500 ms'.")
    return int(m.group(1)) * _UNITS[m.group(2) or "ms"]


def _instant_ms(now: Any) -> int:
    """`now` (epoch millis, a datetime, or ISO-8601 text) as epoch milliseconds."""
    if isinstance(now, dt.datetime):
        if now.tzinfo is None:
            raise InvalidArgumentError(f"--now {now} has no time zone; TTL times are instants (add +00:00 or Z).")
        return int(now.timestamp() * 1000)
    if isinstance(now, (int, np.integer)) and not isinstance(now, bool):
        return int(now)
    text = str(now).strip()
    if text.isdigit():
        return int(text)
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(f"--now {now!r} is neither epoch milliseconds nor an ISO-8601 time "
                                   "(2026-12-04T12:00:00Z).") from None
    return _instant_ms(parsed)


@dataclass
class StatePruned:
    """What was dropped from one state of one operator."""

    operator: str
    state: str
    ttl_ms: int
    entries: int = 0  # entries kept in the state before (values, or map entries)
    removed: int = 0
    bytes_removed: int = 0  # serialized bytes of the removed entries' values (TTL timestamps included)


@dataclass
class PruneReport:
    """What `prune_expired` removed, per operator and state; `written` says whether `target` was written."""

    source: Path
    target: Path
    now: int
    states: list[StatePruned] = field(default_factory=list)
    written: bool = False

    @property
    def removed(self) -> int:
        return sum(s.removed for s in self.states)

    def __str__(self) -> str:
        when = dt.datetime.fromtimestamp(self.now / 1000, dt.timezone.utc).isoformat()
        verb = "wrote" if self.written else "would write" if self.removed else "nothing expired, so did not write"
        head = f"{verb} {self.target} from {self.source}: entries expired at {when} ({self.now})"
        lines = [f"  - operator {s.operator}, state {s.state!r} (ttl {s.ttl_ms} ms): {s.removed} of {s.entries} "
                 f"entries, {s.bytes_removed} bytes removed" for s in self.states]
        return "\n".join([head, *lines] if lines else [head, "  nothing expired"])


def _ttl_states(sp: Any, meta: OperatorMetadata) -> list[tuple[str, str]]:
    """(state, value|map) of `meta`'s keyed states whose values are TTL-wrapped.

    SQL state shows them as ``struct<last_access,value>``; DataStream and PyFlink state as the
    TtlValue's bytes (``binary``: the last access time's 8 bytes, then the value's), recognised by
    the serializer snapshot the savepoint holds (`TtlSerializerSnapshot`).
    """
    from statekit.format.flink.serializers import is_ttl_bytes
    from statekit.savepoint.flink_out import carried_serializers
    from statekit.types import parse_ddl

    carried = None
    out = []
    for s in meta.keyed_states:
        t = parse_ddl(s.type)
        if s.kind == "map" and pa.types.is_map(t):
            t = t.item_type
            kind = "map"
        else:
            kind = s.kind
        if kind not in ("value", "map"):
            continue
        if pa.types.is_struct(t) and [f.name for f in t] == TTL_FIELDS:
            out.append((s.name, kind))
        elif pa.types.is_binary(t):
            carried = carried or carried_serializers(sp, meta)
            got = carried.states.get(s.name) if carried is not None else None
            vt = got.value_type if got is not None else None
            if vt is not None and kind == "map":
                vt = vt.children[1] if len(vt.children) == 2 else None
            if is_ttl_bytes(vt):
                out.append((s.name, kind))
    return out


def _plan_ttls(sp: Any, meta: OperatorMetadata) -> int | None:
    """The TTL the compiled plan gives the operator's states (its ExecNode's ``state`` list), or None."""
    names = sp.plan_names(meta.identifier) if hasattr(sp, "plan_names") else None
    if names is None:
        return None
    ttls = [parse_duration(str(s.get("ttl", "0 ms"))) for s in names.node.spec.get("state", [])]
    ttls = [t for t in ttls if t > 0]
    return min(ttls) if ttls else None


def _ttl_for(ttl: Any, sp: Any, meta: OperatorMetadata, state: str) -> int:
    if isinstance(ttl, Mapping):
        for k in (f"{meta.uid}/{state}", f"{meta.uid_hash}/{state}", f"{meta.name}/{state}",
                  meta.uid, meta.uid_hash, meta.name, "*"):
            if k is not None and k in ttl:
                return parse_duration(ttl[k])
        ttl = None
    if ttl is not None:
        return parse_duration(ttl)
    own = _plan_ttls(sp, meta)
    if own is not None:
        return own
    raise InvalidArgumentError(
        f"state {state!r} of operator {meta.display_name} has a TTL, but a savepoint does not store its duration; "
        "give it (ttl='1 d', CLI --ttl '1 d'; the job's table.exec.state.ttl or StateTtlConfig), or open with the "
        "job's compiled plan when it sets per-state TTLs.")


def _value_bytes(sp: Any, meta: OperatorMetadata, state: str, kind: str, removed: pa.Array) -> int:
    """Serialized bytes of `removed` values (map values: each entry's value) as Flink writes them."""
    from statekit.format.flink.values_out import encode
    from statekit.savepoint.flink_out import carried_serializers

    if not len(removed):
        return 0
    if pa.types.is_binary(removed.type):  # TtlValues shown as their bytes (DataStream, PyFlink): what Flink stored
        return int(pc.sum(pc.binary_length(removed)).as_py() or 0)
    carried = carried_serializers(sp, meta)
    got = carried.states.get(state) if carried is not None else None
    if got is None:
        return 0
    t = got.value_type.children[1] if kind == "map" else got.value_type
    return int(encode(removed, t, what=f"state {state!r}").lengths.sum())


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A binary array's value offsets (n + 1, int64, into the returned data) and its data bytes."""
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = arr.buffers()[2]
    return offsets, np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)


#: a TtlValue's bytes (`TtlSerializer`): the last access time (big-endian i64), then the value's
_STAMP = 8


def _last_access(wrapped: pa.Array) -> np.ndarray:
    """Each TTL-wrapped value's last access time (ms; +inf for nulls): a struct's field, or a TtlValue's first 8 bytes."""
    valid = wrapped.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_binary(wrapped.type):
        offsets, data = _binary_parts(wrapped)
        ok = valid & (np.diff(offsets) >= _STAMP)
        last = np.full(len(wrapped), np.inf)
        if ok.any():
            every = np.ndarray((len(data) - _STAMP + 1,), ">i8", buffer=data, strides=(1,))  # an i64 at every byte
            last[ok] = every[offsets[:-1][ok]].astype(np.float64)
        return last
    last = pc.struct_field(wrapped, "last_access").to_numpy(zero_copy_only=False)
    return np.where(valid, np.nan_to_num(np.asarray(last, np.float64), nan=np.inf), np.inf)


def _expired(wrapped: pa.Array, now: int, ttl: int) -> np.ndarray:
    """Which TTL-wrapped values expired at `now` (null values: not)."""
    return _last_access(wrapped) + ttl <= now


def _touched(wrapped: pa.Array, touch: int) -> pa.Array:
    """TTL-wrapped values with their last access set to `touch` (nulls stay null)."""
    if pa.types.is_binary(wrapped.type):  # each TtlValue's timestamp bytes rewritten in a copy of the data
        offsets, data = _binary_parts(wrapped)
        data = data[offsets[0] : offsets[-1]].copy()
        offsets = offsets - offsets[0]
        ok = wrapped.is_valid().to_numpy(zero_copy_only=False) & (np.diff(offsets) >= _STAMP)
        at = offsets[:-1][ok]
        stamp = np.frombuffer(int(touch).to_bytes(_STAMP, "big", signed=True), np.uint8)
        data[(at[:, None] + np.arange(_STAMP)).ravel()] = np.tile(stamp, len(at))
        validity = None if not wrapped.null_count else pa.py_buffer(
            np.packbits(wrapped.is_valid().to_numpy(zero_copy_only=False), bitorder="little"))
        return pa.Array.from_buffers(pa.binary(), len(wrapped), [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                                 pa.py_buffer(data)])
    value = pc.struct_field(wrapped, "value")
    last = pa.array(np.full(len(wrapped), touch, np.int64), wrapped.type.field("last_access").type)
    mask = None if not wrapped.null_count else pc.invert(wrapped.is_valid())
    return pa.StructArray.from_arrays([last, value], TTL_FIELDS, mask=mask)


def _nulled(col: pa.Array, gone: np.ndarray) -> pa.Array:
    """`col` with the rows `gone` NULL. A struct keeps its children and gets a new validity (``pc.if_else`` copies
    every nested value: most of a 2M-key prune's time)."""
    if not isinstance(col, pa.StructArray) or col.offset:
        return pc.if_else(pa.array(gone), pa.scalar(None, col.type), col)
    null = gone | ~col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else gone
    return pa.StructArray.from_arrays([col.field(i) for i in range(col.type.num_fields)], fields=list(col.type),
                                      mask=pa.array(null))


def _prune_table(sp: Any, meta: OperatorMetadata, keyed: pa.Table, now: int, ttl: Any, touch: int | None,
                 report: list[StatePruned]) -> pa.Table:
    for state, kind in _ttl_states(sp, meta):
        ms = _ttl_for(ttl, sp, meta, state)
        col = keyed.column(state)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        rec = StatePruned(meta.display_name if meta.uid or not meta.name else f"{meta.name} ({meta.uid_hash})", state, ms)
        if kind == "value":
            gone = _expired(col, now, ms)
            rec.entries, rec.removed = int(col.is_valid().to_numpy(zero_copy_only=False).sum()), int(gone.sum())
            rec.bytes_removed = _value_bytes(sp, meta, state, kind, col.filter(pa.array(gone)))
            new = _nulled(col, gone) if gone.any() else col
            if touch is not None:
                new = _touched(new, touch)
        else:
            offsets = col.offsets.to_numpy()
            lo, hi = int(offsets[0]), int(offsets[-1])
            items = col.items.slice(lo, hi - lo)
            keys = col.keys.slice(lo, hi - lo)
            gone = _expired(items, now, ms)
            rec.entries, rec.removed = hi - lo, int(gone.sum())
            rec.bytes_removed = _value_bytes(sp, meta, state, kind, items.filter(pa.array(gone)))
            keep = ~gone
            counts = np.add.reduceat(np.concatenate([keep, [False]]).astype(np.int64), offsets - lo)[:-1] \
                if len(offsets) > 1 else np.zeros(0, np.int64)
            counts = np.where(np.diff(offsets) == 0, 0, counts)
            new_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
            kept_items = items.filter(pa.array(keep))
            if touch is not None:
                kept_items = _touched(kept_items, touch)
            absent = (counts == 0) | ~col.is_valid().to_numpy(zero_copy_only=False)  # a map left empty: no state
            new = pa.MapArray.from_arrays(pa.array(new_offsets), keys.filter(pa.array(keep)), kept_items,
                                          type=col.type, mask=pa.array(absent))
        keyed = keyed.set_column(keyed.schema.get_field_index(state), state, new)
        report.append(rec)
    return keyed


def prune_expired(source: str | os.PathLike[str] | Savepoint, target: str | os.PathLike[str], *, now: Any,
                  ttl: Any = None, operators: Any = None, touch: Any = None, plan: Any = None,
                  dry_run: bool = False) -> PruneReport:
    """Write `source` without the state entries whose TTL expired at `now` (epoch ms, a datetime or ISO text).

    `ttl`: one duration for every TTL state (``"1 d"``, ms, a timedelta), or a mapping ``{uid or name[/state]:
    duration}`` (``"*"`` for the rest); by default the compiled plan's (`plan`) per-state TTL. `operators`
    limits the pruning to those operators (uid, uid hash or name). `touch` sets the last access time of every
    kept entry (so a restore at another time keeps them alive); by default they keep theirs. `target` must
    not exist; nothing is written on a dry run or when nothing expired. The report lists entries and bytes
    removed per operator and state.
    """
    from statekit.savepoint.kinds import is_flink_source

    sp = source if isinstance(source, Savepoint) else (
        Savepoint.open(as_path(source), plan=plan) if plan is not None else Savepoint.open(as_path(source)))
    src = Path(str(sp.path))
    report = PruneReport(src, Path(str(as_path(target))), _instant_ms(now))
    if as_path(target).exists():
        raise SavepointExistsError(f"{target} already exists; savepoints are never overwritten. Choose a new path.")
    if not is_flink_source(sp):
        raise UnsupportedFormatError(
            f"{src} is a statekit savepoint; prune-expired reads the TTL timestamps Flink stores with each value "
            "(a Flink savepoint). Prune the Flink savepoint it came from.")
    wanted = None
    if operators is not None:
        wanted = {sp.operator(o).uid_hash for o in ([operators] if isinstance(operators, str) else operators)}
    touch_ms = _instant_ms(touch) if touch is not None else None
    edits: dict[str, Any] = {}
    for meta in sp.operators:
        if meta.key_type is None or not _ttl_states(sp, meta) or (wanted is not None and meta.uid_hash not in wanted):
            continue
        before = len(report.states)
        pruned = _prune_table(sp, meta, sp.keyed_table(meta.identifier, with_key_group=True), report.now, ttl,
                              touch_ms, report.states)
        if any(s.removed for s in report.states[before:]) or touch_ms is not None:
            edits[meta.uid_hash] = (lambda table: lambda keyed, timers: (table, timers))(pruned)
    if not report.removed and touch_ms is None or dry_run:
        return report
    from statekit.savepoint.flink_repair import write_operators

    write_operators(sp, as_path(target), edits)
    report.written = True
    return report
