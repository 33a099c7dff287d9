"""SavepointWriter.rekey: every key replaced, key groups recomputed, and the result restores into a running job."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from statekit.errors import DuplicateKeyError, InvalidArgumentError, NullKeyError
from statekit.keygroups import assign_to_key_group
from statekit.runtime import KeyedProcessFunction, StreamExecutionEnvironment
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.spark import SavepointWriter
from statekit.state import ValueStateDescriptor
from statekit.state.descriptors import OperatorStateInfo

pytestmark = pytest.mark.spark


class Count(KeyedProcessFunction):
    """Counts events per key and remembers a timer per key (so timers must follow their keys)."""

    def open(self, rc):
        self.count = rc.get_state(ValueStateDescriptor("count", "bigint"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        if n == 1:
            ctx.timer_service().register_processing_time_timer(10**15 + value[1])
        yield ctx.get_current_key(), n


def _run(events, key_fn, key_type, src="src", **run):
    env = StreamExecutionEnvironment(parallelism=2)
    out = env.from_collection(events).uid(src).key_by(key_fn, key_type=key_type).process(Count()).uid("count")
    return list(out.execute_and_collect(**run))


def test_rekeyed_state_restores_into_a_job_keyed_by_the_new_key(spark, tmp_path):
    events = [(i % 40, i) for i in range(400)]  # user ids 0..39, ten events each
    _run(events[:200], lambda e: e[0], "bigint", final_savepoint=tmp_path / "by-id")
    (SavepointWriter.from_existing_savepoint(spark, tmp_path / "by-id")
        .rekey("count", F.concat(F.lit("user-"), F.col("key").cast("string")))
        .write(tmp_path / "by-name"))  # fmt: skip
    assert check(tmp_path / "by-name").ok
    old, new = Savepoint.open(tmp_path / "by-id"), Savepoint.open(tmp_path / "by-name")
    assert new.operator("count").key_type == "string"
    assert new.get("count", "user-7") == old.get("count", 7) == {"count": 5}
    table = new.keyed_table("count", with_key_group=True).to_pylist()
    assert all(r["key_group"] == assign_to_key_group(r["key"], 128, "string") for r in table)
    timers = new.timers("count").to_pylist()
    assert sorted(t["key"] for t in timers) == sorted(f"user-{i}" for i in range(40))
    # The job now keys by name and continues the counts: every user ends at ten events.
    # (A new source uid: the old source would resume from its saved offset into the new input.)
    rest = _run(events[200:], lambda e: f"user-{e[0]}", "string", src="src-2", restore_from=tmp_path / "by-name",
                allow_non_restored_state=True)
    final = {}
    for key, n in rest:
        final[key] = n
    assert final == {f"user-{i}": 10 for i in range(40)}


def test_rekey_with_a_python_function_and_a_new_max_parallelism(spark, tmp_path):
    _run([(i % 10, i) for i in range(30)], lambda e: e[0], "bigint", final_savepoint=tmp_path / "a")
    (SavepointWriter.from_existing_savepoint(spark, tmp_path / "a")
        .rekey("count", lambda k: k * 1000, key_type="int").with_max_parallelism("count", 256)
        .write(tmp_path / "b"))  # fmt: skip
    sp = Savepoint.open(tmp_path / "b")
    meta = sp.operator("count")
    assert (meta.key_type, meta.max_parallelism) == ("int", 256)
    assert sorted(sp.keyed_table("count").column("key").to_pylist()) == [i * 1000 for i in range(10)]
    assert sp.get("count", 3000) == {"count": 3}


def test_two_keys_becoming_one_is_refused_and_nothing_is_written(spark, tmp_path):
    _run([(i % 10, i) for i in range(30)], lambda e: e[0], "bigint", final_savepoint=tmp_path / "a")
    writer = SavepointWriter.from_existing_savepoint(spark, tmp_path / "a").rekey("count", "key % 2")
    with pytest.raises(DuplicateKeyError, match="both become"):
        writer.write(tmp_path / "b")
    assert not (tmp_path / "b").exists()
    null = SavepointWriter.from_existing_savepoint(spark, tmp_path / "a").rekey("count", "IF(key = 3, NULL, key)")
    with pytest.raises(NullKeyError, match="key 3 maps to a null key"):
        null.write(tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_rekey_needs_keys_and_a_type_for_functions(spark, tmp_path):
    with SavepointBuilder(tmp_path / "a") as b:
        b.add_operator("plain").write_list_state(OperatorStateInfo("buf", "split", "bigint"), [[1]])
        b.add_operator("k", key_type="bigint", keyed_states=[ValueStateDescriptor("v", "bigint")]).write_keyed(
            pa.table({"key": pa.array([1], pa.int64()), "v": pa.array([1], pa.int64())}))  # fmt: skip
    writer = SavepointWriter.from_existing_savepoint(spark, tmp_path / "a")
    with pytest.raises(InvalidArgumentError, match="no keyed state"):
        writer.rekey("plain", "key")
    with pytest.raises(InvalidArgumentError, match="key_type"):
        writer.rekey("k", lambda k: k + 1)


@pytest.mark.parametrize("merge", ["sum", {"count": "sum(count)"}, lambda key, states: {"count": sum(s["count"] for s in states)}],
                         ids=["aggregate-name", "sql-per-state", "python"])  # fmt: skip
def test_colliding_keys_merged_then_restored(spark, tmp_path, merge):
    """Counts of users 0..9 merged into their parity: restored, the job continues from the merged counts."""
    _run([(i % 10, i) for i in range(30)], lambda e: e[0], "bigint", final_savepoint=tmp_path / "a")  # 3 each
    SavepointWriter.from_existing_savepoint(spark, tmp_path / "a").rekey("count", "key % 2", merge=merge).write(tmp_path / "b")
    sp = Savepoint.open(tmp_path / "b")
    assert check(tmp_path / "b").ok and {k: sp.get("count", k) for k in (0, 1)} == {0: {"count": 15}, 1: {"count": 15}}
    rest = _run([(0, 1), (1, 2), (0, 3)], lambda e: e[0] % 2, "bigint", src="src-2", restore_from=tmp_path / "b",
                allow_non_restored_state=True)  # fmt: skip
    assert rest == [(0, 16), (1, 16), (0, 17)] or sorted(rest) == [(0, 16), (0, 17), (1, 16)]


def test_a_merge_giving_null_is_refused_and_nothing_is_written(spark, tmp_path):
    from statekit.errors import InvalidMergeError

    _run([(i % 10, i) for i in range(30)], lambda e: e[0], "bigint", final_savepoint=tmp_path / "a")
    writer = SavepointWriter.from_existing_savepoint(spark, tmp_path / "a")
    with pytest.raises(InvalidMergeError, match="null for state 'count'"):
        writer.rekey("count", "key % 2", merge={"count": "CAST(NULL AS BIGINT)"}).write(tmp_path / "b")
    assert not (tmp_path / "b").exists()
    with pytest.raises(InvalidArgumentError, match="missing"):
        writer.rekey("count", "key % 2", merge={"other": "sum(other)"})
