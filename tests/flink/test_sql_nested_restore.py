"""A SQL row holding nested values, edited by statekit and restored by real Flink 2.3.0: `set` of `cnt` on the group
aggregate of the LISTAGG job (tests/fixtures/flink/sql/2.3.0-extra/plan-hashmap-listagg), whose accumulator row
holds two structured LISTAGG-with-retraction accumulators (nested ROWs with RAW ListView fields).

The edited savepoint and the unedited one are restored in one JVM (`SqlMigrate.java`'s restore: unclaimed state not
allowed, batch 2 of the corpus input to its end); batch 2's changelog applied to batch 1's results must differ
exactly by the edit: device 1's ``cnt`` + 100 in every row it reaches, and one retraction of the edited row, which
the sink never saw (so batch 1's row of device 1 stays).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sql_migrate_jobs as J
import sql_restore

from statekit.savepoint import Savepoint
from statekit.savepoint.patch import SetValue, repair

pytestmark = pytest.mark.flink

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "2.3.0-extra" / "plan-hashmap-listagg"
SINKS = {"names_out": "device BIGINT, users STRING, kinds STRING, cnt BIGINT"}  # SqlListaggJob.SINKS
OP = "9_group-aggregate"


def _fields(row: str) -> list[str]:
    return row[1:-1].split(", ")


def _norm(row: str) -> tuple:
    """A names_out row with its LISTAGG strings as sorted tokens: the order of a list follows the arrival order of
    the deduplication's two subtasks, which differs between runs."""
    device, users, kinds, cnt = _fields(row)
    return device, tuple(sorted(users.split(","))), tuple(sorted(kinds.split(";"))), cnt


def _final(changelog: dict[str, list[str]]) -> tuple[list[tuple], list[tuple]]:
    """Batch 1's names_out (the fixture's sink) with batch 2's changelog applied, normalized; and the retractions
    of rows that were not there."""
    start = json.loads((CASE / "sinks.json").read_text("utf-8"))
    final, missing = J.apply_changelog({"names_out": []}, {"names_out": start["names_out"] + changelog["names_out"]})
    table = [_norm(r) for r in final["names_out"]]
    return sorted(table), sorted(_norm(r[2:]) for r in missing.get("names_out", []))


def test_set_on_a_row_with_nested_accumulators_restores_and_shows_exactly_the_edit(tmp_path):
    why = sql_restore.missing_tools()
    if why:
        pytest.skip(why)
    plan = CASE / "plan.json"
    before = Savepoint.open(CASE / "savepoint", plan=plan).get(OP, 1)["accState"]
    report = repair(CASE / "savepoint", tmp_path / "edited", [SetValue(OP, 1, "cnt", before["count1"] + 100)],
                    plan=plan)
    assert report.written, str(report)
    after = Savepoint.open(tmp_path / "edited", plan=plan).get(OP, 1)["accState"]
    assert after == {**before, "count1": before["count1"] + 100}  # the nested accumulators read back unchanged

    plain, edited = (J.restored(p) for p in J.run(
        [{"action": "restore", "savepoint": str(sp.resolve()), "plan": str(plan.resolve()), "sinks": SINKS}
         for sp in (CASE / "savepoint", tmp_path / "edited")], tmp_path / "jvm"))
    assert "error" not in plain and "error" not in edited, (plain.get("error"), edited.get("error"))
    want, none_missing = _final(plain["changelog"])
    got, missing = _final(edited["changelog"])
    assert none_missing == []
    assert any(r[0] == "1" for r in want)
    # batch 2 first retracts device 1's stored (edited) result, which the sink never saw: batch 1's row stays
    batch1, _ = _final({"names_out": []})
    stays = [r for r in batch1 if r[0] == "1"]
    assert len(missing) == 1 and missing[0][0] == "1" and int(missing[0][3]) == before["count1"] + 100
    assert missing[0][1:3] == stays[0][1:3]
    assert got == sorted([(d, u, k, str(int(c) + 100)) if d == "1" else (d, u, k, c) for d, u, k, c in want] + stays)
