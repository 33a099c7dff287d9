"""A real Flink 2.3.0 SQL job over every LogicalType, as keys and as values, read exactly: locally, through DuckDB, through Spark.

The case (tests/fixtures/flink/sql/2.3.0-types/plan-hashmap-types, made by
tests/fixtures/flink/sql/types/make.sh with real Flink) holds the savepoint, the compiled plan, the
job's input rows (input.json) and expected.json, which make_expected.py computes from those rows
alone (not from statekit). Values are compared in expected.json's plain encoding (see
make_expected.py): TIMESTAMP(7..9) at microseconds, statekit's documented resolution.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.savepoint import Savepoint
from statekit.savepoint.check import check

CASE = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql" / "2.3.0-types" / "plan-hashmap-types"
EPOCH = dt.datetime(1970, 1, 1)
#: expected.json's labels -> the operators' uids (ExecNode id + transformation, from the compiled plan)
UIDS = {"dedup": "4_deduplicate", "keys": "8_group-aggregate", "nested": "12_group-aggregate",
        "maps": "16_group-aggregate", "values": "20_group-aggregate", "semi": "26_join", "anti": "30_join",
        "session": "34_window-aggregate", "tumble_offset": "39_global-window-aggregate"}


def _expected() -> dict:
    return json.loads((CASE / "expected.json").read_text("utf-8"))["operators"]


def _sp(plan: bool = True) -> Savepoint:
    return Savepoint.open(CASE / "savepoint", plan=CASE / "plan.json" if plan else None)


def plain(v, t: pa.DataType):
    """A value statekit read (Arrow type `t`) in expected.json's plain encoding."""
    if v is None:
        return None
    if pa.types.is_decimal(t):
        return format(v, "f")
    if pa.types.is_binary(t):
        return v.hex()
    if pa.types.is_date(t):
        return v.isoformat()
    if pa.types.is_timestamp(t):
        naive = v.astimezone(dt.timezone.utc).replace(tzinfo=None) if v.tzinfo else v
        return (naive - EPOCH) // dt.timedelta(microseconds=1)
    if pa.types.is_map(t):
        return [[plain(k, t.key_type), plain(x, t.item_type)] for k, x in (v.items() if isinstance(v, dict) else v)]
    if pa.types.is_list(t):
        return [plain(x, t.value_type) for x in v]
    if pa.types.is_struct(t):
        vals = list(v) if isinstance(v, (tuple, list)) else [v[f.name] for f in t]  # `get`: map keys as tuples
        return [plain(x, f.type) for x, f in zip(vals, t) if f.name != "row_kind"]
    if pa.types.is_floating(t):
        return float(v)
    return v


def _rows(table: pa.Table) -> list[dict]:
    """Rows with every column in the plain encoding (a struct column as a list of its fields, row_kind apart)."""
    out = []
    for r in table.to_pylist():
        row = {}
        for f in table.schema:
            row[f.name] = plain(r[f.name], f.type)
            if pa.types.is_struct(f.type) and r[f.name] is not None and "row_kind" in r[f.name]:
                row[f.name + ".row_kind"] = r[f.name]["row_kind"]
        out.append(row)
    return out


def _by_key(rows: list[dict]) -> dict[str, dict]:
    return {json.dumps(r["key"], ensure_ascii=False): r for r in rows}


def _same(got: dict, want: list, what: str) -> None:
    assert sorted(got) == sorted(json.dumps(w, ensure_ascii=False) for w in want), what


def test_every_value_and_key_type_reads_as_the_input_makes_it():
    exp, sp = _expected(), _sp()
    # keep-last deduplication: the whole latest row of every id, every type incl. nested ones, NULLs, non-ASCII
    rows = _by_key(_rows(sp.keyed_table(UIDS["dedup"])))
    _same(rows, [w["key"] for w in exp["dedup"]], "dedup keys")
    for w in exp["dedup"]:
        r = rows[json.dumps(w["key"], ensure_ascii=False)]
        assert r["deduplicate-state"] == w["row"] and r["deduplicate-state.row_kind"] == w["row_kind"], w["key"]
    # group aggregates keyed by every flat type, by ARRAY/nested ROW, by MAP/MULTISET
    for label in ("keys", "nested", "maps"):
        rows = _by_key(_rows(sp.keyed_table(UIDS[label])))
        _same(rows, [w["key"] for w in exp[label]], label)
        for w in exp[label]:
            assert rows[json.dumps(w["key"], ensure_ascii=False)]["accState"] == [w["count1"]], (label, w["key"])
        assert len(exp[label]) >= 6
    # typed values of the aggregates' accumulators, named by the plan
    acc = {json.dumps(list(r["key"].values()), ensure_ascii=False): r["accState"] for r in sp.keyed_table(UIDS["values"]).to_pylist()}
    t = sp.keyed_table(UIDS["values"]).schema.field("accState").type
    for w in exp["values"]:
        a = acc[json.dumps(w["key"], ensure_ascii=False)]
        assert a["count1"] == w["logical"]["cnt"]
        assert [a["delimiter"], a["listagg"]] == w["listagg"]
        assert [plain(a["sum"], t.field("sum").type), a["count"]] == w["avg"]
        assert a["first_value"]["firstValue"] == w["logical"]["s_first"]
        assert plain(a["last_value"]["lastValue"], pa.decimal128(10, 2)) == w["logical"]["dc_last"]
        assert a["concat_agg"].hex().endswith(w["concat_tail"])  # RAW (Kryo StringBuilder): bytes, not an error


def test_logical_views_hold_the_querys_results():
    exp, sp = _expected(), _sp()
    dedup = _rows(sp.logical_table(UIDS["dedup"]))
    assert sorted(json.dumps([*r.values()][:-1], ensure_ascii=False) for r in dedup) == \
        sorted(json.dumps(w["row"], ensure_ascii=False) for w in exp["dedup"])
    keys = _rows(sp.logical_table(UIDS["keys"]))
    assert sorted(json.dumps([*r.values()], ensure_ascii=False) for r in keys) == \
        sorted(json.dumps([*w["key"], w["count1"]], ensure_ascii=False) for w in exp["keys"])
    assert keys and list(keys[0])[-1] == "cnt"
    # COUNT, MIN/MAX of every type, FIRST_VALUE, LAST_VALUE, LISTAGG, AVG(DECIMAL); the UDAF: its RAW accumulator
    values = {json.dumps(r["g"], ensure_ascii=False): r for r in _rows(sp.logical_table(UIDS["values"]))}
    for w in exp["values"]:
        got = values[json.dumps(w["key"][0], ensure_ascii=False)]
        assert {k: got[k] for k in w["logical"]} == w["logical"], w["key"]
        assert got["vc_concat"].endswith(w["concat_tail"])
    # SESSION windows and TUMBLE with an offset: the windows still waiting for the watermark
    for label in ("session", "tumble_offset"):
        got = sorted(json.dumps([*r.values()], ensure_ascii=False) for r in _rows(sp.logical_table(UIDS[label])))
        assert got == sorted(json.dumps([*w["key"], w["window_start"] * 1000, w["window_end"] * 1000, w["cnt"],
                                         w["total"]], ensure_ascii=False) for w in exp[label]), label
        assert got
    # semi and anti joins: left rows with their count (repeated) and right-row matches, right rows by count
    for label in ("semi", "anti"):
        assert sp.operator_kind(UIDS[label]) == f"{label} join"  # named by the plan's join type
        table = sp.logical_table(UIDS[label])
        left, right = table.column_names[1], table.column_names[2]
        got = {json.dumps(r[table.column_names[0]]): r for r in table.to_pylist()}
        for w in exp[label]:
            r = got.get(json.dumps(w["key"][0]))
            want_left = sorted(json.dumps([i, s, a]) for i, s, n, a in (w["left"] or []) for _ in range(n)) or None
            want_right = sorted(json.dumps([k]) for k, n in (w["right"] or []) for _ in range(n)) or None
            assert r is not None, (label, w["key"])
            have_left = sorted(json.dumps(list(x.values())) for x in r[left]) if r[left] else None
            have_right = sorted(json.dumps(list(x.values())) for x in r[right]) if r[right] else None
            assert (have_left, have_right) == (want_left, want_right), (label, w["key"])


def test_every_key_reads_alone_and_check_finds_no_damage():
    sp = _sp(plan=False)
    for uid in UIDS.values():
        table = sp.keyed_table(uid)
        assert table.num_rows
        for r in table.to_pylist():
            ns = r.get("namespace")
            got = sp.get(uid, r["key"], namespace=ns) if ns is not None else sp.get(uid, r["key"])
            states = [f for f in table.schema if f.name not in ("key", "namespace") and r[f.name] is not None]
            assert got is not None and [plain(got.get(f.name), f.type) for f in states] == \
                [plain(r[f.name], f.type) for f in states], (uid, r["key"])
    report = check(CASE / "savepoint", plan=CASE / "plan.json")
    assert report.ok and not report.unsupported and report.rows_checked >= 50, report


def test_duckdb_reads_the_same_rows_as_the_local_reader():
    import statekit
    from statekit.query import database_names

    sp = _sp()
    names = database_names(sp)
    for uid in UIDS.values():
        for table in ("keyed", "logical"):
            local = sp.keyed_table(uid) if table == "keyed" else sp.logical_table(uid)
            db = names[sp.operator(uid).uid_hash]
            got = statekit.sql(CASE / "savepoint", f'SELECT * FROM "{db}".{table}', plan=CASE / "plan.json")
            assert sorted(map(repr, _norm(_rows(got)))) == sorted(map(repr, _norm(_rows(local)))), (uid, table)


def _norm(rows: list[dict]) -> list[dict]:
    """Rows comparable across engines: Decimal text kept, floats and ints as they are; nothing engine-specific left."""
    return [{k: v for k, v in r.items()} for r in rows]


#: through Spark in `make test`: every value type (dedup rows), every flat key type, nested keys, every aggregate's
#: logical column; every table of every operator in `make test-extended`
SPARK_CORE = [("dedup", "keyed"), ("keys", "keyed"), ("nested", "keyed"), ("values", "logical")]
SPARK_ALL = [(label, kind) for label in UIDS for kind in ("keyed", "logical")]


@pytest.mark.spark
def test_spark_reads_every_type_as_the_local_reader(spark):
    _spark_same_as_local(spark, SPARK_CORE)


@pytest.mark.spark
@pytest.mark.extended
def test_spark_reads_every_table_of_every_operator_as_the_local_reader(spark):
    _spark_same_as_local(spark, [t for t in SPARK_ALL if t not in SPARK_CORE])


def _spark_same_as_local(spark, tables: list[tuple[str, str]]) -> None:
    from statekit.spark import SavepointReader

    def spark_plain(v):
        """A Spark value as the local plain encoding (Spark: naive UTC datetimes, maps as dicts, bytearrays)."""
        if isinstance(v, dict):
            return sorted(([spark_plain(k), spark_plain(x)] for k, x in v.items()), key=repr)
        if isinstance(v, (list, tuple)):
            return [spark_plain(x) for x in v]
        if isinstance(v, (bytes, bytearray)):
            return bytes(v).hex()
        if isinstance(v, decimal.Decimal):
            return format(v, "f")
        if isinstance(v, dt.datetime):
            return ((v.astimezone(dt.timezone.utc).replace(tzinfo=None) if v.tzinfo else v) - EPOCH) \
                // dt.timedelta(microseconds=1)
        if isinstance(v, dt.date):
            return v.isoformat()
        return v

    def local_plain(v):  # plain() output with maps (lists of pairs) sorted as Spark's dicts come
        if isinstance(v, list):
            items = [local_plain(x) for x in v]
            if items and all(isinstance(x, list) and len(x) == 2 for x in items):
                return sorted(items, key=repr)
            return items
        return v

    sp = _sp()
    reader = SavepointReader.read(spark, str(CASE / "savepoint"), plan=CASE / "plan.json")
    for label, kind in tables:
        uid = UIDS[label]
        local = sp.keyed_table(uid) if kind == "keyed" else sp.logical_table(uid)
        df = reader.read_keyed_state(uid) if kind == "keyed" else reader.read_logical_table(uid)
        want = sorted(repr({k: local_plain(v) for k, v in r.items()}) for r in _struct_lists(local))
        got = sorted(repr({k: local_plain(spark_plain(v)) for k, v in r.asDict().items()}) for r in df.collect())
        assert got == want and want, (uid, kind)


def _struct_lists(table: pa.Table) -> list[dict]:
    """Local rows in the plain encoding, structs as lists of all their fields (row_kind included, as Spark has it)."""
    out = []
    for r in table.to_pylist():
        out.append({f.name: _keep_kind(r[f.name], f.type) for f in table.schema})
    return out


def _keep_kind(v, t: pa.DataType):
    if v is None:
        return None
    if pa.types.is_struct(t):
        return [_keep_kind(v[f.name], f.type) for f in t]
    if pa.types.is_map(t):
        return [[_keep_kind(k, t.key_type), _keep_kind(x, t.item_type)] for k, x in v]
    if pa.types.is_list(t):
        return [_keep_kind(x, t.value_type) for x in v]
    return plain(v, t)
