"""`FlinkStateReader`: one Flink savepoint or checkpoint, its operators' keyed, timer and operator state as Arrow/Python data.

Boundary: ties `metadata`, `files`, `proxy` and `keyed` together per operator: which handles
hold its keyed state, which bytes of which stream a key-group range needs (so one key reads one
key group), Snappy-framed key groups, and operator list/union/broadcast state. It knows nothing
of statekit's manifest or Savepoint API (`statekit.savepoint.flink` presents it that way).
"""

from __future__ import annotations

import functools
import os
import struct
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from statekit.errors import CorruptSavepointError, StatekitError, UnsupportedFormatError
from statekit.format.arrow_memory import allocate, small_pages
from statekit.format.flink import keyed as K
from statekit.format.flink.binary import DataInput
from statekit.format.flink.checkpoints import is_heap_stream, read_heap
from statekit.format.flink.files import StateFiles
from statekit.format.flink.locate import DecodeStats, Located, corrupt, locate
from statekit.format.flink.metadata import (
    CheckpointMetadata,
    IncrementalKeyedHandle,
    KeyedHandle,
    KeyGroupsHandle,
    OperatorState,
    StreamHandle,
    read_metadata,
)
from statekit.format.flink.native import NativeDatabases, concat_entries, read_native, read_native_proxy
from statekit.format.flink.proxy import KeyedProxy, OperatorProxy, StateMeta, read_operator_proxy
from statekit.format.flink.snappy import unframe_snappy
from statekit.format.flink.values import reader


def _refuse_stale_compressed_offsets(states, where: str) -> None:
    """Refuse a compressed operator-state stream whose elements share offsets (FLINK-34063).

    Flink flushes its Snappy buffer before recording each element's offset, so every offset starts a chunk
    and no two elements share one. Flink 1.18.0/1.18.1 did not flush: their offsets repeat a stale chunk
    start, and reading at them yields the first element again and again (Flink's own restore fails too).
    """
    seen = [o for s in states for o in s.offsets]
    if len(seen) != len(set(seen)):
        raise CorruptSavepointError(
            f"{where}: several list elements share one offset in a Snappy-compressed operator state stream, the "
            "mark of Flink 1.18.0/1.18.1's compression bug FLINK-34063 (fixed in Flink 1.19): its element "
            "positions were never recorded, and Flink cannot restore this operator state either. Keyed state "
            "and uncompressed streams are unaffected; take the savepoint again without "
            "execution.checkpointing.snapshot-compression or with Flink 1.19 or later."
        )



def _typed(method):
    """Damaged bytes that slip past the explicit checks still end in a `CorruptSavepointError`, never a bare one."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except StatekitError:
            raise
        except (IndexError, KeyError, ValueError, TypeError, OverflowError, struct.error, pa.ArrowException) as exc:
            raise CorruptSavepointError(
                f"{self.root}: state could not be decoded ({type(exc).__name__}: {exc}); the savepoint is damaged "
                "or was not written by Flink. Take a new savepoint or restore this one from a copy."
            ) from exc

    return wrapper


@dataclass(frozen=True)
class OperatorStateValue:
    """Operator state as stored: per subtask a list (split/union), or the broadcast map (one copy)."""

    meta: StateMeta
    mode: str  # split | union | broadcast
    per_subtask: list[list[Any]]
    entries: list[tuple[Any, Any]] | None = None


#: key groups are decoded in batches of about this many bytes (see `FlinkStateReader.read_keyed`)
BATCH_BYTES = 32 << 20
#: threads decoding the batches of a large read
_THREADS = min(4, os.cpu_count() or 1)
#: batches of a read from object storage fetched at once. Two: ranged requests of a batch each download as fast on two
#: threads as on four (S3Proxy on this machine kind: 520 MB in 0.27 s either way), and every further place in the
#: window is one more fresh batch buffer, whose first touch costs the kernel ~0.4 ms per MB
_FETCHES = 2


#: fetched batches of a read from object storage that may wait for their decoder at once (memory: as many batches)
_WINDOW = 2 * _FETCHES


class _Window:
    """At most `n` fetched batches not yet decoded: a fetch waits for a place, a decoded batch gives it back.

    Each place keeps its memory: a batch is read into a buffer a decoded batch gave back (decoded columns
    never point into the bytes they came from), so a read touches fresh pages for `n` batches, not for
    every one (the kernel's first touch of fresh memory cost more CPU than the download).
    """

    def __init__(self, n: int) -> None:
        self._places = threading.Semaphore(n)
        self._closed = False
        self._free: list[np.ndarray] = []  # buffers of decoded batches
        self._lent: dict[int, np.ndarray] = {}  # id of a fetched batch's bytes -> the buffer they lie in
        self._lock = threading.Lock()

    def fetch(self, read: Any, *args: Any, size: int) -> Any:
        """``read(*args, into=buffer)`` with a buffer of at least `size` bytes, once a place is free."""
        self._places.acquire()
        if self._closed:  # the read ended (an error): fetch nothing more
            raise RuntimeError("the read was abandoned")
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if len(b) >= size]
            buf = self._free.pop(fits[0]) if fits else None
            if buf is None and self._free:
                self._free.pop()  # too small: dropped, so that no more than `n` buffers ever exist
        if buf is None:  # with room to spare: batches differ in size by up to a key group
            buf, _ = allocate(max(size, BATCH_BYTES) * 5 // 4, np.uint8)
        try:
            got = read(*args, into=buf)
        except BaseException:
            with self._lock:
                self._free.append(buf)
            raise
        with self._lock:
            self._lent[id(got)] = buf
        return got

    def done(self, got: Any = None) -> None:
        """A fetched batch is decoded (`got`, its bytes), or its fetch failed: its place and buffer are free again."""
        with self._lock:
            buf = self._lent.pop(id(got), None) if got is not None else None
            if buf is not None:
                self._free.append(buf)
        self._places.release()

    def close(self) -> None:
        """Wake every fetch still waiting (they then fetch nothing): the read is over."""
        self._closed = True
        for _ in range(_FETCHES):
            self._places.release()


def _batches(chains: list[tuple[int, int, int, int]],
             batch_bytes: int | None = None) -> list[list[tuple[int, int, int, int]]]:
    """Consecutive chains (segment, key group, start, limit) in groups of about `batch_bytes` (`BATCH_BYTES`)."""
    batch_bytes = BATCH_BYTES if batch_bytes is None else batch_bytes  # read now: tests make batches small
    out: list[list[tuple[int, int, int, int]]] = []
    size = batch_bytes
    for c in chains:
        if size >= batch_bytes:
            out.append([])
            size = 0
        out[-1].append(c)
        size += c[3] - c[2]
    return out


def _concat(tables: list[pa.Table]) -> pa.Table:
    """Per-stream tables as one (their columns chunked); a stream decoded another way may differ in field details."""
    try:
        return pa.concat_tables(tables)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.concat_tables([t.cast(tables[0].schema) for t in tables])


class FlinkStateReader:
    """Reads state of a Flink savepoint (or retained checkpoint) directory."""

    def __init__(self, path: Any) -> None:  # a path or a statekit.format.storage.StoragePath
        self.metadata: CheckpointMetadata = read_metadata(path)
        self.root = self.metadata.path
        self.files = StateFiles(self.root)
        self._proxies: dict[int, KeyedProxy] = {}
        self._layouts: dict[int, str] = {}
        self._native = NativeDatabases()  # scratch copies of native RocksDB state, removed with the reader
        weakref.finalize(self, self._native.close)
        self._op_streams: dict[tuple[str, int], tuple[OperatorProxy, bytes, dict[int, int] | None]] = {}

    # -- keyed -----------------------------------------------------------------------------------
    def keyed_handles(self, op: OperatorState) -> list[KeyedHandle]:
        """The operator's managed keyed handles by key-group range: canonical, heap-checkpoint or native RocksDB."""
        out = [st.managed_keyed for st in op.subtasks if st.managed_keyed is not None]
        return sorted(out, key=lambda h: h.start)

    def handle_layout(self, h: KeyedHandle) -> str:
        """``canonical`` (savepoints, RocksDB full checkpoints), ``heap`` (HashMap checkpoints) or ``native`` (RocksDB files)."""
        if isinstance(h, IncrementalKeyedHandle):
            return "native"
        if id(h) not in self._layouts:
            self._layouts[id(h)] = "heap" if is_heap_stream(self.files, h) else "canonical"
        return self._layouts[id(h)]

    def proxy(self, h: KeyedHandle) -> KeyedProxy:
        key = id(h)
        if key not in self._proxies:
            if isinstance(h, IncrementalKeyedHandle):
                self._proxies[key] = read_native_proxy(self.files, h)
            else:
                self._proxies[key] = K.read_proxy(self.files, h)
        return self._proxies[key]

    @_typed
    def layout(self, op: OperatorState) -> K.KeyedLayout | None:
        handles = self.keyed_handles(op)
        if not handles:
            return None
        missing = [h for h in handles if id(h) not in self._proxies]
        if self.files.remote and len(missing) > 1:  # each header is a request or two: sent together, not in turn
            with ThreadPoolExecutor(min(4, len(missing)), thread_name_prefix="statekit-flink-headers") as pool:
                list(pool.map(self.proxy, missing))
        return K.layout([self.proxy(h) for h in handles], op.max_parallelism, f"{self.root} operator {op.operator_id}")

    @property
    def native(self) -> NativeDatabases:
        """The scratch copies of native RocksDB state this reader opened (removed with the reader)."""
        return self._native

    def key_group_spans(self, h: KeyGroupsHandle) -> list[tuple[int, int, int]]:
        """(key group, start, end) in its stream of every non-empty key group of a canonical handle."""
        return self._key_group_spans(h)

    @_typed
    def _key_group_spans(self, h: KeyGroupsHandle) -> list[tuple[int, int, int]]:
        """(key group, start, end) in its stream of every non-empty key group of a canonical handle."""
        size = self.files.size(h.delegate)
        nz = sorted({o for o in h.offsets if o})
        if nz and nz[-1] >= size:
            raise CorruptSavepointError(
                f"{self.root}: _metadata points at offset {nz[-1]} of {self.files.describe(h.delegate)}, past "
                f"its end ({size} bytes). The savepoint is damaged; take a new one."
            )
        nxt = {o: (nz[i + 1] if i + 1 < len(nz) else size) for i, o in enumerate(nz)}
        return [(h.start + i, o, nxt[o]) for i, o in enumerate(h.offsets) if o]

    def key_group_batches(self, op: OperatorState, batch_bytes: int | None = None) -> list[tuple[int, int]]:
        """(first, last) key group of each batch `read_keyed` would decode (about `batch_bytes` of one stream), in
        order; the operator's handles must be canonical."""
        out = []
        for h in self.keyed_handles(op):
            assert isinstance(h, KeyGroupsHandle)
            chains = [(0, kg, o, end) for kg, o, end in self._key_group_spans(h)]
            out += [(batch[0][1], batch[-1][1]) for batch in _batches(chains, batch_bytes)]
        return out

    def read_keyed(self, op: OperatorState, *, key_groups: tuple[int, int] | None = None,
                   stats: DecodeStats | None = None) -> K.KeyedResult:
        """The keyed and timers tables of `op`, optionally only key groups [start, end] (reading only their bytes)."""
        lay = self.layout(op)
        if lay is None:
            raise ValueError("operator has no keyed state")
        stats = stats if stats is not None else DecodeStats()
        handles = self.keyed_handles(op)
        if any(self.handle_layout(h) != "canonical" for h in handles):
            return self._read_keyed_entries(op, lay, handles, key_groups, stats)
        segments: list[tuple[StreamHandle, int, int]] = []  # (stream, lo, hi) to read
        chains: list[tuple[int, int, int, int]] = []  # (segment, kg, start, limit) relative to the stream
        compressed: list[bool] = []
        sid_maps = []
        for hi_, h in enumerate(handles):
            assert isinstance(h, KeyGroupsHandle)  # every handle is canonical here (checked above)
            proxy = self.proxy(h)
            picked = [(kg, o, end) for kg, o, end in self._key_group_spans(h)
                      if key_groups is None or key_groups[0] <= kg <= key_groups[1]]
            if not picked:
                continue
            lo = min(o for _, o, _ in picked)
            hi = max(end for _, _, end in picked)
            seg = len(segments)
            segments.append((h.delegate, lo, hi))
            compressed.append(proxy.compressed)
            sid_maps.append(dict(enumerate(proxy.states)))
            chains.extend((seg, kg, o - lo, end - lo) for kg, o, end in picked)
        where = f"{self.root} operator {op.uid or op.operator_id}"
        # Each stream is decoded straight from its own (mapped) bytes in batches of whole key groups, and the
        # tables concatenated. Why batches: the decoder's scratch arrays are a few times the bytes decoded;
        # per batch they stay small enough to be reused from one batch to the next instead of being fresh
        # memory the kernel must hand out (a fresh process spent more time there than decoding). Large reads
        # decode batches on `_THREADS` threads (numpy releases the GIL in its loops), each batch with its own
        # stats, merged in order. Streams hold disjoint key-group ranges in handle order, so rows stay in
        # key-group order.
        chains.sort(key=lambda c: (c[0], c[1]))
        jobs: list[tuple[Any, list[tuple[int, int, int, int]], int, DecodeStats]] = []
        if not self.files.remote:
            for seg, (stream, lo, hi) in enumerate(segments):
                buf = self.files.range_array(stream, lo, hi)
                jobs += [(buf, batch, seg, DecodeStats()) for batch in _batches([c for c in chains if c[0] == seg])]
            return self._decode_jobs(lay, jobs, segments, compressed, sid_maps, where, stats)
        # On object storage each batch is its own ranged request, fetched on `_FETCHES` threads in order while the
        # batches before it decode: the download overlaps the decoding instead of preceding it (a whole stream
        # per request left every decoder idle until the last stream arrived). At most `_WINDOW` fetched batches
        # wait for their decoder, which bounds the memory of a read to about that many batches.
        window = _Window(_WINDOW)
        fetch = ThreadPoolExecutor(_FETCHES, thread_name_prefix="statekit-fetch")
        try:
            for seg, (stream, lo, hi) in enumerate(segments):
                for batch in _batches([c for c in chains if c[0] == seg]):
                    blo, bhi = min(c[2] for c in batch), max(c[3] for c in batch)
                    got = fetch.submit(window.fetch, self.files.range_array, stream, lo + blo, lo + bhi,
                                       size=bhi - blo)
                    jobs.append((got, [(s, kg, a - blo, b - blo) for s, kg, a, b in batch], seg, DecodeStats()))
            return self._decode_jobs(lay, jobs, segments, compressed, sid_maps, where, stats, window)
        finally:
            window.close()
            fetch.shutdown(wait=True, cancel_futures=True)

    def _decode_jobs(self, lay: K.KeyedLayout, jobs: list, segments: list, compressed: list[bool],
                     sid_maps: list[dict[int, StateMeta]], where: str, stats: DecodeStats,
                     window: "_Window | None" = None) -> K.KeyedResult:
        """Decode the batches `jobs` (a stream's bytes, or the future of the batch's bytes, with its key groups), in
        order; each fetched batch gives its place in `window` back once decoded."""

        def run(job: tuple[Any, list[tuple[int, int, int, int]], int, DecodeStats]) -> K.KeyedResult:
            buf, batch, seg, own = job
            if not isinstance(buf, Future):
                return self._decode_segment(lay, buf, batch, seg, compressed, sid_maps, where, own)
            got = None
            try:
                got = buf.result()
                return self._decode_segment(lay, got, batch, seg, compressed, sid_maps, where, own)
            finally:
                if window is not None:
                    window.done(got)

        threads = min(_THREADS, len(jobs)) if sum(hi - lo for _, lo, hi in segments) >= 2 * BATCH_BYTES else 1
        if threads > 1:
            with small_pages(), ThreadPoolExecutor(threads, thread_name_prefix="statekit-flink-read") as pool:
                results = list(pool.map(run, jobs))
        else:
            results = [run(j) for j in jobs]
        for j in jobs:
            stats.merge(j[3])
        if len(results) == 1:
            return results[0]
        if not results:
            return K.decode(lay, np.zeros(0, np.uint8), Located([], K.Entries.concat([])), np.zeros(0, np.int64),
                            np.zeros(0, np.int64), sid_maps, where, stats)
        return K.KeyedResult(_concat([r.table for r in results]), _concat([r.timers for r in results]))

    def _decode_segment(self, lay: K.KeyedLayout, buf: np.ndarray, chains: list[tuple[int, int, int, int]], seg: int,
                        compressed: list[bool], sid_maps: list[dict[int, StateMeta]], where: str,
                        stats: DecodeStats) -> K.KeyedResult:
        """The key groups `chains` (segment, key group, start, limit) of one stream's bytes `buf`."""
        starts = np.array([c[2] for c in chains], np.int64)
        limits = np.array([c[3] for c in chains], np.int64)
        seg_of_chain = np.full(len(chains), seg, np.int64)
        if compressed[seg]:
            buf, starts, limits = self._unframe_key_groups(buf, starts, limits, seg_of_chain, compressed, where)
        chain_kg = np.array([c[1] for c in chains], np.int64)
        P = lay.prefix_bytes
        located = locate(buf, starts, limits, where, stats, chain_kg=chain_kg, prefix_bytes=P,
                         value_width=K.value_width(lay),
                         string_keys=lay.key_type.kind == "string" and lay.namespace_type is None)
        # every entry must carry the key group it is stored under: `locate` proved it for runs (and scans)
        ch = located.chained
        if len(ch):
            first = buf[ch.kp].astype(np.int64) & 0x7F
            got = (first << 8 | buf[ch.kp + 1]) if P == 2 else first
            if not np.array_equal(got, chain_kg[ch.chain]):
                raise corrupt(where, "an entry's key-group prefix differs from the key group it is stored in")
        return K.decode(lay, buf, located, seg_of_chain, chain_kg, sid_maps, where, stats)

    def _read_keyed_entries(self, op: OperatorState, lay: K.KeyedLayout, handles: list[KeyedHandle],
                            key_groups: tuple[int, int] | None, stats: K.DecodeStats) -> K.KeyedResult:
        """Native RocksDB and heap-checkpoint handles: their entries re-laid canonically, then decoded as usual."""
        where = f"{self.root} operator {op.uid or op.operator_id}"
        kinds = {self.handle_layout(h) for h in handles}
        if len(kinds) > 1:
            raise UnsupportedFormatError(f"{where}: subtasks mix keyed state layouts {sorted(kinds)}; take a canonical savepoint.")
        parts = []
        for h in handles:
            if key_groups is not None and (h.end < key_groups[0] or h.start > key_groups[1]):
                continue
            if isinstance(h, IncrementalKeyedHandle):
                parts.append(read_native(self.files, h, self.proxy(h), lay.prefix_bytes, key_groups, self._native))
            else:
                parts.append(read_heap(self.files, h, self.proxy(h), lay.prefix_bytes, key_groups))
        kept = [h for h in handles if key_groups is None or not (h.end < key_groups[0] or h.start > key_groups[1])]
        buf, entries = concat_entries(parts)
        return K.decode(lay, buf, Located([], entries), np.arange(len(parts), dtype=np.int64), None,
                        [dict(enumerate(self.proxy(h).states)) for h in kept], where, stats)

    def _unframe_key_groups(self, buf, starts, limits, seg_of_chain, compressed, where):
        pieces, new_starts, new_limits, pos = [], [], [], 0
        for s, lim, seg in zip(starts.tolist(), limits.tolist(), seg_of_chain.tolist()):
            data = buf[s:lim].tobytes()
            if compressed[seg]:
                data, _ = unframe_snappy(data, f"{where} (Snappy key group at {s})")
            pieces.append(np.frombuffer(data, np.uint8))
            new_starts.append(pos)
            pos += len(data)
            new_limits.append(pos)
        out = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
        return out, np.array(new_starts, np.int64), np.array(new_limits, np.int64)

    # -- operator state ----------------------------------------------------------------------------
    def operator_proxy(self, op: OperatorState, subtask: int) -> tuple[OperatorProxy, bytes, dict[int, int] | None]:
        """The operator-state proxy of one subtask, its stream (decompressed) and the offset map if compressed."""
        key = (op.operator_id, subtask)
        if key not in self._op_streams:
            st = op.subtasks[subtask]
            h = st.managed_operator
            assert h is not None
            where = f"{self.root}: {self.files.describe(h.delegate)}"
            data = self.files.read(h.delegate)
            proxy = read_operator_proxy(DataInput(data, where))
            mapping = None
            if proxy.compressed:
                body, at = unframe_snappy(memoryview(data)[proxy.end :], where)
                data = data[: proxy.end] + body
                mapping = {proxy.end + k: proxy.end + v for k, v in at.items()}
            self._op_streams[key] = (proxy, data, mapping)
        return self._op_streams[key]

    @_typed
    def operator_states(self, op: OperatorState) -> dict[str, StateMeta]:
        out: dict[str, StateMeta] = {}
        for i, st in enumerate(op.subtasks):
            if st.managed_operator is not None:
                for m in self.operator_proxy(op, i)[0].states:
                    seen = out.setdefault(m.name, m)
                    if seen.raw != m.raw:
                        raise CorruptSavepointError(
                            f"{self.root}: subtasks of operator {op.uid or op.operator_id} disagree on the meta "
                            f"info of operator state {m.name!r}; the savepoint is damaged."
                        )
        return out

    @_typed
    def read_operator_state(self, op: OperatorState, name: str) -> OperatorStateValue:
        where = f"{self.root} operator {op.uid or op.operator_id} state {name!r}"
        per_subtask: list[list[Any]] = [[] for _ in range(max(op.parallelism, len(op.subtasks)))]
        meta: StateMeta | None = None
        mode = "split"
        entries = None
        for i, st in enumerate(op.subtasks):
            h = st.managed_operator
            if h is None:
                continue
            found = [s for s in h.states if s.name == name]
            proxy, data, mapping = self.operator_proxy(op, i)
            if not found and any(m.name == name for m in proxy.states):
                raise CorruptSavepointError(f"{where}: the stream declares the state but _metadata has no offsets for it")
            if not found:
                continue
            meta = next((m for m in proxy.states if m.name == name), None)
            if meta is None:
                raise CorruptSavepointError(f"{where}: _metadata lists the state but its stream does not declare it")
            entry = found[0]
            mode = entry.mode
            all_offsets = sorted({self._map(o, mapping, where) for s in h.states for o in s.offsets} | {len(data)})
            if mapping is not None:
                _refuse_stale_compressed_offsets(h.states, where)
            offsets = [self._map(o, mapping, where) for o in entry.offsets]
            if any(not 0 < o < len(data) for o in offsets):
                raise CorruptSavepointError(
                    f"{where}: _metadata points at an element offset past the end of its stream ({len(data)} "
                    "bytes). The savepoint is damaged; take a new one."
                )
            mv = memoryview(data)
            if mode == "broadcast":
                if entries is None and offsets:
                    inp = DataInput(mv, where, pos=offsets[0])
                    kr, vr = reader(meta.serializers["KEY_SERIALIZER"]), reader(meta.value_type)
                    entries = [(kr(inp), vr(inp)) for _ in range(inp.count("the broadcast state size"))]
                continue
            t = meta.value_type
            for o in offsets:
                end = all_offsets[all_offsets.index(o) + 1] if o in all_offsets else len(data)
                if not t.decodable:
                    per_subtask[st.index].append(bytes(mv[o:end]))
                    continue
                inp = DataInput(mv, where, pos=o, end=len(data))
                per_subtask[st.index].append(reader(t)(inp))
        if meta is None:
            raise CorruptSavepointError(f"{where}: no subtask's stream holds this state")
        return OperatorStateValue(meta, mode, per_subtask, entries)

    @staticmethod
    def _map(o: int, mapping: dict[int, int] | None, where: str) -> int:
        if mapping is None:
            return o
        if o not in mapping:
            raise CorruptSavepointError(f"{where}: offset {o} is not a chunk boundary of the compressed stream")
        return mapping[o]
