"""Sources: collections, files (Parquet, JSON lines, CSV) and user SourceFunctions, all replayable from a checkpointed offset."""

from __future__ import annotations

import csv
import inspect
import itertools
import json
import logging
import threading
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

from statekit.errors import InvalidArgumentError, JobError
from statekit.runtime.operators import StreamOperator
from statekit.runtime.watermarks import MAX_WATERMARK, MIN_WATERMARK
from statekit.state.descriptors import ListStateDescriptor

END = object()  # a source is exhausted
#: How long closing a job waits for a user source's thread to return from ``run`` after ``cancel``.
SOURCE_JOIN_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


class FileSource:
    """A bounded file source of rows (dicts); its offset (rows emitted) is checkpointed, so replay is exact.

    Examples
    --------
    >>> src = FileSource.json_lines("/data/events.jsonl")
    >>> src.format
    'jsonl'
    """

    shared = True

    def __init__(self, path: str | Path, format: str, *, csv_options: dict | None = None,
                 version: int | None = None) -> None:  # fmt: skip
        if format not in ("parquet", "jsonl", "csv", "delta"):
            raise InvalidArgumentError(f"unknown file format {format!r}; use 'parquet', 'jsonl', 'csv' or 'delta'")
        self.path = Path(path)
        self.format = format
        self.csv_options = dict(csv_options or {})
        self.version = version
        self._delta: Any = None
        if format == "delta":
            from statekit.format.delta import delta_snapshot

            self._delta = delta_snapshot(self.path, version)
            self.version = self._delta.version

    @classmethod
    def parquet(cls, path: str | Path) -> "FileSource":
        """Rows of a Parquet file, or of every ``*.parquet`` file of a directory in name order."""
        return cls(path, "parquet")

    @classmethod
    def json_lines(cls, path: str | Path) -> "FileSource":
        """One JSON object per line."""
        return cls(path, "jsonl")

    @classmethod
    def csv(cls, path: str | Path, **csv_options: Any) -> "FileSource":
        """CSV with a header row; values stay strings (convert them in a map)."""
        return cls(path, "csv", csv_options=csv_options)

    @classmethod
    def delta(cls, path: str | Path, *, version: int | None = None) -> "FileSource":
        """Rows of a Delta Lake table as of `version`, partition columns included (read without Spark).

        ``version=None`` pins the latest version when the source is created, so replays and
        restores in this process read the same rows; a job restored in a new process after the
        table changed must pass the version it started with (``source.version``).
        Raises `SourceError` for tables using deletion vectors, column mapping or V2 checkpoints.
        """
        return cls(path, "delta", version=version)

    def _entries(self) -> list[tuple[Path, dict]]:
        if self._delta is not None:
            return [(f.path, f.partition_values) for f in self._delta.files]
        return [(p, {}) for p in self.files()]

    def files(self) -> list[Path]:
        if self._delta is not None:
            return [f.path for f in self._delta.files]
        if self.path.is_dir():
            suffix = {"parquet": ".parquet", "jsonl": ".jsonl", "csv": ".csv"}[self.format]
            return sorted(p for p in self.path.iterdir() if p.name.endswith(suffix) and not p.name.startswith((".", "_")))
        if not self.path.exists():
            raise InvalidArgumentError(f"file source {self.path} does not exist; check the path")
        return [self.path]

    def read(self, offset: int) -> Iterator[Any]:
        """Rows from row number `offset` on."""
        skip = offset
        for path, partition_values in self._entries():
            if self.format in ("parquet", "delta"):
                import pyarrow.parquet as pq

                pf = pq.ParquetFile(path)
                for rg in range(pf.num_row_groups):
                    n = pf.metadata.row_group(rg).num_rows
                    if skip >= n:  # whole row groups are skipped without being read
                        skip -= n
                        continue
                    group = pf.read_row_group(rg).to_pylist()
                    if partition_values:
                        group = [{**row, **partition_values} for row in group]
                    yield from group[skip:]
                    skip = 0
            else:
                with open(path, newline="" if self.format == "csv" else None, encoding="utf-8") as f:
                    if self.format == "csv":
                        rows: Iterator[Any] = csv.DictReader(f, **self.csv_options)
                    else:
                        rows = (json.loads(line) for line in f if line.strip())
                    for row in rows:
                        if skip:
                            skip -= 1
                            continue
                        yield row


class CollectionSource:
    """The elements of a Python collection, replayed from a checkpointed position."""

    shared = True  # immutable: subtasks and attempts share it instead of deep-copying the data

    def __init__(self, items: Any) -> None:
        self.items = list(items)

    def read(self, offset: int) -> Iterator[Any]:
        return itertools.islice(self.items, offset, None)


class SourceContext:
    """The ``ctx`` of ``SourceFunction.run``: ``collect``, ``collect_with_timestamp``, ``emit_watermark``."""

    def __init__(self, handoff: "_ThreadedRun | None") -> None:
        self._handoff = handoff
        self._lock = _NoLock()

    def collect(self, element: Any) -> None:
        self._put((element, None))

    def collect_with_timestamp(self, element: Any, timestamp: int) -> None:
        self._put((element, int(timestamp)))

    def emit_watermark(self, watermark: Any) -> None:
        self._put((_WATERMARK, int(getattr(watermark, "timestamp", watermark))))

    def mark_as_temporarily_idle(self) -> None:
        """Accepted for compatibility; there are no idle channels in a single process."""

    def get_checkpoint_lock(self) -> "_NoLock":
        return self._lock

    def _put(self, item: tuple) -> None:
        if self._handoff is None:
            raise JobError("a generator SourceFunction.run() yields its elements; do not call ctx.collect() in it")
        self._handoff.put(item)


class _NoLock:
    """Checkpoints only happen while the source is blocked in ``collect``, so the lock has nothing to exclude."""

    def __enter__(self) -> "_NoLock":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def acquire(self, *a: Any) -> bool:
        return True

    def release(self) -> None:
        return None


_WATERMARK = object()


class _Cancelled(BaseException):
    """Unwinds a cancelled source thread out of ``collect``."""


class _ThreadedRun:
    """Runs a ``run(ctx)``-style source in its own thread, strictly handing off one element at a time.

    The source thread and the job thread never run at the same time: ``collect`` parks the
    source until the job asks for the next element. Checkpoints happen while the source is parked
    inside ``collect`` *before* handing its element over, i.e. after it advanced its offset for
    every element already emitted — which is what makes emit-and-advance atomic.
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.item: Any = None
        self.ready = threading.Semaphore(0)
        self.go = threading.Semaphore(0)
        self.error: BaseException | None = None
        self.cancelled = False
        self.thread: threading.Thread | None = None

    def _main(self) -> None:
        try:
            self.fn.run(SourceContext(self))
            self.item = END
        except _Cancelled:
            return
        except BaseException as exc:  # handed to the job thread, which fails the job
            self.error = exc
            self.item = END
        self.ready.release()

    def put(self, item: tuple) -> None:
        if self.cancelled:
            raise _Cancelled()
        self.item = item
        self.ready.release()
        self.go.acquire()
        if self.cancelled:
            raise _Cancelled()

    def pull(self) -> Any:
        if self.thread is None:
            self.thread = threading.Thread(target=self._main, name="statekit-source", daemon=True)
            self.thread.start()
        else:
            self.go.release()
        self.ready.acquire()
        if self.error is not None:
            raise self.error
        return self.item

    def cancel(self) -> None:
        self.cancelled = True
        try:
            self.fn.cancel()
        finally:
            self.go.release()

    def join(self, timeout: float) -> None:
        """Wait for the source thread to end, so no thread of the job outlives it (and the interpreter)."""
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
            if self.thread.is_alive():
                log.warning("source %r did not return from run() %.0f s after cancel(); it keeps running", self.fn, timeout)


class SourceOperator(StreamOperator):
    """One subtask of a source: pulls elements, stamps them, emits watermarks, checkpoints its position.

    The job polls it for up to ``budget`` elements at a time; checkpoints happen between polls,
    when exactly the elements counted in the offset have been emitted.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        opts = self.transformation.options
        self.strategy = opts.get("watermark_strategy")
        self.source = self.function
        self.internal = isinstance(self.source, (CollectionSource, FileSource))
        self.offset = 0
        self.max_ts = MIN_WATERMARK
        self.last_wm = MIN_WATERMARK
        self.finished = False
        self.pending: Any = None
        self._pull: Any = None
        self._threaded: _ThreadedRun | None = None
        self._offset_state: Any = None
        self._wm_state: Any = None
        self._iter: Any = None
        self._prefetch_skip = 0

    def initialize_internal_state(self, restored: bool) -> None:
        store = self.operator_state_store
        if self.internal:
            self._offset_state = store.get_list_state(ListStateDescriptor("offset", "bigint"))
            if restored:
                self.offset = sum(self._offset_state.get() or [])
        # The watermark generator's progress is kept too, so a restored run emits the same watermarks.
        self._wm_state = store.get_list_state(ListStateDescriptor("max_timestamp", "bigint"))
        if restored:
            restored_ts = list(self._wm_state.get() or [])
            if restored_ts:
                self.max_ts = max(restored_ts)
        self._start_reader()

    def _start_reader(self) -> None:
        src = self.source
        if self.internal:
            self._iter = iter(src.read(self.offset))
            self._pull = _pull_from(self._iter)
        elif inspect.isgeneratorfunction(getattr(src, "run", None)):
            gen = src.run(SourceContext(None))
            self._pull = _pull_from((value, None) for value in gen)
        elif callable(getattr(src, "run", None)):
            self._threaded = _ThreadedRun(src)
            self._pull = self._threaded.pull
        else:
            raise JobError(f"{src!r} is not a source: give a SourceFunction (run(ctx)), a FileSource or a collection")

    def snapshot_internal_state(self, checkpoint_id: int) -> None:
        if self._offset_state is not None:
            self._offset_state.update([self.offset])
        self._wm_state.update([] if self.max_ts == MIN_WATERMARK else [self.max_ts])

    def restore_watermark(self) -> None:
        """After a restore, re-emit the watermark the source had reached."""
        if self.strategy is not None and self.max_ts != MIN_WATERMARK and self.strategy.has_watermarks:
            wm = self.max_ts - self.strategy.out_of_orderness_ms - 1
            self.last_wm = wm
            self.emit_watermark(wm)

    def poll(self, budget: int) -> int:
        """Emit up to `budget` elements; returns how many. Sets `finished` at the end of input."""
        if self.internal and self.strategy is None:
            return self._poll_fast(budget)
        pull = self._pull
        item = self.pending
        if item is None:
            item = pull()
        n = 0
        emit = self.emit
        strategy = self.strategy
        internal = self.internal
        while item is not END:
            if internal:
                value, ts = item, None
                self.offset += 1
            else:
                value, ts = item
                if value is _WATERMARK:
                    self._watermark(ts)
                    item = pull()
                    continue
            if strategy is None:
                emit(value, ts)
            else:
                ts = strategy.extract(value, ts)
                emit(value, ts)
                if ts is not None and ts > self.max_ts:
                    self.max_ts = ts
                    if strategy.has_watermarks:
                        self._watermark(ts - strategy.out_of_orderness_ms - 1)
            n += 1
            # Pull the next element now: a user source advances its offset when it resumes.
            item = pull()
            if n >= budget:
                break
        self.pending = item
        if item is END:
            self.finished = True
        return n

    def _poll_fast(self, budget: int) -> int:
        """Collections and files without event time: a tight loop, the offset advanced per batch.

        Counting after the loop is safe because checkpoints only happen between polls; if an
        element fails mid-batch the attempt is abandoned and the offset never read.
        """
        emit = self.emit
        batch = list(islice(self._iter, budget))
        prefetch = getattr(emit, "prefetch", None)
        if prefetch is not None and batch:
            if self._prefetch_skip:
                self._prefetch_skip -= 1
            elif prefetch(batch) < 0.02:
                self._prefetch_skip = 64  # few new keys any more: look again later
        emit_batch = getattr(emit, "batch", None)
        if emit_batch is not None:
            emit_batch(batch, None)
        else:
            for value in batch:
                emit(value, None)
        n = len(batch)
        self.offset += n
        if n < budget:
            self.finished = True
            self.pending = END
        return n

    def _watermark(self, wm: int) -> None:
        if wm > self.last_wm:
            self.last_wm = wm
            self.current_watermark = wm
            self.emit_watermark(wm)

    def end_input(self) -> None:
        """The end-of-input watermark: fires every pending event-time timer downstream."""
        self.current_watermark = MAX_WATERMARK
        self.emit_watermark(MAX_WATERMARK)

    def close(self) -> None:
        if self._threaded is not None:
            if not self.finished:
                self._threaded.cancel()
            self._threaded.join(SOURCE_JOIN_TIMEOUT_S)
        super().close()


def _pull_from(iterator: Iterator[Any]) -> Any:
    nxt = iterator.__next__

    def pull() -> Any:
        try:
            return nxt()
        except StopIteration:
            return END

    return pull
