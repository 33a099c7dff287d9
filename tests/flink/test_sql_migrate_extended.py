"""migrate-sql against real Flink 2.3.0, the pairs `make test` leaves out (`make test-extended`): an aggregate call
removed from the group aggregate, the queries reordered so that every operator id changes, and a column added to a
regular join's left rows, and an aggregate call added to a window TVF aggregate (its pending windows and timers
carried)."""

from __future__ import annotations

import pytest
from test_sql_migrate import check_pair, migrate_and_restore

pytestmark = [pytest.mark.flink, pytest.mark.extended]

PAIRS = ("agg_removed", "reordered", "join_column", "win_added")


@pytest.fixture(scope="module")
def restored(tmp_path_factory):
    return migrate_and_restore(PAIRS, tmp_path_factory.mktemp("sql-migrate-extended"))


@pytest.mark.parametrize("new", PAIRS)
def test_migrated_state_restores_and_continues(restored, new) -> None:
    flink_own, migrated, _ = restored[new]
    check_pair(new, flink_own, migrated)


def test_reordered_operators_get_the_new_ids(restored) -> None:
    flink_own, _, report = restored["reordered"]
    assert "Cannot map checkpoint/savepoint state" in flink_own["error"], flink_own["error"]
    moved = [m for m in report.operators if m.old is not None and m.old.uid_hash != m.new.uid_hash]
    assert len(moved) == 2 and "operator id" in str(report)


def test_the_join_rows_get_the_added_column_as_null(restored) -> None:
    text = str(restored["join_column"][2])
    assert "left-records: column(s) amount added: NULL in the carried rows" in text, text
