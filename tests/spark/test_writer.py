"""SavepointWriter / OperatorTransformation: bootstrapped savepoints are valid, read back equal and restore live."""

from __future__ import annotations

import os

import pytest

from statekit.errors import (
    DuplicateKeyError,
    InvalidArgumentError,
    NullKeyError,
    SavepointExistsError,
    StateAccessError,
    UnknownOperatorError,
)
from statekit.runtime import (
    CheckpointedFunction,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
    WatermarkStrategy,
)
from statekit.savepoint import Savepoint, check
from statekit.spark import (
    BroadcastStateBootstrapFunction,
    KeyedStateBootstrapFunction,
    OperatorTransformation,
    SavepointReader,
    SavepointWriter,
    StateBootstrapFunction,
)
from statekit.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

pytestmark = pytest.mark.spark

BALANCE = ValueStateDescriptor("balance", "double")
TAGS = ListStateDescriptor("tags", "string")
ATTRS = MapStateDescriptor("attrs", "string", "bigint")
USERS = [(f"u{i}", float(i), [f"t{i}", "x"], {"n": i}) for i in range(50)]


@pytest.fixture(scope="module")
def accounts(spark):
    return spark.createDataFrame(USERS, "user string, balance double, tags array<string>, attrs map<string,bigint>")


class AccountBootstrapper(KeyedStateBootstrapFunction):
    def open(self, ctx):
        self.balance = ctx.get_state(BALANCE)
        self.tags = ctx.get_list_state(TAGS)
        self.attrs = ctx.get_map_state(ATTRS)

    def process_element(self, row, ctx):
        self.balance.update(row.balance)
        self.tags.update(row.tags)
        self.attrs.put_all(row.attrs)


class Deposits(KeyedStateBootstrapFunction):
    """Several rows per key: sums deposits and sets a timer per key."""

    def open(self, ctx):
        self.balance = ctx.get_state(BALANCE)

    def process_element(self, row, ctx):
        self.balance.update((self.balance.value() or 0.0) + row.amount)
        ctx.timer_service().register_event_time_timer(1_000)


def sorted_keyed(path, op):
    return Savepoint.open(path).keyed_table(op).sort_by("key").to_pylist()


def test_function_path_and_columnar_path_write_equal_savepoints(spark, accounts, tmp_path):
    fn = OperatorTransformation.bootstrap_with(accounts).key_by("user").transform(AccountBootstrapper())
    cols = OperatorTransformation.bootstrap_with(accounts).key_by("user").columns(BALANCE, TAGS, ATTRS)
    SavepointWriter.new_savepoint(spark, max_parallelism=64).with_operator("accounts", fn).write(tmp_path / "fn")
    SavepointWriter.new_savepoint(spark, max_parallelism=64).with_operator("accounts", cols).write(tmp_path / "col")
    for sp in ("fn", "col"):
        assert check(tmp_path / sp).ok, sp
    assert sorted_keyed(tmp_path / "fn", "accounts") == sorted_keyed(tmp_path / "col", "accounts")
    back = SavepointReader.read(spark, tmp_path / "fn").read_keyed_state("accounts").orderBy("key").collect()
    assert [(r.key, r.balance, r.tags, r.attrs) for r in back] == sorted(
        [(u, b, t, a) for u, b, t, a in USERS])
    meta = Savepoint.open(tmp_path / "fn").operator("accounts")
    assert meta.max_parallelism == 64 and meta.key_type == "string"


def test_columnar_path_reads_renamed_columns_and_refuses_duplicate_keys(spark, tmp_path):
    df = spark.createDataFrame([(1, 5), (2, 7)], "id bigint, amount bigint")
    t = OperatorTransformation.bootstrap_with(df).key_by("id").columns(amount=ValueStateDescriptor("total", "bigint"))
    SavepointWriter.new_savepoint(spark).with_operator("sum", t).write(tmp_path / "ok")
    assert Savepoint.open(tmp_path / "ok").get("sum", 2) == {"total": 7}
    dup = spark.createDataFrame([(1, 5), (1, 7)], "id bigint, amount bigint")
    t = OperatorTransformation.bootstrap_with(dup).key_by("id").columns(amount=ValueStateDescriptor("total", "bigint"))
    with pytest.raises(DuplicateKeyError):
        SavepointWriter.new_savepoint(spark).with_operator("sum", t).write(tmp_path / "dup")
    assert not (tmp_path / "dup").exists()


class Count(KeyedProcessFunction):
    """The live job: adds each deposit to the bootstrapped balance; reports balances when the timer fires."""

    def open(self, rc):
        self.balance = rc.get_state(BALANCE)

    def process_element(self, value, ctx):
        self.balance.update((self.balance.value() or 0.0) + value[1])
        yield value[0], self.balance.value()

    def on_timer(self, timestamp, ctx):
        yield "timer", ctx.get_current_key(), timestamp


def test_keyed_function_with_timers_restores_into_the_runtime(spark, tmp_path):
    rows = [(k, float(a)) for k in range(20) for a in (1, 2, 3)]
    df = spark.createDataFrame(rows, "account bigint, amount double").repartition(3)
    t = OperatorTransformation.bootstrap_with(df).key_by(lambda r: r.account, key_type="bigint").transform(Deposits())
    SavepointWriter.new_savepoint(spark, max_parallelism=32).with_operator("deposits", t).write(tmp_path / "sp")
    assert check(tmp_path / "sp").ok
    sp = Savepoint.open(tmp_path / "sp")
    assert sp.get("deposits", 7) == {"balance": 6.0}
    assert sorted(sp.timers("deposits").column("key").to_pylist()) == list(range(20))

    stamp = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: 1)
    env = StreamExecutionEnvironment(parallelism=2, max_parallelism=32)
    out = (env.from_source([(7, 10.0), (8, 1.0)], stamp).uid("src").key_by(lambda e: e[0], key_type="bigint")
           .process(Count()).uid("deposits").execute_and_collect(restore_from=tmp_path / "sp"))
    assert (7, 16.0) in out and (8, 7.0) in out
    assert sorted(o[1] for o in out if o[0] == "timer") == list(range(20))


class Offsets(StateBootstrapFunction):
    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.split = store.get_list_state(ListStateDescriptor("buffer", "bigint"))
        self.union = store.get_union_list_state(ListStateDescriptor("offsets", "bigint"))

    def process_element(self, row, ctx):
        self.split.add(row.id)

    def snapshot_state(self, ctx):
        self.union.update([ctx.index_of_this_subtask])


class Rates(BroadcastStateBootstrapFunction):
    def process_element(self, row, ctx):
        ctx.get_broadcast_state(MapStateDescriptor("rates", "string", "double")).put(row.currency, row.rate)


def test_operator_list_and_broadcast_state(spark, tmp_path):
    ids = spark.range(0, 10, 1, numPartitions=2)
    rates = spark.createDataFrame([("USD", 1.0), ("EUR", 1.3)], "currency string, rate double")
    (SavepointWriter.new_savepoint(spark)
     .with_operator("src", OperatorTransformation.bootstrap_with(ids, parallelism=2).transform(Offsets()))
     .with_operator("rates", OperatorTransformation.bootstrap_with(rates).transform(Rates()))
     .write(tmp_path / "sp"))
    assert check(tmp_path / "sp").ok
    sp = Savepoint.open(tmp_path / "sp")
    info, lists = sp.operator_state_lists("src", "buffer")
    assert info.redistribution == "split" and len(lists) == 2 and sorted(sum(lists, [])) == list(range(10))
    assert sorted(sp.operator_state_lists("src", "offsets")[1], key=lambda row: row[0]) == [[0], [1]]
    reader = SavepointReader.read(spark, tmp_path / "sp")
    assert sorted(tuple(r) for r in reader.read_broadcast_state("rates", "rates").collect()) == [("EUR", 1.3), ("USD", 1.0)]


RESTORED: dict[int, tuple[list, list]] = {}


class Buffered(MapFunction, CheckpointedFunction):
    """The live job reading the bootstrapped `Offsets` state back (split and union list state)."""

    def initialize_state(self, ctx):
        store = ctx.get_operator_state_store()
        self.split = store.get_list_state(ListStateDescriptor("buffer", "bigint"))
        self.union = store.get_union_list_state(ListStateDescriptor("offsets", "bigint"))

    def open(self, rc):
        RESTORED[rc.get_index_of_this_subtask()] = (sorted(self.split.get() or []), sorted(self.union.get() or []))

    def map(self, value):
        return value

    def snapshot_state(self, ctx):
        pass


def test_bootstrapped_operator_state_restores_into_the_runtime(spark, tmp_path):
    RESTORED.clear()
    ids = spark.range(0, 10, 1, numPartitions=2)
    t = OperatorTransformation.bootstrap_with(ids, parallelism=2).transform(Offsets())
    SavepointWriter.new_savepoint(spark).with_operator("buffered", t).write(tmp_path / "sp")
    env = StreamExecutionEnvironment(parallelism=3)
    env.from_collection([]).uid("src").map(Buffered()).uid("buffered")
    env.execute("ops", restore_from=tmp_path / "sp")
    assert sorted(RESTORED) == [0, 1, 2]
    assert sorted(v for split, _ in RESTORED.values() for v in split) == list(range(10))
    assert all(union == [0, 1] for _, union in RESTORED.values())


def test_from_existing_remove_rename_and_max_parallelism(spark, accounts, tmp_path):
    cols = OperatorTransformation.bootstrap_with(accounts).key_by("user").columns(BALANCE)
    ids = spark.range(0, 4, 1, numPartitions=1)
    (SavepointWriter.new_savepoint(spark).with_operator("accounts", cols)
     .with_operator("src", OperatorTransformation.bootstrap_with(ids).transform(Offsets())).write(tmp_path / "a"))
    before = {p: os.stat(p).st_mtime_ns for p in (tmp_path / "a").rglob("*")}
    extra = OperatorTransformation.bootstrap_with(accounts).key_by("user").columns(TAGS)
    (SavepointWriter.from_existing_savepoint(spark, tmp_path / "a")
     .remove_operator("src")
     .change_operator_identifier("accounts", "accounts-v2")
     .with_max_parallelism("accounts-v2", 256)
     .with_operator("tags", extra)
     .write(tmp_path / "b"))
    assert check(tmp_path / "b").ok
    sp = Savepoint.open(tmp_path / "b")
    assert sorted(m.uid for m in sp.operators) == ["accounts-v2", "tags"]
    assert sp.operator("accounts-v2").max_parallelism == 256
    assert sp.get("accounts-v2", "u3") == {"balance": 3.0}
    old = Savepoint.open(tmp_path / "a").keyed_table("accounts").sort_by("key")
    new = sp.keyed_table("accounts-v2").sort_by("key")
    assert old == new
    assert {p: os.stat(p).st_mtime_ns for p in (tmp_path / "a").rglob("*")} == before
    writer = SavepointWriter.from_existing_savepoint(spark, tmp_path / "a")
    with pytest.raises(UnknownOperatorError):
        writer.remove_operator("nope")
    with pytest.raises(InvalidArgumentError, match="already in the savepoint"):
        writer.with_operator("accounts", cols)
    with pytest.raises(InvalidArgumentError, match="no keyed state"):
        writer.with_max_parallelism("src", 256)


class Boom(KeyedStateBootstrapFunction):
    def open(self, ctx):
        self.balance = ctx.get_state(BALANCE)

    def process_element(self, row, ctx):
        raise RuntimeError("boom")


def test_write_refuses_an_existing_path_and_leaves_nothing_on_failure(spark, accounts, tmp_path):
    cols = OperatorTransformation.bootstrap_with(accounts).key_by("user").columns(BALANCE)
    (tmp_path / "taken").mkdir()
    with pytest.raises(SavepointExistsError):
        SavepointWriter.new_savepoint(spark).with_operator("accounts", cols).write(tmp_path / "taken")
    assert list((tmp_path / "taken").iterdir()) == []
    boom = OperatorTransformation.bootstrap_with(accounts).key_by("user").transform(Boom())
    with pytest.raises(Exception, match="boom"):
        (SavepointWriter.new_savepoint(spark).with_operator("accounts", cols).with_operator("boom", boom)
         .write(tmp_path / "out" / "sp"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


class Late(KeyedStateBootstrapFunction):
    def open(self, ctx):
        pass

    def process_element(self, row, ctx):
        ctx.get_state(BALANCE)


def test_bad_functions_fail_on_the_driver(spark, accounts, tmp_path):
    keyed = OperatorTransformation.bootstrap_with(accounts).key_by("user")
    late = keyed.transform(Late())  # no state in open() is valid (timers only); registering later is not
    with pytest.raises(StateAccessError, match="outside open"):
        SavepointWriter.new_savepoint(spark).with_operator("late", late).write(tmp_path / "late")
    assert not (tmp_path / "late").exists()
    with pytest.raises(InvalidArgumentError, match="key_type"):
        OperatorTransformation.bootstrap_with(accounts).key_by(lambda r: r.user)
    with pytest.raises(InvalidArgumentError, match="no such column"):
        OperatorTransformation.bootstrap_with(accounts).key_by("nope")
    with pytest.raises(InvalidArgumentError, match="key_by"):
        OperatorTransformation.bootstrap_with(accounts).transform(AccountBootstrapper())


def test_bootstrap_from_a_delta_table(spark, accounts, tmp_path):
    # (exporting state to Delta is plain `read_keyed_state(op).write.format("delta")`: tests/spark/test_session.py)
    accounts.coalesce(1).write.format("delta").save(str(tmp_path / "delta"))
    df = spark.read.format("delta").load(str(tmp_path / "delta"))
    t = OperatorTransformation.bootstrap_with(df).key_by("user").columns(BALANCE, ATTRS)
    SavepointWriter.new_savepoint(spark).with_operator("accounts", t).write(tmp_path / "sp")
    back = SavepointReader.read(spark, tmp_path / "sp").read_keyed_state("accounts").orderBy("key").collect()
    assert [(r.key, r.balance, r.attrs) for r in back] == sorted((u, b, a) for u, b, _, a in USERS)


class CountRows(KeyedStateBootstrapFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", "bigint", default=0))

    def process_element(self, row, ctx):
        self.n.update(self.n.value() + 1)
        ctx.timer_service().register_event_time_timer(5)


def test_struct_keys_from_a_function_and_null_keys(spark, tmp_path):
    df = spark.createDataFrame([("x", 1), ("x", 1), ("y", 2)], "a string, b bigint")
    t = (OperatorTransformation.bootstrap_with(df)
         .key_by(lambda r: (r.a, r.b), key_type="struct<a:string,b:bigint>").transform(CountRows()))
    SavepointWriter.new_savepoint(spark).with_operator("s", t).write(tmp_path / "sp")
    sp = Savepoint.open(tmp_path / "sp")
    assert check(tmp_path / "sp").ok
    assert sp.get("s", {"a": "x", "b": 1}) == {"n": 2}
    assert sorted((r["key"]["a"], r["timestamp"]) for r in sp.timers("s").to_pylist()) == [("x", 5), ("y", 5)]
    nulls = spark.createDataFrame([(None, 1), ("x", 2)], "a string, b bigint")
    with pytest.raises(NullKeyError):  # raised in a Spark task, arrives typed
        (SavepointWriter.new_savepoint(spark)
         .with_operator("s", OperatorTransformation.bootstrap_with(nulls).key_by("a").transform(CountRows()))
         .write(tmp_path / "nulls"))
    assert not (tmp_path / "nulls").exists()


def _two_counters(spark, path):
    from statekit.state import ValueStateDescriptor as V

    a = spark.createDataFrame([(1, 10), (2, 20)], "k long, n long")
    b = spark.createDataFrame([(1, 100)], "k long, n long")
    (SavepointWriter.new_savepoint(spark)
     .with_operator("a", OperatorTransformation.bootstrap_with(a).key_by("k").columns(n=V("count", "bigint")))
     .with_operator("b", OperatorTransformation.bootstrap_with(b).key_by("k").columns(n=V("count", "bigint")))
     .write(path))  # fmt: skip
    return path


def test_renames_apply_together_swap_and_do_not_chain(spark, tmp_path):
    """Flink: changeOperatorIdentifier calls are collected and applied when the writer writes, each to the
    operator with that identifier in the savepoint: A->B plus B->A swaps them; A->B plus B->C does not chain."""
    src = _two_counters(spark, tmp_path / "src")
    SavepointWriter.from_existing_savepoint(spark, src).change_operator_identifier("a", "b").change_operator_identifier(
        "b", "a").write(tmp_path / "swapped")  # fmt: skip
    sp = Savepoint.open(tmp_path / "swapped")
    assert sp.get("a", 1) == {"count": 100} and sp.get("b", 2) == {"count": 20}
    # the swapped state restores: a job with uid "a" continues b's counts
    assert _count_job(tmp_path / "swapped", "a") == {1: 101}

    SavepointWriter.from_existing_savepoint(spark, src).change_operator_identifier("a", "b").change_operator_identifier(
        "b", "c").write(tmp_path / "chain")  # fmt: skip
    sp = Savepoint.open(tmp_path / "chain")
    assert sorted(m.uid for m in sp.operators) == ["b", "c"]
    assert sp.get("b", 2) == {"count": 20} and sp.get("c", 1) == {"count": 100}  # A's state is B's, B's is C's


def test_rename_errors(spark, tmp_path):
    src = _two_counters(spark, tmp_path / "src")
    writer = SavepointWriter.from_existing_savepoint(spark, src)
    with pytest.raises(UnknownOperatorError, match="cannot rename operator.*nope"):
        writer.change_operator_identifier("nope", "x")
    writer.change_operator_identifier("a", "b")  # b keeps its identifier: a clash, refused when writing
    with pytest.raises(InvalidArgumentError, match="already renamed"):
        writer.change_operator_identifier("a", "z")
    with pytest.raises(InvalidArgumentError, match="would both have identifier"):
        writer.write(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _count_job(path, uid):
    from statekit.runtime import KeyedProcessFunction
    from statekit.state import ValueStateDescriptor as V

    class Count(KeyedProcessFunction):
        def open(self, rc):
            self.count = rc.get_state(V("count", "bigint"))

        def process_element(self, value, ctx):
            self.count.update((self.count.value() or 0) + 1)
            yield value, self.count.value()

    env = StreamExecutionEnvironment(parallelism=2)
    out = env.from_collection([1]).uid("src").key_by(lambda v: v, key_type="bigint").process(Count()).uid(uid)
    return dict(out.execute_and_collect(restore_from=path, allow_non_restored_state=True))
