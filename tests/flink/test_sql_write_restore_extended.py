"""(a) of test_sql_write_restore.py for the two corpus cases `make test` leaves out: written back unchanged by
statekit, restored by real Flink 2.3.0 into the SQL job, batch 2's results continue exactly (`make test-extended`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sql_restore

from statekit.savepoint.flink_out import write_flink

pytestmark = [pytest.mark.flink, pytest.mark.extended]

SQL = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "2.3.0"
CASES = {"default-rocksdb-canonical": "default", "plan-hashmap-canonical": "plan"}


@pytest.fixture(scope="module")
def restored(tmp_path_factory):
    why = sql_restore.missing_tools()
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("sql-write-extended")
    tasks = [{"savepoint": write_flink(SQL / case / "savepoint", work / case), "mode": mode,
              "plan": SQL / case / "plan.json" if mode == "plan" else None} for case, mode in CASES.items()]
    return dict(zip(CASES, sql_restore.restore(tasks, work / "restores")))


@pytest.mark.parametrize("case", sorted(CASES))
def test_corpus_case_written_back_unchanged_continues_exactly(restored, case):
    r = restored[case]
    assert r.final() == r.results_all
    assert not r.missing
