"""Format in, format out: repairs write their source's format unless `to=` / `--to` says otherwise; POJO keys keep the
key groups Flink stored them in through statekit's format; what would need new key groups is refused, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.format.manifest import parse_manifest
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink import FlinkSavepoint, is_flink_savepoint
from statekit.savepoint.flink_out import write_flink
from statekit.savepoint.patch import DeleteKeys, Rekey, RemoveState, SetMaxParallelism, SetValue, repair
from statekit.savepoint.transforms import change_operator_identifier, remove_operator, with_max_parallelism
from statekit.state import ValueStateDescriptor
from statekit.testing import tree_digest
from statekit_cli.app import app

FLINK = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "2.3.0"
LONG = FLINK / "long-hashmap-canonical" / "savepoint"
POJO = FLINK / "pojo-hashmap-canonical" / "savepoint"
BOB = {"id": -7, "name": "bob"}


def _statekit(path: Path, *, pickled: bool = False) -> Path:
    with SavepointBuilder(path, checkpoint_id=3) as b:
        op = b.add_operator("counter", parallelism=2, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("count", "bigint")])
        op.write_keyed(pa.table({"key": [1, 2, 3], "count": [10, 20, 30]}))
        if pickled:
            from statekit.types import PICKLED

            p = b.add_operator("py", parallelism=1, max_parallelism=128, key_type="bigint",
                               keyed_states=[ValueStateDescriptor("obj", PICKLED)])
            p.write_keyed(pa.table({"key": [1], "obj": [b"\x80\x04K\x01."]}))
    return path


def test_flink_in_flink_out_statekit_in_statekit_out(tmp_path):
    edits = [SetValue("counter", 0, "count", 4242)]
    plan = repair(LONG, tmp_path / "f", edits)
    assert plan.written and is_flink_savepoint(tmp_path / "f") and "Flink savepoint for Flink 2.3" in str(plan)
    assert Savepoint.open(tmp_path / "f").get("counter", 0)["count"] == 4242
    repair(LONG, tmp_path / "s", edits, to="statekit")
    assert (tmp_path / "s" / "_metadata.json").is_file() and Savepoint.open(tmp_path / "s").get("counter", 0)["count"] == 4242
    src = _statekit(tmp_path / "src")
    plan = repair(src, tmp_path / "s2", [SetValue("counter", 1, "count", 11)])
    assert "as a statekit savepoint" in str(plan) and (tmp_path / "s2" / "_metadata.json").is_file()
    repair(src, tmp_path / "f2", [SetValue("counter", 1, "count", 11)], to="flink")
    assert is_flink_savepoint(tmp_path / "f2") and FlinkSavepoint.open(tmp_path / "f2").get("counter", 1) == {"count": 11}


def test_library_transforms_follow_the_same_rule(tmp_path):
    change_operator_identifier(LONG, tmp_path / "r", "counter", "counter-v2")
    remove_operator(LONG, tmp_path / "x", "buffer")
    with_max_parallelism(LONG, tmp_path / "m", "counter", 256)
    for name in "rxm":
        assert is_flink_savepoint(tmp_path / name)
    assert Savepoint.open(tmp_path / "m").operator("counter").max_parallelism == 256
    assert Savepoint.open(tmp_path / "r").get("counter-v2", 0)["count"] == 9
    with_max_parallelism(LONG, tmp_path / "ms", "counter", 256, to="statekit")
    assert (tmp_path / "ms" / "_metadata.json").is_file()


def test_cli_to_overrides_and_the_summary_names_the_format(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["rm-state", str(LONG), str(tmp_path / "a"), "--uid", "counter", "--state", "recent",
                            "--to", "statekit", "--apply"])
    assert r.exit_code == 0, r.output
    assert "as a statekit savepoint" in r.output and (tmp_path / "a" / "_metadata.json").is_file()
    r = runner.invoke(app, ["rename-uid", str(LONG), str(tmp_path / "b"), "--uid", "counter", "--new-uid", "c2",
                            "--apply"])
    assert r.exit_code == 0 and "as a Flink savepoint" in r.output and is_flink_savepoint(tmp_path / "b")
    r = runner.invoke(app, ["rename-uid", str(LONG), str(tmp_path / "c"), "--from", "counter", "--to", "c3", "--apply"])
    assert r.exit_code == 0, r.output  # the old spelling of --new-uid still works
    assert Savepoint.open(tmp_path / "c").operator("c3").uid == "c3"
    r = runner.invoke(app, ["remove-operator", str(LONG), str(tmp_path / "d"), "--uid", "buffer", "--to", "parquet"])
    assert r.exit_code == 2 and "statekit or flink" in r.output and not (tmp_path / "d").exists()


def test_to_flink_for_state_without_a_flink_serializer_writes_nothing(tmp_path):
    src = _statekit(tmp_path / "src", pickled=True)
    before = tree_digest(src)
    with pytest.raises(StateTypeError, match="pickled"):
        repair(src, tmp_path / "out", [SetValue("counter", 1, "count", 11)], to="flink")
    assert not (tmp_path / "out").exists() and tree_digest(src) == before
    with pytest.raises(InvalidArgumentError, match="statekit' or 'flink"):
        repair(src, tmp_path / "out", [SetValue("counter", 1, "count", 11)], to="avro")  # type: ignore[arg-type]


def test_pojo_keys_keep_their_stored_key_groups_through_statekit(tmp_path):
    flink = FlinkSavepoint.open(POJO)
    assert flink.operator("counter").stored_key_groups
    convert_to_statekit(POJO, tmp_path / "sk")
    manifest = parse_manifest(json.loads((tmp_path / "sk" / "_metadata.json").read_text()), tmp_path / "sk")
    assert "stored-key-groups" in manifest.features
    sk = Savepoint.open(tmp_path / "sk")
    assert sk.operator("counter").stored_key_groups and check(tmp_path / "sk").ok
    want = flink.keyed_table("counter", with_key_group=True).sort_by("key_group").select(["key_group", "key"])
    got = sk.keyed_table("counter", with_key_group=True).sort_by("key_group").select(["key_group", "key"])
    assert sorted(map(json.dumps, got.to_pylist())) == sorted(map(json.dumps, want.to_pylist()))
    assert sk.get("counter", BOB)["count"] == 9  # found without hashing the key
    repair(tmp_path / "sk", tmp_path / "sk2", [DeleteKeys("counter", (BOB,)), RemoveState("counter", "recent")])
    assert Savepoint.open(tmp_path / "sk2").get("counter", BOB) is None
    write_flink(tmp_path / "sk2", tmp_path / "back")  # refused before stored key groups
    back = FlinkSavepoint.open(tmp_path / "back").keyed_table("counter", with_key_group=True)
    assert {json.dumps(r) for r in back.select(["key_group", "key"]).to_pylist()} == \
        {json.dumps(r) for r in want.to_pylist() if r["key"] != BOB}


@pytest.mark.parametrize("edit", [
    SetMaxParallelism("counter", 256),
    Rekey("counter", pa.table({"key": [BOB], "new_key": [{"id": 1, "name": "x"}]})),
    SetValue("counter", {"id": 123456, "name": "nobody"}, "count", 1),
])
def test_changes_needing_new_key_groups_of_pojo_keys_are_refused(tmp_path, edit):
    for src in (POJO, ):
        with pytest.raises(StateTypeError, match="hashCode"):
            repair(src, tmp_path / "out", [edit])
        assert not (tmp_path / "out").exists()
    convert_to_statekit(POJO, tmp_path / "sk")
    with pytest.raises(StateTypeError, match="needs new key groups"):
        repair(tmp_path / "sk", tmp_path / "out", [edit])
    assert not (tmp_path / "out").exists()
