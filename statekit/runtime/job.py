"""Running a job: build subtasks, wire partitioning, drive sources, checkpoint, fail over, and the JobClient."""

from __future__ import annotations

import atexit
import gc
import logging
import queue
import shutil
import threading
import time
import weakref
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

from statekit.errors import (
    JobError,
    ParallelismError,
    RestoreError,
    SavepointError,
    SavepointExistsError,
    UntrustedPickleError,
)
from statekit.keygroups import default_max_parallelism
from statekit.runtime.checkpointing import CheckpointCoordinator, OperatorSnapshot
from statekit.runtime.clock import ManualClock
from statekit.runtime.keys import hash_router, selector_of
from statekit.runtime.restore import RestorePlan
from statekit.runtime.sinks import Collector
from statekit.runtime.sources import SourceOperator
from statekit.runtime.watermarks import MIN_WATERMARK
from statekit.tempdirs import owned_temp_dir, release

log = logging.getLogger(__name__)

#: Elements a source emits between two looks at checkpoints, timers and client requests.
BATCH = 512
#: How long interpreter exit waits for each job still running (cancelled first) to end.
SHUTDOWN_JOIN_TIMEOUT_S = 5.0


class _Stopped(Exception):
    """The job was stopped (stop-with-savepoint or cancel) rather than finishing its input."""


class JobExecutionResult:
    """What ``execute`` returns: name, runtime, restarts and the checkpoints and savepoints written."""

    def __init__(self, job_name: str, net_runtime_ms: int, restarts: int, completed: list, final_savepoint: Path | None) -> None:
        self.job_name = job_name
        self.net_runtime_ms = net_runtime_ms
        self.restarts = restarts
        self.completed_checkpoints = completed
        self.final_savepoint = final_savepoint
        #: ``(checkpoint id, exception)`` of checkpoints whose write failed (skipped; the job went on).
        self.failed_checkpoints: list[tuple[int, BaseException]] = []

    def get_job_name(self) -> str:
        return self.job_name

    def get_net_runtime(self) -> int:
        return self.net_runtime_ms

    def __repr__(self) -> str:
        return f"JobExecutionResult({self.job_name!r}, restarts={self.restarts}, checkpoints={len(self.completed_checkpoints)})"


class JobRunner:
    """Runs a job to completion, restarting it from its latest completed checkpoint after failures."""

    def __init__(
        self,
        env: Any,
        job_name: str,
        *,
        restore_from: Any = None,
        allow_non_restored_state: bool = False,
        final_savepoint: Any = None,
        trust_pickled: bool = False,
    ) -> None:
        self.env = env
        self.job_name = job_name
        self.transformations = list(env._transformations)
        if not any(isinstance(t.operator_class, type) and issubclass(t.operator_class, SourceOperator) for t in self.transformations):
            raise JobError("the job has no source; add one with from_collection, from_source or add_source")
        self.clock = env.clock
        self.restore_from = None if restore_from is None else Path(restore_from)
        self.allow_non_restored_state = allow_non_restored_state
        self.final_savepoint = None if final_savepoint is None else Path(final_savepoint)
        self.trust_pickled = trust_pickled
        if self.final_savepoint is not None and self.final_savepoint.exists():
            raise SavepointExistsError(
                f"final savepoint {self.final_savepoint} already exists; savepoints are never overwritten. "
                "Choose a new path."
            )
        if self.restore_from is not None:
            from statekit.savepoint import Savepoint

            Savepoint.open(self.restore_from, trust_pickled=trust_pickled)  # fail fast: NotASavepointError etc.
        self._own_workdir = env.working_dir is None
        # An own working directory goes with the job, or at exit, or (killed process) at the next job's start.
        self.workdir = owned_temp_dir("statekit-job-") if env.working_dir is None else Path(env.working_dir)
        cfg = env.get_checkpoint_config()
        storage = cfg.storage if cfg.storage is not None else self.workdir / "checkpoints"
        self.coordinator = CheckpointCoordinator(cfg, self.clock, storage, job_name)
        if cfg.enabled or self.final_savepoint is not None:
            # Import the writer (and Parquet) up front: done lazily by the first checkpoint's
            # background thread, it would hold the GIL long enough to delay that checkpoint.
            import pyarrow.parquet  # noqa: F401

            import statekit.savepoint  # noqa: F401
        self.requests: "queue.Queue[tuple]" = queue.Queue()
        self.collectors = [t.options["collector"] for t in self.transformations if isinstance(t.options.get("collector"), Collector)]
        self.status = "CREATED"
        self.restarts = 0
        self.execution: Execution | None = None
        self.savepoint_futures: dict[int, Future] = {}
        # Last: the job holds its checkpoint storage from here until `run` ends.
        try:
            self.coordinator.open()
        except BaseException:
            if self._own_workdir:
                release(self.workdir)
            raise

    def run(self) -> JobExecutionResult:
        started = time.monotonic()
        # Everything alive when the job starts (its input collections, the interpreter's own
        # objects) outlives the job: freezing it keeps the collector's full passes, triggered by
        # the job's own allocations, from rescanning it (~15% of a keyed job's time otherwise).
        # Objects made during the job are collected as usual; unfreezing at the end loses nothing.
        gc.freeze()
        try:
            return self._run(started)
        finally:
            gc.unfreeze()

    def _run(self, started: float) -> JobExecutionResult:
        restore, trust, allow = self.restore_from, self.trust_pickled, self.allow_non_restored_state
        strategy = self.env.restart_strategy
        self.status = "RUNNING"
        try:
            while True:
                self.execution = Execution(self, self.restarts)
                try:
                    self.execution.run(restore, trust=trust, allow_non_restored_state=allow)
                    break
                except _Stopped:
                    break
                except Exception as exc:
                    self.execution.abort()
                    if isinstance(exc, (RestoreError, SavepointError, ParallelismError, UntrustedPickleError)):
                        self.status = "FAILED"
                        raise  # a savepoint that does not fit the job fails the same way on every attempt
                    if self.restarts >= strategy.attempts:
                        self.status = "FAILED"
                        raise JobError(
                            f"job {self.job_name!r} failed after {self.restarts} restart(s): {exc!r}. "
                            "Fix the cause, or allow more restarts with set_restart_strategy(...)."
                        ) from exc
                    self.restarts += 1
                    log.info("job %s failed (%r); restart %d", self.job_name, exc, self.restarts)
                    self.clock.sleep(strategy.delay_ms)
                    latest = self.coordinator.latest_completed()
                    if latest is not None:
                        restore, trust, allow = latest[1], True, False
                        for c in self.collectors:
                            c.rollback_after(latest[0])
                    else:
                        restore, trust, allow = self.restore_from, self.trust_pickled, self.allow_non_restored_state
                        for c in self.collectors:
                            c.rollback_after(None)
            self.status = "FINISHED" if self.status == "RUNNING" else self.status
        finally:
            self.coordinator.shutdown()
            self._fail_requests()
            if self._own_workdir:
                # Without a configured storage directory, checkpoints live with the job (like Flink's
                # in-memory checkpoint storage) and go with it; configure one to keep them.
                release(self.workdir)
            else:
                for p in [*self.workdir.glob("attempt-*"), self.workdir / "native"]:
                    shutil.rmtree(p, ignore_errors=True)
        completed = [(cid, path) for cid, _kind, path in self.coordinator.completed]
        result = JobExecutionResult(self.job_name, int((time.monotonic() - started) * 1000), self.restarts, completed, self.final_savepoint)
        result.failed_checkpoints = list(self.coordinator.failed)
        return result

    def _fail_requests(self) -> None:
        while True:
            try:
                req = self.requests.get_nowait()
            except queue.Empty:
                break
            fut = req[-1]
            if isinstance(fut, Future) and not fut.done():
                fut.set_exception(JobError(f"job {self.job_name!r} ended ({self.status}) before the request was served"))
        for fut in self.savepoint_futures.values():
            if not fut.done():
                fut.set_exception(JobError(f"job {self.job_name!r} ended before the savepoint completed"))


class Execution:
    """One attempt of a job: the subtasks of every operator, wired together and driven by the sources."""

    def __init__(self, runner: JobRunner, attempt: int) -> None:
        self.runner = runner
        self.env = runner.env
        self.clock = runner.clock
        self.attempt = attempt
        self.parameters = runner.env.parameters
        self.backend_name = runner.env.state_backend
        self.coordinator = runner.coordinator
        self.last_checkpoint_id = self.coordinator.next_id - 1
        self.ops: dict[int, list[Any]] = {}
        self.timer_ops: list[Any] = []
        self.next_proc: int | None = None
        self.sources: list[SourceOperator] = []
        self._manual_clock = isinstance(self.clock, ManualClock)
        self._snapshot: tuple[str, int] = ("checkpoint", 0)
        self.trust_pickled = False  # may pickled state being restored be unpickled (set per run)

    # -- hooks used by operators ----------------------------------------------------------------------
    def backend_directory(self, op: Any) -> Path | None:
        if self.backend_name != "rocksdb":
            return None
        d = self.runner.workdir / f"attempt-{self.attempt}" / f"{op.transformation.position}-{op.subtask_index}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def native_snapshot_args(self, op: Any) -> dict[str, Any]:
        """Incremental checkpoints: RocksDB subtasks snapshot natively (hard-linked SST files).

        Savepoints stay in the canonical Parquet layout, as Flink's savepoints are canonical by
        default; only periodic checkpoints of `EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True)`
        are native.
        """
        kind, cid = self._snapshot
        if kind != "checkpoint" or self.backend_name != "rocksdb" or not self.coordinator.config.incremental:
            return {}
        target = self.runner.workdir / "native" / f"chk-{cid}" / f"{op.transformation.position}-{op.subtask_index}"
        target.parent.mkdir(parents=True, exist_ok=True)
        return {"native": True, "target_dir": target}

    def on_processing_timer_registered(self, ts: int) -> None:
        if self.next_proc is None or ts < self.next_proc:
            self.next_proc = ts

    def register_timer_operator(self, op: Any) -> None:
        self.timer_ops.append(op)

    # -- build ----------------------------------------------------------------------------------------
    def _build(self, plan: RestorePlan | None) -> None:
        env = self.env
        self.plan = plan
        for t in self.runner.transformations:
            p = t.effective_parallelism(env.get_parallelism())
            # An explicit max parallelism wins (and must match a restored one); otherwise a restored
            # operator keeps the savepoint's, since key groups cannot be re-cut.
            restored_m = plan.max_parallelism_for(t) if plan else None
            m = t.max_parallelism or env.get_max_parallelism() or restored_m or default_max_parallelism(p)
            if p > m:
                error = RestoreError if restored_m == m else JobError
                raise error(
                    f"operator {t.name!r}: parallelism {p} exceeds its max parallelism {m}; "
                    "run with a parallelism <= max parallelism"
                )
            self.ops[t.id] = [t.operator_class(t, i, p, m, self) for i in range(p)]
            if isinstance(self.ops[t.id][0], SourceOperator):
                self.sources.extend(self.ops[t.id])
        self._wire()

    def _restored_key_type(self, t: Any) -> Any:
        """Without a declared key type, keys hash as the restored state's key type (or are inferred)."""
        op = self.plan.matched.get(t.id) if self.plan is not None else None
        if op is None or op.key_type is None:
            return None
        from statekit.types import parse_ddl

        return parse_ddl(op.key_type)

    def _wire(self) -> None:
        downstream: dict[int, list[tuple[Any, Any]]] = {t.id: [] for t in self.runner.transformations}
        for tt in self.runner.transformations:
            for edge in tt.inputs:
                downstream[edge.source.id].append((edge, tt))
        for t in self.runner.transformations:
            ups = self.ops[t.id]
            for i, op in enumerate(ups):
                collects, wm_pairs = [], []
                for edge, tt in downstream[t.id]:
                    downs = self.ops[tt.id]
                    one_input = len(tt.inputs) == 1 or tt.kind == "union"
                    method = ("process", "process1", "process2")[0 if one_input else 1 + edge.input_index]
                    if edge.partition == "hash":
                        method += "_keyed"
                        targets = [getattr(d, method) for d in downs]
                        key_type = edge.key_type if edge.key_type is not None else self._restored_key_type(tt)
                        collects.append(
                            hash_router(selector_of(edge.key_selector), key_type, downs[0].max_parallelism, targets, downs)
                        )
                        wm_targets = downs
                    elif edge.partition == "broadcast":
                        collects.append(_fan_out([getattr(d, method) for d in downs]))
                        wm_targets = downs
                    elif edge.partition == "forward" and len(downs) == len(ups):
                        collects.append(getattr(downs[i], method))
                        wm_targets = [downs[i]]
                    else:
                        collects.append(_round_robin([getattr(d, method) for d in downs], start=i))
                        wm_targets = downs
                    channel = (id(edge), i)  # one watermark channel per upstream subtask and edge
                    for d in wm_targets:
                        d.input_watermarks[channel] = MIN_WATERMARK
                        wm_pairs.append((d.process_watermark, channel))
                sides = [(edge.side, c) for (edge, _tt), c in zip(downstream[t.id], collects) if edge.side is not None]
                if sides:
                    op.side_outputs = {}
                    for tag, c in sides:
                        op.side_outputs.setdefault(tag, []).append(c)
                    collects = [c for (edge, _tt), c in zip(downstream[t.id], collects) if edge.side is None]
                if len(collects) == 1:
                    op.emit = collects[0]
                elif collects:
                    op.emit = _fan_out(collects)
                if wm_pairs:
                    op.emit_watermark = _watermark_fan_out(wm_pairs)

    # -- run ------------------------------------------------------------------------------------------
    def run(self, restore: Path | None, *, trust: bool, allow_non_restored_state: bool) -> None:
        self.trust_pickled = trust
        plan = None
        if restore is not None:
            plan = RestorePlan(restore, self.runner.transformations, allow_non_restored_state=allow_non_restored_state, trust_pickled=trust)
            c = self.coordinator
            c.next_id = max(c.next_id, plan.checkpoint_id + 1)
            self.last_checkpoint_id = c.next_id - 1
        self._build(plan)
        for t in reversed(self.runner.transformations):
            ops = self.ops[t.id]
            shares = plan.for_operator(t, len(ops), ops[0].max_parallelism) if plan is not None else None
            for i, op in enumerate(ops):
                op.initialize(shares[i] if shares is not None else None)
        for src in self.sources:
            src.restore_watermark()
        self._drive()

    def _drive(self) -> None:
        final_savepoint = self.runner.final_savepoint
        hold_end = final_savepoint is not None
        active = [s for s in self.sources]
        c = self.coordinator
        cfg = c.config
        while active:
            single = len(active) == 1
            for src in list(active):
                if not single or self.next_proc is not None or (self._manual_clock and cfg.interval_ms is not None):
                    budget = 1  # interleave inputs; let clock-driven work happen between elements
                else:
                    until = c.records_until_due()
                    budget = BATCH if until is None else min(BATCH, until)
                n = src.poll(budget)
                c.records_since += n
                if src.finished:
                    active.remove(src)
                    if not hold_end:
                        src.end_input()
                self._between_elements()
        if final_savepoint is not None:  # hold_end
            # Stop-with-savepoint without drain: the state as it stands at the end of the input,
            # pending event-time timers included; no end-of-input watermark fires them afterwards,
            # so restoring the savepoint and feeding more input continues exactly where this left off.
            self.take_savepoint(final_savepoint, wait=True)
        # Checkpoints in flight complete (and are notified) before the operators finish, so
        # transactional sinks commit them in order and then flush the rest.
        self._complete_pending(wait=True)
        for t in self.runner.transformations:
            for op in self.ops[t.id]:
                op.finish()
        self.close()

    def _between_elements(self) -> None:
        c = self.coordinator
        if c.pending:
            self._complete_pending(wait=False)
        if self.next_proc is not None:
            now = self.clock.now()
            if now >= self.next_proc:
                self._fire_processing_timers(now)
        if c.config.enabled and c.due(self.clock.now()):
            self.trigger("checkpoint")
        if not self.runner.requests.empty():
            self._serve_requests()

    def _fire_processing_timers(self, now: int) -> None:
        for op in self.timer_ops:
            op.fire_processing_timers(now)
        nxt = [t for t in (op.timer_service.next_processing_time() for op in self.timer_ops) if t is not None]
        self.next_proc = min(nxt) if nxt else None

    # -- checkpoints ----------------------------------------------------------------------------------
    def trigger(self, kind: Literal["savepoint", "checkpoint"], path: Path | None = None) -> Any:
        """Take the synchronous snapshot of every subtask and hand the write to the coordinator."""
        c = self.coordinator
        cid = c.allocate_id()
        ts = self.clock.now()
        self._snapshot = (kind, cid)
        snaps = []
        for t in self.runner.transformations:
            ops = self.ops[t.id]
            snaps.append(
                OperatorSnapshot(t.identifier, t.name, len(ops), ops[0].max_parallelism, t.keyed, [op.snapshot(cid, ts) for op in ops])
            )
        self.last_checkpoint_id = cid
        return c.submit(cid, kind, snaps, path)

    def take_savepoint(self, path: Path, *, wait: bool) -> Any:
        pending = self.trigger("savepoint", Path(path))
        if wait:
            self._complete_pending(wait=True)
            exc = pending.future.exception()
            if exc is not None:
                raise JobError(f"savepoint {path} could not be written: {exc}") from exc
        return pending

    def _complete_pending(self, *, wait: bool) -> None:
        completed, aborted = self.coordinator.poll(wait=wait)
        futures = self.runner.savepoint_futures
        for cid in completed:
            for t in self.runner.transformations:
                for op in self.ops.get(t.id, []):
                    op.notify_checkpoint_complete(cid)
            fut = futures.pop(cid, None)
            if fut is not None:
                fut.set_result(str(next(p for i, _k, p in self.coordinator.completed if i == cid)))
        for cid in aborted:
            for t in self.runner.transformations:
                for op in self.ops.get(t.id, []):
                    op.notify_checkpoint_aborted(cid)
            fut = futures.pop(cid, None)
            if fut is not None:
                fut.set_exception(JobError(f"savepoint {cid} failed or timed out"))

    def _serve_requests(self) -> None:
        while True:
            try:
                kind, path, fut = self.runner.requests.get_nowait()
            except queue.Empty:
                return
            if kind == "cancel":
                fut.set_result(None)
                self.runner.status = "CANCELED"
                self._complete_pending(wait=True)
                self.close()
                raise _Stopped()
            try:
                pending = self.take_savepoint(Path(path), wait=(kind == "stop"))
            except Exception as exc:
                fut.set_exception(exc)
                continue
            if kind == "stop":
                fut.set_result(str(path))
                self.runner.status = "FINISHED"
                self.close()
                raise _Stopped()
            self.runner.savepoint_futures[pending.checkpoint_id] = fut

    # -- teardown -------------------------------------------------------------------------------------
    def close(self) -> None:
        errors = []
        for t in self.runner.transformations:
            for op in self.ops.get(t.id, []):
                try:
                    op.close()
                except Exception as exc:  # keep closing the others; report the first
                    errors.append(exc)
        self.ops = {}
        if errors:
            raise errors[0]

    def abort(self) -> None:
        """After a failure: let in-flight checkpoint writes finish (they are consistent), then release everything."""
        try:
            self.coordinator.poll(wait=True)
        finally:
            for t in self.runner.transformations:
                for op in self.ops.get(t.id, []):
                    try:
                        op.close()
                    except Exception:  # the attempt already failed; its teardown must not mask that
                        log.debug("error closing %s after a failure", op.name, exc_info=True)
            self.ops = {}


def _round_robin(targets: list[Any], start: int) -> Any:
    n = len(targets)
    state = [start % n]

    def collect(value: Any, ts: Any) -> None:
        i = state[0]
        state[0] = (i + 1) % n
        targets[i](value, ts)

    return collect


def _fan_out(collects: list[Any]) -> Any:
    def collect(value: Any, ts: Any) -> None:
        for c in collects:
            c(value, ts)

    return collect


def _watermark_fan_out(pairs: list[tuple[Any, Any]]) -> Any:
    def emit(wm: int) -> None:
        for fn, channel in pairs:
            fn(wm, channel)

    return emit


#: Jobs started with ``execute_async`` whose thread may still run; cancelled and joined at exit.
_RUNNING: "weakref.WeakSet[JobClient]" = weakref.WeakSet()


def _end_running_jobs() -> None:
    """At interpreter exit, cancel jobs still running and wait for their threads.

    A job's thread is a daemon (a forgotten job must not keep the process alive), but one still
    inside native code (pyarrow, RocksDB) while the interpreter finalizes aborts the process; atexit
    handlers run while threads can still finish, so each job is cancelled and ends here, in order.
    """
    for client in list(_RUNNING):
        thread = client._thread
        if thread is None or not thread.is_alive():
            continue
        client.cancel()
        thread.join(SHUTDOWN_JOIN_TIMEOUT_S)
        if thread.is_alive():
            log.warning("job %r did not end within %.0f s of interpreter exit", client._runner.job_name,
                        SHUTDOWN_JOIN_TIMEOUT_S)


class JobClient:
    """Handle of a job started with ``execute_async``: savepoints, stop, cancel, status, result."""

    def __init__(self, runner: JobRunner) -> None:
        self._runner = runner
        self._result: Future = Future()
        self._thread: threading.Thread | None = None

    @classmethod
    def start(cls, runner: JobRunner) -> "JobClient":
        client = cls(runner)

        def main() -> None:
            try:
                client._result.set_result(runner.run())
            except BaseException as exc:
                client._result.set_exception(exc)

        client._thread = threading.Thread(target=main, name=f"statekit-job-{runner.job_name}", daemon=True)
        client._thread.start()
        _RUNNING.add(client)
        # Registered (again) last so that it runs first at exit (atexit is LIFO): before the hooks
        # that remove working directories the job's RocksDB instances still use.
        atexit.unregister(_end_running_jobs)
        atexit.register(_end_running_jobs)
        return client

    def get_job_id(self) -> str:
        return f"{self._runner.job_name}-{id(self._runner):x}"

    def get_job_status(self) -> str:
        return self._runner.status

    def trigger_savepoint(self, path: str | Path) -> Future:
        """Ask for a savepoint at `path`; the future resolves to its path once it is complete."""
        fut: Future = Future()
        self._runner.requests.put(("savepoint", Path(path), fut))
        return fut

    def stop_with_savepoint(self, path: str | Path) -> Future:
        """Savepoint, then stop without draining (pending timers stay in the savepoint)."""
        fut: Future = Future()
        self._runner.requests.put(("stop", Path(path), fut))
        return fut

    def cancel(self) -> Future:
        fut: Future = Future()
        self._runner.requests.put(("cancel", None, fut))
        return fut

    def get_job_execution_result(self) -> Future:
        """A future of the `JobExecutionResult` (``.result(timeout)`` waits)."""
        return self._result

    def wait(self, timeout: float | None = None) -> JobExecutionResult:
        return self._result.result(timeout)
