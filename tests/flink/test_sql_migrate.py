"""migrate-sql against real Flink 2.3.0: pairs of versions of a SQL job (tests/fixtures/flink/sql/migrate, made by
`sql_migrate_jobs.make_fixtures`), where Flink's own restore of the old savepoint into the new job fails, and
statekit's migrated savepoint restores (unclaimed state not allowed) and continues as the model says.

Here (`make test`): an aggregate call added to the group aggregate, and a column added to the deduplicated row;
GROUP BY keys changed is refused. test_sql_migrate_extended.py: an aggregate call removed, the queries reordered
(new operator ids).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sql_migrate_jobs as J
import sql_restore

from statekit.errors import MigrationRefusedError
from statekit.savepoint.sql_migrate import migrate_sql

pytestmark = pytest.mark.flink

FIX = J.FIXTURES
PAIRS = ("agg_added", "dedup_column")


def migrate_and_restore(pairs: tuple[str, ...], work: Path) -> dict[str, tuple]:
    """Per new version: Flink's restore of the old savepoint (must fail), and of statekit's migration, in one JVM."""
    why = sql_restore.missing_tools()
    if why:
        pytest.skip(why)
    tasks, reports = [], {}
    for new in pairs:
        old = FIX / {"join": "join_base", "win_": "win_base"}.get(new[:4], "base")
        reports[new] = migrate_sql(old / "savepoint", work / f"migrated-{new}", plan=FIX / new / "plan.json",
                                   template=FIX / new / "savepoint", old_plan=old / "plan.json")
        tasks.append(J.restore_task(new, old / "savepoint", FIX / new / "plan.json"))
        tasks.append(J.restore_task(new, work / f"migrated-{new}", FIX / new / "plan.json"))
    outs = [J.restored(p) for p in J.run(tasks, work / "jvm")]
    return {new: (outs[2 * i], outs[2 * i + 1], reports[new]) for i, new in enumerate(pairs)}


def check_pair(new: str, flink_own: dict, migrated: dict) -> None:
    """Flink refused the old state; after the migration batch 2 continues from the carried values exactly."""
    assert "error" in flink_own, f"Flink restored the old savepoint into {new} by itself: no migration needed?"
    assert "migrated" not in flink_own["error"]
    assert "error" not in migrated, migrated.get("error")
    start, want = J.expected_after_migration(new, J.input_rows_cached())
    final, missing = J.apply_changelog(start, migrated["changelog"])
    assert missing == {}, missing
    assert final == want


@pytest.fixture(scope="module")
def restored(tmp_path_factory):
    return migrate_and_restore(PAIRS, tmp_path_factory.mktemp("sql-migrate"))


@pytest.mark.parametrize("new", PAIRS)
def test_migrated_state_restores_and_continues(restored, new) -> None:
    flink_own, migrated, _ = restored[new]
    check_pair(new, flink_own, migrated)


def test_flink_refuses_the_old_state_for_its_serializers(restored) -> None:
    for new in PAIRS:
        assert "StateMigrationException" in restored[new][0]["error"] or "incompatible" in restored[new][0]["error"], \
            restored[new][0]["error"]


def test_the_report_says_what_starts_empty(restored) -> None:
    text = str(restored["agg_added"][2])
    assert "added EXPR$3 MAX(amount): its accumulator starts empty (max = NULL)" in text, text
    assert "13 keys" in text
    text = str(restored["dedup_column"][2])
    assert "column(s) kind added: NULL in the carried rows" in text, text


def test_changed_group_by_keys_are_refused(tmp_path) -> None:
    with pytest.raises(MigrationRefusedError, match=r"GROUP BY keys changed: .* keys by \(user_name STRING\), the new "
                                                    r"one by \(user_name STRING, device BIGINT\)"):
        migrate_sql(FIX / "base" / "savepoint", tmp_path / "out", plan=FIX / "keys_changed" / "plan.json",
                    template=FIX / "keys_changed" / "savepoint", old_plan=FIX / "base" / "plan.json")
    assert not (tmp_path / "out").exists()
