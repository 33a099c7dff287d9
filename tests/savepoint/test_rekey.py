"""Re-keying on Arrow data alone (the logic Spark's SavepointWriter.rekey calls)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.errors import DuplicateKeyError, InvalidArgumentError
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.savepoint.rekey import rekey_operator, remap_keys
from statekit.state import ValueStateDescriptor


@pytest.fixture
def source(tmp_path):
    with SavepointBuilder(tmp_path / "src") as b:
        op = b.add_operator("op", parallelism=2, key_type="struct<a:bigint,b:string>",
                            keyed_states=[ValueStateDescriptor("v", "bigint")])
        keys = [{"a": i, "b": f"x{i}"} for i in range(20)]
        op.write_keyed(pa.table({"key": keys, "v": pa.array(range(20), pa.int64())}))
        op.write_timers(pa.table({"key": keys[:2] * 2, "timestamp": pa.array([5, 5, 6, 6], pa.int64()),
                                  "domain": ["event"] * 4}))  # fmt: skip
    return Savepoint.open(tmp_path / "src")


def _mapping(source, fn):
    keys = source.keyed_table("op").column("key").to_pylist()
    return pa.table({"key": pa.array(keys, source.keyed_table("op").schema.field("key").type),
                     "new_key": pa.array([fn(k) for k in keys])})  # fmt: skip


def test_struct_keys_map_to_scalars_and_timers_follow(source, tmp_path):
    mapping = _mapping(source, lambda k: k["b"])
    with SavepointBuilder(tmp_path / "dst") as b:
        rekey_operator(b, source, source.operator("op"), source.operator("op").identifier, mapping)
    out = Savepoint.open(tmp_path / "dst")
    assert check(tmp_path / "dst").ok and out.operator("op").key_type == "string"
    assert out.get("op", "x7") == {"v": 7}
    assert sorted((t["key"], t["timestamp"]) for t in out.timers("op").to_pylist()) == [
        ("x0", 5), ("x0", 6), ("x1", 5), ("x1", 6)]  # fmt: skip


def test_an_unmapped_key_is_named(source):
    mapping = _mapping(source, lambda k: k["b"]).slice(1)
    with pytest.raises(InvalidArgumentError, match="no new key for 1 key"):
        remap_keys(source.keyed_table("op"), mapping, "test")


def test_a_mapping_listing_a_key_twice_is_refused(source, tmp_path):
    mapping = _mapping(source, lambda k: k["b"])
    twice = pa.concat_tables([mapping, mapping.slice(0, 1)])
    with pytest.raises(DuplicateKeyError, match="more than once"), SavepointBuilder(tmp_path / "dst") as b:
        rekey_operator(b, source, source.operator("op"), source.operator("op").identifier, twice)
    assert not (tmp_path / "dst").exists()


def _merge_source(tmp_path):
    from statekit.state import ListStateDescriptor

    with SavepointBuilder(tmp_path / "m") as b:
        op = b.add_operator("op", key_type="bigint",
                            keyed_states=[ValueStateDescriptor("v", "bigint"), ListStateDescriptor("seen", "string")])  # fmt: skip
        op.write_keyed(pa.table({"key": pa.array(range(6), pa.int64()), "v": pa.array([1, 2, 3, 4, 5, None], pa.int64()),
                                 "seen": [["a"], ["b"], None, ["d"], ["e"], ["f"]]}))  # fmt: skip
    return Savepoint.open(tmp_path / "m")


def test_colliding_keys_merged_by_a_python_function(tmp_path):
    source = _merge_source(tmp_path)
    mapping = pa.table({"key": pa.array(range(6), pa.int64()), "new_key": pa.array([k // 2 for k in range(6)], pa.int64())})
    calls = []

    def merge(key, states):
        calls.append((key, states))
        return {"v": sum(s["v"] or 0 for s in states), "seen": sorted(sum((s["seen"] or [] for s in states), []))}

    with SavepointBuilder(tmp_path / "dst") as b:
        rekey_operator(b, source, source.operator("op"), source.operator("op").identifier, mapping, merge=merge)
    out = Savepoint.open(tmp_path / "dst")
    assert check(tmp_path / "dst").ok
    assert {k: out.get("op", k) for k in range(3)} == {0: {"v": 3, "seen": ["a", "b"]}, 1: {"v": 7, "seen": ["d"]},
                                                       2: {"v": 5, "seen": ["e", "f"]}}  # fmt: skip
    assert sorted(k for k, _ in calls) == [0, 1, 2] and all(len(s) == 2 for _, s in calls)


@pytest.mark.parametrize("result, match", [(None, "gave None"), ({"v": 1}, "null for state 'seen'"),
                                           ({"v": "many", "seen": []}, "does not fit")])  # fmt: skip
def test_a_merge_giving_null_or_the_wrong_type_is_refused_and_nothing_is_written(tmp_path, result, match):
    from statekit.errors import InvalidMergeError

    source = _merge_source(tmp_path)
    mapping = pa.table({"key": pa.array(range(6), pa.int64()), "new_key": pa.array([k // 2 for k in range(6)], pa.int64())})
    with pytest.raises(InvalidMergeError, match=match), SavepointBuilder(tmp_path / "dst") as b:
        rekey_operator(b, source, source.operator("op"), source.operator("op").identifier, mapping,
                       merge=lambda key, states: result)  # fmt: skip
    assert not (tmp_path / "dst").exists()
