"""RocksDB files as keyed tables: the stored layout, column-wise encoding for restores, and checkpoint reading."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.extras import require

# before rocksdict is imported: without the extra, a typed error naming the install, not an ImportError
require("rocksdb", "Native RocksDB state (the RocksDB backend, native checkpoints)")

from rocksdict import AccessType, Options, Rdict

from statekit.errors import CorruptSavepointError, StatekitError
from statekit.format.arrow_memory import copy_buffer
from statekit.format.keyed_dicts import dicts_to_keyed_table
from statekit.format.rocksdb_encoding import KEY_GROUP_PREFIX, ValueCodec, decode_namespace, encode_namespace, key_codec
from statekit.format.ttl import ttl_export
from statekit.keygroups import KeyGroupRange
from statekit.state.descriptors import StateInfo
from statekit.types import parse_ddl

__all__ = ["NATIVE_SIDECAR", "codecs", "decode_entries", "native_to_arrow", "read_checkpoint", "vector_entries"]

#: File statekit adds to a native checkpoint: when it was taken (for TTL) and what it holds.
NATIVE_SIDECAR = "statekit-native.json"

_MISS: Any = object()


def codecs(info: StateInfo, ttl: bool, *, raw_pickles: bool = False) -> tuple[ValueCodec, Any]:
    """(value codec, ordered map-key codec or None) of a state as stored in its column family."""
    t = info.arrow_type
    if info.kind == "list":
        return ValueCodec(t.value_type, pickled=info.pickled, raw_pickles=raw_pickles, ttl=ttl, element=True), None
    if info.kind == "map":
        codec = ValueCodec(t.item_type, pickled=info.pickled, raw_pickles=raw_pickles, ttl=ttl, nullable=True)
        return codec, key_codec(t.key_type)
    return ValueCodec(t, pickled=info.pickled, raw_pickles=raw_pickles, ttl=ttl), None


# --- restoring keyed tables column-wise -------------------------------------------------------------------

_VECTOR_VALUES = {pa.int8(): "<i1", pa.int16(): "<i2", pa.int32(): "<i4", pa.int64(): "<i8",
                  pa.float32(): "<f4", pa.float64(): "<f8", pa.bool_(): "u1"}  # fmt: skip
_VECTOR_KEYS = {pa.int32(): (">u4", 1 << 31), pa.int64(): (">u8", 1 << 63)}


def _fixed_binary(data: bytes, width: int, n: int) -> pa.Array:
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, copy_buffer(data)]).cast(pa.binary())


def vector_entries(table: pa.Table, kg: Any, info: StateInfo, key_type: pa.DataType) -> tuple[list, list] | None:
    """RocksDB keys and values of a plain value state, encoded column-wise with Arrow and numpy.

    Restoring row by row costs microseconds per row in Python; this path covers the common case
    (non-pickled bigint/double/string... values, integer or string keys without NUL characters,
    no window namespaces) and returns None otherwise, leaving it to the general path.
    """
    col = table.column(info.name)
    if info.kind not in ("value", "reducing", "aggregating") or info.pickled or col.type != info.arrow_type:
        return None
    vt = info.arrow_type
    if vt not in _VECTOR_VALUES and not pa.types.is_string(vt):
        return None
    if "namespace" in table.column_names and table.column("namespace").null_count < table.num_rows:
        return None
    key_col = table.column("key")
    if key_col.type != key_type or not (key_type in _VECTOR_KEYS or pa.types.is_string(key_type)):
        return None
    if pa.types.is_string(key_type) and pc.any(pc.match_substring(key_col, "\x00")).as_py():
        return None  # NUL characters need escaping: the general path does that
    valid = col.is_valid()
    if col.null_count:
        col, key_col, kg = col.filter(valid), key_col.filter(valid), kg[valid.to_numpy(zero_copy_only=False)]
    n = len(col)
    col, key_col = col.combine_chunks(), key_col.combine_chunks()
    prefix = _fixed_binary(kg.astype(">u2").tobytes(), 2, n)
    if pa.types.is_string(key_type):
        key_bytes, suffix = key_col.cast(pa.binary()), b"\x00\x01" + encode_namespace(None)
    else:
        dtype, bias = _VECTOR_KEYS[key_type]
        unsigned = key_col.to_numpy().astype(dtype[1:].replace("u", "i")).view(dtype[1:]) ^ np.array(bias, dtype[1:])
        key_bytes, suffix = _fixed_binary(unsigned.astype(dtype).tobytes(), int(dtype[-1]), n), encode_namespace(None)
    dbkeys = pc.binary_join_element_wise(prefix, key_bytes, pa.scalar(suffix, pa.binary()), pa.scalar(b"", pa.binary()))
    if pa.types.is_string(vt):
        values = col.cast(pa.binary())
    else:
        fmt = _VECTOR_VALUES[vt]
        values = _fixed_binary(col.to_numpy(zero_copy_only=False).astype(fmt).tobytes(), int(np.dtype(fmt).itemsize), n)
    return dbkeys.to_pylist(), values.to_pylist()


# --- reading checkpoints ---------------------------------------------------------------------------------


def decode_entries(
    items: Iterable[tuple[bytes, bytes]], info: StateInfo, kdec: Any, codec: ValueCodec, ukc: Any
) -> dict[Any, dict[Any, Any]]:
    """``{namespace: {key: stored item}}`` from a column family's ``(RocksDB key, value)`` pairs."""
    by_ns: dict[Any, dict[Any, Any]] = {}
    decode = codec.decode
    d: dict[Any, Any] = {}
    last_ns: Any = _MISS
    if info.kind == "map":
        decode_uk = ukc[1]
        for dbkey, raw in items:
            key, pos = kdec(dbkey, 2)
            ns, pos = decode_namespace(dbkey, pos)
            if ns != last_ns:
                d = by_ns.setdefault(ns, {})
                last_ns = ns
            m = d.get(key)
            if m is None:
                m = d[key] = {}
            m[decode_uk(dbkey, pos)[0]] = decode(raw)
        return by_ns
    for dbkey, raw in items:
        key, pos = kdec(dbkey, 2)
        ns = None if dbkey[pos] == 0 else decode_namespace(dbkey, pos)[0]
        if ns != last_ns:
            d = by_ns.setdefault(ns, {})
            last_ns = ns
        d[key] = decode(raw)
    return by_ns


def _range_items(cf: Rdict, key_groups: KeyGroupRange | None) -> Iterator[tuple[bytes, bytes]]:
    """Entries of `cf` in `key_groups` (all when None), raising if RocksDB stops early on damage."""
    start = None if key_groups is None else KEY_GROUP_PREFIX[key_groups.start]
    stop = None if key_groups is None else (key_groups.end + 1).to_bytes(2, "big")
    last = None
    # raw mode: keys and values are bytes (rocksdict's stub lists the types of every mode)
    items: Iterable[tuple[bytes, bytes]] = cf.items() if start is None else cf.items(from_key=start)  # type: ignore[assignment]
    for k, v in items:
        if stop is not None and k >= stop:
            return  # reached the bound, so nothing before it was skipped
        last = k
        yield k, v
    _check_complete(cf, last, start)


def _check_complete(cf: Rdict, last: bytes | None, start: bytes | None) -> None:
    # rocksdict's item iterators end silently when RocksDB reports an error (a damaged block), so
    # a scan that ended without reaching a bound must have seen the column family's last key
    it = cf.iter()
    it.seek_to_last()
    if it.valid():
        true_last = it.key()
        if true_last != last and (start is None or true_last >= start):
            raise CorruptSavepointError(
                f"a scan of column family data stopped at {last!r} before its last key {true_last!r} "
                "(RocksDB could not read a block)"
            )
        return
    it.status()  # raises the error that invalidated the iterator, if any
    if last is not None:
        raise CorruptSavepointError("RocksDB could not read the last entries of a column family")


def read_checkpoint(
    path: Path,
    *,
    key_type: pa.DataType,
    max_parallelism: int,
    states: Sequence[tuple[StateInfo, bool, Callable[[Any], Any] | None]],
    key_groups: KeyGroupRange | None = None,
    overlays: dict[str, dict[Any, dict[Any, Any]]] | None = None,
    raw_pickles: bool = True,
    namespaced: bool = False,
) -> pa.Table:
    """The keyed table of the RocksDB checkpoint at `path` (opened read-only in place).

    `overlays` are cached entries newer than the checkpoint, per state: ``{ns: {key: item or None}}``.
    Pickled values pass through as bytes when `raw_pickles` (readers that must not unpickle);
    otherwise they are unpickled, which only the backend that wrote them may do.
    """
    names = set(Rdict.list_cf(str(path), Options(raw_mode=True)))
    families = {n: Options(raw_mode=True) for n in names if n != "default"}
    db = Rdict(str(path), Options(raw_mode=True), column_families=families, access_type=AccessType.read_only())
    try:
        kdec = key_codec(key_type)[1]
        parts = []
        for info, stamped, export in states:
            by_ns: dict[Any, dict[Any, Any]] = {}
            if info.name in names:
                codec, ukc = codecs(info, stamped, raw_pickles=raw_pickles)
                by_ns = decode_entries(_range_items(db.get_column_family(info.name), key_groups), info, kdec, codec, ukc)
            for ns, newer in (overlays or {}).get(info.name, {}).items():
                d = by_ns.setdefault(ns, {})
                for k, v in newer.items():
                    if v is None:
                        d.pop(k, None)
                    else:
                        d[k] = v
            parts.append((info, by_ns, export))
        return dicts_to_keyed_table(
            key_type=key_type, max_parallelism=max_parallelism, states=parts, pickle_values=not raw_pickles,
            namespaced=namespaced,
        )  # fmt: skip
    finally:
        db.close()
        del db


def _finite_number(v: Any) -> bool:
    return type(v) in (int, float) and abs(v) < 2**63


def native_to_arrow(
    directory: str | os.PathLike[str],
    *,
    key_type: Any,
    infos: Sequence[StateInfo],
    max_parallelism: int,
    key_groups: KeyGroupRange | None = None,
) -> pa.Table:
    """The keyed table held by a native RocksDB checkpoint, as the canonical format would hold it.

    The checkpoint is never modified: it is opened read-only from a temporary copy whose SST files
    are hard links (copies across file systems). Entries whose TTL had expired when the checkpoint
    was taken are left out, as canonical snapshots leave them out.

    Parameters
    ----------
    directory
        A directory written by ``snapshot(..., native=True, target_dir=directory)``.
    key_type, infos, max_parallelism
        The operator's key type (DDL or Arrow), keyed state infos and max parallelism (from the manifest).
    key_groups
        Read only these key groups (a range scan: other key groups are not read).

    Raises
    ------
    CorruptSavepointError
        If the directory is not a RocksDB checkpoint or a file in it is damaged.
    """
    src = Path(directory)
    if not (src / "CURRENT").is_file():
        raise CorruptSavepointError(
            f"{src} is not a RocksDB checkpoint (no CURRENT file); pass the directory a native snapshot wrote."
        )
    key_type = parse_ddl(key_type) if isinstance(key_type, str) else key_type
    sidecar: dict[str, Any] = {}
    if (src / NATIVE_SIDECAR).is_file():
        try:
            sidecar = json.loads((src / NATIVE_SIDECAR).read_text())
        except (ValueError, OSError) as exc:
            raise CorruptSavepointError(f"{src / NATIVE_SIDECAR} is unreadable ({exc}).") from None
        if not (isinstance(sidecar, dict)
                and isinstance(sidecar.get("ttl_stamped", []), list)
                and all(isinstance(n, str) for n in sidecar.get("ttl_stamped", []))
                and (sidecar.get("snapshot_time_ms") is None or _finite_number(sidecar["snapshot_time_ms"]))
                and isinstance(sidecar.get("namespaced", False), bool)):
            raise CorruptSavepointError(
                f"{src / NATIVE_SIDECAR} does not hold ttl_stamped (a list of state names), snapshot_time_ms (an "
                "number) and namespaced (true/false); the native checkpoint is damaged."
            )
    stamped = set(sidecar.get("ttl_stamped", [i.name for i in infos if i.ttl_ms is not None]))
    now = sidecar.get("snapshot_time_ms")
    states = [
        (
            info,
            info.name in stamped,
            ttl_export(info.kind, info.ttl_ms, now) if info.name in stamped and info.ttl_ms and now is not None else None,
        )
        for info in infos
    ]
    tmp = Path(tempfile.mkdtemp(prefix="statekit-native-"))
    try:
        work = tmp / "db"
        work.mkdir()
        for entry in src.iterdir():
            if entry.name == NATIVE_SIDECAR or not entry.is_file():
                continue
            try:
                os.link(entry, work / entry.name) if entry.suffix == ".sst" else shutil.copy2(entry, work / entry.name)
            except OSError:
                shutil.copy2(entry, work / entry.name)
        return read_checkpoint(
            work, key_type=key_type, max_parallelism=max_parallelism, states=states, key_groups=key_groups,
            namespaced=bool(sidecar.get("namespaced", False)),
        )  # fmt: skip
    except StatekitError as exc:
        if not isinstance(exc, CorruptSavepointError):
            raise
        raise CorruptSavepointError(
            f"native RocksDB checkpoint {src} cannot be read: {exc}. The files are damaged or incomplete; "
            "restore from another checkpoint or savepoint."
        ) from exc
    except Exception as exc:  # noqa: BLE001 - RocksDB and decoding failures alike mean damaged files
        raise CorruptSavepointError(
            f"native RocksDB checkpoint {src} cannot be read: {exc}. The files are damaged or incomplete; "
            "restore from another checkpoint or savepoint."
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
