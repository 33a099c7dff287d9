"""The regular keyed layout written in bulk: primitive keys and value states, void namespace, no timers.

Every entry of such a state has one width (``i32 klen | key-group prefix | key | 0x00 | i32 vlen |
value``), so a state's entries are one numpy structured array: the constant fields are filled once
per reused buffer, and per key group only the key and value fields are assigned (numpy swaps the
bytes to big-endian as it assigns, releasing the GIL), plus the key-group prefix as one scalar. The
buffers stay small (`CHUNK_ROWS` entries per state, in cache) and are handed to the kernel in gathered
writes spanning many key groups. Rows arrive as Arrow tables or batches sorted by key
group (one whole table, or a savepoint read file by file: `statekit.format.keyed_stream`); null
values (a key without that state) are skipped as the general path (`writer.keyed_runs`) skips them,
and the bytes are identical to that path's. Files go to disk around the page cache
(`statekit.format.direct_file`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.format.direct_file import DirectFile

if TYPE_CHECKING:
    from statekit.format.flink.writer import KeyedLayoutOut

PRIMITIVE = {"long": ">i8", "int": ">i4", "short": ">i2", "byte": "i1", "double": ">f8", "float": ">f4",
             "boolean": "u1"}
#: the Arrow column type each primitive serializer is written from in bulk (others take the general path)
ARROW = {"long": pa.int64(), "int": pa.int32(), "short": pa.int16(), "byte": pa.int8(), "double": pa.float64(),
         "float": pa.float32(), "boolean": pa.bool_()}
END_OF_KEY_GROUP = b"\xff\xff"
CHUNK_ROWS = 1 << 16  # entries per state buffer (~1.7 MB for Long/Long): refilled while still in cache


def entry_dtype(nb: int, key_kind: str, value_kind: str) -> np.dtype:
    """One entry ``i32 klen | kg (nb bytes) | key | 0x00 | i32 vlen | value`` as a packed structured dtype."""
    kt, vt = np.dtype(PRIMITIVE[key_kind]), np.dtype(PRIMITIVE[value_kind])
    kw, vw = kt.itemsize, vt.itemsize
    return np.dtype({"names": ["kl", "kg", "k", "ns", "vl", "v"],
                     "formats": [">i4", "u1" if nb == 1 else ">u2", kt, "u1", ">i4", vt],
                     "offsets": [0, 4, 4 + nb, 4 + nb + kw, 5 + nb + kw, 9 + nb + kw],
                     "itemsize": 9 + nb + kw + vw})


def is_regular(layout: "KeyedLayoutOut", schema: pa.Schema) -> bool:
    """Whether `layout`, written from a keyed table of `schema`, is the regular layout (each primitive from
    exactly its Arrow type, so that numpy's assignment cannot narrow a value)."""
    if layout.namespace is not None or layout.key.kind not in ARROW or "key" not in schema.names:
        return False
    if schema.field("key").type != ARROW[layout.key.kind]:
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


class _Out:
    """Per-state entry buffers and the writes of one file (stream positions counted as queued)."""

    def __init__(self, file: DirectFile, pos: int, dtypes: list[np.dtype], cap: int, nb: int) -> None:
        self.file, self.pos, self.cap = file, pos, cap
        self.bufs = []
        for dt in dtypes:
            b = np.empty(cap, dt)
            b["kl"] = nb + dt["k"].itemsize + 1
            b["ns"] = 0
            b["vl"] = dt["v"].itemsize
            self.bufs.append(b)
        self.used = [0] * len(dtypes)
        self.queued: list[bytes | memoryview] = []

    def add(self, data: bytes | memoryview) -> None:
        self.queued.append(data)
        self.pos += len(data)

    def entries(self, sid: int, kg: int, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Queue the entries of `keys`/`values` for state `sid`; the bytes of the last chunk queued."""
        i, n, raw = 0, len(keys), None
        while i < n:
            used = self.used[sid]
            if used == self.cap:
                self.flush()
                used = 0
            m = min(self.cap - used, n - i)
            view = self.bufs[sid][used : used + m]
            view["kg"] = kg
            view["k"] = keys[i : i + m]
            view["v"] = values[i : i + m]
            raw = view.view(np.uint8)
            self.add(raw.data)
            self.used[sid] = used + m
            i += m
        assert raw is not None
        return raw

    def flush(self) -> None:
        """Write everything queued (and free the buffers for reuse)."""
        queued, self.queued = self.queued, []
        self.used = [0] * len(self.used)
        self.file.write(queued)


def write_regular_file(path: Path, layout: "KeyedLayoutOut", tables: Iterable[pa.Table | pa.RecordBatch],
                       start: int, end: int) -> tuple[list[int], int]:
    """One keyed state file of the regular layout for key groups [start, end]: the backend proxy, then the key
    groups of `tables` (`write_regular_key_groups`). Returns the key-group offsets and the file size."""
    proxy = layout.proxy()
    with DirectFile(path) as f:
        f.write([proxy])
        offsets = write_regular_key_groups(f, layout, tables, start, end, len(proxy))
        size = f.close()
    return offsets, size


def write_regular_key_groups(f: DirectFile, layout: "KeyedLayoutOut", tables: Iterable[pa.Table | pa.RecordBatch],
                             start: int, end: int, pos: int, *, cap: int | None = None) -> list[int]:
    """Write key groups [start, end] of the regular layout to `f` at stream position `pos` from `tables`
    (rows sorted by key group across all of them, columns ``key_group``, ``key`` and the states'); returns
    the key-group offsets (0 = empty) like `writer.write_key_groups`. Everything is written on return."""
    nb = layout.prefix_bytes
    states = layout.states
    out = _Out(f, pos, [entry_dtype(nb, layout.key.kind, s.value.kind) for s in states], cap or CHUNK_ROWS, nb)
    sids = [sid.to_bytes(2, "big") for sid in range(len(states))]
    widths = [b.dtype.itemsize for b in out.bufs]
    offsets = [0] * (end - start + 1)
    pending: list[tuple[int, int, np.ndarray, list[tuple[np.ndarray, np.ndarray | None]]]] = []
    group = -1

    def finish_group() -> None:
        """Queue the pending rows of `group`: per state its non-null entries, the last one flagged."""
        wrote = False
        for sid in range(len(states)):
            parts = []
            for a, z, keys, cols in pending:
                values, valid = cols[sid]
                k, v = keys[a:z], values[a:z]
                if valid is not None and not valid[a:z].all():
                    k, v = k[valid[a:z]], v[valid[a:z]]
                if len(k):
                    parts.append((k, v))
            if not parts:
                continue
            if not wrote:
                offsets[group - start] = out.pos
                wrote = True
            out.add(sids[sid])
            for k, v in parts:
                raw = out.entries(sid, group, k, v)
            raw[len(raw) - widths[sid] + 4] |= 0x80  # the state run's last entry: its first key byte
        if wrote:
            out.add(END_OF_KEY_GROUP)
        pending.clear()

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
                    if pending:
                        finish_group()
                    group = g
                pending.append((a, z, keys, cols))
    if pending:
        finish_group()
    out.flush()
    return offsets


__all__ = ["ARROW", "CHUNK_ROWS", "PRIMITIVE", "entry_dtype", "is_regular", "write_regular_file",
           "write_regular_key_groups"]
