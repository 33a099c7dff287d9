"""HOP/CUMULATE window aggregates, outer joins and more aggregate functions of a real Flink 2.3.0 SQL job, against an oracle from its input.

The case (tests/fixtures/flink/sql/2.3.0-extra/plan-hashmap-windows-joins, made by
tests/fixtures/flink/sql/extra/make.sh with real Flink) holds the savepoint, the compiled plan and
the job's input (input.json); what every logical table must hold is computed here from the input
alone, as the SQL defines it (SqlExtraJob.java), not from statekit's reading of the state.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from statekit.savepoint import Savepoint
from statekit.savepoint.check import check

CASE = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql" / "2.3.0-extra" / "plan-hashmap-windows-joins"
UTC = dt.timezone.utc


def _input() -> dict:
    return json.loads((CASE / "input.json").read_text("utf-8"))


def _sp() -> Savepoint:
    return Savepoint.open(CASE / "savepoint", plan=CASE / "plan.json")


def _op(sp: Savepoint, kind: str, key: str) -> str:
    """The uid of the operator of `kind` keyed by column `key`."""
    (uid,) = [m.uid for m in sp.operators if m.key_type is not None and sp.operator_kind(m.identifier) == kind
              and m.key_type.startswith(f"struct<{key}:")]
    return uid


def _ts(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)


def _agg(amounts: list) -> dict:
    vals = [a for a in amounts if a is not None]
    return {"cnt": len(amounts), "total": sum(vals) if vals else None, "top": max(vals) if vals else None,
            "low": min(vals) if vals else None, "mean": int(sum(vals) / len(vals)) if vals else None}


def test_hop_windows_are_the_pending_windows_of_the_input():
    inp, sp = _input(), _sp()
    wm = inp["watermark"]
    want: dict = defaultdict(list)
    for _, _, user_id, _, _, amount, ts in inp["orders"]:
        for end in (ts // 5000 * 5000 + 5000, ts // 5000 * 5000 + 10000):  # HOP 10 s every 5 s: two windows
            if end - 1 > wm:
                want[(user_id, end)].append(amount)
    expected = sorted((uid, _ts(end - 10000), _ts(end), *_agg(a).values()) for (uid, end), a in want.items())
    got = sorted(tuple(r.values()) for r in sp.logical_table(_op(sp, "window TVF aggregate", "user_id")).to_pylist())
    assert got == expected and len(got) > 12


def test_cumulate_windows_are_the_pending_windows_of_the_input():
    inp, sp = _input(), _sp()
    wm = inp["watermark"]
    want: dict = defaultdict(list)
    for _, name, _, _, _, amount, ts in inp["orders"]:
        cycle = ts // 20000 * 20000
        for end in range(cycle + 5000, cycle + 20001, 5000):  # CUMULATE every 5 s up to 20 s
            if end > ts and end - 1 > wm:
                want[(name, cycle, end)].append(amount)
    expected = [(n, _ts(c), _ts(e), len(a), _agg(a)["total"]) for (n, c, e), a in want.items()]
    got = sorted((tuple(r.values()) for r in sp.logical_table(_op(sp, "window TVF aggregate", "user_name")).to_pylist()),
                 key=repr)
    assert got == sorted(expected, key=repr) and len(got) > 12


def _side(rows: list, cols: list[int], other: Counter | None) -> dict:
    """Rows per join key (column 0), each repeated by its count; an outer side's with the rows they joined."""
    out: dict = defaultdict(list)
    for r in rows:
        row = [r[c] for c in cols]
        if other is not None:
            row.append(other[r[0]])
        out[r[0]].append(row)
    return out


def _plain(v):
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


@pytest.mark.parametrize("joined, left_cols, right_cols, outer", [
    ("user_name", [0, 1], [0, 1], (True, False)),  # LEFT JOIN: orders (order_id, user_name), payments (order_id, pay_method)
    ("amount", [0, 5], [0, 2], (True, True)),  # FULL JOIN: orders (order_id, amount), payments (order_id, paid)
])
def test_outer_joins_hold_each_sides_rows_with_their_associations(joined, left_cols, right_cols, outer):
    inp, sp = _input(), _sp()
    orders, payments = inp["orders"], inp["payments"]
    per_order, per_payment = Counter(o[0] for o in orders), Counter(p[0] for p in payments)
    left = _side(orders, left_cols, per_payment if outer[0] else None)
    right = _side(payments, right_cols, per_order if outer[1] else None)
    ops = [m.uid for m in sp.operators if m.key_type is not None and sp.operator_kind(m.identifier) == "regular join"]
    (uid,) = [u for u in ops if joined in str(sp.logical_table(u, rows=False).schema)]
    table = sp.logical_table(uid).to_pylist()
    got = {r["order_id"]: {side: sorted(([_plain(x) for x in row.values()] for row in r[side] or []), key=repr)
                           for side in ("orders", "payments")} for r in table}
    want = {k: {"orders": sorted(left.get(k, []), key=repr), "payments": sorted(right.get(k, []), key=repr)}
            for k in set(left) | set(right)}
    assert got == want


def test_count_avg_min_sum_of_a_group_aggregate():
    inp, sp = _input(), _sp()
    per_kind: dict = defaultdict(list)
    for o in inp["orders"]:
        per_kind[o[4]].append(o[5])
    want = sorted(((k, len([a for a in v if a is not None]), _agg(v)["mean"], _agg(v)["low"], _agg(v)["total"])
                   for k, v in per_kind.items()), key=repr)
    got = sorted((tuple(r.values()) for r in sp.logical_table(_op(sp, "group aggregate", "kind")).to_pylist()), key=repr)
    assert got == want


def test_the_case_checks_clean_with_its_plan():
    assert check(CASE / "savepoint", plan=CASE / "plan.json").ok


def test_aggregates_over_a_retracting_input():
    inp, sp = _input(), _sp()
    last: dict = {}
    for o in inp["orders"]:  # each user_id's last order by arrival (ROW_NUMBER() ... ORDER BY pt DESC = 1)
        last[o[2]] = o
    per_device: dict = defaultdict(list)
    for o in last.values():
        per_device[o[3]].append(o)
    want = sorted((d, len(os), _agg([o[5] for o in os])["total"], _agg([o[5] for o in os])["top"],
                   len({o[1] for o in os if o[1] is not None})) for d, os in per_device.items())
    uid = _op(sp, "group aggregate", "device")
    got = sorted(tuple(r[c] for c in ("device", "cnt", "total", "top", "users")) for r in sp.logical_table(uid).to_pylist())
    assert got == want
    acc = {s.name: s.type for s in sp.operator(uid).keyed_states}["accState"]
    assert acc.startswith("struct<count1:bigint,sum:bigint,count:bigint,max:struct<`max`:bigint,`mapSize`:bigint,")


@pytest.mark.parametrize("sink, key", [("kind_out", "kind"), ("dev_out", "device")])
def test_group_aggregates_equal_what_flinks_own_sink_materialized(sink, key):
    """Flink's changelog to the sink, applied (+I/+U add a row, -U/-D take one away), is the logical table."""
    rows: Counter = Counter()
    for change in json.loads((CASE / "sinks.json").read_text("utf-8"))[sink]:
        rows[change[3:-1]] += 1 if change[:2] in ("+I", "+U") else -1
    sp = _sp()
    table = sp.logical_table(_op(sp, "group aggregate", key))
    shown = [c for c in table.column_names if not c.startswith(("distinct_", "null_"))]  # the sink's columns
    mine = Counter(", ".join("null" if v is None else str(v) for v in r.values()) for r in table.select(shown).to_pylist())
    assert +rows == mine


def test_the_logical_schema_without_rows_is_the_logical_tables():
    """What Spark plans with (``rows=False``: no state read) is what the read gives."""
    sp = _sp()
    ops = [m.identifier for m in sp.operators if sp.has_logical_table(m.identifier)]
    assert len(ops) == 7
    for op in ops:
        assert sp.logical_table(op, rows=False).schema == sp.logical_table(op).schema, op


LISTAGG = CASE.parent / "plan-hashmap-listagg"  # tests/fixtures/flink/sql/listagg/make.sh


def test_listagg_over_retractions_is_what_flinks_own_sink_materialized():
    """LISTAGG(user_name), LISTAGG(kind, ';') over a keep-last deduplication: the values live in the ListView
    states agg<i>$list (NULL kinds are skipped; a list left empty gives NULL); Flink's changelog, applied, is the
    logical table."""
    rows: Counter = Counter()
    for change in json.loads((LISTAGG / "sinks.json").read_text("utf-8"))["names_out"]:
        rows[change[3:-1]] += 1 if change[:2] in ("+I", "+U") else -1
    sp = Savepoint.open(LISTAGG / "savepoint", plan=LISTAGG / "plan.json")
    (uid,) = [m.uid for m in sp.operators if sp.operator_kind(m.identifier) == "group aggregate"]
    table = sp.logical_table(uid)
    assert table.column_names == ["device", "users", "kinds", "cnt"]
    mine = Counter(", ".join("null" if v is None else str(v) for v in r.values()) for r in table.to_pylist())
    assert +rows == mine and len(mine) == 2
    states = {s.name for s in sp.operator(uid).keyed_states}
    assert {"agg0$list", "agg0$retractList", "agg1$list", "agg1$retractList"} <= states
    assert check(LISTAGG / "savepoint", plan=LISTAGG / "plan.json").ok
