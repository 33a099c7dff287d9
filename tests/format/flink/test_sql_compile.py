"""A Flink SQL job's statements (`--sql job.sql`, ``sql=``) compiled to its plan by Flink 2.3.0's real planner.

The corpus case's job.sql is the corpus job's statements with datagen/blackhole connectors; the
planner (built once with Maven from Maven Central, `statekit.format.flink.sqlcompile`) must give
the plan the job ran from: the same logical tables as its plan.json. A SQL text the planner refuses
is a `SqlCompileError` carrying the planner's message; without a JDK or Maven, a
`PlannerUnavailableError` saying to install them or pass the plan.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from statekit.errors import PlannerUnavailableError, SqlCompileError
from statekit.format.flink.sqlcompile import compile_plan
from statekit.savepoint import Savepoint
from tests.cli.conftest import run_runner

pytestmark = pytest.mark.flink

CASE = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql" / "2.3.0" / "plan-hashmap-canonical"


@pytest.fixture(scope="module")
def jvm():
    from tests.flink.flink_harness import missing_tools

    why = missing_tools()
    if why:  # as every `flink` test: skipped with the reason (the no-JDK path is tested below)
        pytest.skip(why)


def test_the_jobs_sql_compiles_to_the_plan_it_ran_from(jvm):
    compiled = compile_plan(CASE / "job.sql")
    shipped = json.loads((CASE / "plan.json").read_text())
    assert [(n["id"], n["type"]) for n in compiled["nodes"]] == [(n["id"], n["type"]) for n in shipped["nodes"]]
    by_sql = Savepoint.open(CASE / "savepoint", sql=CASE / "job.sql")
    by_plan = Savepoint.open(CASE / "savepoint", plan=CASE / "plan.json")
    ops = [m.identifier for m in by_plan.operators if m.key_type is not None and by_plan.has_logical_table(m.identifier)]
    assert len(ops) == 7
    for op in ops:
        assert by_sql.logical_table(op).equals(by_plan.logical_table(op)), op
        assert by_sql.keyed_table(op).equals(by_plan.keyed_table(op)), op
    r = run_runner(["show", CASE / "savepoint", "--uid", "6_group-aggregate", "--logical", "--sql", CASE / "job.sql",
                    "--values", "--json"])
    assert r.exit_code == 0, r.output
    assert {row["user_name"]: row["cnt"] for row in json.loads(r.stdout)}["alice"] == 8
    both = run_runner(["inspect", CASE / "savepoint", "--sql", CASE / "job.sql", "--plan", CASE / "plan.json"])
    assert both.exit_code == 2 and "not both" in both.output


def test_sql_the_planner_refuses_is_a_typed_error_with_its_message(jvm, tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text((CASE / "job.sql").read_text().replace("SUM(amount)", "SUM(no_such_column)"))
    with pytest.raises(SqlCompileError, match="(?s)bad.sql does not compile.*no_such_column.*--plan"):
        compile_plan(bad)
    r = run_runner(["inspect", CASE / "savepoint", "--sql", bad])
    assert r.exit_code == 2 and "no_such_column" in r.output
    ddl_only = tmp_path / "ddl.sql"
    ddl_only.write_text("CREATE TABLE t (a INT) WITH ('connector' = 'datagen');\n")
    with pytest.raises(SqlCompileError, match="no INSERT"):
        compile_plan(ddl_only)
    assert not any((tmp_path).glob("*.json"))


def test_without_a_jdk_or_maven_the_error_says_to_install_them_or_pass_the_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no java, no mvn
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("STATEKIT_CACHE_DIR", str(tmp_path / "cache"))  # nothing compiled before
    with pytest.raises(PlannerUnavailableError, match="(?s)JDK 17.*Maven.*--plan plan.json.*COMPILE PLAN"):
        Savepoint.open(CASE / "savepoint", sql=CASE / "job.sql")
    assert not os.path.exists(tmp_path / "cache" / "flink-sql-plans")
