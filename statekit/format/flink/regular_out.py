"""The regular keyed layout written in bulk: primitive keys, primitive value states and timers, void namespace.

Every entry of such a state (or timer queue) has one width (``i32 klen | key-group prefix | key | 0x00
| i32 vlen | value``; timers ``... | prefix | timestamp | key | 0x00 | i32 0``), so a run of entries is
one numpy structured array: the constant fields are filled once per reused buffer, and per key group
only the key and value (timestamp) fields are assigned - numpy swaps the bytes to big-endian as it
assigns, releasing the GIL - plus the key-group prefix as one scalar. The buffers stay small
(`CHUNK_ROWS` entries per run, in cache) and are written in batches spanning many key groups. Rows
arrive as Arrow tables or batches sorted by key group (one whole table, or a savepoint read file by
file: `statekit.format.keyed_stream`); null values (a key without that state) are skipped as the
general path (`writer.keyed_runs`) skips them, and the bytes are identical to that path's. Files go
to disk around the page cache (`statekit.format.direct_file`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.format.direct_file import DirectFile
from statekit.format.storage import ObjectWriter, StoragePath

if TYPE_CHECKING:
    from statekit.format.flink.writer import KeyedLayoutOut

PRIMITIVE = {"long": ">i8", "int": ">i4", "short": ">i2", "byte": "i1", "double": ">f8", "float": ">f4",
             "boolean": "u1"}
#: the Arrow column type each primitive serializer is written from in bulk (others take the general path)
ARROW = {"long": pa.int64(), "int": pa.int32(), "short": pa.int16(), "byte": pa.int8(), "double": pa.float64(),
         "float": pa.float32(), "boolean": pa.bool_()}
END_OF_KEY_GROUP = b"\xff\xff"
_SIGN = np.uint64(1 << 63)
CHUNK_ROWS = 1 << 16  # entries per state buffer (~1.7 MB for Long/Long): refilled while still in cache


def entry_dtype(nb: int, key_kind: str, value_kind: str) -> np.dtype:
    """One entry ``i32 klen | kg (nb bytes) | key | 0x00 | i32 vlen | value`` as a packed structured dtype."""
    kt, vt = np.dtype(PRIMITIVE[key_kind]), np.dtype(PRIMITIVE[value_kind])
    kw, vw = kt.itemsize, vt.itemsize
    return np.dtype({"names": ["kl", "kg", "k", "ns", "vl", "v"],
                     "formats": [">i4", "u1" if nb == 1 else ">u2", kt, "u1", ">i4", vt],
                     "offsets": [0, 4, 4 + nb, 4 + nb + kw, 5 + nb + kw, 9 + nb + kw],
                     "itemsize": 9 + nb + kw + vw})


def timer_dtype(nb: int, key_kind: str) -> np.dtype:
    """One timer ``i32 klen | kg (nb bytes) | u64 timestamp (sign flipped) | key | 0x00 | i32 0`` as a packed dtype."""
    kt = np.dtype(PRIMITIVE[key_kind])
    kw = kt.itemsize
    return np.dtype({"names": ["kl", "kg", "ts", "k", "ns", "vl"],
                     "formats": [">i4", "u1" if nb == 1 else ">u2", ">u8", kt, "u1", ">i4"],
                     "offsets": [0, 4, 4 + nb, 12 + nb, 12 + nb + kw, 13 + nb + kw],
                     "itemsize": 17 + nb + kw})


def is_regular(layout: "KeyedLayoutOut", schema: pa.Schema, timers: pa.Schema | None = None) -> bool:
    """Whether `layout`, written from a keyed table of `schema` (and timers of schema `timers`), is the regular
    layout (each primitive from exactly its Arrow type, so that numpy's assignment cannot narrow a value)."""
    if layout.namespace is not None or layout.key.kind not in ARROW or "key" not in schema.names:
        return False
    if schema.field("key").type != ARROW[layout.key.kind]:
        return False
    if timers is not None and ("key" not in timers.names or timers.field("key").type != ARROW[layout.key.kind]
                               or "namespace" in timers.names or "timestamp" not in timers.names):
        return False
    for s in layout.states:
        if s.kind in ("list", "map") or s.value.kind not in ARROW or s.column not in schema.names:
            return False
        if schema.field(s.column).type != ARROW[s.value.kind]:
            return False
    return True


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(buf, np.uint8), count=offset + n, bitorder="little")[offset:]


def _column(arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of a primitive Arrow array (zero-copy for numbers) and its validity (None: no nulls)."""
    n = len(arr)
    valid = _bits(arr.buffers()[0], arr.offset, n).view(bool) if arr.null_count else None
    if arr.type == pa.bool_():
        return _bits(arr.buffers()[1], arr.offset, n), valid
    dt = np.dtype(arr.type.to_pandas_dtype())
    return np.frombuffer(arr.buffers()[1], dt, count=arr.offset + n)[arr.offset:], valid


class EntryBuffers:
    """Per-run entry buffers (states, then timer queues) and the writes of one file (stream positions counted as
    queued). Each buffer starts zeroed (bytes no field covers stay 0) and its constant fields are filled once."""

    def __init__(self, file: "DirectFile | ObjectWriter", pos: int, templates: list[tuple[np.dtype, dict[str, int]]], cap: int) -> None:
        self.file, self.pos, self.cap = file, pos, cap
        self.bufs = []
        for dt, constants in templates:
            b = np.zeros(cap, dt)
            for name, value in constants.items():
                b[name] = value
            self.bufs.append(b)
        self.used = [0] * len(templates)
        self.queued: list[bytes | memoryview] = []

    def add(self, data: bytes | memoryview) -> None:
        self.queued.append(data)
        self.pos += len(data)

    def entries(self, run: int, kg: int, fields: dict[str, np.ndarray], count: int | None = None) -> np.ndarray:
        """Queue `count` entries (default: as many as ``k`` holds) of buffer `run` in key group `kg` with `fields`
        (``k`` and ``v``, or ``ts`` and ``k``; other names for other dtypes); the bytes of the last chunk queued."""
        i, n, raw = 0, len(fields["k"]) if count is None else count, None
        while i < n:
            used = self.used[run]
            if used == self.cap:
                self.flush()
                used = 0
            m = min(self.cap - used, n - i)
            view = self.bufs[run][used : used + m]
            view["kg"] = kg
            for name, values in fields.items():
                view[name] = values[i : i + m]
            raw = view.view(np.uint8)
            self.add(raw.data)
            self.used[run] = used + m
            i += m
        assert raw is not None
        return raw

    def flush(self) -> None:
        """Write everything queued (and free the buffers for reuse)."""
        queued, self.queued = self.queued, []
        self.used = [0] * len(self.used)
        self.file.write(queued)


def write_regular_file(path: "Path | StoragePath", layout: "KeyedLayoutOut", tables: Iterable[pa.Table | pa.RecordBatch],
                       start: int, end: int, timers: pa.Table | None = None) -> tuple[list[int], int]:
    """One keyed state file of the regular layout for key groups [start, end]: the backend proxy, then the key
    groups of `tables` and `timers` (`write_regular_key_groups`). Returns the key-group offsets and the file size."""
    proxy = layout.proxy()
    try:
        with (path.create() if isinstance(path, StoragePath) else DirectFile(path)) as f:
            f.write([proxy])
            offsets = write_regular_key_groups(f, layout, tables, start, end, len(proxy), timers=timers)
            size = f.close()
    finally:
        close = getattr(tables, "close", None)
        if close is not None:  # a generator reading ahead (`KeyedFiles.batches`): stop it now, not at collection
            close()
    return offsets, size


def _timer_queues(layout: "KeyedLayoutOut", timers: pa.Table | None, start: int,
                  end: int) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Per timer queue of `layout` (its domain), the key-group bounds of its timers in [start, end] (index
    ``g - start``) and their ``ts`` (sign flipped, as Flink orders them) and ``k`` fields, in table order."""
    if timers is None or not timers.num_rows or not layout.timers:
        return []
    import pyarrow.compute as pc  # here: savepoints without timers do without it

    t = timers.combine_chunks()
    if t.column("key").null_count:
        raise StateTypeError("the timers table holds a null key; Flink forbids null keys.")
    tkg = _column(t.column("key_group").chunk(0))[0]
    if tkg[0] < start or tkg[-1] > end or (tkg[1:] < tkg[:-1]).any():
        raise InvalidArgumentError(f"timers outside key groups {start}..{end}, or not sorted by key group, were given.")
    keys = _column(t.column("key").chunk(0))[0]
    ts = _column(t.column("timestamp").chunk(0))[0].astype(np.int64, copy=False).view(np.uint64) ^ _SIGN
    queues = []
    for domain, _ in layout.timers:
        rows = np.flatnonzero(_column(pc.equal(t.column("domain").chunk(0), domain))[0])
        kg = tkg[rows]
        queues.append((np.searchsorted(kg, np.arange(start, end + 2)), {"ts": ts[rows], "k": keys[rows]}))
    return queues


def write_regular_key_groups(f: "DirectFile | ObjectWriter", layout: "KeyedLayoutOut", tables: Iterable[pa.Table | pa.RecordBatch],
                             start: int, end: int, pos: int, *, timers: pa.Table | None = None,
                             cap: int | None = None) -> list[int]:
    """Write key groups [start, end] of the regular layout to `f` at stream position `pos` from `tables`
    (rows sorted by key group across all of them, columns ``key_group``, ``key`` and the states') and `timers`
    (sorted by key group: ``key_group``, ``key``, ``timestamp``, ``domain``); returns the key-group offsets
    (0 = empty) like `writer.write_key_groups`. Everything is written on return."""
    nb = layout.prefix_bytes
    states = layout.states
    kw = np.dtype(PRIMITIVE[layout.key.kind]).itemsize
    queues = _timer_queues(layout, timers, start, end)
    templates = [(entry_dtype(nb, layout.key.kind, s.value.kind),
                  {"kl": nb + kw + 1, "ns": 0, "vl": np.dtype(PRIMITIVE[s.value.kind]).itemsize}) for s in states]
    templates += [(timer_dtype(nb, layout.key.kind), {"kl": nb + 8 + kw + 1, "ns": 0, "vl": 0})] * len(queues)
    out = EntryBuffers(f, pos, templates, cap or CHUNK_ROWS)
    sids = [sid.to_bytes(2, "big") for sid in range(len(templates))]
    widths = [b.dtype.itemsize for b in out.bufs]
    offsets = [0] * (end - start + 1)
    pending: list[tuple[int, int, np.ndarray, list[tuple[np.ndarray, np.ndarray | None]]]] = []
    timer_groups = np.unique(np.concatenate([np.repeat(np.arange(start, end + 1), np.diff(b)) for b, _ in queues]
                                            or [np.zeros(0, np.int64)])).tolist()
    group = -1  # the key group whose keyed rows are pending
    done = -1  # the last key group written

    def run(sid: int, g: int, parts: list[dict[str, np.ndarray]], wrote: bool) -> bool:
        """Queue one state id's run of key group `g` (its last entry flagged); whether the group has begun."""
        if not parts:
            return wrote
        if not wrote:
            offsets[g - start] = out.pos
        out.add(sids[sid])
        for fields in parts:
            raw = out.entries(sid, g, fields)
        raw[len(raw) - widths[sid] + 4] |= 0x80  # the run's last entry: its first key byte
        return True

    def emit(g: int) -> None:
        """Queue key group `g`: the pending rows' non-null entries per state, then its timers per queue."""
        nonlocal done
        wrote = False
        for sid in range(len(states)):
            parts = []
            for a, z, keys, cols in pending:
                values, valid = cols[sid]
                k, v = keys[a:z], values[a:z]
                if valid is not None and not valid[a:z].all():
                    k, v = k[valid[a:z]], v[valid[a:z]]
                if len(k):
                    parts.append({"k": k, "v": v})
            wrote = run(sid, g, parts, wrote)
        for j, (bounds, fields) in enumerate(queues):
            a, z = bounds[g - start], bounds[g - start + 1]
            if z > a:
                wrote = run(len(states) + j, g, [{name: col[a:z] for name, col in fields.items()}], wrote)
        if wrote:
            out.add(END_OF_KEY_GROUP)
        pending.clear()
        done = g

    def timers_only(before: int) -> None:
        """Emit the key groups below `before` that hold timers but no keyed rows."""
        while timer_groups and timer_groups[0] < before:
            g = timer_groups.pop(0)
            if g > done:
                emit(g)

    for t in tables:
        for batch in t.to_batches() if isinstance(t, pa.Table) else [t]:
            n = batch.num_rows
            if not n:
                continue
            if batch.column("key").null_count:
                raise StateTypeError("the keyed table holds a null key; Flink forbids null keys.")
            kg, _ = _column(batch.column("key_group"))
            cuts = np.flatnonzero(kg[1:] != kg[:-1]) + 1
            if kg[0] < max(group, start) or kg[-1] > end or (len(cuts) and (kg[cuts] < kg[cuts - 1]).any()):
                raise InvalidArgumentError(
                    f"keyed rows outside key groups {start}..{end}, or not sorted by key group, were given for one file."
                )
            keys, _ = _column(batch.column("key"))
            cols = [_column(batch.column(s.column)) for s in states]
            bounds = [0, *cuts.tolist(), n]
            for a, z in zip(bounds[:-1], bounds[1:]):
                g = int(kg[a])
                if g != group:
                    if group >= 0:
                        emit(group)
                    timers_only(g)
                    group = g
                pending.append((a, z, keys, cols))
    if group >= 0:
        emit(group)
    timers_only(end + 1)
    out.flush()
    return offsets


__all__ = ["ARROW", "CHUNK_ROWS", "END_OF_KEY_GROUP", "PRIMITIVE", "EntryBuffers", "entry_dtype", "is_regular", "timer_dtype", "write_regular_file",
           "write_regular_key_groups"]
