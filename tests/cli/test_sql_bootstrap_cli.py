"""`statekit bootstrap DATA TARGET --template --plan --uid`: a Flink SQL job's state from history, through the CLI."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from statekit.savepoint import Savepoint
from tests.cli.conftest import run_runner
from tests.flink.sql_restore import orders1

SQL = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql"
PLAN = SQL / "2.3.0" / "plan-hashmap-canonical" / "plan.json"
TEMPLATE = SQL / "2.3.0-template" / "plan-hashmap" / "savepoint"


def test_bootstrap_a_group_aggregate_from_parquet(tmp_path):
    pq.write_table(orders1(), tmp_path / "orders.parquet")
    args = ["bootstrap", tmp_path / "orders.parquet", tmp_path / "out", "--template", TEMPLATE, "--plan", PLAN,
            "--uid", "6_group-aggregate"]
    r = run_runner(args)  # a dry run
    assert r.exit_code == 0, r.output
    assert "13 keys from 72 input rows" in r.output and not (tmp_path / "out").exists()
    r = run_runner([*args, "--apply"])
    assert r.exit_code == 0, r.output
    got = Savepoint.open(tmp_path / "out", plan=PLAN).get("6_group-aggregate", "alice")["accState"]
    assert (got["count1"], got["sum"], got["count"]) == (8, 434, 3)


def test_a_template_with_state_needs_replace_and_datastream_options_are_refused(tmp_path):
    pq.write_table(orders1(), tmp_path / "orders.parquet")
    full = SQL / "2.3.0" / "plan-hashmap-canonical" / "savepoint"
    args = ["bootstrap", tmp_path / "orders.parquet", tmp_path / "out", "--template", full, "--plan", PLAN,
            "--uid", "6_group-aggregate", "--apply"]
    r = run_runner(args)
    assert r.exit_code == 2 and "TemplateHasStateError" in r.output and "--replace" in r.output
    assert not (tmp_path / "out").exists()
    assert run_runner([*args, "--replace"]).exit_code == 0
    r = run_runner(["bootstrap", tmp_path / "orders.parquet", tmp_path / "x", "--template", TEMPLATE, "--plan", PLAN,
                    "--uid", "6_group-aggregate", "--key", "user_name"])
    assert r.exit_code == 2 and "--key" in r.output
    r = run_runner(["bootstrap", tmp_path / "orders.parquet", tmp_path / "x", "--uid", "u"])
    assert r.exit_code == 2 and "--max-parallelism" in r.output
