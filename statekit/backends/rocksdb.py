"""RocksDB keyed state backend: a column family per state behind a write-back cache, native checkpoints.

RocksDB keys are ``key group (2 bytes, big-endian) + ordered key bytes + namespace [+ map key]``,
so a key group's entries are contiguous and iteration order is deterministic. Between checkpoints
writes go to a dict per state and namespace (like the heap backend) and reach RocksDB in one
`WriteBatch` when a dict outgrows its bound, at iteration and at snapshots; the WAL is off because
checkpoints, not RocksDB, are the durability point.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import pyarrow as pa
from rocksdict import Checkpoint, Options, Rdict, WriteBatch, WriteOptions

from statekit.backends.base import VOID_NAMESPACE, KeyedSnapshot
from statekit.backends.slots import Slot, SlotBackend, as_namespace, check_compatible, is_mutable, no_none
from statekit.errors import InvalidArgumentError, NullKeyError, StatekitError, StateTypeError
from statekit.format.keyed_dicts import filter_key_groups, keyed_table_to_dicts
from statekit.format.rocksdb_encoding import KEY_GROUP_PREFIX, encode_namespace, key_codec, successor
from statekit.format.rocksdb_native import (
    NATIVE_SIDECAR,
    codecs,
    decode_entries,
    native_to_arrow,
    read_checkpoint,
    vector_entries,
)
from statekit.keygroups import assign_key_groups
from statekit.state.descriptors import KeyedStateDescriptor, StateInfo, ValueStateDescriptor
from statekit.state.handles import ListState, MapState, ValueState
from statekit.types import to_ddl

__all__ = ["NATIVE_SIDECAR", "RocksDBKeyedStateBackend", "native_to_arrow"]

_MISS: Any = object()
_DEFAULT_CACHE_ENTRIES = 250_000
_MEMTABLE_BYTES = 8 << 20


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    return opts


def _cf_options() -> Options:
    opts = Options(raw_mode=True)
    # small memtables are flushed in the background as they fill, so the flush a checkpoint must
    # do in its synchronous part stays small
    opts.set_write_buffer_size(_MEMTABLE_BYTES)
    opts.set_max_write_buffer_number(4)
    return opts


# --- raw storage of one state: write-back cache in front of a column family ----------------------------


class _RocksSlot(Slot):
    """`Slot` whose dicts are the write-back cache: ``_data`` holds dirty entries (None = deleted),
    ``_rc`` clean entries read from RocksDB; misses go to the column family."""

    __slots__ = ("_cf", "_cfh", "_rc", "_rc_by_ns", "_codec", "_ukc", "_limit")
    if TYPE_CHECKING:
        _b: RocksDBKeyedStateBackend

    def __init__(self, backend: "RocksDBKeyedStateBackend", info: StateInfo, ttl: Any, default: Any = None) -> None:
        super().__init__(backend, info, ttl, default)
        self._rc_by_ns: dict[Any, dict[Any, Any]] = {VOID_NAMESPACE: {}}
        self._rc = self._rc_by_ns.setdefault(backend._ns, {})
        self._cf, self._cfh = backend._column_family(info.name)
        self._codec, self._ukc = codecs(info, ttl is not None)
        self._limit = backend._cache_entries

    def _switch(self, old: Any, new: Any) -> None:
        super()._switch(old, new)
        if not self._rc and old is not None:
            self._rc_by_ns.pop(old, None)
        rc = self._rc_by_ns.get(new)
        if rc is None:
            rc = self._rc_by_ns[new] = {}
        self._rc = rc

    def _dbkey(self, key: Any) -> bytes:
        b = self._b
        return KEY_GROUP_PREFIX[b._kg] + b._kenc(key) + encode_namespace(b._ns)

    def _load(self) -> Any:
        """The current key's stored item from the read cache or RocksDB (None when absent)."""
        k = self._b._key
        rc = self._rc
        v = rc.get(k, _MISS)
        if v is _MISS:
            v = self._read(self._dbkey(k))
            if len(rc) >= self._limit:
                rc.clear()
            rc[k] = v
        return v

    def _read(self, dbkey: bytes) -> Any:
        raw = self._cf.get(dbkey)
        return None if raw is None else self._codec.decode(raw)

    def _dirtied(self, d: dict) -> None:
        if len(d) > self._limit:
            self._b._flush()

    def _write(self, wb: WriteBatch, ns: Any, entries: dict[Any, Any]) -> None:
        """Put `entries` (None = delete) of namespace `ns` into `wb`."""
        keys = list(entries)
        kgs = assign_key_groups(keys, self._b.max_parallelism, self._b.key_type).tolist()
        nsb = encode_namespace(ns)
        kenc, enc, cfh, put, delete = self._b._kenc, self._codec.encode, self._cfh, wb.put, wb.delete
        v = None
        try:
            for k, kg, v in zip(keys, kgs, entries.values()):
                if v is None:
                    delete(KEY_GROUP_PREFIX[kg] + kenc(k) + nsb, cfh)
                else:
                    put(KEY_GROUP_PREFIX[kg] + kenc(k) + nsb, enc(v), cfh)
        except StatekitError:
            raise
        except Exception as exc:  # noqa: BLE001 - any codec failure means the value misfits its type
            raise self._misfit(v, exc) from None

    def _misfit(self, v: Any, exc: Exception) -> StateTypeError:
        return StateTypeError(
            f"state {self.info.name!r}: value {v!r} does not fit its declared type {self.info.type} ({exc}). "
            "Write values of the declared type, or declare a type that holds them."
        )

    def _flush_into(self, wb: WriteBatch) -> int:
        n = 0
        for ns, d in self._by_ns.items():
            if d:
                self._write(wb, ns, d)
                n += len(d)
        return n

    def _after_flush(self) -> None:
        for ns, d in list(self._by_ns.items()):
            if not d:
                continue
            rc = self._rc_by_ns.get(ns)
            if rc is None:
                rc = self._rc_by_ns[ns] = {}
            if len(rc) + len(d) > self._limit:
                rc.clear()
            rc.update(d)  # what was just written is now the clean value
            d.clear()
        current = self._b._ns
        for by in (self._by_ns, self._rc_by_ns):
            for ns in [ns for ns, d in by.items() if not d and ns is not None and ns != current]:
                del by[ns]

    def load(self, by_ns: dict[Any, dict[Any, Any]]) -> None:
        """Write restored entries straight to RocksDB (flushing the cache first so it cannot shadow them)."""
        self._b._flush()
        for rc in self._rc_by_ns.values():
            rc.clear()
        for ns, entries in by_ns.items():
            items = iter(entries.items())
            while True:
                chunk = dict(itertools.islice(items, 200_000))
                if not chunk:
                    break
                wb = WriteBatch(raw_mode=True)
                self._write(wb, ns, chunk)
                self._b._db.write(wb, self._b._wo)


    def _load_encoded(self, dbkeys: list[bytes], values: list[bytes]) -> None:
        """Write restored, already encoded entries straight to RocksDB."""
        self._b._flush()
        for rc in self._rc_by_ns.values():
            rc.clear()
        cfh, step = self._cfh, 200_000
        for lo in range(0, len(dbkeys), step):
            wb = WriteBatch(raw_mode=True)
            put = wb.put
            for k, v in zip(dbkeys[lo : lo + step], values[lo : lo + step]):
                put(k, v, cfh)
            self._b._db.write(wb, self._b._wo)


class RocksValueState(_RocksSlot, ValueState):
    """Value state (and the raw store of reducing/aggregating state) on RocksDB."""

    __slots__ = ()

    def value(self) -> Any:
        v = self._data.get(self._b._key, _MISS)
        if v is _MISS:
            v = self._load()
        return self._default if v is None else v

    def update(self, value: Any) -> None:
        d = self._data
        d[self._b._key] = value  # None is a tombstone: update(None) clears
        if len(d) > self._limit:
            self._b._flush()

    def clear(self) -> None:
        self.update(None)


class RocksMutableValueState(RocksValueState):
    """Value state of a mutable type: reads hand out a private copy while a snapshot shares the cached one."""

    __slots__ = ()

    def value(self) -> Any:
        d, k = self._data, self._b._key
        v = d.get(k, _MISS)
        if v is _MISS:
            v = self._load()
        if v is None:
            return self._default
        fresh = self._b._fresh
        if fresh is not None and id(v) not in fresh:
            v = copy.deepcopy(v)
            d[k] = v
            fresh.add(id(v))
        return v


class RocksListState(_RocksSlot, ListState):
    """List state on RocksDB: one value per key holding the encoded list."""

    __slots__ = ()

    def _current(self) -> Any:
        lst = self._data.get(self._b._key, _MISS)
        return self._load() if lst is _MISS else lst

    def get(self) -> list[Any]:
        lst = self._current()
        return [] if lst is None else list(lst)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateTypeError("list state cannot hold None (Flink forbids null elements); skip it or use a sentinel.")
        lst = self._current()
        d, k = self._data, self._b._key
        if lst is None:
            d[k] = [value]
        else:
            lst = self._own(d, k, lst)  # a pending snapshot may share the cached list
            lst.append(value)
            d[k] = lst
        self._dirtied(d)

    def add_all(self, values: Iterable[Any]) -> None:
        items = no_none(values)
        if items:
            lst = self._current()
            d = self._data
            d[self._b._key] = items if lst is None else lst + items
            self._dirtied(d)

    def update(self, values: Iterable[Any]) -> None:
        items = no_none(values)
        d = self._data
        d[self._b._key] = items or None
        self._dirtied(d)

    def clear(self) -> None:
        d = self._data
        d[self._b._key] = None
        self._dirtied(d)


class RocksMapState(_RocksSlot, MapState):
    """Map state on RocksDB: one RocksDB entry per map key; the cache holds whole maps of recent keys."""

    __slots__ = ()

    def _read(self, dbkey: bytes) -> Any:
        decode_uk, decode = self._ukc[1], self._codec.decode
        m = {}
        n = len(dbkey)
        for k, raw in self._cf.items(from_key=dbkey):
            if not k.startswith(dbkey):  # type: ignore[union-attr, arg-type]  # raw mode: keys are bytes (the stub lists every mode's types)
                break
            m[decode_uk(k, n)[0]] = decode(raw)
        return m or None

    def _write(self, wb: WriteBatch, ns: Any, entries: dict[Any, Any]) -> None:
        keys = list(entries)
        kgs = assign_key_groups(keys, self._b.max_parallelism, self._b.key_type).tolist()
        nsb = encode_namespace(ns)
        kenc, ukenc, enc, cfh = self._b._kenc, self._ukc[0], self._codec.encode, self._cfh
        for k, kg, m in zip(keys, kgs, entries.values()):
            prefix = KEY_GROUP_PREFIX[kg] + kenc(k) + nsb
            wb.delete_range(prefix, successor(prefix), cfh)  # the cached map replaces what was stored
            if m:
                for uk, v in m.items():
                    try:
                        value = enc(v)
                    except Exception as exc:  # noqa: BLE001 - a codec failure means the value misfits
                        raise self._misfit(v, exc) from None
                    wb.put(prefix + ukenc(uk), value, cfh)

    def _current(self) -> Any:
        m = self._data.get(self._b._key, _MISS)
        return self._load() if m is _MISS else m

    def _store(self, m: Any) -> None:
        d = self._data
        d[self._b._key] = m or None
        self._dirtied(d)

    def get(self, key: Any) -> Any:
        m = self._current()
        return None if m is None else m.get(key)

    def put(self, key: Any, value: Any) -> None:
        if key is None:
            raise NullKeyError("map state keys cannot be None (Flink forbids null map keys).")
        m = self._current()
        m = {} if m is None else self._own(self._data, self._b._key, m)
        m[key] = value
        self._store(m)

    def put_all(self, mapping: Any) -> None:
        pairs = dict(mapping.items() if hasattr(mapping, "items") else mapping)
        if None in pairs:
            raise NullKeyError("map state keys cannot be None (Flink forbids null map keys); nothing was put.")
        if pairs:
            m = self._current()
            self._store(pairs if m is None else {**m, **pairs})

    def remove(self, key: Any) -> None:
        m = self._current()
        if m is not None and key in m:
            m = self._own(self._data, self._b._key, m)
            del m[key]
            self._store(m)

    def contains(self, key: Any) -> bool:
        m = self._current()
        return m is not None and key in m

    def keys(self) -> list[Any]:
        m = self._current()
        return [] if m is None else list(m)

    def values(self) -> list[Any]:
        m = self._current()
        return [] if m is None else list(m.values())

    def items(self) -> list[tuple[Any, Any]]:
        m = self._current()
        return [] if m is None else list(m.items())

    def is_empty(self) -> bool:
        return self._current() is None

    def clear(self) -> None:
        self._store(None)


# --- the backend -----------------------------------------------------------------------------------------


class RocksDBKeyedStateBackend(SlotBackend[_RocksSlot]):
    """Keyed state in RocksDB (rocksdict, raw mode) under ``directory/db``, one column family per state.

    Parameters
    ----------
    cache_entries
        Bound of each write-back and read cache dict (per state and namespace). Larger caches mean
        fewer, bigger write batches; every cached entry is written at the next snapshot anyway.
    **kwargs
        As for `KeyedStateBackend`. Without `directory` a temporary directory is used and removed
        on `close`. An existing ``directory/db`` (a previous attempt's working copy) is discarded:
        state comes back through `restore`.
    """

    if TYPE_CHECKING:
        directory: Path  # set in __init__ (a temporary directory when none is given)

    def __init__(self, *, cache_entries: int = _DEFAULT_CACHE_ENTRIES, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._own_dir: Path | None = None
        if self.directory is None:
            self._own_dir = Path(tempfile.mkdtemp(prefix="statekit-rocksdb-"))
            self.directory = self._own_dir
        self.directory = Path(self.directory)
        self._path = self.directory / "db"
        if self._path.exists():
            shutil.rmtree(self._path)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._db = Rdict(str(self._path), _options())
        self._wo = WriteOptions()
        self._wo.disable_wal = True  # type: ignore[method-assign, assignment]  # a property at runtime; the stub says method
        self._cache_entries = max(1, int(cache_entries))
        self._kenc, self._kdec = key_codec(self.key_type)
        self._cfs: dict[str, tuple[Rdict, Any]] = {}
        self._seq = itertools.count()

    def _column_family(self, name: str) -> tuple[Rdict, Any]:
        if name not in self._cfs:
            cf = self._db.create_column_family(name, _cf_options())
            self._cfs[name] = (cf, self._db.get_column_family_handle(name))
        return self._cfs[name]

    def _new_slot(self, info: StateInfo, ttl: Any, default: Any) -> _RocksSlot:
        if info.kind == "list":
            return RocksListState(self, info, ttl)
        if info.kind == "map":
            return RocksMapState(self, info, ttl)
        cls = RocksMutableValueState if is_mutable(info) else RocksValueState
        return cls(self, info, ttl, default)

    def _flush(self) -> None:
        """Write every cached change to RocksDB in one batch."""
        wb = WriteBatch(raw_mode=True)
        n = 0
        for slot in self._slots.values():
            n += slot._flush_into(wb)
        if n:
            self._db.write(wb, self._wo)
        for slot in self._slots.values():
            slot._after_flush()

    # -- registration of restored state --------------------------------------------------------------------
    def get_state(self, descriptor: KeyedStateDescriptor) -> Any:
        if not isinstance(descriptor, KeyedStateDescriptor):
            return super().get_state(descriptor)  # raises the error naming the descriptor
        name = descriptor.name
        slot = self._slots.get(name)
        if slot is not None and name not in self._handles:
            # restored before registration: keep the column family when it is stored the same way
            info = descriptor.info()
            check_compatible(slot.info, info, "was restored")
            if (slot.ttl is None) == (descriptor.ttl is None):
                slot.info, slot.ttl = info, descriptor.ttl
                if isinstance(descriptor, ValueStateDescriptor) and descriptor.ttl is None:
                    slot._default = descriptor.default
                handle = self._wrap(descriptor, slot)
                self._handles[name] = (descriptor, handle)
                return handle
            self._pending[name] = (slot.info, self._plain(slot))
            del self._slots[name]
            self._db.drop_column_family(name)
            del self._cfs[name]
        return super().get_state(descriptor)

    def restore(self, tables: Sequence[pa.Table], infos: Sequence[StateInfo]) -> None:
        for table in tables:
            self._namespaced = self._namespaced or "namespace" in table.column_names
            table, kg = filter_key_groups(
                table, key_type=self.key_type, max_parallelism=self.max_parallelism, key_group_range=self.key_group_range
            )
            rest = []
            for info in infos:
                if info.name not in table.column_names:
                    continue
                slot = self._slots.get(info.name)
                if slot is not None:
                    check_compatible(slot.info, info, "is registered")
                encoded = vector_entries(table, kg, info, self.key_type) if slot is None or slot.ttl is None else None
                if encoded is None:
                    rest.append(info)
                    continue
                if slot is None:
                    slot = self._slots[info.name] = self._new_slot(info, None, None)
                slot._load_encoded(*encoded)
            if not rest:
                continue
            parsed, _ = keyed_table_to_dicts(
                table,
                rest,
                key_type=self.key_type,
                max_parallelism=self.max_parallelism,
                key_group_range=self.key_group_range,
                trust_pickled=self.trust_pickled,
            )
            for name, (info, by_ns) in parsed.items():
                slot = self._slots.get(name)
                if slot is None:
                    slot = self._slots[name] = self._new_slot(info, None, None)
                slot.load(self._to_stored(slot.info, slot.ttl, by_ns))

    # -- iteration -----------------------------------------------------------------------------------------------
    def _plain(self, slot: Slot) -> dict[Any, dict[Any, Any]]:
        """Every live entry of `slot` as plain values (TTL removed), straight from RocksDB."""
        self._flush()
        cf = self._cfs[slot.info.name][0]
        rs: Any = slot
        # raw mode yields (bytes, bytes); rocksdict's stub types RdictItems as iterating over itself
        by_ns = decode_entries(cf.items(), slot.info, self._kdec, rs._codec, rs._ukc)  # type: ignore[arg-type]
        export = self._export(slot, self.clock())
        if export is None:
            return by_ns
        out: dict[Any, dict[Any, Any]] = {}
        for ns, d in by_ns.items():
            live = {k: p for k, p in ((k, export(v)) for k, v in d.items()) if p is not None}
            if live:
                out[ns] = live
        return out

    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        return iter(list(self._plain(self._slot(state_name)).get(as_namespace(namespace), {})))

    def namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        by_ns = self._plain(self._slot(state_name))
        return iter([(k, ns) for ns, d in by_ns.items() for k in d])

    # -- checkpoints ------------------------------------------------------------------------------------------
    def _checkpoint(self, target: Path, checkpoint_id: int, now: int, *, flush: bool = True) -> tuple[str, ...]:
        if target.exists():
            if any(target.iterdir()):
                raise InvalidArgumentError(f"checkpoint directory {target} is not empty; give a new directory.")
            target.rmdir()  # RocksDB creates the directory itself
        target.parent.mkdir(parents=True, exist_ok=True)
        if flush:
            self._flush()
        # flushes the memtables, then hard-links the SST files: files shared with earlier checkpoints
        # are not rewritten
        Checkpoint(self._db).create_checkpoint(str(target))
        sidecar = {
            "format": "statekit-rocksdb-native",
            "format_version": 1,
            "checkpoint_id": checkpoint_id,
            "snapshot_time_ms": now,
            "key_type": to_ddl(self.key_type),
            "max_parallelism": self.max_parallelism,
            "key_group_range": [self.key_group_range.start, self.key_group_range.end],
            "states": [s.info.to_json() for s in self._slots.values()],
            "ttl_stamped": [s.info.name for s in self._slots.values() if s.ttl is not None],
            "namespaced": self._namespaced,
        }
        (target / NATIVE_SIDECAR).write_text(json.dumps(sidecar, indent=1))
        return tuple(sorted(os.listdir(target)))

    def _adopt_pending(self) -> None:
        # restored state of no registered descriptor goes into RocksDB so native checkpoints carry it
        for name, (info, by_ns) in list(self._pending.items()):
            slot = self._slots[name] = self._new_slot(info, None, None)
            slot.load(by_ns)
            del self._pending[name]

    def snapshot(self, checkpoint_id: int, *, native: bool = False, target_dir: Path | None = None) -> KeyedSnapshot:
        self._adopt_pending()
        now = self.clock()
        infos = self.state_infos()
        if native:
            if target_dir is None:
                raise InvalidArgumentError("a native snapshot needs target_dir, the directory to write it to.")
            target = Path(target_dir)
            return KeyedSnapshot(infos, native_dir=target, native_files=self._checkpoint(target, checkpoint_id, now))
        # rocksdict's snapshot iterators do not read at the snapshot, so the consistent copy is a
        # private checkpoint (memtable flush + hard links) plus a shallow copy of the write-back
        # cache; materialize() overlays the cache on the checkpoint and removes the checkpoint
        private = self.directory / "snapshots" / f"chk-{checkpoint_id}-{next(self._seq)}"
        overlay = {s.info.name: {ns: dict(d) for ns, d in s._by_ns.items() if d} for s in self._slots.values()}
        self._checkpoint(private, checkpoint_id, now, flush=False)
        states = [(s.info, s.ttl is not None, self._export(s, now)) for s in self._slots.values()]
        parts: list[Any] = [states, overlay]
        key_type, m, namespaced = self.key_type, self.max_parallelism, self._namespaced

        def build() -> pa.Table:
            try:
                return read_checkpoint(
                    private, key_type=key_type, max_parallelism=m, states=parts[0], overlays=parts[1],
                    raw_pickles=False, namespaced=namespaced,
                )  # fmt: skip
            finally:
                shutil.rmtree(private, ignore_errors=True)

        return KeyedSnapshot(infos, materialize=self._shared_snapshot(parts, build))

    def close(self) -> None:
        self._slots.clear()
        self._handles.clear()
        self._pending.clear()
        self._cfs.clear()
        db, self._db = self._db, None  # type: ignore[assignment]
        if db is not None:
            db.close()
            del db
            shutil.rmtree(self._path, ignore_errors=True)
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
