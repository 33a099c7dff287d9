"""migrate-sql without a JVM, on the committed real Flink 2.3.0 job versions (tests/fixtures/flink/sql/migrate):
what each pair carries, starts empty, drops or refuses; the carried values read back; inputs untouched, nothing
written by a dry run or a refusal. The restores into real Flink are tests/flink/test_sql_migrate*.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from statekit.errors import MigrationRefusedError, OutputExistsError, PlanMismatchError
from statekit.savepoint.flink import FlinkSavepoint
from statekit.savepoint.sql_migrate import migrate_sql
from tests.cli.conftest import run_runner

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "migrate"
OLD, OLD_PLAN = FIX / "base" / "savepoint", FIX / "base" / "plan.json"


def _migrate(new: str, target: Path, **kw):
    kw.setdefault("old_plan", OLD_PLAN)
    return migrate_sql(OLD, target, plan=FIX / new / "plan.json", template=FIX / new / "savepoint", **kw)


def _tables(path: Path, plan: Path) -> dict[str, dict]:
    """Per operator kind: {key: state row} of the savepoint read with its plan."""
    sp = FlinkSavepoint.open(path, plan=plan)
    out = {}
    for m in sp.operators:
        if m.key_type is None:
            continue
        t = sp.keyed_table(m.identifier).to_pylist()
        state = next(s.name for s in m.keyed_states if s.name in ("accState", "deduplicate-state"))
        out[sp.operator_kind(m.identifier)] = {tuple(r["key"].values()): r[state] for r in t}
    return out


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def old_tables():
    return _tables(OLD, OLD_PLAN)


def test_an_added_aggregate_starts_empty_and_the_rest_is_carried(tmp_path, old_tables) -> None:
    before = _digest(OLD)
    report = _migrate("agg_added", tmp_path / "out")
    assert _digest(OLD) == before
    got = _tables(tmp_path / "out", FIX / "agg_added" / "plan.json")
    agg, old_agg = got["group aggregate"], old_tables["group aggregate"]
    assert set(agg) == set(old_agg) and len(agg) == 13
    for k, acc in agg.items():
        assert (acc["count1"], acc["sum"], acc["max"]) == (old_agg[k]["count1"], old_agg[k]["sum"], None)
    assert got["deduplication keep-last"] == old_tables["deduplication keep-last"]
    text = str(report)
    assert "added EXPR$3 MAX(amount): its accumulator starts empty (max = NULL)" in text
    assert "13 keys, 13 rows carried" in text and "25 keys, 25 rows carried" in text


def test_a_removed_aggregate_is_dropped(tmp_path, old_tables) -> None:
    report = _migrate("agg_removed", tmp_path / "out")
    agg = _tables(tmp_path / "out", FIX / "agg_removed" / "plan.json")["group aggregate"]
    assert {k: v["count1"] for k, v in agg.items()} == {k: v["count1"] for k, v in old_tables["group aggregate"].items()}
    assert all(set(v) == {"count1", "row_kind"} for v in agg.values())
    assert "removed EXPR$2 SUM(amount): its accumulator is dropped" in str(report)


def test_a_column_added_to_the_deduplicated_row_is_null(tmp_path, old_tables) -> None:
    report = _migrate("dedup_column", tmp_path / "out")
    rows = _tables(tmp_path / "out", FIX / "dedup_column" / "plan.json")["deduplication keep-last"]
    old = old_tables["deduplication keep-last"]
    assert set(rows) == set(old)
    for k, r in rows.items():
        assert r["kind"] is None and {f: v for f, v in r.items() if f != "kind"} == old[k]
    assert {r["row_kind"] for r in rows.values()} == {"+I", "+U"}  # the stored RowKind travels with the row
    assert "deduplicate-state: column(s) kind added: NULL in the carried rows" in str(report)


@pytest.mark.parametrize("old_plan", [OLD_PLAN, None], ids=["with-old-plan", "from-snapshots"])
def test_reordered_queries_get_the_new_operator_ids(tmp_path, old_tables, old_plan) -> None:
    report = _migrate("reordered", tmp_path / "out", old_plan=old_plan)
    assert all(m.old is not None and m.old.uid_hash != m.new.uid_hash for m in report.operators)
    assert _tables(tmp_path / "out", FIX / "reordered" / "plan.json") == old_tables
    new_ids = {m.uid_hash for m in FlinkSavepoint.open(FIX / "reordered" / "savepoint").operators}
    assert {m.uid_hash for m in FlinkSavepoint.open(tmp_path / "out").operators} == new_ids


def test_without_the_old_plan_a_changed_accumulator_is_refused_asking_for_it(tmp_path) -> None:
    with pytest.raises(MigrationRefusedError, match=r"accState: .* without the old job's plan \(--old-plan\)"):
        _migrate("agg_added", tmp_path / "out", old_plan=None)
    assert not (tmp_path / "out").exists()


def test_changed_group_by_keys_are_refused_with_the_reason(tmp_path) -> None:
    with pytest.raises(MigrationRefusedError) as err:
        _migrate("keys_changed", tmp_path / "out")
    msg = str(err.value)
    assert "(group aggregate): GROUP BY keys changed" in msg
    assert "keys by (user_name STRING), the new one by (user_name STRING, device BIGINT)" in msg
    assert "Nothing was written" in msg and not (tmp_path / "out").exists()


def test_dry_run_writes_nothing_and_bad_inputs_are_typed(tmp_path) -> None:
    report = _migrate("agg_added", tmp_path / "dry", dry_run=True)
    assert not (tmp_path / "dry").exists() and "dry run: nothing written" in str(report)
    with pytest.raises(PlanMismatchError):  # a template of another job than the plan's
        migrate_sql(OLD, tmp_path / "x", plan=FIX / "agg_added" / "plan.json", template=FIX / "base" / "savepoint",
                    old_plan=OLD_PLAN)
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "f").write_text("x")
    with pytest.raises(OutputExistsError):
        _migrate("agg_added", tmp_path / "exists")
    assert (tmp_path / "exists" / "f").read_text() == "x"


def test_cli_dry_run_apply_and_refusal(tmp_path) -> None:
    args = ["migrate-sql", OLD, tmp_path / "out", "--plan", FIX / "dedup_column" / "plan.json", "--template",
            FIX / "dedup_column" / "savepoint", "--old-plan", OLD_PLAN]
    r = run_runner(args)
    assert r.exit_code == 0, r.output
    assert "column(s) kind added" in r.output and "dry run" in r.output and not (tmp_path / "out").exists()
    r = run_runner([*args, "--apply"])
    assert r.exit_code == 0 and (tmp_path / "out" / "_metadata").exists(), r.output
    r = run_runner(["migrate-sql", OLD, tmp_path / "k", "--plan", FIX / "keys_changed" / "plan.json", "--template",
                    FIX / "keys_changed" / "savepoint", "--old-plan", OLD_PLAN, "--apply"])
    assert r.exit_code == 1 and "MigrationRefusedError" in r.output and "GROUP BY keys changed" in r.output
    assert not (tmp_path / "k").exists()


def test_a_distinct_added_is_refused(tmp_path) -> None:
    with pytest.raises(MigrationRefusedError, match=r"a DISTINCT added \(EXPR\$3 COUNT\(DISTINCT kind\)\): the distinct "
                                                    r"values seen so far are not in the old state"):
        _migrate("distinct_added", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_changed_window_definition_is_refused(tmp_path) -> None:
    old = FIX / "win_base"
    with pytest.raises(MigrationRefusedError, match=r"\(window TVF aggregate\): window definition changed: .*PT10S.* in "
                                                    r"the old job, .*PT20S.* in the new one"):
        migrate_sql(old / "savepoint", tmp_path / "out", plan=FIX / "win_changed" / "plan.json",
                    template=FIX / "win_changed" / "savepoint", old_plan=old / "plan.json")
    with pytest.raises(MigrationRefusedError, match=r"only with the old job's plan"):
        migrate_sql(old / "savepoint", tmp_path / "out", plan=FIX / "win_changed" / "plan.json",
                    template=FIX / "win_changed" / "savepoint")
    assert not (tmp_path / "out").exists()
    report = migrate_sql(old / "savepoint", tmp_path / "same", plan=old / "plan.json", template=old / "savepoint",
                         old_plan=old / "plan.json")  # the same window: its pending windows and timers carried
    got, want = FlinkSavepoint.open(tmp_path / "same"), FlinkSavepoint.open(old / "savepoint")
    op = report.operators[0].new.identifier
    assert sorted(map(str, got.keyed_table(op).to_pylist())) == sorted(map(str, want.keyed_table(op).to_pylist()))
    assert got.timers(op).num_rows == want.timers(op).num_rows > 0


def test_a_column_added_to_a_joined_row_is_null(tmp_path) -> None:
    old = FIX / "join_base"
    report = migrate_sql(old / "savepoint", tmp_path / "out", plan=FIX / "join_column" / "plan.json",
                         template=FIX / "join_column" / "savepoint", old_plan=old / "plan.json")
    assert "left-records: column(s) amount added: NULL in the carried rows" in str(report)

    def sides(path: Path, plan: Path) -> tuple[list, list]:
        sp = FlinkSavepoint.open(path, plan=plan)
        (m,) = [m for m in sp.operators if m.key_type is not None]
        rows = sp.keyed_table(m.identifier).to_pylist()
        left = sorted(str((k, n)) for r in rows for k, n in (r["left-records"] or []))
        right = sorted(str((k, n)) for r in rows for k, n in (r["right-records"] or []))
        return left, right

    left, right = sides(tmp_path / "out", FIX / "join_column" / "plan.json")
    old_left, old_right = sides(old / "savepoint", old / "plan.json")
    assert right == old_right and len(left) == len(old_left) > 0
    assert sorted(x.replace(", 'amount': None", "") for x in left) == old_left


def test_a_call_added_to_a_window_aggregate_is_named_by_its_input_column(tmp_path) -> None:
    """The global phase's calls index the local phase's input (amount), not its own input (count1$0, sum$1)."""
    old = FIX / "win_base"
    report = migrate_sql(old / "savepoint", tmp_path / "out", plan=FIX / "win_added" / "plan.json",
                         template=FIX / "win_added" / "savepoint", old_plan=old / "plan.json", dry_run=True)
    assert "added EXPR$3 MAX(amount): its accumulator starts empty (max = NULL)" in str(report), str(report)
    assert "12 keys, 18 rows carried" in str(report) and not (tmp_path / "out").exists()


def test_operators_without_counterparts_start_empty_or_are_dropped(tmp_path) -> None:
    """The base job (group aggregate, deduplication) into the join job: no operator pairs, the join starts empty
    (the template's state is not kept), the old operators are reported dropped."""
    report = migrate_sql(OLD, tmp_path / "out", plan=FIX / "join_column" / "plan.json",
                         template=FIX / "join_column" / "savepoint", old_plan=OLD_PLAN)
    text = str(report)
    assert "(regular join): no counterpart in the old job: starts empty" in text
    assert "dropped: 6_group-aggregate (group aggregate, keyed by (user_name STRING))" in text
    assert "dropped: 12_deduplicate (deduplication keep-last" in text
    got = FlinkSavepoint.open(tmp_path / "out")
    (m,) = [m for m in got.operators if m.key_type is not None]
    assert got.keyed_table(m.identifier).num_rows == 0
    assert FlinkSavepoint.open(FIX / "join_column" / "savepoint").keyed_table(m.identifier).num_rows > 0
