"""Acceptance (c): a real Flink savepoint (corpus `long-hashmap-canonical`) with a uid renamed, max parallelism 128 ->
256 and a re-key (Long -> String keys) restores into real Flink 2.3.0 jobs that use the new uid, max parallelism and
key: once with 256 set on the operator only, once for the whole job (`env.setMaxParallelism(256)` also checks the
stateless operators listed in the savepoint, so the savepoint-wide change includes them). The unchanged savepoint
does not restore into the 256 job: the check is real."""

from __future__ import annotations

import json

import pytest

from statekit.format.flink.metadata import read_metadata
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint.flink_out import write_flink

from .conftest import CORPUS

pytestmark = pytest.mark.flink

CASE = CORPUS / "long-hashmap-canonical"
COUNTER_STATES = [{"name": "count", "kind": "value", "type": "bigint"},
                  {"name": "recent", "kind": "list", "type": "string"},
                  {"name": "per_kind", "kind": "map", "key_type": "string", "type": "bigint"},
                  {"name": "sum", "kind": "reducing", "type": "bigint"}]
TYPES_STATES = [{"name": "v_int", "kind": "value", "type": "int"},
                {"name": "v_double", "kind": "value", "type": "double"},
                {"name": "v_bool", "kind": "value", "type": "boolean"},
                {"name": "v_bytes", "kind": "value", "type": "binary"},
                {"name": "v_row", "kind": "value", "type": "struct<kind:string,value:bigint>"},
                {"name": "v_pojo", "kind": "value", "type": "pojo<statekit.flinkreal.Model$ValuePojo>"},
                {"name": "v_tuple", "kind": "value", "type": "tuple<string,int>"},
                {"name": "v_kryo", "kind": "value", "type": "generic<statekit.flinkreal.Model$KryoThing>"}]


def _spec(*, job_max: int | None, counter_max: int | None, counter_uid: str, counter_key: str) -> dict:
    counter = {"uid": counter_uid, "kind": "keyed", "key_type": counter_key, "states": COUNTER_STATES}
    if counter_max:
        counter["max_parallelism"] = counter_max
    spec = {"parallelism": 2, "operators": [
        counter,
        {"uid": "types", "kind": "keyed", "key_type": "bigint", "states": TYPES_STATES},
        {"uid": "buffer", "kind": "operator", "states": [{"name": "buffered", "kind": "list", "type": "string"},
                                                          {"name": "seen", "kind": "union", "type": "bigint"}]},
        {"uid": "rules", "kind": "broadcast", "states": [{"name": "rules", "key_type": "string", "type": "bigint"}]},
        {"uid": "src", "kind": "stateless", "parallelism": 1},
        {"uid": "rules-src", "kind": "stateless", "parallelism": 1},
        {"uid": "sink", "kind": "stateless"},
    ]}
    if job_max:
        spec["max_parallelism"] = job_max
    return spec


def _expected_counter(key=lambda k: k) -> tuple[dict, dict]:
    exp = json.loads((CASE / "expected.json").read_text())["operators"]["counter"]["keys"]
    values = {key(e["key"]): {s: e[s] for s in ("count", "recent", "per_kind", "sum")} for e in exp}
    timers = {key(e["key"]): [("event", t) for t in e["event_timers"]] for e in exp}
    return values, timers


def test_renamed_rescaled_rekeyed_savepoint_restores_into_real_flink(flink, tmp_path):
    rekey = {"counter": lambda k: f"k{k}"}
    per_op = write_flink(CASE / "savepoint", tmp_path / "per-op", uids={"counter": "counter-v2"},
                         max_parallelism={"counter": 256}, rekey=rekey, key_types={"counter": "string"})
    whole = write_flink(CASE / "savepoint", tmp_path / "whole", uids={"counter": "counter-v2"},
                        max_parallelism=256, rekey=rekey, key_types={"counter": "string"})
    md = read_metadata(whole)
    assert {op.max_parallelism for op in md.operators} == {256}  # stateless src, rules-src and sink included
    assert OperatorIdentifier.for_uid("counter-v2").uid_hash in {op.operator_id for op in md.operators}
    assert OperatorIdentifier.for_uid("counter").uid_hash not in {op.operator_id for op in md.operators}

    results = flink.restore_many([
        (per_op, _spec(job_max=None, counter_max=256, counter_uid="counter-v2", counter_key="string")),
        (whole, _spec(job_max=256, counter_max=None, counter_uid="counter-v2", counter_key="string")),
        (CASE / "savepoint", _spec(job_max=256, counter_max=None, counter_uid="counter", counter_key="bigint")),
    ])
    values, timers = _expected_counter(lambda k: f"k{k}")
    types_exp = json.loads((CASE / "expected.json").read_text())["operators"]["types"]["keys"]
    for got in results[:2]:
        assert not isinstance(got, str), got
        assert got.keyed["counter-v2"] == values
        assert got.timers["counter-v2"] == timers  # the re-keyed timers fire for the new keys
        assert {k: v["v_int"] for k, v in got.keyed["types"].items()} == {e["key"]: e["v_int"] for e in types_exp}
        assert {k: v["v_kryo"] for k, v in got.keyed["types"].items()} == {e["key"]: e["v_kryo"] for e in types_exp}
        assert sorted(sum(got.operator["buffer"]["buffered"].values(), [])) == sorted(
            f"e{i}" for i in range(50, 60))
        assert all(v == {"max": 500, "min": 5, "threshold": 43} for v in got.broadcast["rules"]["rules"].values())
    # the untouched savepoint (max parallelism 128) does not restore into a job with max parallelism 256
    assert isinstance(results[2], str) and "max parallelism" in results[2].lower()
