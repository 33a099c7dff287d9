"""Flink SQL state written back (statekit.format.flink.sqlwrite, savepoint.flink_repair, savepoint.prune) on the real
Flink 2.3.0 SQL corpus: what is written reads back as intended, bytes where Flink's own bytes are known, and bad edits
are refused with nothing written. Whether Flink restores it: tests/flink/test_sql_write_restore.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from statekit.errors import (
    AmbiguousEditError,
    InvalidArgumentError,
    StateTypeError,
    UnknownStateError,
    UnsupportedFormatError,
)
from statekit.format.flink.sqlwrite import key_groups, row_bytes
from statekit.savepoint import Savepoint
from statekit.savepoint.check import check
from statekit.savepoint.flink_out import carried_serializers, write_flink
from statekit.savepoint.patch import DeleteKeys, RemoveState, RenameOperator, SetMaxParallelism, SetValue, repair
from statekit.savepoint.prune import parse_duration, prune_expired

SQL = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql" / "2.3.0"
CASES = sorted(p.name for p in SQL.iterdir() if p.is_dir())
PLAN = SQL / "plan-hashmap-canonical"


def _keyed(case: str) -> dict[str, dict]:
    ops = json.loads((SQL / case / "expected.json").read_text("utf-8"))["operators"]
    return {k: v for k, v in ops.items() if v["kind"] == "keyed"}


def _rows(sp: Savepoint, op: str) -> list:
    return sorted(sp.keyed_table(op, with_key_group=True).to_pylist(), key=repr)


@pytest.mark.parametrize("case", CASES)
def test_every_case_written_back_reads_the_same_with_the_same_key_groups(tmp_path, case):
    src = Savepoint.open(SQL / case / "savepoint")
    out = Savepoint.open(write_flink(SQL / case / "savepoint", tmp_path / "out"))
    assert check(out.path).ok
    for want in _keyed(case).values():
        assert _rows(out, want["name"]) == _rows(src, want["name"])
        assert sorted(out.timers(want["name"]).to_pylist(), key=repr) == sorted(src.timers(want["name"]).to_pylist(), key=repr)
    for m in src.operators:  # the serializer snapshots are carried byte for byte
        a, b = carried_serializers(src, m), carried_serializers(out, out.operator(m.uid_hash))
        if a is not None and a.key is not None:
            assert b is not None and b.key is not None and b.key.raw == a.key.raw
            assert {n: s.raw for n, s in b.states.items()} == {n: s.raw for n, s in a.states.items()}


def test_keys_encode_to_the_key_groups_flink_gave_them():
    """Every key of every operator, encoded by statekit, hashes to the key group Flink stored it in."""
    sp = Savepoint.open(SQL / "default-hashmap-canonical" / "savepoint")
    n = 0
    for m in sp.operators:
        if m.key_type is None:
            continue
        t = sp.keyed_table(m.identifier, with_key_group=True)
        key_t = carried_serializers(sp, m).key
        assert key_groups(t.column("key").combine_chunks(), key_t, m.max_parallelism).tolist() == \
            t.column("key_group").to_pylist()
        n += t.num_rows
    assert n > 150


def test_rows_encode_byte_for_byte_as_flink_wrote_them():
    """The stored BinaryRowData of a key (SQL-FORMAT.md 4.1: 'bartholomew', 2 with a long string) re-encoded."""
    sp = Savepoint.open(SQL / "default-hashmap-canonical" / "savepoint")
    m = sp.operator("Deduplicate[70]")
    key_t = carried_serializers(sp, m).key
    keys = pa.array([{"k0": "bartholomew", "k1": 2}], pa.struct([("k0", pa.string()), ("k1", pa.int64())]))
    got = row_bytes(keys, key_t.logical)
    want = bytes.fromhex("0000000000000000" "0b00000018000000" "0200000000000000" "62617274686f6c6f" "6d65770000000000")
    assert got.data.tobytes() == want
    inline = pa.array([{"k0": "jürgen", "k1": 1}], keys.type)  # 7 UTF-8 bytes: inline, 0x87
    assert row_bytes(inline, key_t.logical).data.tobytes()[8:16] == "jürgen".encode() + b"\x87"


def test_set_through_the_plan_changes_the_accumulator_fields_behind_a_result(tmp_path):
    plan = PLAN / "plan.json"
    result = repair(PLAN / "savepoint", tmp_path / "out", [
        SetValue("6_group-aggregate", "alice", "cnt", 100), SetValue("6_group-aggregate", "alice", "total", 5000),
        SetValue("6_group-aggregate", {"user_name": "carol"}, "total", 1)], plan=plan)
    assert result.written
    assert "cnt (COUNT in accState field(s) count1): 8 -> 100" in str(result)
    src, out = Savepoint.open(PLAN / "savepoint", plan=plan), Savepoint.open(tmp_path / "out", plan=plan)
    before, after = src.get("6_group-aggregate", "alice")["accState"], out.get("6_group-aggregate", "alice")["accState"]
    assert after == {**before, "count1": 100, "sum": 5000}
    assert out.get("6_group-aggregate", "carol")["accState"]["sum"] == 1
    logical = {r["user_name"]: r for r in out.logical_table("6_group-aggregate").to_pylist()}
    assert (logical["alice"]["cnt"], logical["alice"]["total"], logical["carol"]["total"]) == (100, 5000, 1)
    for name in ("12_global-window-aggregate", "25_deduplicate", "43_join"):  # other operators as they were
        assert _rows(out, name) == _rows(src, name)
    # only the edited keys' key groups were rewritten (spliced into their files): every other row as it was, each
    # key in its BinaryRowData key group, and the other operators' files hard links of the source's
    others = [r for r in _rows(out, "6_group-aggregate") if r["key"]["user_name"] not in ("alice", "carol")]
    assert others == [r for r in _rows(src, "6_group-aggregate") if r["key"]["user_name"] not in ("alice", "carol")]
    assert check(out.path).ok
    files = [p for p in (tmp_path / "out").iterdir() if p.name != "_metadata"]
    assert sum(p.stat().st_nlink > 1 for p in files) >= len(files) - 2  # the agg's two subtask files at most


def test_physical_set_delete_key_rm_state_window_and_dedup_row(tmp_path):
    sp = Savepoint.open(SQL / "default-hashmap-canonical" / "savepoint")
    agg, win, dedup = "GroupAggregate[51]", "GlobalWindowAggregate[57]", "Deduplicate[70]"
    ns = next(r["namespace"] for r in sp.keyed_table(win).to_pylist() if r["key"]["k0"] == -42)
    repair(SQL / "default-hashmap-canonical" / "savepoint", tmp_path / "out", [
        SetValue(agg, "dave", "accState", {"f0": 70}), DeleteKeys(agg, ("bob",)), RemoveState(agg, "distinctAcc_0"),
        SetValue(win, -42, "window-aggs", {"f1": 1}, namespace=ns),
        SetValue(dedup, ("bartholomew", 2), "deduplicate-state", {"f3": 5, "row_kind": "+I"}),
        SetValue("Deduplicate[74]", 424242, "deduplicate-state", True)])  # a new key
    out = Savepoint.open(tmp_path / "out")
    assert out.get(agg, "dave")["accState"] == {**sp.get(agg, "dave")["accState"], "f0": 70}
    assert out.get(agg, "bob") is None
    assert "distinctAcc_0" not in {s.name for s in out.operator(agg).keyed_states}
    assert out.get(win, -42, namespace=ns)["window-aggs"]["f1"] == 1
    assert out.get(dedup, ("bartholomew", 2))["deduplicate-state"] == \
        {**sp.get(dedup, ("bartholomew", 2))["deduplicate-state"], "f3": 5, "row_kind": "+I"}
    assert out.get("Deduplicate[74]", 424242) == {"deduplicate-state": True}
    assert check(out.path).ok  # the new key sits in its BinaryRowData key group


def test_ttl_values_keep_their_last_access_unless_set(tmp_path):
    case = SQL / "default-hashmap-canonical-ttl" / "savepoint"
    sp = Savepoint.open(case)
    old = sp.get("GroupAggregate[51]", "alice")["accState"]
    repair(case, tmp_path / "a", [SetValue("GroupAggregate[51]", "alice", "accState", {"f1": 1})])
    got = Savepoint.open(tmp_path / "a").get("GroupAggregate[51]", "alice")["accState"]
    assert got == {"last_access": old["last_access"], "value": {**old["value"], "f1": 1}}
    repair(case, tmp_path / "b", [SetValue("GroupAggregate[51]", "alice", "accState",
                                           {"last_access": 5, "value": {"f1": 2}})])
    assert Savepoint.open(tmp_path / "b").get("GroupAggregate[51]", "alice")["accState"]["last_access"] == 5


def test_rename_to_plan_uids_and_max_parallelism_rehash_sql_keys(tmp_path):
    default = SQL / "default-hashmap-canonical" / "savepoint"
    plan_uids = {label: v["uid"] for label, v in _keyed("plan-hashmap-canonical").items()}
    renames = [RenameOperator(v["operator_id"], plan_uids[label]) for label, v in _keyed("default-hashmap-canonical").items()]
    repair(default, tmp_path / "renamed", renames)
    out = Savepoint.open(tmp_path / "renamed", plan=PLAN / "plan.json")  # the plan now matches it
    assert out.logical_table("6_group-aggregate").num_rows == 13
    repair(default, tmp_path / "256", [SetMaxParallelism("GroupAggregate[51]", 256)])
    wide = Savepoint.open(tmp_path / "256")
    assert wide.operator("GroupAggregate[51]").max_parallelism == 256 and check(wide.path).ok
    repair(tmp_path / "256", tmp_path / "128", [SetMaxParallelism("GroupAggregate[51]", 128)])
    back = Savepoint.open(tmp_path / "128")
    src = Savepoint.open(default)
    assert _rows(back, "GroupAggregate[51]") == _rows(src, "GroupAggregate[51]")  # the key groups Flink gave them


@pytest.mark.parametrize(("column", "error", "named"), [
    ("kinds", AmbiguousEditError, "distinctAcc_0"),  # COUNT(DISTINCT kind): a map of the values seen
    ("user_name", InvalidArgumentError, "key column"),
    ("nope", UnknownStateError, "cnt"),
])
def test_ambiguous_or_unknown_result_columns_are_refused_naming_the_fields(tmp_path, column, error, named):
    with pytest.raises(error, match=named):
        repair(PLAN / "savepoint", tmp_path / "out", [SetValue("6_group-aggregate", "alice", column, 1)],
               plan=PLAN / "plan.json")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("edit", "error", "named"), [
    (SetValue("6_group-aggregate", "alice", "accState", {"distinct_kind": b"\x01"}), StateTypeError, "RAW"),
    (SetValue("6_group-aggregate", "alice", "cnt", "ten"), StateTypeError, "cnt"),
    (SetValue("6_group-aggregate", "alice", "accState", {"count1": "ten"}), StateTypeError, "accState"),
    (SetValue("6_group-aggregate", "alice", "accState", {"bogus": 1}), StateTypeError, "bogus"),
    (SetValue("12_global-window-aggregate", 42, "window-aggs", {"sum": 1}), InvalidArgumentError, "namespace"),
    (SetValue("12_global-window-aggregate", 42, "window-aggs", {"sum": 1}, namespace=1), InvalidArgumentError,
     "pending windows"),
    (SetValue("6_group-aggregate", ("alice", 2), "cnt", 1), InvalidArgumentError, "1 column"),
    (SetValue("6_group-aggregate", "nobody", "cnt", 1), InvalidArgumentError, "no accumulator"),
])
def test_bad_edits_are_typed_errors_and_nothing_is_written(tmp_path, edit, error, named):
    with pytest.raises(error, match=named):
        repair(PLAN / "savepoint", tmp_path / "out", [edit], plan=PLAN / "plan.json")
    assert not (tmp_path / "out").exists()


def test_set_on_sql_written_as_statekit_is_refused(tmp_path):
    with pytest.raises(UnsupportedFormatError, match="Flink savepoint"):
        repair(PLAN / "savepoint", tmp_path / "out", [SetValue("6_group-aggregate", "alice", "cnt", 1)],
               plan=PLAN / "plan.json", to="statekit")
    assert not (tmp_path / "out").exists()


def test_delete_key_of_a_sql_operator_written_as_statekit(tmp_path):
    repair(PLAN / "savepoint", tmp_path / "out", [DeleteKeys("6_group-aggregate", ("bob",))], to="statekit")
    out = Savepoint.open(tmp_path / "out")
    keys = {r["key"]["k0"] for r in out.keyed_table("6_group-aggregate").to_pylist()}
    assert "bob" not in keys and "alice" in keys


def test_logical_set_needs_the_plan():
    with pytest.raises(UnknownStateError, match="compiled plan"):
        repair(PLAN / "savepoint", PLAN.parent / "never", [SetValue("6_group-aggregate", "alice", "cnt", 1)])


def _ttl_entries(sp: Savepoint, op: str) -> dict[str, list[int]]:
    """Last-access times of every TTL entry per state, counted independently in Python."""
    out: dict[str, list[int]] = {}
    for r in sp.keyed_table(op).to_pylist():
        for name, v in r.items():
            if name == "key" or v is None:
                continue
            if isinstance(v, dict) and "last_access" in v:
                out.setdefault(name, []).append(v["last_access"])
            elif isinstance(v, list):
                out.setdefault(name, []).extend(x["last_access"] for _, x in v)
    return out


def test_prune_expired_drops_exactly_the_entries_past_their_ttl_and_reports_them(tmp_path):
    case = SQL / "default-hashmap-canonical-ttl" / "savepoint"
    sp = Savepoint.open(case)
    agg = "GroupAggregate[51]"
    entries = _ttl_entries(sp, agg)
    times = sorted(entries["accState"])
    now = times[len(times) // 2] + 86_400_000
    report = prune_expired(case, tmp_path / "out", now=now, ttl="1 d", operators=[agg])
    assert report.written
    by_state = {s.state: s for s in report.states}
    out = Savepoint.open(tmp_path / "out")
    left = _ttl_entries(out, agg)
    for state, stamps in entries.items():
        gone = sum(t + 86_400_000 <= now for t in stamps)
        assert (by_state[state].entries, by_state[state].removed) == (len(stamps), gone), state
        assert sorted(left.get(state, [])) == sorted(t for t in stamps if t + 86_400_000 > now), state
    assert by_state["accState"].bytes_removed == by_state["accState"].removed * 68  # i64 + i32 + 56-byte row
    for m in sp.operators:  # other operators untouched
        if m.key_type is not None and m.name != agg:
            assert _rows(out, m.uid_hash) == _rows(sp, m.uid_hash)
    nothing = prune_expired(case, tmp_path / "none", now=times[0], ttl="1 d")
    assert not nothing.written and not (tmp_path / "none").exists() and nothing.removed == 0


def test_prune_expired_touch_and_refusals(tmp_path):
    case = SQL / "default-hashmap-canonical-ttl" / "savepoint"
    report = prune_expired(case, tmp_path / "t", now=0, ttl="1 d", touch=123, operators=["Deduplicate[74]"])
    assert report.written and report.removed == 0
    assert {r["deduplicate-state"]["last_access"] for r in Savepoint.open(tmp_path / "t").keyed_table(
        "Deduplicate[74]").to_pylist()} == {123}
    with pytest.raises(InvalidArgumentError, match="does not store its duration"):
        prune_expired(case, tmp_path / "x", now=0)
    with pytest.raises(InvalidArgumentError, match="not a duration"):
        prune_expired(case, tmp_path / "x", now=0, ttl="one day")
    with pytest.raises(UnsupportedFormatError, match="statekit savepoint"):
        from statekit.savepoint.convert import convert_to_statekit

        convert_to_statekit(SQL / "default-hashmap-canonical" / "savepoint", tmp_path / "sk")
        prune_expired(tmp_path / "sk", tmp_path / "x", now=0, ttl="1 d")
    assert not (tmp_path / "x").exists()
    assert parse_duration("36 h") == 36 * 3_600_000 and int(np.int64(5)) == 5


def test_splice_edges_a_key_group_emptied_and_a_new_key_in_a_used_key_group(tmp_path):
    """A key group whose only keys are deleted is written empty; a new key whose key group holds others joins it."""
    src_path = SQL / "default-hashmap-canonical" / "savepoint"
    sp = Savepoint.open(src_path)
    agg = "GroupAggregate[51]"
    m = sp.operator(agg)
    rows = sp.keyed_table(agg, with_key_group=True).to_pylist()
    by_kg: dict[int, list] = {}
    for r in rows:
        by_kg.setdefault(r["key_group"], []).append(r["key"]["k0"])
    kg, gone = next((k, v) for k, v in sorted(by_kg.items()) if v[0] is not None)
    key_t = carried_serializers(sp, m).key
    key_type = pa.struct([("k0", pa.string())])
    new = next(f"user-{i}" for i in range(10_000) if (k := key_groups(pa.array([{"k0": f"user-{i}"}], key_type), key_t,
                                                                        128)[0]) in by_kg and k != kg)
    acc = {**sp.get(agg, "alice")["accState"], "f0": 1}
    repair(src_path, tmp_path / "out", [DeleteKeys(agg, tuple(gone)), SetValue(agg, new, "accState", acc)])
    out = Savepoint.open(tmp_path / "out")
    assert check(out.path).ok
    want = [r for r in rows if r["key"]["k0"] not in gone]
    got = out.keyed_table(agg, with_key_group=True).to_pylist()
    assert sorted([r for r in got if r["key"]["k0"] != new], key=repr) == sorted(want, key=repr)
    assert out.get(agg, new)["accState"] == acc
    assert all(out.get(agg, k) is None for k in gone)
