"""Bootstrapping Flink SQL state from history, without a JVM: the state computed from the corpus job's batch-1 input
equals the state real Flink 2.3.0 kept after that input (`../shared/flink/sql/corpus`), and bad input is refused
with typed errors and nothing written. The real restore of a bootstrapped savepoint is (e) in
test_sql_write_restore.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sql_restore

from statekit.errors import (
    InvalidArgumentError,
    PlanMismatchError,
    SavepointExistsError,
    StateTypeError,
    TemplateHasStateError,
    UnsupportedFormatError,
)
from statekit.savepoint import Savepoint
from statekit.savepoint.sql_bootstrap import bootstrap_sql

SQL = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "sql" / "2.3.0"
PLAN = SQL / "plan-hashmap-canonical" / "plan.json"
TEMPLATE = SQL.parent / "2.3.0-template" / "plan-hashmap" / "savepoint"
ORDERS = sql_restore.orders1()


def _rows(sp: Savepoint, op: str) -> list[dict]:
    rows = sp.keyed_table(op, with_key_group=True).to_pylist()
    for r in rows:
        for k, v in r.items():
            if isinstance(v, list):
                r[k] = sorted(v)
    return sorted(rows, key=lambda r: str(r["key"]))


@pytest.mark.parametrize("case", ["plan-hashmap-canonical", "plan-rocksdb-canonical"])
@pytest.mark.parametrize("op", ["6_group-aggregate", "29_deduplicate"])
def test_bootstrapped_state_equals_what_flink_kept_after_the_same_input(tmp_path, case, op):
    report = bootstrap_sql(ORDERS, TEMPLATE, tmp_path / "out", operator=op, plan=PLAN)
    assert report.written and report.operators[0][3] == 72
    got = Savepoint.open(tmp_path / "out", plan=PLAN)
    want = Savepoint.open(SQL / case / "savepoint", plan=PLAN)
    assert _rows(got, op) == _rows(want, op)  # keys, key groups, accumulators, DISTINCT maps and NULL states
    assert got.check_all() is None or not list(got.check_all())
    # the other operators are the template's, empty
    assert all(got.keyed_table(m.identifier).num_rows == 0 for m in got.operators if m.key_type and m.uid != op)


def test_the_same_from_parquet_pandas_and_duckdb(tmp_path):
    import duckdb
    import pyarrow.parquet as pq

    pq.write_table(ORDERS, tmp_path / "orders.parquet")
    want = None
    con = duckdb.connect()
    import pandas as pd

    for i, data in enumerate([tmp_path / "orders.parquet", ORDERS.to_pandas(types_mapper=pd.ArrowDtype),
                              con.sql(f"SELECT * FROM '{tmp_path / 'orders.parquet'}'")]):
        bootstrap_sql(data, TEMPLATE, tmp_path / f"out{i}", operator="6_group-aggregate", plan=PLAN)
        rows = _rows(Savepoint.open(tmp_path / f"out{i}", plan=PLAN), "6_group-aggregate")
        want = want or rows
        assert rows == want


def _plan_with(tmp_path: Path, old: str, new: dict) -> Path:
    """The corpus plan with the group aggregate's MAX(ts) call changed (same accumulator width and type)."""
    plan = json.loads(PLAN.read_text())
    for node in plan["nodes"]:
        for call in node.get("aggCalls") or []:
            if call.get("internalName") == old:
                call.update(new)
                for k in [k for k, v in new.items() if v is None]:
                    del call[k]
    out = tmp_path / "plan.json"
    out.write_text(json.dumps(plan))
    return out


def test_min_and_sum0_accumulators(tmp_path):
    """MIN and SUM0 (with the template's field types): checked against a plain computation over the rows."""
    plan = _plan_with(tmp_path, "$MAX$1", {"internalName": "$MIN$1"})
    plan = json.loads(plan.read_text())
    for node in plan["nodes"]:
        for call in node.get("aggCalls") or []:
            if call.get("internalName") == "$SUM$1":
                call["internalName"] = "$SUM0$1"
    (tmp_path / "plan2.json").write_text(json.dumps(plan))
    bootstrap_sql(ORDERS, TEMPLATE, tmp_path / "out", operator="6_group-aggregate", plan=tmp_path / "plan2.json")
    got = {r["key"]["user_name"]: r["accState"] for r in
           Savepoint.open(tmp_path / "out", plan=tmp_path / "plan2.json").keyed_table("6_group-aggregate").to_pylist()}
    want: dict = {}
    for o in ORDERS.to_pylist():
        w = want.setdefault(o["user_name"], {"min": None, "sum": 0})
        w["min"] = o["ts"] if w["min"] is None else min(w["min"], o["ts"])
        w["sum"] += o["amount"] or 0
    assert {u: {"min": a["min"], "sum": a["sum"]} for u, a in got.items()} == want
    assert got["bartholomew"]["sum"] == 0  # SUM0 of only NULLs is 0 (SUM's is NULL)


def _nothing(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


@pytest.mark.parametrize("new, named", [
    ({"internalName": "$FIRST_VALUE$1"}, "FIRST_VALUE"),
    ({"internalName": "", "systemName": "MyTopN"}, "MyTopN (a user-defined, RAW accumulator)"),
    ({"filterArg": 0}, "FILTER clause"),
])
def test_unsupported_aggregates_are_refused_by_name(tmp_path, new, named):
    plan = _plan_with(tmp_path, "$MAX$1", new)
    with pytest.raises(UnsupportedFormatError, match=named.replace("(", r"\(").replace(")", r"\)")):
        bootstrap_sql(ORDERS, TEMPLATE, tmp_path / "out", operator="6_group-aggregate", plan=plan)
    _nothing(tmp_path)


@pytest.mark.parametrize("op, named", [("25_deduplicate", "deduplication keep-last"),
                                       ("12_global-window-aggregate", "window TVF aggregate"),
                                       ("43_join", "regular join")])
def test_other_operators_are_refused_by_kind(tmp_path, op, named):
    with pytest.raises(UnsupportedFormatError, match=named):
        bootstrap_sql(ORDERS, TEMPLATE, tmp_path / "out", operator=op, plan=PLAN)
    _nothing(tmp_path)


@pytest.mark.parametrize("column, values, match", [
    ("amount", pa.array([str(i) for i in range(72)]), "amount.*string.*int64"),
    ("amount", pa.array([float(i) for i in range(72)]), "amount.*double.*int64"),
    ("user_name", pa.array(range(72), pa.int64()), "user_name.*int64.*string"),
    ("ts", pa.array(range(72), pa.int64()), "MAX\\(ts\\).*int64.*timestamp"),
    ("kind", pa.array([b"x"] * 72), "kind.*binary.*string"),
])
def test_a_value_of_the_wrong_type_is_refused(tmp_path, column, values, match):
    bad = ORDERS.set_column(ORDERS.schema.get_field_index(column), column, values)
    with pytest.raises(StateTypeError, match=match):
        bootstrap_sql(bad, TEMPLATE, tmp_path / "out", operator="6_group-aggregate", plan=PLAN)
    _nothing(tmp_path)


def test_a_value_that_does_not_fit_is_refused(tmp_path):
    # nanoseconds where the job keeps TIMESTAMP_LTZ(3) (statekit reads it as microseconds): not without loss
    ts = pc.add(ORDERS.column("ts").cast(pa.timestamp("ns", "UTC")).cast(pa.int64()), 1).cast(pa.timestamp("ns", "UTC"))
    big = ORDERS.set_column(ORDERS.schema.get_field_index("ts"), "ts", ts)
    with pytest.raises(StateTypeError, match="does not fit"):
        bootstrap_sql(big, TEMPLATE, tmp_path / "out", operator="6_group-aggregate", plan=PLAN)
    _nothing(tmp_path)


def test_a_missing_column_is_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="no column.*kind"):
        bootstrap_sql(ORDERS.drop_columns(["kind"]), TEMPLATE, tmp_path / "out", operator="6_group-aggregate", plan=PLAN)
    _nothing(tmp_path)


def test_a_template_of_another_job_is_refused(tmp_path):
    # the same SQL run without a compiled plan: other operator ids
    with pytest.raises(PlanMismatchError, match="has no operator in the savepoint"):
        bootstrap_sql(ORDERS, SQL / "default-hashmap-canonical" / "savepoint", tmp_path / "out",
                      operator="6_group-aggregate", plan=PLAN)
    # a DataStream job's savepoint
    other = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "2.3.0" / "pojo-hashmap-canonical" / "savepoint"
    with pytest.raises(PlanMismatchError):
        bootstrap_sql(ORDERS, other, tmp_path / "out", operator="6_group-aggregate", plan=PLAN)
    _nothing(tmp_path)


def test_a_template_with_state_needs_replace(tmp_path):
    full = SQL / "plan-hashmap-canonical" / "savepoint"
    with pytest.raises(TemplateHasStateError, match="already holds state.*--replace"):
        bootstrap_sql(ORDERS, full, tmp_path / "out", operator="6_group-aggregate", plan=PLAN)
    _nothing(tmp_path)
    half = ORDERS.filter(pc.equal(ORDERS.column("device"), 1))
    bootstrap_sql(half, full, tmp_path / "out", operator="6_group-aggregate", plan=PLAN, replace=True)
    got = Savepoint.open(tmp_path / "out", plan=PLAN)
    counts = {r["key"]["user_name"]: r["accState"]["count1"] for r in got.keyed_table("6_group-aggregate").to_pylist()}
    assert sum(counts.values()) == half.num_rows  # replaced, not added to
    # the operators not bootstrapped keep their state
    assert _rows(got, "25_deduplicate") == _rows(Savepoint.open(full, plan=PLAN), "25_deduplicate")


def test_an_existing_target_and_a_missing_plan_are_refused(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(SavepointExistsError):
        bootstrap_sql(ORDERS, TEMPLATE, tmp_path / "out", operator="6_group-aggregate", plan=PLAN)
    assert not os.listdir(tmp_path / "out")
    shutil.rmtree(tmp_path / "out")
    with pytest.raises(InvalidArgumentError, match="compiled plan"):
        bootstrap_sql(ORDERS, TEMPLATE, tmp_path / "out", operator="6_group-aggregate")
    _nothing(tmp_path)


def test_rowtime_keep_first_marks_every_key_emitted(tmp_path):
    """Keep-first on event time: every key of the (already filtered) history is "already emitted"; where Flink had
    emitted (watermark past the first row) it holds the same flag, the rest of its keys still wait on a timer."""
    big = ORDERS.filter(pc.greater_equal(ORDERS.column("amount"), 80))  # the query's WHERE amount >= 80
    bootstrap_sql(big, TEMPLATE, tmp_path / "out", operator="34_deduplicate", plan=PLAN)
    got = {r["key"]["user_name"]: r for r in Savepoint.open(tmp_path / "out", plan=PLAN).keyed_table("34_deduplicate").to_pylist()}
    assert {k for k, r in got.items() if r["already-emitted-state-boolean"]} == set(got)
    assert Savepoint.open(tmp_path / "out", plan=PLAN).timers("34_deduplicate") is None or \
        not Savepoint.open(tmp_path / "out", plan=PLAN).timers("34_deduplicate").num_rows
    flink = {r["key"]["user_name"]: r for r in
             Savepoint.open(SQL / "plan-hashmap-canonical" / "savepoint", plan=PLAN).keyed_table("34_deduplicate").to_pylist()}
    assert set(flink) == set(got)
    assert {k for k, r in flink.items() if r["already-emitted-state-boolean"]} < set(got)


def test_keys_that_occur_once_skip_the_hash_aggregation_with_its_results():
    """`per_row` (every key once, found by `distinct_keys`) gives what pyarrow's group_by gives for each buffer rule:
    COUNT(*), COUNT(x), SUM (NULL if no value), SUM0 / AVG's sum (0), MIN, MAX, over NULLs too."""
    import numpy as np

    from statekit.savepoint.sql_bootstrap import distinct_keys, per_row

    n = 1000
    rng = np.random.default_rng(3)
    keys = pa.array(rng.permutation(n).astype(np.int64) * 7 - 3000)
    work = {"_k0": keys, "_one": pa.array(np.ones(n, np.int8)),
            "_a2": pa.array(rng.integers(-50, 50, n).astype(np.int32), mask=np.arange(n) % 3 == 0),
            "_a3": pa.array(rng.random(n), mask=np.arange(n) % 4 == 0)}
    specs = [("_one", "count", pc.CountOptions("all"), "all"), ("_a2", "count", pc.CountOptions("only_valid"), "only_valid"),
             ("_a2", "sum", pc.ScalarAggregateOptions(min_count=1), "null"),
             ("_a3", "sum", pc.ScalarAggregateOptions(min_count=0), "zero"),
             ("_a2", "min", pc.ScalarAggregateOptions(min_count=1), "null"),
             ("_a3", "max", pc.ScalarAggregateOptions(min_count=1), "null")]
    want = pa.table(work).group_by("_k0", use_threads=False).aggregate([(c, f, o) for c, f, o, _ in specs])
    got = per_row(work, [(c, f, r) for c, f, _, r in specs])
    assert sorted(got.column_names) == sorted(want.column_names)
    for name in want.column_names:
        assert got.column(name).cast(want.column(name).type).equals(want.column(name)), name
    assert distinct_keys([keys]) and distinct_keys([keys.slice(10, 20)])
    assert not distinct_keys([pa.concat_arrays([keys, keys.slice(5, 1)])])  # one key twice
    assert not distinct_keys([pa.array(["a", "b"])]) and not distinct_keys([keys, keys])  # strings, two columns
    assert not distinct_keys([pa.array([1, None, 2])])  # a NULL key: the grouping decides


def test_integer_keys_are_grouped_by_sorting_with_the_hash_aggregations_results():
    """`sorted_groups` (one integer key: rows in key order, numpy reduceat per key) equals pyarrow's group_by for
    every buffer rule, over keys seen once, several times, only with NULL values; MIN/MAX of timestamps too."""
    import numpy as np

    from statekit.savepoint.sql_bootstrap import key_order, sorted_groups

    rng = np.random.default_rng(5)
    n = 3000
    keys = pa.array(rng.integers(-400, 400, n).astype(np.int64))
    none = np.isin(keys.to_numpy(), [7, 8])  # keys whose values are all NULL
    work = {"_k0": keys, "_one": pa.array(np.ones(n, np.int8)),
            "_a2": pa.array(rng.integers(-10**12, 10**12, n), mask=(np.arange(n) % 3 == 0) | none),
            "_a3": pa.array(rng.integers(0, 10**15, n), pa.timestamp("us"), mask=(np.arange(n) % 5 == 0) | none),
            "_a4": pa.array(rng.integers(-100, 100, n).astype(np.int16))}
    specs = [("_one", "count", pc.CountOptions("all"), "all"), ("_a2", "count", pc.CountOptions("only_valid"), "only_valid"),
             ("_a2", "sum", pc.ScalarAggregateOptions(min_count=1), "null"),
             ("_a2", "sum", pc.ScalarAggregateOptions(min_count=0), "zero"),
             ("_a2", "min", pc.ScalarAggregateOptions(min_count=1), "null"),
             ("_a3", "max", pc.ScalarAggregateOptions(min_count=1), "null"),
             ("_a3", "min", pc.ScalarAggregateOptions(min_count=1), "null"),
             ("_a4", "sum", pc.ScalarAggregateOptions(min_count=1), "null"),
             ("_a4", "max", pc.ScalarAggregateOptions(min_count=1), "null")]
    for c, f, o, r in specs[2:4]:  # SUM and SUM0 of one column: both names once in pyarrow's output, so apart
        want = pa.table(work).group_by("_k0", use_threads=False).aggregate([(c, f, o)]).sort_by("_k0")
        got = sorted_groups(work, [(c, f, r)], *key_order([keys]))
        assert got.column(f"{c}_{f}").equals(want.column(f"{c}_{f}")), r
    specs = [s for i, s in enumerate(specs) if i not in (2, 3)]
    want = pa.table(work).group_by("_k0", use_threads=False).aggregate([(c, f, o) for c, f, o, _ in specs])
    want = want.sort_by("_k0")
    got = sorted_groups(work, [(c, f, r) for c, f, _, r in specs], *key_order([keys]))
    assert got.column("_k0").equals(want.column("_k0"))  # in key order
    for name in want.column_names:
        assert got.column(name).cast(want.column(name).type).equals(want.column(name)), name
