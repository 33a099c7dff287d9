"""HashMap-backend checkpoint streams (handle type 12 in a retained `chk-N`), re-laid as canonical entries.

Boundary: input is one `KeyGroupsHandle` whose stream the heap backend wrote for a checkpoint
(`HeapSnapshotStrategy`); output is its entries in the canonical layout (``kg prefix | key |
namespace [| user key]`` -> value) so that `keyed.decode` builds the usual tables. The heap
checkpoint layout differs from a canonical savepoint's: at each key group's offset
``i32 keyGroup``, then for every registered state ``i16 stateId`` followed by
``i32 n`` × (namespace, key, value) written by the state's own serializers (a list is
``ListSerializer``: count + elements; a map is ``MapSerializer``: count + (key, null flag, value)),
and for a timer queue ``i32 n`` × timer (``TimerSerializer``). Entries carry no lengths, so every
serializer involved must be decodable; Kryo/Avro state in a heap checkpoint is refused by name.
With snapshot compression each state's part of a key group is its own Snappy framed stream.
RocksDB full checkpoints also use type 12 but write the canonical layout: `is_heap_stream` tells
them apart by the key-group number the heap layout puts at each offset.
"""

from __future__ import annotations

from statekit.errors import CorruptSavepointError, UnsupportedFormatError
from statekit.format.flink.binary import DataInput
from statekit.format.flink.files import StateFiles
from statekit.format.flink.metadata import KeyGroupsHandle
from statekit.format.flink.native import NativeEntries, pack_entries
from statekit.format.flink.proxy import KeyedProxy, StateMeta
from statekit.format.flink.serializers import FlinkType
from statekit.format.flink.values import reader

HEAP_CHECKPOINT_HANDLE = 12


def is_heap_stream(files: StateFiles, h: KeyGroupsHandle) -> bool:
    """Whether a type-12 stream has the heap layout (``i32 keyGroup`` at every offset) rather than the canonical one.

    Canonical key groups start with ``i16 stateId`` and ``i32 keyLength``; read as an i32 that is
    ``stateId << 16``, which equals a key group >= 1 never. The heap layout writes every key group
    of its range, so checking the non-zero offsets of key groups >= 1 is decisive.
    """
    if h.type != HEAP_CHECKPOINT_HANDLE:
        return False
    probes = [(h.start + i, o) for i, o in enumerate(h.offsets) if o and h.start + i >= 1][:4]
    if not probes:
        probes = [(h.start + i, o) for i, o in enumerate(h.offsets) if o][:1]
    if not probes:
        return False
    for kg, o in probes:
        if files.read_range(h.delegate, o, o + 4) != kg.to_bytes(4, "big", signed=True):
            return False
    return True


def _skipper(t: FlinkType, where: str, what: str):
    if not t.decodable:
        raise UnsupportedFormatError(
            f"{where}: {what} uses serializer {t.serializer}, whose values carry no length in a HashMap checkpoint, "
            "so statekit cannot find where they end. Take a CANONICAL savepoint of the job and read that instead."
        )
    return reader(t)


def read_heap(files: StateFiles, h: KeyGroupsHandle, proxy: KeyedProxy, prefix_bytes: int,
              key_groups: tuple[int, int] | None = None) -> NativeEntries:
    """Every entry of a heap checkpoint stream (optionally only key groups [lo, hi]) in the canonical layout."""
    where = f"{files.root}: {files.describe(h.delegate)}"
    data = files.read(h.delegate)
    size = len(data)
    nz = sorted({o for o in h.offsets if o} | {size})
    region_end = dict(zip(nz, nz[1:]))
    key_type = proxy.key_type
    rkey = _skipper(key_type, where, "the key")
    plan = [_plan(s, where) for s in proxy.states]
    keys: list[bytes] = []
    vals: list[bytes] = []
    sids: list[int] = []
    for i, off in enumerate(h.offsets):
        kg = h.start + i
        if not off or (key_groups is not None and not key_groups[0] <= kg <= key_groups[1]):
            continue
        if off >= size:
            raise CorruptSavepointError(
                f"{files.root}: _metadata points at offset {off} of {files.describe(h.delegate)}, past its end "
                f"({size} bytes). The checkpoint is damaged; use another checkpoint."
            )
        inp = DataInput(data, where, pos=off)
        got = inp.i32("a key-group number")
        if got != kg:
            raise inp.fail(f"key group {kg} starts with key-group number {got}")
        body = data
        if proxy.compressed:
            # snapshot compression: after the plain key-group number, each state's part is its own Snappy
            # framed stream (HeapSnapshotStrategy); decoded back to back they are the uncompressed layout
            from statekit.format.flink.snappy import unframe_snappy

            body, _ = unframe_snappy(memoryview(data)[inp.pos : region_end[off]], f"{where} (key group {kg})")
            inp = DataInput(body, f"{where} (key group {kg}, decompressed)")
        prefix = kg.to_bytes(prefix_bytes, "big")
        for _ in proxy.states:
            sid = inp.i16("a state id")
            if not 0 <= sid < len(plan):
                raise inp.fail(f"state id {sid} is not one of the {len(plan)} states the stream declares")
            _read_state(inp, plan[sid], sid, prefix, rkey, body, keys, vals, sids)
    return pack_entries(keys, vals, sids)


def _plan(meta: StateMeta, where: str) -> tuple:
    """How to read one state's entries: (kind, namespace reader, value readers...)."""
    vt = meta.value_type
    if meta.backend_type == "PRIORITY_QUEUE":
        if vt.kind != "timer":
            raise UnsupportedFormatError(
                f"{where}: priority queue {meta.name!r} holds {vt.serializer} elements; statekit reads timer queues."
            )
        return ("timers", _skipper(vt.children[0], where, f"the key of {meta.name!r}"),
                _skipper(vt.children[1], where, f"the namespace of {meta.name!r}"))
    rns = _skipper(meta.serializers["NAMESPACE_SERIALIZER"], where, f"the namespace of {meta.name!r}")
    kind = meta.keyed_kind
    if kind == "list":
        return ("list", rns, _skipper(vt.children[0], where, f"state {meta.name!r}"))
    if kind == "map":
        return ("map", rns, _skipper(vt.children[0], where, f"the map keys of {meta.name!r}"),
                _skipper(vt.children[1], where, f"the map values of {meta.name!r}"))
    return ("value", rns, _skipper(vt, where, f"state {meta.name!r}"))


def _read_state(inp: DataInput, plan: tuple, sid: int, prefix: bytes, rkey, data: bytes,
                keys: list, vals: list, sids: list) -> None:
    kind = plan[0]
    n = inp.count("a number of entries")
    if kind == "timers":
        _, rk, rn = plan
        for _ in range(n):
            a = inp.pos
            inp.skip(8, "a timer timestamp")
            rk(inp)
            rn(inp)
            keys.append(prefix + data[a : inp.pos])
            vals.append(b"")
            sids.append(sid)
        return
    rns = plan[1]
    for _ in range(n):
        a = inp.pos
        rns(inp)
        b = inp.pos
        rkey(inp)
        c = inp.pos
        composite = prefix + data[b:c] + data[a:b]  # canonical order: key, then namespace
        if kind == "value":
            plan[2](inp)
            keys.append(composite)
            vals.append(data[c : inp.pos])
            sids.append(sid)
        elif kind == "list":
            parts = []
            for _ in range(inp.count("a list size")):
                e = inp.pos
                plan[2](inp)
                parts.append(data[e : inp.pos])
            if parts:  # Flink writes no entry for an empty list
                keys.append(composite)
                vals.append(b",".join(parts))
                sids.append(sid)
        else:
            for _ in range(inp.count("a map size")):
                e = inp.pos
                plan[2](inp)
                uk = data[e : inp.pos]
                f = inp.pos
                if not inp.bool("a map null flag"):
                    plan[3](inp)
                keys.append(composite + uk)
                vals.append(data[f : inp.pos])
                sids.append(sid)
