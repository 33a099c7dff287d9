"""SavepointWriter.with_state_transform: types changed, states added with defaults and dropped, states moved
between operators; every result restores into a runtime job declaring the new states."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from statekit.errors import StateTypeError, UnknownStateError
from statekit.runtime import KeyedProcessFunction, StreamExecutionEnvironment
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.spark import OperatorTransformation, SavepointReader, SavepointWriter
from statekit.state import ListStateDescriptor, ValueStateDescriptor

pytestmark = pytest.mark.spark

PROFILE = "struct<name:string,tier:string>"


@pytest.fixture
def source(tmp_path):
    with SavepointBuilder(tmp_path / "src", checkpoint_id=3) as b:
        op = b.add_operator("users", parallelism=2, key_type="bigint", keyed_states=[
            ValueStateDescriptor("count", "int"), ValueStateDescriptor("profile", "struct<name:string>"),
            ValueStateDescriptor("last", "string"), ValueStateDescriptor("legacy", "string")])  # fmt: skip
        op.write_keyed(pa.table({"key": pa.array([1, 2, 3], pa.int64()), "count": pa.array([5, 7, None], pa.int32()),
                                 "profile": [{"name": "ann"}, {"name": "bob"}, None], "last": ["x", None, "z"],
                                 "legacy": ["old", "old", "old"]}))  # fmt: skip
    return tmp_path / "src"


class Evolved(KeyedProcessFunction):
    """The job after evolution: declares the new types and reports what it restored."""

    def open(self, rc):
        self.count = rc.get_state(ValueStateDescriptor("count", "bigint"))
        self.profile = rc.get_state(ValueStateDescriptor("profile", PROFILE))
        self.seen = rc.get_list_state(ListStateDescriptor("last", "string"))
        self.flag = rc.get_state(ValueStateDescriptor("flag", "boolean"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 10**10)  # beyond int: the state is bigint now
        yield ctx.get_current_key(), self.count.value(), self.profile.value(), self.seen.get(), self.flag.value()


def _restore(path, keys, fn):
    env = StreamExecutionEnvironment(parallelism=3)
    out = env.from_collection(keys).uid("src").key_by(lambda k: k, key_type="bigint").process(fn).uid("users")
    return sorted(out.execute_and_collect(restore_from=path, allow_non_restored_state=True))


def test_change_type_add_with_default_value_to_list_and_drop_then_restore(spark, source, tmp_path):
    (SavepointWriter.from_existing_savepoint(spark, source)
     .with_state_transform("users", "count", "CAST(count AS BIGINT)", "bigint")                      # int -> bigint
     .with_state_transform("users", "profile", "IF(profile IS NULL, NULL, named_struct('name', profile.name, 'tier', 'basic'))", PROFILE)
     .with_state_transform("users", "last", F.when(F.col("last").isNotNull(), F.array("last")), "array<string>")
     .with_state_transform("users", "flag", F.lit(True), "boolean")                                  # new, default
     .with_state_transform("users", "legacy", None)                                                  # dropped
     .write(tmp_path / "evolved"))  # fmt: skip
    assert check(tmp_path / "evolved").ok
    meta = Savepoint.open(tmp_path / "evolved").operator("users")
    assert [(s.name, s.kind, s.type) for s in meta.keyed_states] == [
        ("count", "value", "bigint"), ("profile", "value", PROFILE), ("last", "list", "array<string>"),
        ("flag", "value", "boolean")]  # fmt: skip
    assert _restore(tmp_path / "evolved", [1, 2, 3], Evolved()) == [
        (1, 5 + 10**10, {"name": "ann", "tier": "basic"}, ["x"], True),
        (2, 7 + 10**10, {"name": "bob", "tier": "basic"}, [], True),
        (3, 10**10, None, ["z"], True),
    ]
    assert Savepoint.open(source).operator("users").keyed_states[0].type == "int"  # the source is untouched


def test_python_function_transforms_and_wrong_types_are_refused(spark, source, tmp_path):
    (SavepointWriter.from_existing_savepoint(spark, source)
     .with_state_transform("users", "last", lambda row: (row["last"] or "").upper() + str(row["key"]))
     .write(tmp_path / "py"))  # fmt: skip
    assert Savepoint.open(tmp_path / "py").keyed_table("users").sort_by("key").column("last").to_pylist() == ["X1", "2", "Z3"]

    writer = SavepointWriter.from_existing_savepoint(spark, source)
    with pytest.raises(StateTypeError, match="produces string values, but the state is declared bigint"):
        writer.with_state_transform("users", "count", "concat('n', count)", "bigint").write(tmp_path / "bad1")
    with pytest.raises(StateTypeError, match="not bigint"):
        (SavepointWriter.from_existing_savepoint(spark, source)
         .with_state_transform("users", "count", lambda row: "many", "bigint").write(tmp_path / "bad2"))  # fmt: skip
    assert not (tmp_path / "bad1").exists() and not (tmp_path / "bad2").exists()
    with pytest.raises(UnknownStateError):
        SavepointWriter.from_existing_savepoint(spark, source).with_state_transform("users", "nope", None)
    with pytest.raises(StateTypeError, match="does not fit"):
        SavepointWriter.from_existing_savepoint(spark, source).with_state_transform("users", "x", "1", "bigint", kind="list")


class Names(KeyedProcessFunction):
    def open(self, rc):
        self.profile = rc.get_state(ValueStateDescriptor("profile", "struct<name:string>"))

    def process_element(self, value, ctx):
        yield ctx.get_current_key(), self.profile.value()


def test_moving_a_state_to_another_operator_split_and_merge(spark, source, tmp_path):
    """Split: "profile" moves out of "users" into a new operator "profiles" (bootstrap + drop).
    Merge: the two operators become one again, "users" taking "profile" back from a join on the key."""
    reader = SavepointReader.read(spark, source)
    profiles = reader.read_keyed_state("users").select("key", "profile").where("profile IS NOT NULL")
    (SavepointWriter.from_existing_savepoint(spark, source)
     .with_operator("profiles", OperatorTransformation.bootstrap_with(profiles).key_by("key").columns(
         ValueStateDescriptor("profile", "struct<name:string>")))
     .with_state_transform("users", "profile", None)
     .write(tmp_path / "split"))  # fmt: skip
    split = Savepoint.open(tmp_path / "split")
    assert [s.name for s in split.operator("users").keyed_states] == ["count", "last", "legacy"]
    assert split.get("profiles", 2) == {"profile": {"name": "bob"}}
    env = StreamExecutionEnvironment(parallelism=2)
    out = env.from_collection([1, 2]).uid("src").key_by(lambda k: k, key_type="bigint").process(Names()).uid("profiles")
    assert sorted(out.execute_and_collect(restore_from=tmp_path / "split", allow_non_restored_state=True)) == [
        (1, {"name": "ann"}), (2, {"name": "bob"})]  # fmt: skip

    r = SavepointReader.read(spark, tmp_path / "split")
    merged = r.read_keyed_state("users").join(r.read_keyed_state("profiles"), "key", "full_outer")
    states = [ValueStateDescriptor("count", "int"), ValueStateDescriptor("last", "string"),
              ValueStateDescriptor("profile", "struct<name:string>")]  # fmt: skip
    (SavepointWriter.from_existing_savepoint(spark, tmp_path / "split")
     .remove_operator("users").remove_operator("profiles")
     .with_operator("users", OperatorTransformation.bootstrap_with(merged).key_by("key").columns(*states))
     .write(tmp_path / "merged"))  # fmt: skip
    back = Savepoint.open(tmp_path / "merged")
    assert back.get("users", 1) == {"count": 5, "last": "x", "profile": {"name": "ann"}}
    # the merged operator restores into a job keyed as both were, holding both operators' states
    assert _restore(tmp_path / "merged", [1, 2, 3], Merged()) == [
        (1, 5, "x", {"name": "ann"}), (2, 7, None, {"name": "bob"}), (3, None, "z", None)]  # fmt: skip


class Merged(KeyedProcessFunction):
    def open(self, rc):
        self.count = rc.get_state(ValueStateDescriptor("count", "int"))
        self.last = rc.get_state(ValueStateDescriptor("last", "string"))
        self.profile = rc.get_state(ValueStateDescriptor("profile", "struct<name:string>"))

    def process_element(self, value, ctx):
        yield ctx.get_current_key(), self.count.value(), self.last.value(), self.profile.value()
