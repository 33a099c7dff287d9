"""Stream handles to bytes: relative, absolute and inline handles resolved inside the savepoint (or the checkpoint's job directory).

Boundary: the only module of `statekit.format.flink` that opens state files, local or on object storage
(`statekit.format.storage.StoragePath`: ranged requests instead of memory maps). A savepoint's
handles resolve inside its own directory; a retained checkpoint (`chk-N/_metadata`) may also
reach its job directory's `shared/` and `taskowned/` folders, including absolute paths written on
another machine (relocated by their last two path components). Nothing outside is ever read.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from statekit.errors import CorruptSavepointError, UnsafePathError
from statekit.format.flink.metadata import StreamHandle
from statekit.format.storage import StoragePath

_CHECKPOINT_DIR = re.compile(r"chk-\d+")
_JOB_ID = re.compile(r"[0-9a-f]{32}")
_JOB_SUBDIRS = ("shared", "taskowned")
#: ranges at least this long are memory-mapped rather than copied (`StateFiles.range_array`)
MAP_MIN_BYTES = 8 << 20


class StateFiles:
    """Resolves and reads the stream handles of one `_metadata` at `root`."""

    def __init__(self, root: Path | StoragePath) -> None:
        self.root = root.resolve()
        #: on object storage: ranges are fetched by requests, worth overlapping with decoding
        self.remote = isinstance(self.root, StoragePath)
        # a retained checkpoint's handles may point at ../shared and ../taskowned of the job directory
        self.scope = self.root.parent if _CHECKPOINT_DIR.fullmatch(self.root.name) else self.root
        # ...and, after a restore in CLAIM mode, at ../../<previous job id>/shared of the same checkpoint base
        self.base = self.scope.parent if self.scope != self.root and _JOB_ID.fullmatch(self.scope.name) else None
        # on object storage: the sizes of the files under `root`, from one listing when first needed (a savepoint
        # is immutable; a HEAD request per state file and per read was most of a one-key get's requests)
        self._sizes: dict[str, int] | None = None
        self._sizes_lock = threading.Lock()  # headers are fetched on several threads (reader.layout)

    def _inside(self, p: Any, shown: str, scope: Any = None) -> Any:
        full = p.resolve()
        scope = scope or self.scope
        if full != scope and scope not in full.parents:
            raise UnsafePathError(
                f"{self.root}/_metadata names state file {shown!r}, which lies outside the savepoint "
                f"({self.scope}); refusing to read it. Move the savepoint together with its files."
            )
        return full

    def path(self, h: StreamHandle) -> Path | StoragePath:
        """The local file of a relative or absolute handle."""
        if h.kind == "relative":
            if not h.path or "\x00" in h.path or os.path.isabs(h.path):
                raise UnsafePathError(f"{self.root}/_metadata names relative state file {h.path!r}; it is malformed.")
            return self._inside(self.root / h.path, h.path)
        if h.kind != "file":
            raise ValueError("inline handles have no file")
        raw = re.sub(r"^file:(//)?", "", h.path)
        parts = [x for x in raw.replace("\\", "/").split("/") if x]
        if not parts:
            raise UnsafePathError(f"{self.root}/_metadata names state file {h.path!r}; it is malformed.")
        name = parts[-1]
        parent = parts[-2] if len(parts) > 1 else ""
        candidates = []
        if parent in _JOB_SUBDIRS or _CHECKPOINT_DIR.fullmatch(parent):
            candidates.append(self.scope / parent / name)
        if isinstance(self.root, StoragePath):  # an absolute URI written by the job: the same object when on this store
            uri = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://(.*)$", h.path)
            candidates += [self.root / name] + ([self.root.at(uri.group(1).strip("/"))] if uri else [])
        else:
            candidates += [self.root / name, Path("/" + "/".join(parts))]
        for c in candidates:
            try:
                full = self._inside(c, h.path)
            except UnsafePathError:
                continue
            if full.is_file():
                return full
        job = parts[-3] if len(parts) > 2 else ""
        if self.base is not None and parent == "shared" and _JOB_ID.fullmatch(job) and job != self.scope.name:
            # a file the job this one was restored from uploaded (CLAIM mode): a sibling job directory
            full = self._inside(self.base / job / parent / name, h.path, self.base)
            if full.is_file():
                return full
        return self._inside(candidates[0], h.path)  # missing: reported by the reader with the handle's name

    def describe(self, h: StreamHandle) -> str:
        return f"inline state {h.path!r} of {self.root}/_metadata" if h.kind == "bytes" else f"state file {h.path}"

    def _stat_size(self, p: Path | StoragePath) -> int:
        if isinstance(p, StoragePath) and isinstance(self.root, StoragePath) and self.root in p.parents:
            with self._sizes_lock:
                if self._sizes is None:
                    self._sizes = self.root.file_sizes()
            size = self._sizes.get(p.path)
            if size is None:
                raise FileNotFoundError(2, "No such object", str(p))
            return size
        return p.stat().st_size

    def _open_checked(self, h: StreamHandle) -> tuple[Path | StoragePath, int]:
        p = self.path(h)
        try:
            size = self._stat_size(p)
        except FileNotFoundError:
            raise CorruptSavepointError(
                f"{self.root}: state file {h.path!r} named by _metadata is missing. The savepoint is incomplete; "
                "copy it again with all its files."
            ) from None
        if size < h.size:
            raise CorruptSavepointError(
                f"{self.root}: state file {h.path!r} holds {size} bytes but _metadata says {h.size}; it is "
                "truncated. Copy the savepoint again or take a new one."
            )
        return p, size

    def size(self, h: StreamHandle) -> int:
        if h.kind == "bytes":
            return len(h.data or b"")
        return self._open_checked(h)[1]

    def read(self, h: StreamHandle) -> bytes:
        if h.kind == "bytes":
            return h.data or b""
        p, _ = self._open_checked(h)
        return p.read_bytes()

    def read_many(self, handles: list[StreamHandle]) -> tuple[np.ndarray, list[int]]:
        """The streams of `handles` in one buffer, and each stream's base offset in it."""
        sizes = [self.size(h) for h in handles]
        buf = np.empty(sum(sizes), np.uint8)
        bases, pos = [], 0
        for h, n in zip(handles, sizes):
            bases.append(pos)
            if h.kind == "bytes":
                buf[pos : pos + n] = np.frombuffer(h.data or b"", np.uint8)
            else:
                with self.path(h).open("rb") as f:
                    got = f.readinto(buf[pos : pos + n].data)
                if got != n:
                    raise CorruptSavepointError(f"{self.root}: state file {h.path!r} changed while being read.")
            pos += n
        return buf, bases

    def range_array(self, h: StreamHandle, lo: int, hi: int, into: np.ndarray | None = None) -> np.ndarray:
        """Bytes [lo, hi) of a stream as a read-only uint8 array: memory-mapped when long, copied when short.

        Why a mapping: a full read of a large savepoint copied every state file into fresh memory, and a
        fresh process spent more time in the kernel (first touch of that memory) than decoding it. The
        mapping is Arrow's (`pyarrow.memory_map`), so it is unmapped by Arrow when the last array over
        it is gone, never freed through Python objects. Decoded columns never point into it: every
        decoder copies into Arrow-owned memory (`statekit.format.arrow_memory`). As with any mapping, a
        file truncated by another process while it is being decoded ends the process (SIGBUS); a file
        found shorter than `_metadata` says before mapping is a `CorruptSavepointError`.

        `into`: on object storage, a writable uint8 array of at least ``hi - lo`` bytes to read into (memory
        the caller reuses, see `StoragePath.read_range_into`); the result is then its first ``hi - lo`` bytes.
        Local files are mapped either way.
        """
        if h.kind == "bytes":
            data = h.data or b""
            if hi > len(data):
                raise CorruptSavepointError(f"{self.root}: {self.describe(h)} holds {len(data)} bytes, fewer than "
                                            f"_metadata's offsets need ({hi}). The savepoint is damaged; take a new one.")
            return np.frombuffer(data, np.uint8)[lo:hi]
        p, size = self._open_checked(h)
        if hi > size:
            raise CorruptSavepointError(
                f"{self.root}: _metadata points at offset {hi} of state file {h.path!r}, past its end "
                f"({size} bytes). The savepoint is damaged; take a new one."
            )
        if isinstance(p, StoragePath):  # ranged requests (in parallel when long) into one read-only buffer
            if into is not None:
                p.read_range_into(lo, into[: hi - lo])
                got = into[: hi - lo]
                got.flags.writeable = False  # as every other range: decoders only read
                return got
            return p.read_range_array(lo, hi)
        if hi - lo >= MAP_MIN_BYTES:
            mapped = pa.memory_map(str(p), "r")
            buf = mapped.read_buffer()  # zero-copy: a slice of the mapping, which keeps it alive
            mapped.close()
            if buf.size < hi:  # shortened since it was checked
                raise CorruptSavepointError(f"{self.root}: state file {h.path!r} is shorter than expected "
                                            f"({buf.size} < {hi} bytes); it changed while being read.")
            return np.frombuffer(buf, np.uint8)[lo:hi]
        out = np.empty(hi - lo, np.uint8)
        with open(p, "rb") as f:
            f.seek(lo)
            if f.readinto(out.data) != hi - lo:
                raise CorruptSavepointError(f"{self.root}: state file {h.path!r} is shorter than expected; it "
                                            "changed while being read.")
        out.flags.writeable = False
        return out

    def copy_to(self, h: StreamHandle, target: Path) -> None:
        """Copy a file handle's bytes into the new local file `target` (streamed; from object storage, downloaded)."""
        src = self.path(h)
        if isinstance(src, StoragePath):
            src.download(target)
        else:
            shutil.copyfile(src, target)  # streamed by the kernel; the source is only read

    def read_range(self, h: StreamHandle, start: int, end: int) -> bytes:
        """Bytes [start, end) of a stream (end clipped to the stream's size)."""
        if h.kind == "bytes":
            return (h.data or b"")[start:end]
        p, size = self._open_checked(h)
        if start > size:
            raise CorruptSavepointError(
                f"{self.root}: _metadata points at offset {start} of state file {h.path!r}, past its end "
                f"({size} bytes). The savepoint is damaged; take a new one."
            )
        if isinstance(p, StoragePath):
            return p.read_range(start, max(0, min(end, size) - start)).to_pybytes()
        with open(p, "rb") as f:
            f.seek(start)
            return f.read(max(0, min(end, size) - start))
