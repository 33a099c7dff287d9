"""The CLI on real Flink SQL savepoints: operators listed with name, uid and SQL kind, addressed by --name, checked clean."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import run_runner

SQL = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "2.3.0"


def test_inspect_lists_name_uid_id_parallelism_and_sql_kind():
    r = run_runner(["inspect", SQL / "default-hashmap-canonical" / "savepoint"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("GroupAggregate[51]"))
    assert "ce628a0c9ddf8d38e127d0b466258be2" in line and "2 / 128" in line and "group aggregate" in line
    assert any(x.startswith("Join[88]") and "regular join" in x for x in r.stdout.splitlines())


def test_get_and_show_by_stored_name_and_check_is_clean():
    sp = SQL / "plan-rocksdb-canonical" / "savepoint"
    r = run_runner(["get", sp, "--name", "Deduplicate[25]", "--key", json.dumps({"k0": "bartholomew", "k1": 2}),
                    "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["deduplicate-state"]["row_kind"] == "+U"
    assert run_runner(["check", sp]).exit_code == 0
    bad = run_runner(["get", sp, "--name", "Deduplicate[25]", "--uid", "x", "--key", "1"])
    assert bad.exit_code != 0 and "not two of them" in bad.output


def test_check_says_unsupported_apart_from_damage(tmp_path):
    import shutil

    root = tmp_path / "sp"
    shutil.copytree(SQL / "default-hashmap-canonical" / "savepoint", root)
    for p in root.iterdir():
        p.chmod(0o644)
        b = p.read_bytes()
        if b"logical.VarCharType" in b:  # a SQL type class Flink does not have, same length
            p.write_bytes(b.replace(b"logical.VarCharType", b"logical.VarXharType"))
    r = run_runner(["check", root])
    assert r.exit_code == 0, r.output
    assert "unsupported" in r.output and "damaged" not in r.output


def test_plan_names_columns_on_every_read_command(tmp_path):
    case = SQL / "plan-hashmap-canonical"
    sp, plan = case / "savepoint", case / "plan.json"
    r = run_runner(["get", sp, "--uid", "25_deduplicate", "--key", json.dumps({"user_name": "bartholomew", "device": 2}),
                    "--plan", plan, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["deduplicate-state"]["order_id"] == 1058
    r = run_runner(["show", sp, "--uid", "6_group-aggregate", "--logical", "--plan", plan, "--values", "--json",
                    "--limit", "20"])
    assert r.exit_code == 0, r.output
    rows = {row["user_name"]: row for row in json.loads(r.stdout)}
    assert (rows["alice"]["cnt"], rows["alice"]["total"], rows["alice"]["kinds"]) == (8, 434, 3)
    r = run_runner(["query", sp, "--plan", plan, "--json",
                    'SELECT user_id, cnt, total FROM "12_global_window_aggregate".logical WHERE user_id = -42'])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"user_id": -42, "cnt": 1, "total": 79}]
    assert run_runner(["check", sp, "--plan", plan]).exit_code == 0
    assert run_runner(["inspect", sp, "--plan", plan]).exit_code == 0
    r = run_runner(["export", sp, tmp_path / "out", "--plan", plan, "--uid", "43_join"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "43_join" / "logical.parquet").is_file()
    assert run_runner(["diff", sp, SQL / "plan-rocksdb-canonical" / "savepoint", "--plan", plan]).exit_code == 0


def test_a_plan_of_another_job_is_a_usage_error_naming_the_mismatch():
    r = run_runner(["show", SQL / "default-hashmap-canonical" / "savepoint", "--name", "GroupAggregate[51]", "--logical",
                    "--plan", SQL / "plan-hashmap-canonical" / "plan.json"])
    assert r.exit_code == 2, r.output
    assert "does not match the savepoint" in r.output and "6_group-aggregate" in r.output
