"""`stats` of one operator of a Flink savepoint: keyed figures from `format.flink.sizes`, operator state from its offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from statekit.format.flink.sizes import keyed_sizes
from statekit.format.manifest import OperatorMetadata
from statekit.savepoint.stats_figures import KeySize, OperatorStats, StateStats, SubtaskStats, new_operator_stats

if TYPE_CHECKING:
    from statekit.savepoint.flink import FlinkSavepoint

__all__ = ["flink_operator_stats"]

TIMERS = "_timer_state/"


def flink_operator_stats(sp: "FlinkSavepoint", meta: OperatorMetadata, *, top: int = 10) -> OperatorStats:
    """Entries and bytes of `meta`'s keyed state (per key group, state, subtask), operator state and largest keys."""
    o = new_operator_stats(meta)
    reader = sp.flink
    fop = sp.flink_operator(meta.identifier)
    per_sub: dict[int, list] = {}  # index -> [kg start, kg end, bytes, entries]
    if meta.key_type is not None:
        ks = keyed_sizes(reader, fop, top=top)
        if ks is not None:
            o.key_group_bytes, o.key_group_entries = ks.kg_bytes, ks.kg_entries
            for name in sorted(ks.state_entries):
                kind = "timers" if name.startswith(TIMERS) else "keyed"
                o.states.append(StateStats(name, kind, ks.state_entries[name], ks.state_bytes[name]))
            for index, start, end, nbytes, entries in ks.subtasks:
                per_sub[index] = [start, end, nbytes, entries]
            o.top_keys = [KeySize(*t) for t in ks.top]
    op_states: dict[str, list] = {}  # name -> [mode, entries, bytes]
    for st in fop.subtasks:
        h = st.managed_operator
        if h is None:
            continue
        size = reader.files.size(h.delegate)
        ends = sorted({off for s in h.states for off in s.offsets} | {size})
        nxt = {a: b for a, b in zip(ends, ends[1:])}
        entries = 0
        for s in h.states:
            got = op_states.setdefault(s.name, [s.mode, 0, 0])
            n = len(s.offsets)
            if s.mode == "broadcast" and s.offsets:
                n = sp.broadcast_state(meta.identifier, s.name).num_rows  # every subtask holds a copy
            got[1] += n
            got[2] += sum(nxt.get(off, size) - off for off in s.offsets)
            entries += n
        slot = per_sub.setdefault(st.index, [None, None, 0, 0])
        slot[2] += size
        slot[3] += entries
    for name, (mode, n, b) in sorted(op_states.items()):
        o.states.append(StateStats(name, mode, n, b))
    o.subtasks = [SubtaskStats(i, s, e, b, n) for i, (s, e, b, n) in sorted(per_sub.items())]
    o.bytes = sum(s.bytes for s in o.subtasks)
    o.entries = sum(s.entries for s in o.subtasks)
    return o


def stored_sizes(sp: "FlinkSavepoint", meta: OperatorMetadata) -> tuple[int, int]:
    """(files, bytes) that hold `meta`'s state as `_metadata` lists them (inline state counts bytes, no file)."""
    from statekit.format.flink.metadata import IncrementalKeyedHandle, KeyGroupsHandle

    reader = sp.flink
    streams = {}
    for st in sp.flink_operator(meta.identifier).subtasks:
        for h in (st.managed_keyed, st.raw_keyed, st.managed_operator, st.raw_operator):
            if h is None:
                continue
            if isinstance(h, IncrementalKeyedHandle):
                parts = [s for _, s in (*h.shared, *h.private)] + [h.meta]
            elif isinstance(h, KeyGroupsHandle) or hasattr(h, "delegate"):
                parts = [h.delegate]
            else:
                continue
            for s in parts:
                streams[(s.kind, s.path, id(s) if s.kind == "bytes" else None)] = s
    files = sum(1 for s in streams.values() if s.kind != "bytes")  # inline state lives inside `_metadata`
    return files, sum(reader.files.size(s) for s in streams.values())
