"""A native RocksDB checkpoint and the canonical savepoint of the same state read as equal DataFrames."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.backends import create_keyed_backend
from statekit.keygroups import assign_to_key_group, key_group_range
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.spark import SavepointReader
from statekit.state import ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor, ValueStateDescriptor

pytestmark = pytest.mark.spark

P, M = 4, 128
STATES = [
    ValueStateDescriptor("count", "bigint"),
    ListStateDescriptor("events", "bigint"),
    MapStateDescriptor("attrs", "string", "string"),
    ReducingStateDescriptor("total", lambda a, b: a + b, "bigint"),
]


def _fill_backends(tmp_path):
    """Four RocksDB subtasks, each holding the keys of its key groups among 1..60."""
    backends = []
    for i in range(P):
        rng = key_group_range(M, P, i)
        b = create_keyed_backend(
            "rocksdb", key_type=pa.int64(), max_parallelism=M, key_group_range=rng, clock=lambda: 0,
            directory=tmp_path / f"work-{i}",
        )
        count, events, attrs, total = (b.get_state(d) for d in STATES)
        for key in range(1, 61):
            kg = assign_to_key_group(key, M, "bigint")
            if kg not in rng:
                continue
            b.set_current_key(key, kg)
            count.update(key * 10)
            events.add(key)
            events.add(key + 1)
            if key % 2:
                attrs.put("k", str(key))
            total.add(key)
            total.add(key)
        backends.append((b, rng))
    return backends


@pytest.fixture(scope="module")
def native_and_canonical(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("native")
    backends = _fill_backends(tmp)
    with SavepointBuilder(tmp / "native", kind="checkpoint", checkpoint_id=1) as nb, \
            SavepointBuilder(tmp / "canonical", checkpoint_id=1) as cb:
        nop = nb.add_operator("proc", parallelism=P, max_parallelism=M, key_type="bigint", keyed_states=STATES)
        cop = cb.add_operator("proc", parallelism=P, max_parallelism=M, key_type="bigint", keyed_states=STATES)
        for i, (b, rng) in enumerate(backends):
            native = b.snapshot(1, native=True, target_dir=tmp / f"chk-{i}")
            nop.write_native_keyed(i, native.native_dir, rng, list(native.native_files))
            cop.write_keyed(b.snapshot(2).table())
    for b, _ in backends:
        b.close()
    return tmp / "native", tmp / "canonical"


def test_native_checkpoint_reads_like_the_canonical_savepoint(spark, native_and_canonical):
    native, canonical = native_and_canonical
    assert Savepoint.open(native).operator("proc").is_native
    a = SavepointReader.read(spark, native).read_keyed_state("proc", with_key_group=True)
    b = SavepointReader.read(spark, canonical).read_keyed_state("proc", with_key_group=True)
    assert a.schema == b.schema
    assert a.count() == b.count() == 60
    # Maps cannot be compared by Spark's set operations, so compare the collected rows.
    assert a.orderBy("key").collect() == b.orderBy("key").collect()
    # Pruning works on native state too: one subtask's RocksDB files for one key.
    assert a.where("key = 7").rdd.getNumPartitions() == 1
    assert [r["count"] for r in a.where("key = 7").collect()] == [70]


def _count_job(words, backend):
    from statekit.runtime import StreamExecutionEnvironment

    env = StreamExecutionEnvironment(parallelism=2, state_backend=backend)
    env.from_collection(words).uid("src").key_by(lambda w: w, key_type="string") \
        .map_with_state(lambda w, n: (None, (n or 0) + 1), "bigint").uid("count")
    return env


def test_runtime_native_checkpoint_reads_like_a_savepoint_of_the_same_state(spark, tmp_path):
    """The runtime's incremental RocksDB checkpoint vs a canonical savepoint of the same input prefix."""
    from statekit.runtime import EmbeddedRocksDBStateBackend

    words = [f"k{i % 97}" for i in range(2_000)]
    env = _count_job(words, EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
    env.enable_checkpointing(every_records=500)
    env.get_checkpoint_config().set_checkpoint_storage_dir(tmp_path / "chk").set_num_retained_checkpoints(10)
    result = env.execute("native")
    checkpoints = [sp for _, p in result.completed_checkpoints if (sp := Savepoint.open(p)).kind == "checkpoint"]
    assert checkpoints and all(sp.operator("count").is_native for sp in checkpoints)
    native_sp = checkpoints[-1]
    offset = native_sp.list_state("src", "offset").column("value")[0].as_py()
    assert 0 < offset <= len(words)

    # The same job over exactly the prefix the checkpoint had consumed, ending in a canonical savepoint.
    _count_job(words[:offset], "heap").execute("canonical", final_savepoint=tmp_path / "sp")

    native = SavepointReader.read(spark, str(native_sp.path)).read_keyed_state("count").orderBy("key").collect()
    canonical = SavepointReader.read(spark, str(tmp_path / "sp")).read_keyed_state("count").orderBy("key").collect()
    assert native == canonical
    assert sum(r["state"] for r in canonical) == offset
