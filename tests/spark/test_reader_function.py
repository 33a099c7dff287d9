"""KeyedStateReaderFunction: state registered in open, read per key with timers, on executors."""

from __future__ import annotations

import pytest

from statekit.errors import StateAccessError, StateTypeError, UnknownStateError
from statekit.spark import KeyedStateReaderFunction, SavepointReader
from statekit.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

pytestmark = pytest.mark.spark


class Everything(KeyedStateReaderFunction):
    """Reads all five keyed states of `proc` and the key's timers."""

    def open(self, ctx):
        from statekit.state import AggregatingStateDescriptor, ReducingStateDescriptor

        self.count = ctx.get_state(ValueStateDescriptor("count", "bigint"))
        self.events = ctx.get_list_state(ListStateDescriptor("events", "bigint"))
        self.attrs = ctx.get_map_state(MapStateDescriptor("attrs", "string", "string"))
        self.total = ctx.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b, "bigint"))
        self.avg = ctx.get_aggregating_state(AggregatingStateDescriptor("avg", _Avg(), "struct<count:bigint,sum:bigint>"))

    def read_key(self, key, ctx):
        yield {
            "key": key,
            "count": self.count.value(),
            "events": self.events.get(),
            "attrs": self.attrs.items(),
            "total": self.total.get(),
            "avg": self.avg.get(),
            "event_timers": ctx.registered_event_time_timers(),
            "processing_timers": ctx.registered_processing_time_timers(),
        }


from statekit.state import AggregateFunction  # noqa: E402


class _Avg(AggregateFunction):
    def create_accumulator(self):
        return {"count": 0, "sum": 0}

    def add(self, value, acc):
        return {"count": acc["count"] + 1, "sum": acc["sum"] + value}

    def get_result(self, acc):
        return acc["sum"] / acc["count"]


@pytest.fixture(scope="module")
def reader(spark, acceptance_savepoint):
    return SavepointReader.read(spark, acceptance_savepoint)


def test_reader_function_sees_every_state_and_timer(reader):
    schema = (
        "key bigint, count bigint, events array<bigint>, attrs array<struct<k:string,v:string>>, total bigint, "
        "avg double, event_timers array<bigint>, processing_timers array<bigint>"
    )
    got = reader.read_keyed_state("proc", Everything(), output_schema=schema).orderBy("key").collect()
    assert [r.key for r in got] == [1, 2, 3]
    for r in got:
        k = r.key
        assert (r["count"], r.events, r.total, r.avg) == (10 * k, [k, k + 1], 100 * k, 2.0)
        assert [tuple(a) for a in r.attrs] == [("k", str(k))]
        assert (r.event_timers, r.processing_timers) == ([1000 + k], [2000 + k])


class CountOnly(KeyedStateReaderFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", "bigint"))

    def read_key(self, key, ctx):
        yield {"key": key, "doubled": 2 * self.count.value()}


def test_output_schema_is_inferred(reader):
    df = reader.read_keyed_state("proc", CountOnly())
    assert df.schema.simpleString() == "struct<key:bigint,doubled:bigint>"
    assert sorted(tuple(r) for r in df.collect()) == [(1, 20), (2, 40), (3, 60)]


class LateRegistration(KeyedStateReaderFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", "bigint"))

    def read_key(self, key, ctx):
        ctx.get_state(ValueStateDescriptor("total", "bigint"))
        yield {"key": key}


def test_registering_outside_open_raises(reader):
    with pytest.raises(StateAccessError, match="open"):
        reader.read_keyed_state("proc", LateRegistration(), output_schema="key bigint").collect()


class Wrong(KeyedStateReaderFunction):
    def __init__(self, descriptor):
        self.descriptor = descriptor

    def open(self, ctx):
        ctx.get_state(self.descriptor)

    def read_key(self, key, ctx):
        yield {"key": key}


def test_registration_is_checked_against_the_manifest_on_the_driver(reader):
    with pytest.raises(UnknownStateError, match="count"):
        reader.read_keyed_state("proc", Wrong(ValueStateDescriptor("missing", "bigint")), output_schema="key bigint")
    with pytest.raises(StateTypeError, match="bigint"):
        reader.read_keyed_state("proc", Wrong(ValueStateDescriptor("count", "string")), output_schema="key bigint")


class Mutating(KeyedStateReaderFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", "bigint"))

    def read_key(self, key, ctx):
        self.count.update(0)
        yield {"key": key}


def test_handles_are_read_only(reader):
    with pytest.raises(StateAccessError, match="read-only"):
        reader.read_keyed_state("proc", Mutating(), output_schema="key bigint").collect()


@pytest.fixture(scope="module")
def pickled_savepoint(tmp_path_factory):
    import pyarrow as pa

    from statekit import serde
    from statekit.savepoint import SavepointBuilder
    from statekit.types import PICKLED

    path = tmp_path_factory.mktemp("pickled") / "sp"
    with SavepointBuilder(path) as b:
        op = b.add_operator("objs", parallelism=1, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("obj", PICKLED)])
        op.write_keyed(pa.table({"key": pa.array([1, 2], pa.int64()),
                                 "obj": pa.array([serde.dumps({"a": 1}), serde.dumps((2, "b"))], pa.binary())}))
    return path


class Objects(KeyedStateReaderFunction):
    def open(self, ctx):
        from statekit.types import PICKLED

        self.obj = ctx.get_state(ValueStateDescriptor("obj", PICKLED))

    def read_key(self, key, ctx):
        yield {"key": key, "obj": repr(self.obj.value())}


def test_pickled_state_is_read_only_when_trusted(spark, pickled_savepoint):
    from statekit.errors import UntrustedPicklePayloadError

    untrusted = SavepointReader.read(spark, pickled_savepoint)
    with pytest.raises(UntrustedPicklePayloadError, match="trust_pickled"):
        untrusted.read_keyed_state("objs", Objects(), output_schema="key bigint, obj string")
    assert untrusted.read_keyed_state("objs").schema["obj"].dataType.simpleString() == "binary"
    trusted = SavepointReader.read(spark, pickled_savepoint, trust_pickled=True)
    got = trusted.read_keyed_state("objs", Objects(), output_schema="key bigint, obj string").orderBy("key").collect()
    assert [r.obj for r in got] == ["{'a': 1}", "(2, 'b')"]


def test_tasks_split_by_key_group_for_parallel_python_work():
    from statekit.format.manifest import FileEntry
    from statekit.spark.scan import ScanTask, split_tasks, task_range

    one = ScanTask(files=(FileEntry("k.parquet", "keyed", 10, 10, "crc32:0", None, 0, 127),))
    parts = split_tasks([one], 4)
    assert len(parts) == 4 and all(t.files == one.files for t in parts)
    covered = sorted(g for t in parts for g in t.key_groups)
    assert covered == list(range(128))  # disjoint halves, nothing lost
    assert [task_range(t) for t in parts] == [(0, 31), (32, 63), (64, 95), (96, 127)]
    narrowed = ScanTask(files=one.files, key_groups=frozenset({5}), keys=frozenset({1}))
    assert split_tasks([narrowed], 4) == [narrowed]  # a key lookup stays one task
    native = split_tasks([ScanTask(key_group_range=(0, 1))], 8)
    assert [t.key_group_range for t in native] == [(0, 0), (1, 1)]
