"""The `statekit` command against real savepoints: inspect, check, show, and its error exits."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekit.demo import write_demo_savepoint
from statekit.identifiers import OperatorIdentifier
from statekit.testing import tree_digest
from statekit_cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory) -> Path:
    return write_demo_savepoint(tmp_path_factory.mktemp("cli") / "sp", users=500)


def test_inspect_lists_operators_and_states(savepoint):
    result = runner.invoke(app, ["inspect", str(savepoint)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("accounts", "transactions-source", "rules", "14cfd403e0929194539014eaed9ae6ed",
                 "map<string,boolean>", "operator broadcast"):
        assert text in result.output


def test_check_ok_then_reports_damage_without_touching_files(savepoint, tmp_path):
    assert runner.invoke(app, ["check", str(savepoint)]).exit_code == 0
    damaged = tmp_path / "damaged"
    import shutil

    shutil.copytree(savepoint, damaged)
    victim = next(damaged.glob("op-*/keyed/*.parquet"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    before = tree_digest(damaged)
    result = runner.invoke(app, ["check", str(damaged)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "checksum_mismatch" in result.output
    assert tree_digest(damaged) == before


def test_show_masks_values_unless_asked(savepoint):
    masked = runner.invoke(app, ["show", str(savepoint), "--uid", "accounts", "--limit", "2"], env={"COLUMNS": "200"})
    assert masked.exit_code == 0, masked.output
    assert "•••" in masked.output and "--values" in masked.output
    shown = runner.invoke(app, ["show", str(savepoint), "--uid", "accounts", "--key", "user-00042", "--values"],
                          env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "433.5" in shown.output and "•••" not in shown.output


def test_show_operator_state_tables(savepoint):
    result = runner.invoke(app, ["show", str(savepoint), "--uid", "rules", "--table", "limits", "--values"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "vip" in result.output and "50000.0" in result.output


def test_unknown_uid_is_a_clear_error(savepoint):
    result = runner.invoke(app, ["show", str(savepoint), "--uid", "nope"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "UnknownOperatorError" in result.output and "accounts" in result.output


def test_not_a_savepoint(tmp_path):
    result = runner.invoke(app, ["inspect", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "NotASavepointError" in result.output


def test_repairs_default_to_dry_run_then_apply(savepoint, tmp_path):
    target = tmp_path / "renamed"
    dry = runner.invoke(app, ["rename-uid", str(savepoint), str(target), "--uid", "accounts", "--new-uid", "acc2"],
                        env={"COLUMNS": "200"})
    assert dry.exit_code == 0, dry.output
    assert "dry run" in dry.output and "would write" in dry.output and not target.exists()
    applied = runner.invoke(app, ["rename-uid", str(savepoint), str(target), "--hash",
                                  OperatorIdentifier.for_uid("accounts").uid_hash, "--new-uid", "acc2", "--apply"],
                            env={"COLUMNS": "200"})
    assert applied.exit_code == 0, applied.output
    assert runner.invoke(app, ["check", str(target)]).exit_code == 0
    rescaled = tmp_path / "rescaled"
    result = runner.invoke(app, ["set-max-parallelism", str(target), str(rescaled), "--uid", "acc2", "--max", "256",
                                 "--apply"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    removed = tmp_path / "removed"
    result = runner.invoke(app, ["remove-operator", str(rescaled), str(removed), "--uid", "rules", "--apply"])
    assert result.exit_code == 0, result.output
    inspect = runner.invoke(app, ["inspect", str(removed)], env={"COLUMNS": "200"})
    assert "256" in inspect.output and "rules" not in inspect.output


def test_repair_error_is_typed(savepoint, tmp_path):
    result = runner.invoke(app, ["set-max-parallelism", str(savepoint), str(tmp_path / "x"), "--uid", "accounts",
                                 "--max", "0", "--apply"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "ParallelismError" in result.output
    assert not (tmp_path / "x").exists()


@pytest.mark.spark
def test_query_runs_sql_over_the_savepoint(spark, savepoint):
    result = runner.invoke(app, ["query", str(savepoint), "SELECT count(*) AS n FROM accounts.keyed"],
                           env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "500" in result.output
    bad = runner.invoke(app, ["query", str(savepoint), "SELECT * FROM nowhere.keyed"], env={"COLUMNS": "200"})
    assert bad.exit_code == 2
    assert "accounts: keyed, timers" in bad.output
