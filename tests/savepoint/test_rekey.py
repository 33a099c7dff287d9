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
