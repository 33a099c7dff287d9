"""Checkpoint coordination: trigger, write in the savepoint format off the processing thread, complete, retain, time out."""

from __future__ import annotations

import logging
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from statekit.format.keyed import NAMESPACE_ARROW, NAMESPACE_TYPE, timers_table
from statekit.identifiers import OperatorIdentifier
from statekit.runtime.storage import StorageLock, checkpoint_dirs, clean_storage, discard_checkpoint
from statekit.types import to_ddl

log = logging.getLogger(__name__)


@dataclass
class OperatorSnapshot:
    """Everything one operator contributes to a checkpoint: metadata plus one snapshot per subtask."""

    identifier: OperatorIdentifier
    name: str
    parallelism: int
    max_parallelism: int
    keyed: bool
    subtasks: list[Any] = field(default_factory=list)  # SubtaskSnapshot


@dataclass
class PendingCheckpoint:
    """A checkpoint that was triggered and whose snapshot has not completed yet."""
    checkpoint_id: int
    kind: str
    path: Path
    started: int
    future: Future
    aborted: bool = False


def write_snapshot(path: Path, checkpoint_id: int, kind: Literal["savepoint", "checkpoint"], job_name: str, operators: list[OperatorSnapshot]) -> Path:
    """Write the snapshots as one savepoint-format directory (atomically: manifest last, then rename).

    This is the asynchronous part: keyed tables are materialised here, off the processing thread.
    """
    from statekit.savepoint import SavepointBuilder

    with SavepointBuilder(path, checkpoint_id=checkpoint_id, kind=kind, job_name=job_name) as builder:
        for op in operators:
            subs = op.subtasks
            key_type = next((s.key_type for s in subs if s.key_type is not None), None)
            infos: dict[str, Any] = {}
            for s in subs:
                if s.keyed is not None:
                    for info in s.keyed.infos:
                        infos.setdefault(info.name, info)
            has_op_state = any(s.operator_states for s in subs)
            if key_type is None and not has_op_state:
                continue  # nothing to write: a keyed operator that never saw a key, or a stateless one
            # Materialise first: whether state or timers are namespaced (windows) decides the layout.
            tables = [s.keyed.table() for s in subs if s.keyed is not None and s.keyed.native_dir is None]
            tables = [t for t in tables if t.num_rows]
            timer_rows = [row for s in subs for row in s.timers]
            namespaced = any("namespace" in t.column_names for t in tables) or any(r[2] is not None for r in timer_rows)
            w = builder.add_operator(
                op.identifier,
                name=op.name,
                parallelism=op.parallelism,
                max_parallelism=op.max_parallelism,
                key_type=None if key_type is None else to_ddl(key_type),
                keyed_states=list(infos.values()),
                namespace_type=NAMESPACE_TYPE if namespaced else None,
            )
            for s in subs:
                if s.keyed is not None and s.keyed.native_dir is not None:
                    w.write_native_keyed(s.subtask, s.keyed.native_dir, s.key_group_range, list(s.keyed.native_files))
            for table in tables:
                w.write_keyed(table)
            if timer_rows:
                w.write_timers(timers_table(timer_rows, key_type, NAMESPACE_ARROW if namespaced else None))
            _write_operator_states(w, subs)
    # Native snapshots were hard-linked (or copied) into the checkpoint; their staging copies go.
    for op in operators:
        for s in op.subtasks:
            if s.keyed is not None and s.keyed.native_dir is not None:
                shutil.rmtree(s.keyed.native_dir, ignore_errors=True)
    log.info("%s %d written to %s", kind, checkpoint_id, path)
    return path


def _write_operator_states(w: Any, subs: list[Any]) -> None:
    names: dict[str, Any] = {}
    for s in subs:
        for name, (info, _table) in s.operator_states.items():
            names.setdefault(name, info)
    for name, info in names.items():
        if info.redistribution == "broadcast":
            first = next(s.operator_states[name][1] for s in subs if name in s.operator_states)
            w.write_broadcast_state(info, first)
            continue
        per_subtask: list[Any] = []
        for s in subs:
            entry = s.operator_states.get(name)
            per_subtask.append(entry[1].column("value").combine_chunks() if entry is not None else [])
        w.write_list_state(info, per_subtask)


class CheckpointCoordinator:
    """Decides when to checkpoint and tracks checkpoints from trigger to completion.

    Synchronous snapshots are taken by the job between two elements; the coordinator writes them
    in a background thread, so processing goes on while files are written. Completion is noticed
    by the job thread (`poll`), which then notifies the operators, as Flink's task thread does.
    """

    def __init__(self, config: Any, clock: Any, storage: Path, job_name: str, first_id: int = 1) -> None:
        self.config = config
        self.clock = clock
        self.storage = storage
        self.job_name = job_name
        self.next_id = first_id
        self.pending: dict[int, PendingCheckpoint] = {}
        self.completed: list[tuple[int, str, Path]] = []  # (id, kind, path), ascending
        self.failed: list[tuple[int, BaseException]] = []
        self.last_trigger = clock.now()
        self.last_completion = -(2**62)
        self.records_since = 0
        self._pool = ThreadPoolExecutor(max_workers=max(1, config.max_concurrent) + 1, thread_name_prefix="statekit-ckpt")
        self._lock: StorageLock | None = None

    def open(self) -> None:
        """Take the storage for this job: lock it (`CheckpointStorageInUseError` if a live job holds it),
        remove what a dead predecessor left half-written, and number checkpoints past every existing one."""
        self._lock = StorageLock.acquire(self.storage, self.job_name)
        try:
            clean_storage(self.storage)
            self.next_id = max(self.next_id, max(checkpoint_dirs(self.storage), default=0) + 1)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- triggering -----------------------------------------------------------------------------------
    def due(self, now: int) -> bool:
        cfg = self.config
        if not cfg.enabled:
            return False
        if sum(1 for p in self.pending.values() if not p.aborted) >= cfg.max_concurrent:
            return False
        if now - self.last_completion < cfg.min_pause_ms:
            return False
        if cfg.every_records is not None and self.records_since >= cfg.every_records:
            return True
        return cfg.interval_ms is not None and now - self.last_trigger >= cfg.interval_ms

    def records_until_due(self) -> int | None:
        """Elements until a record-count checkpoint is due; None when none is configured or one is overdue
        (held back by max concurrency or min pause, so batching need not stop for it)."""
        every = self.config.every_records
        if every is None or self.records_since >= every:
            return None
        return every - self.records_since

    def allocate_id(self) -> int:
        cid = self.next_id
        while (self.storage / f"chk-{cid}").exists():  # never reuse a checkpoint's id (and so its directory)
            cid += 1
        self.next_id = cid + 1
        return cid

    def submit(self, checkpoint_id: int, kind: Literal["savepoint", "checkpoint"], operators: list[OperatorSnapshot], path: Path | None = None) -> PendingCheckpoint:
        """Write `operators` in the background; ``kind`` is ``checkpoint`` or ``savepoint``."""
        now = self.clock.now()
        if kind == "checkpoint":
            self.last_trigger = now
            self.records_since = 0
        target = Path(path) if path is not None else self.storage / f"chk-{checkpoint_id}"
        fut = self._pool.submit(write_snapshot, target, checkpoint_id, kind, self.job_name, operators)
        p = PendingCheckpoint(checkpoint_id, kind, target, now, fut)
        self.pending[checkpoint_id] = p
        return p

    # -- progress -------------------------------------------------------------------------------------
    def poll(self, *, wait: bool = False) -> tuple[list[int], list[int]]:
        """Collect finished writes: returns (completed ids, aborted ids), ascending."""
        completed, aborted = [], []
        now = self.clock.now()
        for cid in sorted(self.pending):
            p = self.pending[cid]
            if wait:
                try:
                    p.future.result()
                except BaseException:
                    pass
            if not p.future.done():
                if not p.aborted and now - p.started > self.config.timeout_ms:
                    p.aborted = True  # the write goes on; its result is discarded when it ends
                    aborted.append(cid)
                continue
            del self.pending[cid]
            exc = p.future.exception()
            if p.aborted or exc is not None:
                if exc is not None:
                    log.warning("checkpoint %s failed: %s", cid, exc)
                    self.failed.append((cid, exc))
                    if not p.aborted:
                        aborted.append(cid)
                if p.kind == "checkpoint" and exc is None:
                    # Timed out but written: this attempt created the directory, so it removes it. A
                    # failed write created nothing there (the builder removes its own staging, and a
                    # `chk-N` that already existed belongs to someone else).
                    discard_checkpoint(p.path)
                continue
            self.completed.append((cid, p.kind, p.path))
            self.last_completion = now
            completed.append(cid)
        if completed:
            self._retain()
        return completed, aborted

    def _retain(self) -> None:
        checkpoints = [c for c in self.completed if c[1] == "checkpoint"]
        for cid, _kind, path in checkpoints[: -self.config.retained]:
            discard_checkpoint(path)
            self.completed.remove((cid, _kind, path))

    def latest_completed(self) -> tuple[int, Path] | None:
        if not self.completed:
            return None
        cid, _kind, path = self.completed[-1]
        return cid, path

    def shutdown(self) -> None:
        try:
            self.poll(wait=True)
            self._pool.shutdown(wait=True)
        finally:
            self.release()
