"""The repair verbs and prune-expired on real Flink 2.3.0 SQL savepoints, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from statekit.savepoint import Savepoint
from tests.cli.conftest import run_runner

SQL = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "2.3.0"
PLAN = SQL / "plan-hashmap-canonical"


def test_set_a_result_column_with_the_plan_a_window_and_delete_a_key_by_name(tmp_path):
    plan = str(PLAN / "plan.json")
    r = run_runner(["set", PLAN / "savepoint", tmp_path / "a", "--uid", "6_group-aggregate", "--key", "alice",
                    "--state", "cnt", "--value", "10", "--plan", plan, "--apply"])
    assert r.exit_code == 0, r.output
    assert "cnt (COUNT in accState field(s) count1): 8 -> 10" in r.output
    assert Savepoint.open(tmp_path / "a").get("6_group-aggregate", "alice")["accState"]["f0"] == 10
    r = run_runner(["set", PLAN / "savepoint", tmp_path / "w", "--uid", "12_global-window-aggregate", "--key", "42",
                    "--state", "window-aggs", "--value", '{"sum": 7}', "--namespace", "1704067250000", "--plan", plan,
                    "--apply"])
    assert r.exit_code == 0, r.output
    assert Savepoint.open(tmp_path / "w").get("12_global-window-aggregate", 42, namespace=1704067250000)[
        "window-aggs"]["f1"] == 7
    r = run_runner(["delete-key", SQL / "default-hashmap-canonical" / "savepoint", tmp_path / "d", "--name",
                    "GroupAggregate[51]", "--key", "bob", "--apply"])
    assert r.exit_code == 0, r.output
    assert Savepoint.open(tmp_path / "d").get("GroupAggregate[51]", "bob") is None


def test_ambiguous_and_bad_edits_exit_2_naming_the_fields_and_write_nothing(tmp_path):
    plan = str(PLAN / "plan.json")
    r = run_runner(["set", PLAN / "savepoint", tmp_path / "x", "--uid", "6_group-aggregate", "--key", "alice",
                    "--state", "kinds", "--value", "10", "--plan", plan, "--apply"])
    assert r.exit_code == 2 and "distinctAcc_0" in r.output and "distinct_kind" in r.output
    r = run_runner(["set", PLAN / "savepoint", tmp_path / "x", "--uid", "6_group-aggregate", "--key", "alice",
                    "--state", "accState", "--value", '{"distinct_kind": "AQ=="}', "--plan", plan, "--apply"])
    assert r.exit_code == 2 and "RAW" in r.output
    assert not (tmp_path / "x").exists()


def test_repair_plan_with_sql_edits_and_prune_expired(tmp_path):
    edits = tmp_path / "edits.json"
    edits.write_text(json.dumps([
        {"edit": "set", "uid": "6_group-aggregate", "key": "alice", "state": "total", "value": 1},
        {"edit": "set", "uid": "12_global-window-aggregate", "key": 42, "state": "window-aggs",
         "value": {"sum": 7}, "namespace": 1704067250000},
        {"edit": "delete-key", "uid": "43_join", "keys": [1026]},
        {"edit": "rm-state", "uid": "29_deduplicate", "state": "deduplicate-state"}]))
    r = run_runner(["repair", PLAN / "savepoint", tmp_path / "r", "--plan", edits, "--sql-plan", PLAN / "plan.json",
                    "--apply"])
    assert r.exit_code == 0, r.output
    out = Savepoint.open(tmp_path / "r")
    assert out.get("6_group-aggregate", "alice")["accState"]["f1"] == 1 and out.get("43_join", 1026) is None
    ttl = SQL / "default-hashmap-canonical-ttl" / "savepoint"
    r = run_runner(["prune-expired", ttl, tmp_path / "p", "--now", "2026-12-05T06:37:59.839Z", "--ttl", "1 d",
                    "--operator", "GroupAggregate[51]", "--apply"])
    assert r.exit_code == 0, r.output
    assert "GroupAggregate[51] (ce628a0c9ddf8d38e127d0b466258be2), state 'accState' (ttl 86400000 ms): 7 of 13" \
        in r.output
    assert Savepoint.open(tmp_path / "p").keyed_table("GroupAggregate[51]").num_rows == 6
    r = run_runner(["prune-expired", ttl, tmp_path / "q", "--now", "2026-12-04", "--ttl", "1 d"])
    assert r.exit_code == 2 and "time zone" in r.output and not (tmp_path / "q").exists()
