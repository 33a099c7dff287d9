"""Native RocksDB keyed state (handle type 11: native savepoints, incremental checkpoints) read from a read-only copy of the backend's files.

Boundary: input is one `IncrementalKeyedHandle` and the proxy of its meta stream; output is the
entries of every keyed state and timer queue in the canonical layout (``kg prefix | key |
namespace [| user key]`` -> value), so `keyed.decode` turns them into the same tables as a canonical
savepoint. The handle's files (shared and private: ``*.sst``, ``MANIFEST-*``, ``CURRENT``,
``OPTIONS-*``) are copied under their RocksDB names into a fresh temporary directory, opened
read-only with rocksdict (one column family per state, named as the state) and removed afterwards:
the input is never opened by RocksDB, let alone written. Flink's ListState merges are resolved by
RocksDB with the merge operator the OPTIONS file names (`StringAppendTESTOperator`, ',').
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from statekit.errors import CorruptSavepointError, UnsafePathError, UnsupportedFormatError
from statekit.extras import require
from statekit.format.flink.binary import DataInput
from statekit.format.flink.files import StateFiles
from statekit.format.flink.keyed import Entries
from statekit.format.flink.metadata import IncrementalKeyedHandle
from statekit.format.flink.proxy import KeyedProxy, read_keyed_proxy

# the files a RocksDB checkpoint consists of; anything else in a handle is refused by name
_ROCKS_FILE = re.compile(r"(\d+\.(sst|blob|log)|MANIFEST-\d+|CURRENT|OPTIONS-\d+|IDENTITY)")
# merge operators RocksDB can rebuild from an OPTIONS file: Flink only ever sets the string-append one.
# A column family with merge operands and no usable operator would crash RocksDB on read, so any
# other value is refused before the database is opened.
_KNOWN_MERGE = re.compile(r"\s*merge_operator=(nullptr|\{id=StringAppendTESTOperator;delimiter=,;\}|StringAppendTESTOperator)\s*")


#: RocksDB's words for files that are damaged or missing (anything else is refused as unsupported)
_DAMAGE = re.compile(r"Corruption|checksum|No such file|truncated|bad magic|bad block|missing", re.IGNORECASE)


@dataclass
class NativeEntries:
    """Entries of one handle in one buffer: state id (index in the proxy), key and value positions."""

    buf: np.ndarray
    sid: np.ndarray
    kp: np.ndarray
    klen: np.ndarray
    vp: np.ndarray
    vlen: np.ndarray


def read_native_proxy(files: StateFiles, h: IncrementalKeyedHandle) -> KeyedProxy:
    """The backend proxy of the handle's meta stream (the same `KeyedBackendSerializationProxy` as canonical)."""
    return read_keyed_proxy(DataInput(files.read(h.meta), files.describe(h.meta)))


def _refuse(root: object, what: str) -> UnsupportedFormatError:
    return UnsupportedFormatError(
        f"{root}: {what}. statekit reads native RocksDB state by opening a copy of its files; for this one, "
        "take a CANONICAL savepoint of the job (flink savepoint --type canonical) and read that instead."
    )


def _materialize(files: StateFiles, h: IncrementalKeyedHandle, into: Path) -> None:
    """Copy the handle's files under their RocksDB names into `into` (sizes checked against `_metadata`)."""
    seen: set[str] = set()
    for local, sh in (*h.shared, *h.private):
        name = Path(local).name
        if name != local.replace("\\", "/").split("/")[-1] or not _ROCKS_FILE.fullmatch(name) or name in seen:
            raise UnsafePathError(
                f"{files.root}/_metadata lists RocksDB file {local!r} for key groups {h.start}-{h.end}; it is not "
                "a RocksDB file name (or is listed twice). The metadata is damaged; take a new savepoint."
            )
        seen.add(name)
        if sh.kind == "bytes":  # small files inlined into _metadata
            (into / name).write_bytes(sh.data or b"")
            continue
        size = files.size(sh)  # missing or short files raise CorruptSavepointError naming the handle
        if size != sh.size:
            raise CorruptSavepointError(
                f"{files.root}: RocksDB file {local} ({files.describe(sh)}) holds {size} bytes but _metadata "
                f"says {sh.size}. The checkpoint is damaged; use another checkpoint or take a new savepoint."
            )
        files.copy_to(sh, into / name)  # only this handle's files; from object storage, downloaded
    if "CURRENT" not in seen or not any(n.startswith("MANIFEST-") for n in seen):
        raise CorruptSavepointError(
            f"{files.root}: the native RocksDB state of key groups {h.start}-{h.end} lacks CURRENT or MANIFEST; "
            "it is incomplete. Use another checkpoint or take a new savepoint."
        )
    options = [n for n in seen if n.startswith("OPTIONS-")]
    if not options:
        raise _refuse(files.root, f"the native RocksDB state of key groups {h.start}-{h.end} has no OPTIONS file")
    text = (into / max(options, key=lambda n: int(n.split("-")[1]))).read_text("utf-8", "replace")
    for line in text.splitlines():
        if line.strip().startswith("merge_operator=") and not _KNOWN_MERGE.fullmatch(line):
            raise _refuse(files.root, f"a column family uses RocksDB merge operator {line.strip()!r}")
    for name in options:
        _keep_inside(into / name)


#: DBOptions naming directories of the machine that wrote the files (RocksDB 6.x as shipped with Flink
#: 1.x records the TaskManager's absolute `wal_dir`); RocksDB refuses to open a database whose `wal_dir`
#: is missing, and must never touch one that exists. Empty means "the database's own directory".
_OUTSIDE_DIRS = re.compile(r"^(\s*(?:wal_dir|db_log_dir)=).*$", re.MULTILINE)


def _keep_inside(options_file: Path) -> None:
    """Point the scratch copy's OPTIONS file at the copy itself (the checkpoint's own file is not touched)."""
    text = options_file.read_text("utf-8", "replace")
    fixed = _OUTSIDE_DIRS.sub(r"\1", text)
    if fixed != text:
        options_file.write_text(fixed, "utf-8")


class NativeDatabases:
    """Read-only scratch copies of native handles' RocksDB databases, opened once and removed by `close`.

    A reader keeps one so that several reads of the same handle (a full read, then `get`s) copy
    and open its files once; `close` (also run when the owner is collected) closes and deletes them.
    """

    def __init__(self) -> None:
        self._open: dict[int, tuple[Any, Path, set[str], Callable[[Exception], str]]] = {}

    def get(self, files: StateFiles, h: IncrementalKeyedHandle) -> tuple[Any, set[str], Callable[[Exception], str]]:
        if id(h) not in self._open:
            self._open[id(h)] = _open_copy(files, h)
        db, _, present, explain = self._open[id(h)]
        return db, present, explain

    def drop(self, h: IncrementalKeyedHandle) -> None:
        got = self._open.pop(id(h), None)
        if got is not None:
            _close(got[0], got[1])

    def close(self) -> None:
        for key in list(self._open):
            db, tmp, _, _ = self._open.pop(key)
            _close(db, tmp)


def _close(db: Any, tmp: Path) -> None:
    try:
        db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _open_copy(files: StateFiles, h: IncrementalKeyedHandle) -> tuple[Any, Path, set[str], Callable[[Exception], str]]:
    require("rocksdb", "Reading Flink's native RocksDB state")
    import rocksdict  # deferred: only native state needs RocksDB

    tmp = Path(tempfile.mkdtemp(prefix="statekit-flink-rocksdb-"))
    origin = {Path(local).name: files.describe(sh) for local, sh in (*h.shared, *h.private)}

    def explain(e: Exception) -> str:
        # RocksDB names the scratch copy; name the checkpoint's file instead
        msg = str(e).replace(f"{tmp}/", "")
        for name, where in origin.items():
            msg = msg.replace(name, f"{name} ({where})")
        return msg

    try:
        _materialize(files, h, tmp)
        try:
            opts, cf_opts = rocksdict.Options.load_latest(str(tmp), ignore_unknown_options=True)
            db = rocksdict.Rdict(str(tmp), options=opts, column_families=cf_opts,
                                 access_type=rocksdict.AccessType.read_only())
        except Exception as e:  # rocksdict raises plain exceptions for corruption and I/O errors
            if not _DAMAGE.search(str(e)):  # e.g. "Invalid argument" / "Not implemented": not the files' fault
                raise _refuse(files.root, f"RocksDB refuses to open the native state of key groups {h.start}-"
                                          f"{h.end}: {explain(e)}") from None
            raise CorruptSavepointError(
                f"{files.root}: RocksDB cannot open the native state of key groups {h.start}-{h.end}: {explain(e)}. "
                "Its files are damaged; use another checkpoint or take a new savepoint."
            ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return db, tmp, set(cf_opts), explain


def read_native(files: StateFiles, h: IncrementalKeyedHandle, proxy: KeyedProxy, prefix_bytes: int,
                key_groups: tuple[int, int] | None = None, dbs: NativeDatabases | None = None) -> NativeEntries:
    """Every entry of the handle's states (keyed and timers) in its key-group range (or only in [lo, hi]).

    Keys start with their key group, so a range is one seek per column family. Without `dbs` the
    scratch copy is made for this call and removed before it returns.
    """
    require("rocksdb", "Reading Flink's native RocksDB state")
    import rocksdict  # deferred: only native state needs RocksDB

    own = dbs is None
    dbs = dbs if dbs is not None else NativeDatabases()
    keys: list[bytes] = []
    vals: list[bytes] = []
    sids: list[int] = []
    try:
        db, present, explain = dbs.get(files, h)
        for sid, meta in enumerate(proxy.states):
            if meta.name not in present:
                continue  # registered but never written: Flink creates the column family lazily
            # after a rescale the database may hold key groups outside the handle's range: RocksDB's
            # iterate bounds skip them. (rocksdict's items() would be faster but ends silently on a
            # damaged block; an iterator's status() reports it.)
            lo, hi = h.start, h.end
            if key_groups is not None:
                lo, hi = max(lo, key_groups[0]), min(hi, key_groups[1])
            ro = rocksdict.ReadOptions()
            ro.set_iterate_lower_bound(lo.to_bytes(prefix_bytes, "big"))
            ro.set_iterate_upper_bound((hi + 1).to_bytes(prefix_bytes, "big"))  # maxP <= 128 (1 B) or 32768 (2 B)
            it = db.get_column_family(meta.name).iter(ro)
            it.seek(lo.to_bytes(prefix_bytes, "big"))  # the lower bound alone does not move seek_to_first
            before = len(keys)
            key, value, step, valid, kadd, vadd = it.key, it.value, it.next, it.valid, keys.append, vals.append
            while valid():
                kadd(key())
                vadd(value())
                step()
            sids.extend([sid] * (len(keys) - before))
            try:
                it.status()
            except Exception as e:
                dbs.drop(h)  # a damaged copy is not kept
                raise CorruptSavepointError(
                    f"{files.root}: reading state {meta.name!r} of key groups {h.start}-{h.end} from RocksDB failed: "
                    f"{explain(e)}. Its files are damaged; use another checkpoint or take a new savepoint."
                ) from None
    finally:
        if own:
            dbs.close()
    return pack_entries(keys, vals, sids)


def pack_entries(keys: list[bytes], vals: list[bytes], sids: list[int]) -> NativeEntries:
    """Entries given as byte strings laid out in one buffer: every key, then every value."""
    n = len(keys)
    klen = np.fromiter(map(len, keys), np.int64, n)
    vlen = np.fromiter(map(len, vals), np.int64, n)
    kp = np.zeros(n, np.int64)
    vp = np.zeros(n, np.int64)
    if n:
        np.cumsum(klen[:-1], out=kp[1:])
        np.cumsum(vlen[:-1], out=vp[1:])
    kblob = b"".join(keys)
    vp += len(kblob)
    buf = np.frombuffer(kblob + b"".join(vals), np.uint8)
    return NativeEntries(buf, np.asarray(sids, np.int64), kp, klen, vp, vlen)


def concat_entries(parts: list[NativeEntries]) -> tuple[np.ndarray, Entries]:
    """One buffer and `keyed.Entries` for the entries of several handles (chain = the part's index)."""
    bases = np.cumsum([0] + [len(p.buf) for p in parts])[:-1]
    buf = np.concatenate([p.buf for p in parts]) if parts else np.zeros(0, np.uint8)

    def cat(f, shift=False):
        arrs = [getattr(p, f) + (b if shift else 0) for p, b in zip(parts, bases)]
        return np.concatenate(arrs) if arrs else np.zeros(0, np.int64)
    chain = np.concatenate([np.full(len(p.kp), i, np.int64) for i, p in enumerate(parts)]) if parts else np.zeros(0, np.int64)
    return buf, Entries(chain, cat("sid"), cat("kp", True), cat("klen"), cat("vp", True), cat("vlen"))
