"""Sinks: user SinkFunctions and print (at-least-once), the collect sink and a transactional file sink (exactly-once)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from statekit.errors import InvalidArgumentError
from statekit.runtime.context import SinkContext
from statekit.runtime.operators import StreamOperator, method_or_callable
from statekit.state.descriptors import ListStateDescriptor
from statekit.tempdirs import pid_alive


class SinkOperator(StreamOperator):
    """``add_sink``: calls ``invoke(value, context)`` (or a plain callable) for every element.

    At-least-once: after a failure, elements since the last completed checkpoint are replayed
    and reach the sink again, unless the function itself is transactional (see `FileSink`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fn = self.function
        self.sink_ctx = SinkContext(self)
        invoke = getattr(fn, "invoke", None)
        if invoke is not None:
            ctx = self.sink_ctx

            def call(value: Any, ts: Any) -> None:
                ctx._ts = ts
                invoke(value, ctx)

            self.process = call
        else:
            f = method_or_callable(fn, "invoke")
            self.process = lambda value, ts: f(value)


class PrintSinkOperator(StreamOperator):
    """``print()``: writes ``str(value)`` (prefixed ``"<subtask>> "`` when parallel). At-least-once."""

    def process(self, value: Any, ts: Any) -> None:
        prefix = self.transformation.options.get("prefix")
        head = f"{prefix}:" if prefix else ""
        if self.parallelism > 1:
            head += f"{self.subtask_index + 1}> "
        elif head:
            head += " "
        print(f"{head}{value}", flush=False)


class Collector:
    """Results of ``execute_and_collect``, committed per checkpoint so they survive restarts exactly once."""

    def __init__(self) -> None:
        self.committed: list[Any] = []
        self.staged: dict[int, list[Any]] = {}

    def stage(self, checkpoint_id: int, items: list[Any]) -> None:
        self.staged.setdefault(checkpoint_id, []).extend(items)

    def commit_upto(self, checkpoint_id: int) -> None:
        for cid in sorted(c for c in self.staged if c <= checkpoint_id):
            self.committed.extend(self.staged.pop(cid))

    def rollback_after(self, checkpoint_id: int | None) -> None:
        """A restart from `checkpoint_id` (None: from scratch) drops what later checkpoints staged."""
        if checkpoint_id is not None:
            self.commit_upto(checkpoint_id)
        self.staged.clear()


class CollectSinkOperator(StreamOperator):
    """The sink behind ``execute_and_collect``: a two-phase commit into the job's `Collector`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.collector: Collector = self.transformation.options["collector"]
        self.buffer: list[Any] = []
        self.process = lambda value, ts, append=self.buffer.append: append(value)

    def snapshot_internal_state(self, checkpoint_id: int) -> None:
        self.collector.stage(checkpoint_id, self.buffer[:])
        self.buffer.clear()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.collector.commit_upto(checkpoint_id)

    def finish(self) -> None:
        self.collector.commit_upto(2**62)
        self.collector.committed.extend(self.buffer)
        self.buffer.clear()


class FileSink:
    """A transactional file sink: exactly-once output with checkpoints.

    Elements go to a hidden in-progress file; a checkpoint closes it as *pending* (its name kept
    in the sink's operator state) and its completion renames it to a visible
    ``part-<subtask>-<checkpoint>.<ext>`` file. A restore commits the pending files of the
    checkpoint it restores from; in-progress files of a failed attempt stay hidden and are ignored.
    Read the output with `read_file_sink`.

    Examples
    --------
    >>> FileSink.for_row_format("/tmp/out").build().format
    'jsonl'
    """

    def __init__(self, path: str | Path, *, format: str = "jsonl") -> None:
        if format not in ("jsonl", "text"):
            raise InvalidArgumentError(f"file sink format must be 'jsonl' or 'text', got {format!r}.")
        self.path = Path(path)
        self.format = format

    @classmethod
    def for_row_format(cls, base_path: str | Path, encoder: Any = None) -> "_FileSinkBuilder":
        """PyFlink shape: ``FileSink.for_row_format(path, Encoder.simple_string_encoder()).build()``."""
        return _FileSinkBuilder(base_path, "text" if encoder == "text" else "jsonl")


class _FileSinkBuilder:
    def __init__(self, path: str | Path, fmt: str) -> None:
        self.path, self.fmt = path, fmt

    def build(self) -> FileSink:
        return FileSink(self.path, format=self.fmt)


class Encoder:
    """PyFlink's ``Encoder.simple_string_encoder()``: one ``str(value)`` per line."""

    @staticmethod
    def simple_string_encoder() -> str:
        return "text"


def read_file_sink(path: str | Path) -> list[str]:
    """Committed lines of a `FileSink` directory, file by file in name order (hidden files skipped)."""
    out: list[str] = []
    for p in sorted(Path(path).iterdir()):
        if p.name.startswith("part-"):
            out.extend(p.read_text(encoding="utf-8").splitlines())
    return out


class FileSinkOperator(StreamOperator):
    """One subtask of a `FileSink`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        sink: FileSink = self.function
        self.dir = sink.path
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ext = "jsonl" if sink.format == "jsonl" else "txt"
        self.encode = (lambda v: json.dumps(v, default=str)) if sink.format == "jsonl" else str
        self.tag = self.transformation.uid_hash[:8]
        self.file: Any = None
        self.inprogress: Path | None = None
        self.pending: list[str] = []
        self._pending_state: Any = None
        if self.subtask_index == 0:
            remove_dead_inprogress(self.dir, self.tag)

    def initialize_internal_state(self, restored: bool) -> None:
        self._pending_state = self.operator_state_store.get_list_state(ListStateDescriptor("pending_files", "string"))
        if restored:
            # Pending files of the checkpoint we restore from were durable before the failure:
            # commit them now (idempotently), as Flink's two-phase commit sinks do on recovery.
            for name in list(self._pending_state.get() or []):
                self._commit(name)
            self._pending_state.update([])

    def process(self, value: Any, ts: Any) -> None:
        f = self.file
        if f is None:
            self.inprogress = self.dir / f".inprogress-{self.tag}-{self.subtask_index}-{self.attempt}-{os.getpid()}"
            f = self.file = open(self.inprogress, "w", encoding="utf-8")
        f.write(self.encode(value))
        f.write("\n")

    def _roll(self, checkpoint_id: int) -> str | None:
        if self.file is None or self.inprogress is None:  # both are set together when a file opens
            return None
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.file = None
        name = f".pending-{self.tag}-{self.subtask_index}-{checkpoint_id:08d}.{self.ext}"
        os.replace(self.inprogress, self.dir / name)
        return name

    def _commit(self, name: str) -> None:
        src = self.dir / name
        final = self.dir / name.replace(".pending-", "part-", 1)
        if src.exists():
            os.replace(src, final)

    def snapshot_internal_state(self, checkpoint_id: int) -> None:
        name = self._roll(checkpoint_id)
        if name is not None:
            self.pending.append(name)
        self._pending_state.update(list(self.pending))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        keep = []
        for name in self.pending:
            if int(name.rsplit("-", 1)[1].split(".")[0]) <= checkpoint_id:
                self._commit(name)
            else:
                keep.append(name)
        self.pending = keep
        super().notify_checkpoint_complete(checkpoint_id)

    def finish(self) -> None:
        name = self._roll(self.job.last_checkpoint_id + 1)
        for n in self.pending + ([name] if name else []):
            self._commit(n)
        self.pending = []

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        super().close()


def dead_inprogress(directory: Path, tag: str | None = None) -> list[Path]:
    """In-progress files (``.inprogress-<tag>-<subtask>-<attempt>-<pid>``) of processes no longer alive.

    Their content was never covered by a checkpoint (that would have made it ``.pending``), so a
    restore replays it: they are garbage once their writer is dead.
    """
    out: list[Path] = []
    prefix = ".inprogress-" + (f"{tag}-" if tag is not None else "")
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return out
    for name in names:
        pid = name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            out.append(Path(directory) / name)
    return out


def remove_dead_inprogress(directory: Path, tag: str | None = None) -> list[Path]:
    """Remove the in-progress files that dead writers left in directory; returns what was removed."""
    removed = dead_inprogress(directory, tag)
    for path in removed:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    return removed

