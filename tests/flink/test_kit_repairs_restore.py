"""Issue 25 part 1: every repair command, run in one step on a real Flink 2.3.0 savepoint, writes a Flink savepoint that
the corpus job restores with exactly that change visible (all restores in one JVM); a POJO-keyed savepoint taken through
statekit's format and back, and repaired in one step, restores with every key on the subtask Flink placed it on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekit.savepoint.flink import is_flink_savepoint
from statekit_cli.app import app

from .conftest import CORPUS
from .test_repair_restore import COUNTER_STATES, TYPES_STATES

pytestmark = pytest.mark.flink

LONG = CORPUS / "long-hashmap-canonical"
POJO = CORPUS / "pojo-hashmap-canonical"
POJO_KEY = "pojo<statekit.flinkreal.Model$KeyPojo>"


def _spec(key_type: str = "bigint", *, counter_uid: str = "counter", counter_key: str | None = None,
          counter_max: int | None = None, counter_states: list | None = None, buffer: bool = True) -> dict:
    counter = {"uid": counter_uid, "kind": "keyed", "key_type": counter_key or key_type,
               "states": counter_states or COUNTER_STATES}
    if counter_max:
        counter["max_parallelism"] = counter_max
    ops = [counter, {"uid": "types", "kind": "keyed", "key_type": key_type, "states": TYPES_STATES},
           {"uid": "rules", "kind": "broadcast", "states": [{"name": "rules", "key_type": "string", "type": "bigint"}]},
           {"uid": "src", "kind": "stateless", "parallelism": 1},
           {"uid": "rules-src", "kind": "stateless", "parallelism": 1},
           {"uid": "sink", "kind": "stateless"}]
    if buffer:
        ops.append({"uid": "buffer", "kind": "operator", "states": [
            {"name": "buffered", "kind": "list", "type": "string"}, {"name": "seen", "kind": "union", "type": "bigint"}]})
    return {"parallelism": 2, "operators": ops}


def _expected(case: Path) -> list[dict]:
    return json.loads((case / "expected.json").read_text())["operators"]["counter"]["keys"]


def _key(k) -> object:
    """A key as the harness reports it (objects by their sorted JSON text)."""
    return json.dumps(k, sort_keys=True) if isinstance(k, dict) else k


def _counter(case: Path, key=_key) -> dict:
    return {key(e["key"]): {s: e[s] for s in ("count", "recent", "per_kind", "sum")} for e in _expected(case)}


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, [*map(str, args), "--apply"])
    assert result.exit_code == 0, result.output
    return result.output


def test_each_repair_in_one_step_restores_into_the_corpus_job(flink, tmp_path):
    src = LONG / "savepoint"
    out = {name: tmp_path / name for name in ("set", "delete", "rm", "rekey", "rename", "remove", "maxp", "plan")}
    outputs = [
        _cli("set", src, out["set"], "--uid", "counter", "--key", "0", "--state", "count", "--value", "4242"),
        _cli("delete-key", src, out["delete"], "--uid", "counter", "--key", "0", "--key", "-1"),
        _cli("rm-state", src, out["rm"], "--uid", "counter", "--state", "recent"),
        _cli("rekey", src, out["rekey"], "--uid", "counter", "--expr", "'k' || CAST(key AS VARCHAR)"),
        _cli("rename-uid", src, out["rename"], "--uid", "counter", "--new-uid", "counter-v2"),
        _cli("remove-operator", src, out["remove"], "--uid", "buffer"),
        _cli("set-max-parallelism", src, out["maxp"], "--uid", "counter", "--max", "256"),
    ]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"edit": "set", "uid": "counter", "key": 0, "state": "sum", "value": 7},
                                {"edit": "rename-uid", "uid": "types", "new_uid": "types-v2"}]))
    outputs.append(_cli("repair", src, out["plan"], "--plan", plan))
    for text, path in zip(outputs, out.values()):
        assert "as a Flink savepoint for Flink 2.3" in text, text  # the summary names the format written
        assert is_flink_savepoint(path)
    plan_spec = _spec()
    plan_spec["operators"][1]["uid"] = "types-v2"
    rm_states = [s for s in COUNTER_STATES if s["name"] != "recent"]
    got = flink.restore_many([
        (out["set"], _spec()), (out["delete"], _spec()), (out["rm"], _spec(counter_states=rm_states)),
        (out["rekey"], _spec(counter_key="string")), (out["rename"], _spec(counter_uid="counter-v2")),
        (out["remove"], _spec(buffer=False)), (out["maxp"], _spec(counter_max=256)), (out["plan"], plan_spec),
    ])
    for r in got:
        assert not isinstance(r, str), r
    base = _counter(LONG)
    timers = {e["key"]: [("event", t) for t in e["event_timers"]] for e in _expected(LONG)}
    s_set, s_del, s_rm, s_rekey, s_ren, s_rem, s_maxp, s_plan = got
    assert s_set.keyed["counter"] == {**base, 0: {**base[0], "count": 4242}}
    assert s_del.keyed["counter"] == {k: v for k, v in base.items() if k not in (0, -1)}
    assert set(s_del.timers["counter"]) == set(timers) - {0, -1}  # the deleted keys' timers went too
    assert s_rm.keyed["counter"] == {k: {s: v[s] for s in v if s != "recent"} for k, v in base.items()}
    assert s_rekey.keyed["counter"] == {f"k{k}": v for k, v in base.items()}
    assert s_rekey.timers["counter"] == {f"k{k}": t for k, t in timers.items()}
    assert s_ren.keyed["counter-v2"] == base
    assert "buffer" not in s_rem.operator and s_rem.keyed["counter"] == base
    assert s_maxp.keyed["counter"] == base and s_maxp.timers["counter"] == timers
    assert s_plan.keyed["counter"] == {**base, 0: {**base[0], "sum": 7}}
    assert set(s_plan.keyed["types-v2"]) == set(s_set.keyed["types"])
    for r in (s_set, s_del, s_rm, s_rekey, s_ren, s_maxp, s_plan):  # operator state carried everywhere else
        assert sorted(sum(r.operator["buffer"]["buffered"].values(), [])) == sorted(f"e{i}" for i in range(50, 60))


def test_pojo_keys_keep_their_key_groups_through_statekit_and_back(flink, tmp_path):
    src = POJO / "savepoint"
    bob = {"id": -7, "name": "bob"}
    _cli("set", src, tmp_path / "set", "--uid", "counter", "--key", json.dumps(bob), "--state", "count", "--value", "99")
    converted = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "sk")])
    assert converted.exit_code == 0, converted.output
    _cli("set", tmp_path / "sk", tmp_path / "sk-set", "--uid", "counter", "--key", json.dumps(bob), "--state", "sum",
         "--value", "5")
    back = CliRunner().invoke(app, ["convert", "--to", "flink", str(tmp_path / "sk-set"), str(tmp_path / "back")])
    assert back.exit_code == 0, back.output
    got = flink.restore_many([(tmp_path / "set", _spec(POJO_KEY)), (tmp_path / "back", _spec(POJO_KEY))])
    base = _counter(POJO)
    subtask = {_key(e["key"]): e["subtask"] for e in _expected(POJO)}
    one_step, round_trip = got
    assert not isinstance(one_step, str), one_step
    assert not isinstance(round_trip, str), round_trip
    b = _key(bob)
    assert one_step.keyed["counter"] == {**base, b: {**base[b], "count": 99}}
    assert round_trip.keyed["counter"] == {**base, b: {**base[b], "sum": 5}}
    for r in got:  # every key restored on the subtask whose key groups Flink's own hashCode() gave it
        assert r.subtask_of["counter"] == subtask
