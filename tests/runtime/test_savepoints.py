"""Savepoints written by the runtime: contents, restore by uid hash, and rescaling 2 → 1, 3, 4."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobs import SumCount, events

from statekit.errors import NotASavepointError, RestoreError, SavepointExistsError
from statekit.identifiers import OperatorIdentifier
from statekit.runtime import (
    CheckpointedFunction,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
    WatermarkStrategy,
)
from statekit.savepoint import Savepoint
from statekit.state.descriptors import ListStateDescriptor, ValueStateDescriptor


class Count(KeyedProcessFunction):
    def open(self, rc):
        self.count = rc.get_state(ValueStateDescriptor("count", "bigint"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield value, n


def test_savepoint_holds_exactly_the_jobs_keys_and_values(backend, tmp_path):
    words = [f"w{i % 50}" for i in range(1_000)]
    env = StreamExecutionEnvironment(parallelism=3, state_backend=backend)
    env.from_collection(words).uid("words").key_by(lambda w: w, key_type="string").process(Count()).uid("count")
    env.execute("count", final_savepoint=tmp_path / "sp")
    sp = Savepoint.open(tmp_path / "sp")
    assert sp.kind == "savepoint" and sp.job_name == "count"
    op = sp.operator("count")
    assert (op.parallelism, op.max_parallelism, op.key_type) == (3, 128, "string")
    assert [s.name for s in op.keyed_states] == ["count"]
    table = sp.keyed_table("count")
    assert dict(zip(table.column("key").to_pylist(), table.column("count").to_pylist())) == {f"w{i}": 20 for i in range(50)}
    assert sp.get("count", "w7") == {"count": 20}
    assert sp.list_state("words", "offset").column("value").to_pylist() == [1_000]


def _rescale_run(backend, tmp_path, first: list, rest: list, p1: int, p2: int):
    """Run `first` at p1 to a savepoint, then `rest` at p2 restored from it; return outputs and state."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1] * 10)
    env2 = StreamExecutionEnvironment(parallelism=p1, state_backend=backend)
    src = env2.from_source(first, strategy, "events").uid("events-1")
    o1 = src.key_by(lambda e: e[0], key_type="string").process(SumCount()).uid("sum").execute_and_collect(
        final_savepoint=tmp_path / f"sp-{p1}"
    )
    env3 = StreamExecutionEnvironment(parallelism=p2, state_backend=backend)
    src = env3.from_source(rest, strategy, "events").uid("events-2")
    o2 = src.key_by(lambda e: e[0], key_type="string").process(SumCount()).uid("sum").execute_and_collect(
        restore_from=tmp_path / f"sp-{p1}", allow_non_restored_state=True, final_savepoint=tmp_path / f"sp-{p1}-{p2}"
    )
    return list(o1) + list(o2), Savepoint.open(tmp_path / f"sp-{p1}-{p2}")


@pytest.mark.parametrize("p2", [1, 3, 4])
def test_rescale_from_2(backend, tmp_path, p2):
    data = events(1_000, keys=61)
    first, rest = data[:600], data[600:]
    # The unrescaled reference: the same two runs at parallelism 2.
    ref_out, ref_sp = _rescale_run(backend, tmp_path / "ref", first, rest, 2, 2)
    out, sp = _rescale_run(backend, tmp_path / "new", first, rest, 2, p2)
    key = repr
    assert sorted(out, key=key) == sorted(ref_out, key=key)
    rows = lambda s: sorted(s.keyed_table("sum").to_pylist(), key=lambda r: r["key"])  # noqa: E731
    assert rows(sp) == rows(ref_sp)
    timers = lambda s: sorted(map(repr, s.timers("sum").to_pylist()))  # noqa: E731
    assert timers(sp) == timers(ref_sp)
    assert sp.operator("sum").parallelism == p2


def test_pending_event_timers_are_in_the_final_savepoint(backend, tmp_path):
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1] * 10)
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    src = env.from_source(events(20, keys=3), strategy, "events").uid("events")
    out = src.key_by(lambda e: e[0], key_type="string").process(SumCount()).uid("sum").execute_and_collect(
        final_savepoint=tmp_path / "sp"
    )
    timers = Savepoint.open(tmp_path / "sp").timers("sum").to_pylist()
    # The last element's timer (at 190 + 50) is still pending: no end-of-input watermark fired it.
    assert {t["timestamp"] for t in timers} >= {240}
    assert all(t["domain"] == "event" for t in timers)
    fired = [o for o in out if o[1] == "timer"]
    assert all(o[2] <= 199 for o in fired)  # only timers the watermarks passed fired


# -- operator list state on rescale --------------------------------------------------------------------

SEEN: dict[str, dict[int, list]] = {}


class Stateful(MapFunction, CheckpointedFunction):
    """Each subtask keeps some operator list state and some union list state."""

    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.items = store.get_list_state(ListStateDescriptor("items", "bigint"))
        self.union = store.get_union_list_state(ListStateDescriptor("everyone", "string"))
        self.index = None
        if ctx.is_restored():
            self.restored = (list(self.items.get() or []), sorted(self.union.get() or []))

    def open(self, rc):
        self.index = rc.get_index_of_this_subtask()
        if hasattr(self, "restored"):
            SEEN.setdefault("restored", {})[self.index] = self.restored

    def map(self, value):
        return value

    def snapshot_state(self, ctx):
        base = self.index * 100
        self.items.update([base + i for i in range(5)])
        self.union.update([f"subtask-{self.index}"])


@pytest.mark.parametrize("p2", [1, 3, 4])
def test_operator_state_split_and_union_on_rescale(backend, tmp_path, p2):
    SEEN.clear()
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.from_collection(range(10)).uid("src").map(Stateful()).uid("stateful")
    env.execute("ops", final_savepoint=tmp_path / "sp")
    env = StreamExecutionEnvironment(parallelism=p2, state_backend=backend)
    env.from_collection([]).uid("src").map(Stateful()).uid("stateful")
    env.execute("ops", restore_from=tmp_path / "sp")
    restored = SEEN["restored"]
    assert sorted(restored) == list(range(p2))
    items = [restored[i][0] for i in range(p2)]
    assert sorted(v for part in items for v in part) == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104]
    sizes = [len(part) for part in items]
    assert max(sizes) - min(sizes) <= 1  # an even split
    for i in range(p2):
        assert restored[i][1] == ["subtask-0", "subtask-1"]  # every subtask gets the union


def test_unmatched_state_is_an_error_unless_allowed(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.from_collection(["a", "b"]).uid("src").key_by(lambda w: w).process(Count()).uid("count")
    env.execute("c", final_savepoint=tmp_path / "sp")
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.from_collection(["a"]).uid("src").key_by(lambda w: w).process(Count()).uid("renamed")
    with pytest.raises(RestoreError, match="count"):
        env.execute("c", restore_from=tmp_path / "sp")
    env.execute("c", restore_from=tmp_path / "sp", allow_non_restored_state=True)


def test_restore_continues_counts(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.from_collection(["a", "b", "a"]).uid("src").key_by(lambda w: w).process(Count()).uid("count")
    env.execute("c", final_savepoint=tmp_path / "sp")
    env = StreamExecutionEnvironment(parallelism=3, state_backend=backend)
    out = env.from_collection(["a", "b", "c"]).uid("src2").key_by(lambda w: w).process(Count()).uid("count")
    got = out.execute_and_collect(restore_from=tmp_path / "sp", allow_non_restored_state=True)
    assert sorted(got) == [("a", 3), ("b", 2), ("c", 1)]


def test_parallelism_above_max_is_refused(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=2, max_parallelism=4, state_backend=backend)
    env.from_collection(["a"]).uid("src").key_by(lambda w: w).process(Count()).uid("count")
    env.execute("c", final_savepoint=tmp_path / "sp")
    env = StreamExecutionEnvironment(parallelism=4, max_parallelism=4, state_backend=backend)
    env.from_collection(["a"]).uid("src").key_by(lambda w: w).process(Count()).uid("count")
    env.execute("c", restore_from=tmp_path / "sp")  # 4 <= 4 is fine
    env = StreamExecutionEnvironment(parallelism=4, max_parallelism=8, state_backend=backend)
    env.from_collection(["a"]).uid("src").key_by(lambda w: w).process(Count()).uid("count")
    with pytest.raises(RestoreError, match="max parallelism"):
        env.execute("c", restore_from=tmp_path / "sp")
    env = StreamExecutionEnvironment(parallelism=5, state_backend=backend)  # adopts the savepoint's 4
    env.from_collection(["a"]).uid("src").key_by(lambda w: w).process(Count()).uid("count")
    with pytest.raises(RestoreError, match="exceeds"):
        env.execute("c", restore_from=tmp_path / "sp")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=60),
    p1=st.integers(1, 4),
    p2=st.integers(1, 4),
)
def test_rescaling_keeps_every_key_exactly_once(tmp_path_factory, words, p1, p2):
    tmp = tmp_path_factory.mktemp("hyp")
    env = StreamExecutionEnvironment(parallelism=p1, max_parallelism=16)
    env.from_collection(words).uid("src").key_by(lambda w: w, key_type="string").process(Count()).uid("count")
    env.execute("a", final_savepoint=tmp / "a")
    env = StreamExecutionEnvironment(parallelism=p2)
    env.from_collection([]).uid("src").key_by(lambda w: w, key_type="string").process(Count()).uid("count")
    env.execute("b", restore_from=tmp / "a", final_savepoint=tmp / "b")
    table = Savepoint.open(tmp / "b").keyed_table("count", with_key_group=True)
    got = dict(zip(table.column("key").to_pylist(), table.column("count").to_pylist()))
    assert got == {w: words.count(w) for w in set(words)}
    assert Savepoint.open(tmp / "b").operator("count").parallelism == p2


def test_bad_savepoint_paths_fail_fast(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.from_collection(["a"]).uid("src").key_by(lambda w: w).process(Count()).uid("count")
    with pytest.raises(NotASavepointError):
        env.execute("c", restore_from=tmp_path / "missing")
    (tmp_path / "taken").mkdir()
    with pytest.raises(SavepointExistsError):
        env.execute("c", final_savepoint=tmp_path / "taken")


class StructKeyed(KeyedProcessFunction):
    def open(self, rc):
        self.n = rc.get_state(ValueStateDescriptor("n", "bigint", default=0))

    def process_element(self, value, ctx):
        self.n.update(self.n.value() + 1)
        ctx.timer_service().register_event_time_timer(10_000)
        yield ctx.get_current_key(), self.n.value()

    def on_timer(self, timestamp, ctx):
        yield "timer", ctx.get_current_key(), self.n.value()


@pytest.mark.parametrize("key_type", ["struct<a:string,b:bigint>", None])
def test_struct_keys_and_their_timers_survive_a_restore(backend, tmp_path, key_type):
    stamp = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: 1)
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    keyed = env.from_source([("x", 1), ("y", 2), ("x", 1)], stamp).uid("src").key_by(lambda e: (e[0], e[1]), key_type=key_type)
    first = keyed.process(StructKeyed()).uid("f").execute_and_collect(final_savepoint=tmp_path / "sp")
    assert first == [(("x", 1), 1), (("y", 2), 1), (("x", 1), 2)]
    env = StreamExecutionEnvironment(parallelism=3, state_backend=backend)
    keyed = env.from_source([("x", 1)], stamp).uid("src2").key_by(lambda e: (e[0], e[1]), key_type=key_type)
    second = keyed.process(StructKeyed()).uid("f").execute_and_collect(restore_from=tmp_path / "sp", allow_non_restored_state=True)
    assert sorted(map(repr, second)) == sorted(map(repr, [(("x", 1), 3), ("timer", ("y", 2), 1), ("timer", ("x", 1), 3)]))


def test_key_type_must_match_the_saved_one(backend, tmp_path):
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.from_collection(["a"]).uid("src").key_by(lambda w: w, key_type="string").process(Count()).uid("count")
    env.execute("c", final_savepoint=tmp_path / "sp")
    env = StreamExecutionEnvironment(parallelism=1, state_backend=backend)
    env.from_collection([1]).uid("src").key_by(lambda w: w, key_type="bigint").process(Count()).uid("count")
    with pytest.raises(RestoreError, match="keyed by bigint"):
        env.execute("c", restore_from=tmp_path / "sp")


def test_pickled_state_needs_trust_to_restore_but_not_to_fail_over(backend, tmp_path):
    from statekit import PICKLED
    from statekit.errors import UntrustedPickleError
    from statekit.runtime import RestartStrategies

    class FailOnce(MapFunction):
        def open(self, rc):
            self.attempt = rc.get_attempt_number()

        def map(self, value):
            if self.attempt == 0 and value[1] == 40:
                raise RuntimeError("injected")
            return value

    def job(p, data, **kw):
        env = StreamExecutionEnvironment(parallelism=p, state_backend=backend)
        env.enable_checkpointing(every_records=10)
        env.get_checkpoint_config().set_checkpoint_storage_dir(kw.pop("chk"))
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
        ds = env.from_collection(data).uid(kw.pop("src")).map(FailOnce()).uid("fail").key_by(lambda e: e[0])
        reduced = ds.reduce(lambda x, y: (x[0], x[1] + y[1]), output_type=PICKLED).uid("sum")
        return reduced.execute_and_collect(**kw)

    first = job(2, [(f"k{i % 3}", i) for i in range(60)], chk=tmp_path / "c1", src="a", final_savepoint=tmp_path / "sp")
    assert first.job_execution_result.restarts == 1  # failed over through pickled state
    assert max(v for k, v in first if k == "k0") == sum(range(0, 60, 3))
    with pytest.raises(UntrustedPickleError):
        job(3, [("k0", 1)], chk=tmp_path / "c2", src="b", restore_from=tmp_path / "sp", allow_non_restored_state=True)
    again = job(3, [("k0", 1)], chk=tmp_path / "c3", src="b", restore_from=tmp_path / "sp", allow_non_restored_state=True, trust_pickled=True)
    assert list(again) == [("k0", sum(range(0, 60, 3)) + 1)]


def test_undeclared_key_type_routes_as_the_restored_one(backend, tmp_path):
    # Saved with int keys (Java Integer hashing); restored without a declared type, the keys must
    # still hash as int, not as the bigint a Python int would be inferred as.
    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    keys = list(range(-25, 25))  # negative ints hash differently as Integer and as Long
    env.from_collection(keys).uid("src").key_by(lambda k: k, key_type="int").process(Count()).uid("count")
    env.execute("c", final_savepoint=tmp_path / "sp")
    env = StreamExecutionEnvironment(parallelism=3, state_backend=backend)
    out = env.from_collection(keys).uid("src2").key_by(lambda k: k).process(Count()).uid("count")
    got = out.execute_and_collect(restore_from=tmp_path / "sp", allow_non_restored_state=True)
    assert sorted(got) == [(k, 2) for k in keys]


def test_operators_without_uid_match_by_topology(backend, tmp_path):
    def job(name):
        env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
        keyed = env.from_collection(["a", "b", "a"]).key_by(lambda w: w, key_type="string")
        return keyed.process(Count()).name(name)

    job("first name").execute_and_collect(final_savepoint=tmp_path / "sp")
    ops = Savepoint.open(tmp_path / "sp").operators
    assert all(op.uid is None for op in ops)
    # Same topology, new display name: the generated ids match, so state (and the source offset) restore.
    assert job("renamed").execute_and_collect(restore_from=tmp_path / "sp") == []


def test_explicit_uid_hash_wins_over_the_uid_in_savepoints_and_restores(tmp_path):
    """One rule for ``.uid(x).set_uid_hash(h)`` (Flink's): the operator is written under h and restored from h."""
    h = OperatorIdentifier.for_uid("legacy-counter").uid_hash
    env = StreamExecutionEnvironment(parallelism=2)
    (env.from_collection(["a", "b", "a"]).uid("words-1").key_by(lambda w: w, key_type="string")
        .process(Count()).uid("count-v2").set_uid_hash(h))
    env.execute("first", final_savepoint=tmp_path / "sp")
    sp = Savepoint.open(tmp_path / "sp")
    keyed = [m for m in sp.operators if m.key_type is not None]
    assert [m.identifier for m in keyed] == [OperatorIdentifier.for_uid_hash(h)]
    assert OperatorIdentifier.for_uid("count-v2").uid_hash not in {m.uid_hash for m in sp.operators}
    assert sp.get(OperatorIdentifier.for_uid_hash(h), "a") == {"count": 2}

    def second(tag, configure):
        env = StreamExecutionEnvironment(parallelism=1)
        stream = env.from_collection(["a"]).uid(f"words-{tag}").key_by(lambda w: w, key_type="string").process(Count())
        configure(stream)
        return sorted(stream.execute_and_collect(restore_from=tmp_path / "sp", allow_non_restored_state=True))

    # the same uid + hash, the hash alone, or the uid whose hash it is: all restore the count of "a"
    assert second("2", lambda s: s.uid("count-v2").set_uid_hash(h)) == [("a", 3)]
    assert second("3", lambda s: s.set_uid_hash(h)) == [("a", 3)]
    assert second("4", lambda s: s.uid("legacy-counter")) == [("a", 3)]
    # the uid alone names another operator: its state starts empty
    assert second("5", lambda s: s.uid("count-v2")) == [("a", 1)]
