"""Flink SQL savepoints opened with their compiled plan: named columns, logical tables equal to expected.json, plans of other jobs refused."""

from __future__ import annotations

import copy
import json

import pytest

from statekit.errors import InvalidArgumentError, PlanMismatchError, StatekitError, UnsupportedFormatError
from statekit.savepoint import Savepoint
from statekit.savepoint.check import check

from .test_sql import SQL, _from_json, _keyed_ops, _plain

PLANNED = sorted(p.name for p in SQL.iterdir() if (p / "plan.json").is_file())
#: logical fields expected.json gives that the savepoint does not hold (the generator knew them from its input)
NOT_IN_STATE = {
    "dedup_keep_last_rowtime": {"rows_accepted"},  # only whether there was more than one: the row kind +U
    "dedup_keep_first_proctime": {"first_order_id", "note"},  # the state is a flag
}


def _open(case: str, plan=None) -> Savepoint:
    return Savepoint.open(SQL / case / "savepoint", plan=SQL / case / "plan.json" if plan is None else plan)


def _plan(case: str) -> dict:
    return json.loads((SQL / case / "plan.json").read_text("utf-8"))


def _by_key(rows: list[dict], key_cols: list[str]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(r[c] for c in key_cols), []).append({k: v for k, v in r.items() if k not in key_cols})
    return out


def _rows(v: list[dict] | None) -> list:
    return sorted(([_plain(x) for x in r.values()] for r in v or []), key=repr)


@pytest.mark.parametrize("case", PLANNED)
def test_key_columns_and_stored_rows_take_the_plans_names(case):
    sp = _open(case)
    for label, want in _keyed_ops(case).items():
        meta = sp.operator(want["uid"])
        assert meta.key_type == "struct<" + ",".join(
            f"{c}:{'string' if t == 'STRING' else 'bigint'}" for c, t in zip(want["key"]["columns"], want["key"]["types"])) + ">"
        for name, st in want["states"].items():
            cols = [c.split(":")[0] for c in st.get("columns", []) if not c.startswith("distinct view")]
            cols = cols or st.get("user_key_columns", [])
            info = {s.name: s for s in meta.keyed_states}.get(name)
            if info is None or not cols or st["kind"] == "map" and len(cols) == 1:
                continue
            assert all(f"{c}:" in info.type for c in cols), (label, name, info.type)
    acc = {s.name: s.type for s in sp.operator("6_group-aggregate").keyed_states}["accState"]
    assert acc == "struct<count1:bigint,sum:bigint,max:timestamp,count:bigint,distinct_kind:binary,row_kind:string>"
    assert sp.get("6_group-aggregate", {"user_name": "alice"})["accState"]["sum"] == 434
    assert sp.get("25_deduplicate", ("bartholomew", 2))["deduplicate-state"]["order_id"] == 1058
    assert sp.timers("34_deduplicate").column("key").type.field(0).name == "user_name"
    assert check(sp.path).ok


@pytest.mark.parametrize("case", PLANNED)
def test_every_logical_view_is_expected_jsons(case):
    sp = _open(case)
    for label, want in _keyed_ops(case).items():
        key_cols = want["key"]["columns"]
        table = sp.logical_table(want["uid"])
        assert table.column_names[:len(key_cols)] == key_cols, label
        got = _by_key(table.to_pylist(), key_cols)
        assert sorted(got, key=repr) == sorted((tuple(k["key"]) for k in want["keys"]), key=repr), label
        for k in want["keys"]:
            exp = _from_json(k["logical"])
            mine = got[tuple(k["key"])]
            if "pending_windows" in exp:
                assert sorted((_plain(r) for r in mine), key=repr) == sorted(exp["pending_windows"], key=repr), (label, k)
                continue
            (row,) = mine
            if label == "join":
                assert {s: _rows(v) for s, v in row.items() if v} == \
                    {s: sorted((_from_json(r) for r in v), key=repr) for s, v in k["logical"].items()}, k["key"]
                continue
            row.update({c: v for c, v in zip(key_cols, k["key"]) if c in exp})  # a kept row shows its key columns
            skip = NOT_IN_STATE.get(label, set())
            if label == "dedup_keep_first_rowtime" and exp["emitted"]:  # an emitted row is dropped from state
                skip = {"order_id", "amount", "ts"}
                assert (row.pop("order_id"), row.pop("amount"), row.pop("ts")) == (None, None, None)
            if label == "dedup_keep_last_rowtime":  # +U: the key's row replaced an earlier one
                assert row.pop("row_kind") == ("+U" if exp["rows_accepted"] > 1 else "+I")
            if label == "group_agg":
                row["distinct_kinds"] = sorted(row["distinct_kinds"])
            assert {c: _plain(v) for c, v in row.items()} == {c: v for c, v in exp.items() if c not in skip}, (label, k)


def test_a_plan_of_a_savepoint_without_uids_is_refused_by_name():
    with pytest.raises(PlanMismatchError, match="6_group-aggregate.*no operator in the savepoint.*no uids"):
        Savepoint.open(SQL / "default-hashmap-canonical" / "savepoint",
                       plan=SQL / "plan-hashmap-canonical" / "plan.json")


@pytest.mark.parametrize("edit, message", [
    (lambda n: n[6].update(id=7006), "ExecNode 7006 .*no operator in the savepoint"),  # another job's node ids
    (lambda n: n[6]["aggCalls"].pop(1), "keeps 4 accumulator fields .* holds 5"),  # other aggregates
    (lambda n: n[5].update(outputType=n[5]["outputType"].replace("`user_name` VARCHAR(2147483647)", "`user_name` BIGINT")),
     r"keys by \(user_name BIGINT\).*\(VARCHAR\)"),  # another key type
    (lambda n: n[24]["outputType"]["fields"].pop(), "stores rows of 4 fields .* rows of 5 fields"),  # another input row
])
def test_a_plan_that_disagrees_with_the_savepoint_is_refused_naming_the_first_mismatch(edit, message):
    plan = _plan("plan-hashmap-canonical")
    nodes = {n["id"]: n for n in plan["nodes"]}
    edit(nodes)
    if nodes[6]["id"] == 7006:
        for e in plan["edges"]:
            e["source"], e["target"] = [7006 if x == 6 else x for x in (e["source"], e["target"])]
    with pytest.raises(PlanMismatchError, match=message):
        _open("plan-hashmap-canonical", plan=plan)


def test_a_plan_missing_a_stateful_operator_is_refused():
    plan = _plan("plan-hashmap-canonical")
    plan["nodes"] = [n for n in plan["nodes"] if n["id"] != 43]
    plan["edges"] = [e for e in plan["edges"] if 43 not in (e["source"], e["target"])]
    with pytest.raises(PlanMismatchError, match="Join.*43_join.*no ExecNode for it"):
        _open("plan-hashmap-canonical", plan=plan)


def test_what_is_not_a_plan_is_refused(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    for p, msg in [(bad, "not JSON"), (tmp_path / "none.json", "does not exist"), ({"nodes": 1}, "not a Flink compiled plan")]:
        with pytest.raises(InvalidArgumentError, match=msg):
            _open("plan-hashmap-canonical", plan=p)
    with pytest.raises(InvalidArgumentError, match="open the savepoint with the job's compiled plan"):
        Savepoint.open(SQL / "plan-hashmap-canonical" / "savepoint").logical_table("6_group-aggregate")


def test_an_aggregate_statekit_does_not_evaluate_is_unsupported_not_an_error_of_the_rest():
    plan = _plan("plan-hashmap-canonical")
    node = next(n for n in plan["nodes"] if n["id"] == 6)
    node["aggCalls"][2]["internalName"] = "$MY_UDAF$1"  # an accumulator layout statekit cannot know
    sp = _open("plan-hashmap-canonical", plan=plan)
    with pytest.raises(UnsupportedFormatError, match="MY_UDAF"):
        sp.logical_table("6_group-aggregate")
    acc = {s.name: s.type for s in sp.operator("6_group-aggregate").keyed_states}["accState"]
    assert acc.startswith("struct<f0:bigint")  # unnamed, still read
    assert sp.keyed_table("6_group-aggregate").num_rows == 13 and sp.logical_table("43_join").num_rows == 78
    assert isinstance(UnsupportedFormatError("x"), StatekitError)


def test_logical_views_are_the_same_through_copy_of_the_plan_json():
    plan = _plan("plan-rocksdb-canonical")
    a = _open("plan-rocksdb-canonical", plan=copy.deepcopy(plan))
    b = _open("plan-hashmap-canonical")
    for op in ("6_group-aggregate", "12_global-window-aggregate", "43_join"):
        rows = [[{k: sorted(map(repr, v)) if isinstance(v, list) and k != "distinct_kinds" else v for k, v in r.items()}
                 for r in sp.logical_table(op).to_pylist()] for sp in (a, b)]  # a join side's rows in any order
        assert sorted(map(repr, rows[0])) == sorted(map(repr, rows[1]))
