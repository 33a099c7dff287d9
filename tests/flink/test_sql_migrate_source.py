"""migrate-sql carries a source's operator state: real Flink 2.3.0, a SQL job over a `datagen` sequence (its readers'
remaining ids are operator state) savepointed mid-way, migrated into a changed query (MAX added, so Flink refuses the
old state; the source's operator id changed) whose template was savepointed at another point of the sequence. Restored (unclaimed state not allowed),
the new job continues from the old job's position, not the template's: every id of the sequence is counted exactly
once (`sql_source_jobs`)."""

from __future__ import annotations

import pytest
import sql_migrate_jobs as J
import sql_restore
import sql_source_jobs as S

from statekit.savepoint import Savepoint
from statekit.savepoint.flink import FlinkSavepoint
from statekit.savepoint.sql_migrate import migrate_sql
from statekit.savepoint.sql_sources import plan_sources

OLD, NEW = S.FIXTURES / "old", S.FIXTURES / "new"


def _read(version: str, op: str) -> int:
    """How many ids the version's savepoint had counted."""
    sp = Savepoint.open(S.FIXTURES / version / "savepoint", plan=S.FIXTURES / version / "plan.json")
    return sum(r["accState"]["count1"] for r in sp.keyed_table(op).to_pylist())


@pytest.mark.flink
def test_the_migrated_job_continues_from_the_old_jobs_source_offsets(tmp_path):
    why = sql_restore.missing_tools()
    if why:
        pytest.skip(why)
    read_old, read_template = _read("old", "4_group-aggregate"), _read("new", "11_group-aggregate")
    assert 0 < read_old < S.N and read_template != read_old  # the template's offsets would count other ids
    report = migrate_sql(OLD / "savepoint", tmp_path / "migrated", plan=NEW / "plan.json", template=NEW / "savepoint",
                         old_plan=OLD / "plan.json")
    text = str(report)
    assert [(c.table, c.states) for c in report.sources] == [("gen", ("id-sequence-state",))]
    # the scan's operator id changed (1_source -> 8_source): paired by the table it reads
    assert "source 8_source (table gen) <- 1_source: operator state (id-sequence-state) carried" in text
    assert not any("id-sequence-state" in d for d in report.dropped)

    own, migrated = (J.restored(p) for p in J.run([S.restore_task("new", OLD / "savepoint"),
                                                  S.restore_task("new", tmp_path / "migrated")], tmp_path / "jvm"))
    assert "error" in own  # Flink refuses the old accumulators by itself
    assert "error" not in migrated, migrated.get("error")
    assert migrated["changelog"]["dev_out"]  # the other statement (no counterpart: starts empty) ran too
    last: dict[int, list[str]] = {}
    for change in migrated["changelog"]["agg_out"]:
        if change.startswith("+"):
            g, *rest = change[3:-1].split(", ")
            last[int(g)] = rest
    model = S.model()
    # every id counted once: the carried counts plus the ids the restored source read; MAX started empty and the
    # sequence's last ids are read after the savepoint, so it is each group's maximum
    assert {g: tuple(int(x) for x in v) for g, v in last.items()} == model
    dry = migrate_sql(OLD / "savepoint", tmp_path / "dry", plan=NEW / "plan.json", template=NEW / "savepoint",
                      old_plan=OLD / "plan.json", dry_run=True)
    assert "carried" in str(dry) and not (tmp_path / "dry").exists()


def test_without_the_old_plan_the_source_state_is_reported_not_carried():
    """JVM-free: which table the old source read is only in the old plan."""
    old, tmpl = FlinkSavepoint.open(OLD / "savepoint"), FlinkSavepoint.open(NEW / "savepoint", plan=NEW / "plan.json")
    carries, notes = plan_sources(old, tmpl, {m.uid_hash for m in old.operators if m.key_type is not None})
    assert carries == []
    assert notes == ["1_source: its operator state (id-sequence-state) is not carried: without the old job's plan "
                     "(--old-plan) statekit cannot tell which table it read; the new job's comes from the template"]


def _remaining(path, uid: str) -> list[list[int]]:
    """The ids each datagen reader had still to emit (its operator state)."""
    return Savepoint.open(path).operator_state_lists(uid, "id-sequence-state")[1]


def test_the_migrated_source_holds_the_old_jobs_remaining_ids_not_the_templates(tmp_path):
    """JVM-free: the carried operator state is the old source's, under the new operator id."""
    migrate_sql(OLD / "savepoint", tmp_path / "out", plan=NEW / "plan.json", template=NEW / "savepoint",
                old_plan=OLD / "plan.json")
    got, old, template = (_remaining(tmp_path / "out", "8_source"), _remaining(OLD / "savepoint", "1_source"),
                          _remaining(NEW / "savepoint", "8_source"))
    assert got == old != template
    # the sequence is dealt out to the two readers alternately, and both had emitted as many
    assert min(min(x) for x in got) == _read("old", "4_group-aggregate") + 1
    assert min(min(x) for x in template) == _read("new", "11_group-aggregate") + 1


def test_a_table_the_new_job_does_not_read_is_reported_not_carried():
    """JVM-free: the new job (the corpus migrate fixture's `base`) reads only the orders."""
    base = S.FIXTURES.parent / "migrate" / "base"
    old = FlinkSavepoint.open(OLD / "savepoint", plan=OLD / "plan.json")
    tmpl = FlinkSavepoint.open(base / "savepoint", plan=base / "plan.json")
    carries, notes = plan_sources(old, tmpl, {m.uid_hash for m in old.operators if m.key_type is not None})
    assert carries == []
    assert notes == ["1_source: its operator state (id-sequence-state) (table gen) is not carried: the new job does "
                     "not read that table"]
