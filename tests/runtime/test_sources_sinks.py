"""File sources replayed from offsets, the transactional file sink, print, JobClient savepoints, checkpoint settings."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.errors import JobError
from statekit.runtime import (
    CheckpointedFunction,
    CheckpointListener,
    FileSink,
    FileSource,
    KeyedProcessFunction,
    ListCheckpointed,
    MapFunction,
    RestartStrategies,
    SourceFunction,
    StreamExecutionEnvironment,
    latest_checkpoint,
    read_file_sink,
)
from statekit.savepoint import Savepoint
from statekit.state import ListStateDescriptor, ValueStateDescriptor


class FailOnceAt(MapFunction):
    def __init__(self, at):
        self.at = at

    def open(self, rc):
        self.attempt = rc.get_attempt_number()

    def map(self, value):
        if self.attempt == 0 and value == self.at:
            raise RuntimeError("injected")
        return value


def _write_inputs(tmp_path):
    rows = [{"id": i, "word": f"w{i % 7}"} for i in range(300)]
    pq.write_table(pa.Table.from_pylist(rows[:150]), tmp_path / "a.parquet", row_group_size=40)
    pq.write_table(pa.Table.from_pylist(rows[150:]), tmp_path / "b.parquet", row_group_size=40)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rows.csv").write_text("id,word\n" + "".join(f"{r['id']},{r['word']}\n" for r in rows))
    return rows


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_file_sources_replay_exactly(backend, tmp_path, fmt):
    rows = _write_inputs(tmp_path)
    source = {
        "parquet": FileSource.parquet(tmp_path),
        "jsonl": FileSource.json_lines(tmp_path / "rows.jsonl"),
        "csv": FileSource.csv(tmp_path / "rows.csv"),
    }[fmt]
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.enable_checkpointing(every_records=25)
    env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path / "chk")
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    ids = env.from_source(source, None, fmt).uid("files").map(lambda r: int(r["id"])).map(FailOnceAt(211))
    out = ids.execute_and_collect()
    assert out == [r["id"] for r in rows]
    assert out.job_execution_result.restarts == 1


def test_file_sink_is_exactly_once_across_failures(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.enable_checkpointing(every_records=30)
    env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path / "chk")
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    ds = env.from_collection(range(500)).uid("src").map(FailOnceAt(333)).uid("fail")
    ds.sink_to(FileSink.for_row_format(tmp_path / "out").build()).uid("sink")
    result = env.execute("files")
    assert result.restarts == 1
    assert sorted(json.loads(line) for line in read_file_sink(tmp_path / "out")) == list(range(500))


def test_print_is_at_least_once(capsys, backend):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.from_collection(["a", "b"]).print("out")
    env.execute("print")
    assert capsys.readouterr().out.splitlines() == ["out: a", "out: b"]


class Buffer(MapFunction, ListCheckpointed):
    """The instance-field style: snapshot returns a list, restore gets it back."""

    state_type = "bigint"

    def __init__(self):
        self.seen = []

    def map(self, value):
        self.seen.append(value)
        return len(self.seen)

    def snapshot_state(self, checkpoint_id, timestamp):
        return list(self.seen)

    def restore_state(self, state):
        self.seen = list(state)


def test_list_checkpointed_restores_instance_fields(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.from_collection([1, 2, 3]).uid("src").map(Buffer()).uid("buffer")
    env.execute("lc", final_savepoint=tmp_path / "sp")
    assert Savepoint.open(tmp_path / "sp").list_state("buffer", "list_checkpointed").column("value").to_pylist() == [1, 2, 3]
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    out = env.from_collection([4]).uid("src2").map(Buffer()).uid("buffer")
    assert out.execute_and_collect(restore_from=tmp_path / "sp", allow_non_restored_state=True) == [4]


def test_checkpoints_are_savepoints_and_retained(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.enable_checkpointing(every_records=50)
    cfg = env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path).set_num_retained_checkpoints(2)
    assert cfg.retained == 2
    env.from_collection([f"k{i % 10}" for i in range(1_000)]).uid("src").key_by(lambda w: w).map(lambda w: w).uid("m")
    result = env.execute("retain")
    kept = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("chk-"))
    assert 1 <= len(kept) <= 2
    assert [f"chk-{cid}" for cid, _ in result.completed_checkpoints] == sorted(kept, key=lambda n: int(n[4:]))
    latest = latest_checkpoint(tmp_path)
    sp = Savepoint.open(latest)
    assert sp.kind == "checkpoint"
    assert sp.list_state("src", "offset").column("value").to_pylist()[0] % 50 == 0


def test_restart_attempts_are_bounded(backend):
    class AlwaysFails(MapFunction):
        def map(self, value):
            raise RuntimeError("boom")

    from statekit.runtime import ManualClock

    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend, clock=ManualClock(0))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 10_000))
    env.from_collection([1]).map(AlwaysFails())
    with pytest.raises(JobError, match="after 2 restart"):
        env.execute("fails")


def test_restart_delay_uses_the_clock(backend):
    from statekit.runtime import ManualClock

    clock = ManualClock(0)

    class FailTwice(MapFunction):
        def open(self, rc):
            self.attempt = rc.get_attempt_number()

        def map(self, value):
            if self.attempt < 2:
                raise RuntimeError("boom")
            return value

    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend, clock=clock)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 5_000))
    assert env.from_collection([1]).map(FailTwice()).execute_and_collect() == [1]
    assert clock.now() == 10_000  # two restarts, 5 s each, without sleeping


class Unbounded(SourceFunction, CheckpointedFunction):
    def __init__(self):
        self.n = 0
        self.running = True

    def run(self, ctx):
        while self.running:
            ctx.collect(f"k{self.n % 5}")
            self.n += 1

    def cancel(self):
        self.running = False

    def initialize_state(self, ctx):
        self.state = ctx.get_operator_state_store().get_list_state(ListStateDescriptor("n", "bigint"))
        for v in self.state.get() or []:
            self.n = v

    def snapshot_state(self, ctx):
        self.state.update([self.n])


class Count(KeyedProcessFunction):
    def open(self, rc):
        self.count = rc.get_state(ValueStateDescriptor("count", "bigint", default=0))

    def process_element(self, value, ctx):
        self.count.update(self.count.value() + 1)


def test_job_client_savepoints_of_an_unbounded_job(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.add_source(Unbounded()).uid("src").key_by(lambda w: w, key_type="string").process(Count()).uid("count")
    client = env.execute_async("unbounded")
    first = client.trigger_savepoint(tmp_path / "sp1").result(timeout=60)
    final = client.stop_with_savepoint(tmp_path / "sp2").result(timeout=60)
    client.wait(timeout=60)
    assert client.get_job_status() == "FINISHED"
    for path in (first, final):
        sp = Savepoint.open(path)
        emitted = sp.list_state("src", "n").column("value").to_pylist()[0]
        counts = sp.keyed_table("count").column("count").to_pylist()
        assert sum(counts) == emitted  # source offset and keyed state agree: a consistent cut
    assert Savepoint.open(final).list_state("src", "n").column("value")[0].as_py() >= Savepoint.open(first).list_state("src", "n").column("value")[0].as_py()


def test_incremental_rocksdb_checkpoints_share_files(tmp_path):
    from statekit.runtime import EmbeddedRocksDBStateBackend

    env = StreamExecutionEnvironment(parallelism=2, state_backend=EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
    env.enable_checkpointing(every_records=200)
    env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path / "chk").set_num_retained_checkpoints(3)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    words = [f"k{i % 97}" for i in range(3_000)]
    counted = env.from_collection(words).uid("src").map(FailOnceAt(2_500_000)).key_by(lambda w: w, key_type="string")
    counted.map_with_state(lambda w, n: (None, (n or 0) + 1), "bigint").uid("count")
    result = env.execute("native", final_savepoint=tmp_path / "sp")
    native = [Savepoint.open(path) for _, path in result.completed_checkpoints if Savepoint.open(path).kind == "checkpoint"]
    assert native and all(sp.operator("count").is_native for sp in native)
    # Restoring a native checkpoint gives the canonical table: every key, counted once per element so far.
    latest = native[-1]
    table = latest.keyed_table("count")
    offset = latest.list_state("src", "offset").column("value")[0].as_py()
    assert sum(table.column("state").to_pylist()) == offset
    assert not Savepoint.open(tmp_path / "sp").operator("count").is_native  # savepoints are canonical
    inodes = [{p.stat().st_ino for p in Path(sp.path).rglob("*.sst")} for sp in native]
    if len(inodes) >= 2:
        assert inodes[-1] & inodes[-2] or not inodes[-2]  # SST files shared, not rewritten


def test_restore_from_a_native_checkpoint(tmp_path):
    from statekit.runtime import EmbeddedRocksDBStateBackend

    def job():
        env = StreamExecutionEnvironment(parallelism=2, state_backend=EmbeddedRocksDBStateBackend(True))
        env.enable_checkpointing(every_records=100)
        env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path / "chk")
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
        ds = env.from_collection([(f"k{i % 13}", i) for i in range(1_000)]).uid("src").map(FailOnceAt(("k4", 550)))
        ds = ds.uid("f").map(lambda e: e[0])
        return ds.key_by(lambda w: w, key_type="string").map_with_state(lambda w, n: ((w, (n or 0) + 1), (n or 0) + 1), "bigint").uid("c")

    out = job().execute_and_collect()
    result = out.job_execution_result
    assert result.restarts == 1
    assert any(Savepoint.open(p).operator("c").is_native for _, p in result.completed_checkpoints)
    assert sorted(out)[-1] == ("k9", 77) and len(out) == 1_000


def test_min_pause_between_checkpoints(backend, tmp_path):
    from statekit.runtime import ManualClock

    clock = ManualClock(0)  # never advances: after the first checkpoint completes, the pause never ends
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend, clock=clock)
    env.enable_checkpointing(every_records=10, mode="at_least_once")
    env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path).set_min_pause_between_checkpoints(1_000).set_num_retained_checkpoints(10)
    env.from_collection(range(2_000)).uid("src").map(lambda x: x)
    result = env.execute("pause")
    assert len(result.completed_checkpoints) == 1


def test_job_client_cancel(backend):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.add_source(Unbounded()).uid("src").key_by(lambda w: w, key_type="string").process(Count()).uid("count")
    client = env.execute_async("unbounded")
    client.cancel().result(timeout=60)
    client.wait(timeout=60)
    assert client.get_job_status() == "CANCELED"


RELEASE = threading.Event()
ABORTED: list[int] = []


class Blocker:
    """Pickles only once released when pickled off the main thread: a checkpoint write that hangs."""

    def __reduce__(self):
        if threading.current_thread() is not threading.main_thread():
            RELEASE.wait(timeout=60)
        return (Blocker, ())


class SlowToCheckpoint(KeyedProcessFunction):
    def __init__(self, clock):
        self.clock = clock

    def open(self, rc):
        from statekit import PICKLED

        self.blob = rc.get_state(ValueStateDescriptor("blob", PICKLED))

    def process_element(self, value, ctx):
        self.blob.update(Blocker())
        if not RELEASE.is_set():  # time passes only while the first checkpoint hangs
            self.clock.advance(50)


class ListensForAborts(MapFunction, CheckpointListener):
    def map(self, value):
        return value

    def notify_checkpoint_complete(self, checkpoint_id):
        pass

    def notify_checkpoint_aborted(self, checkpoint_id):
        ABORTED.append(checkpoint_id)
        RELEASE.set()


def test_checkpoint_timeout_aborts_and_the_next_one_completes(backend, tmp_path):
    from statekit.runtime import ManualClock

    RELEASE.clear()
    ABORTED.clear()
    clock = ManualClock(0)
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend, clock=clock)
    env.enable_checkpointing(every_records=5)
    env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path).set_checkpoint_timeout(100).set_num_retained_checkpoints(10)
    ds = env.from_collection(range(40)).uid("src").map(ListensForAborts()).uid("listen")
    ds.key_by(lambda x: x % 2).process(SlowToCheckpoint(clock)).uid("slow")
    result = env.execute("timeout")
    assert ABORTED == [1]
    done = [cid for cid, _ in result.completed_checkpoints]
    assert done and 1 not in done and not (tmp_path / "chk-1").exists()
