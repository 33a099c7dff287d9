"""SQL rows holding nested values, edited by statekit and restored by real Flink 2.3.0: `set` of `cnt` on group
aggregates whose accumulator rows hold structured accumulators (nested ROWs with RAW view fields): the LISTAGG job
(tests/fixtures/flink/sql/2.3.0-extra/plan-hashmap-listagg: two LISTAGG-with-retraction accumulators) and a
MIN/MAX-over-retractions job (tests/fixtures/flink/sql/nested-retract-minmax, `sql_nested_jobs`: ROW<max, mapSize,
map>); and `set` of the nested columns (ARRAY, MAP, ROW with an ARRAY) of a deduplicated row
(tests/fixtures/flink/sql/nested-dedup), which batch 2 retracts as Flink decoded it.

Per job the edited savepoint and the unedited one are restored in one JVM (`SqlMigrate.java`'s restore:
unclaimed state not allowed, batch 2 of the corpus input to its end); batch 2's changelog applied to what the sink
had before must differ exactly by the edit: device 1's ``cnt`` + 100 in every row it reaches, and one retraction
of the edited row, which the sink never saw (so the earlier row of device 1 stays).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sql_migrate_jobs as J
import sql_nested_jobs as N
import sql_restore

from statekit.savepoint import Savepoint
from statekit.savepoint.patch import SetValue, repair

pytestmark = pytest.mark.flink

LISTAGG = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "2.3.0-extra" / "plan-hashmap-listagg"
OP = {"listagg": "9_group-aggregate", "minmax": "9_group-aggregate", "dedup": "6_deduplicate"}
CASES = {"listagg": (LISTAGG, {"names_out": "device BIGINT, users STRING, kinds STRING, cnt BIGINT"}),  # SqlListaggJob
         "minmax": (N.FIXTURE, N.SINKS), "dedup": N.JOBS["dedup"][:2]}
USER = 42  # the dedup case's edited user: batch 2 brings a later order of theirs
#: the dedup case's edit: every nested column, NULL elements and values included
NESTED = {"$2": [7, None, 9], "$3": [("k", None), ("long key, 8+ bytes", 5)], "$4": {"EXPR$0": "edited", "EXPR$1": [None, -1]}}
#: as the sink prints it (the ARRAY cast to a string after the deduplication; the MAP as a java.util.HashMap)
NESTED_TEXT = "-U[42, [7, NULL, 9], {long key, 8+ bytes=5, k=null}, +I[edited, [null, -1]]]"


def _fields(row: str) -> list[str]:
    return row[1:-1].split(", ")


def _norm(case: str, row: str) -> tuple:
    """A row as (device, ..., cnt); LISTAGG strings as sorted tokens: a list's order follows the arrival order of
    the deduplication's two subtasks, which differs between runs."""
    f = _fields(row)
    if case == "listagg":
        return f[0], tuple(sorted(f[1].split(","))), tuple(sorted(f[2].split(";"))), f[3]
    return tuple(f)


def _before(case: str) -> list[str]:
    """What the sink held when the savepoint was taken."""
    if case == "listagg":
        final, _ = J.apply_changelog({"names_out": []},
                                     {"names_out": json.loads((LISTAGG / "sinks.json").read_text("utf-8"))["names_out"]})
        return final["names_out"]
    sp = Savepoint.open(N.FIXTURE / "savepoint", plan=N.FIXTURE / "plan.json")
    text = lambda v: "null" if v is None else str(v)  # noqa: E731
    return [f"[{r['key']['device']}, {text(r['accState']['max']['max'])}, {text(r['accState']['min']['min'])}, "
            f"{r['accState']['count1']}]" for r in sp.keyed_table(OP["minmax"]).to_pylist()]


def _final(case: str, changelog: dict[str, list[str]]) -> tuple[list[tuple], list[tuple]]:
    """The sink's table after batch 2 (normalized), and the retractions of rows it did not hold."""
    sink = next(iter(CASES[case][1]))
    final, missing = J.apply_changelog({sink: _before(case)}, {sink: changelog[sink]})
    return sorted(_norm(case, r) for r in final[sink]), sorted(_norm(case, r[2:]) for r in missing.get(sink, []))


@pytest.fixture(scope="module")
def restored(request, tmp_path_factory):
    """The case's unedited savepoint and the one with device 1's cnt + 100, restored in one JVM."""
    why = sql_restore.missing_tools()
    if why:
        pytest.skip(why)
    case = request.param
    path, sinks = CASES[case]
    work = tmp_path_factory.mktemp(f"sql-nested-{case}")
    plan = path / "plan.json"
    if case == "dedup":
        state = "deduplicate-state"
        before = Savepoint.open(path / "savepoint", plan=plan).get(OP[case], USER)[state]
        report = repair(path / "savepoint", work / "edited", [SetValue(OP[case], USER, state, NESTED)], plan=plan)
        got = Savepoint.open(work / "edited", plan=plan).get(OP[case], USER)[state]
        assert got == {**before, **NESTED, "$3": dict(NESTED["$3"])}  # `get` gives maps as dicts
        cnt = 0
    else:
        before = Savepoint.open(path / "savepoint", plan=plan).get(OP[case], 1)["accState"]
        report = repair(path / "savepoint", work / "edited", [SetValue(OP[case], 1, "cnt", before["count1"] + 100)],
                        plan=plan)
        after = Savepoint.open(work / "edited", plan=plan).get(OP[case], 1)["accState"]
        assert after == {**before, "count1": before["count1"] + 100}  # the nested accumulators read back unchanged
        cnt = before["count1"]
    assert report.written, str(report)
    plain, edited = (J.restored(p) for p in J.run(
        [{"action": "restore", "savepoint": str(sp.resolve()), "plan": str(plan.resolve()), "sinks": sinks}
         for sp in (path / "savepoint", work / "edited")], work / "jvm"))
    return case, plain, edited, cnt


#: MIN/MAX over retractions in `make test-extended` (one more JVM); LISTAGG's structured accumulators in make test
@pytest.mark.parametrize("restored", ["listagg", pytest.param("minmax", marks=pytest.mark.extended)], indirect=True)
def test_set_on_a_row_with_nested_accumulators_restores_and_shows_exactly_the_edit(restored):
    case, plain, edited, cnt = restored
    assert "error" not in plain and "error" not in edited, (plain.get("error"), edited.get("error"))
    want, none_missing = _final(case, plain["changelog"])
    got, missing = _final(case, edited["changelog"])
    assert none_missing == []
    assert any(r[0] == "1" for r in want)
    # batch 2 first retracts device 1's stored (edited) result, which the sink never saw: the earlier row stays
    stays = [_norm(case, r) for r in _before(case) if _fields(r)[0] == "1"]
    assert len(missing) == 1 and missing[0][0] == "1" and int(missing[0][-1]) == cnt + 100
    assert missing[0][1:-1] == stays[0][1:-1]
    assert got == sorted([(*r[:-1], str(int(r[-1]) + 100)) if r[0] == "1" else r for r in want] + stays)


@pytest.mark.extended
@pytest.mark.parametrize("restored", ["dedup"], indirect=True)
def test_set_of_nested_values_in_a_deduplicated_row_is_what_flink_retracts(restored):
    """Flink decodes the edited row's ARRAY (NULL element), MAP (NULL value, a key in the variable part) and ROW with an
    ARRAY: batch 2's later order of the user retracts exactly that row; every other change is the unedited run's."""
    _, plain, edited, _ = restored
    assert "error" not in plain and "error" not in edited, (plain.get("error"), edited.get("error"))
    a, b = sorted(plain["changelog"]["nest_out"]), sorted(edited["changelog"]["nest_out"])
    only_edited = [r for r in b if r not in a]
    only_plain = [r for r in a if r not in b]
    assert only_edited == [NESTED_TEXT]
    assert len(only_plain) == 1 and only_plain[0].startswith("-U[42, ")
