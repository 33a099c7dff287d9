"""Nested SQL fields (ARRAY, MAP, MULTISET, ROW, and RAW inside a structured accumulator) written back: byte for byte
as real Flink 2.3.0 wrote them, the writer and the reader agreeing on every nested type, and `set` on rows that
hold them."""

from __future__ import annotations

import datetime as dt
import decimal
import re
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.errors import StateTypeError
from statekit.format.flink.logical import LogicalType
from statekit.format.flink.rowdata import decode_rows
from statekit.format.flink.sqlnested import NESTED
from statekit.format.flink.sqlwrite import encode_serialized, row_bytes
from statekit.savepoint import Savepoint
from statekit.savepoint.flink_out import carried_serializers
from statekit.savepoint.patch import SetValue, repair
from statekit.types import parse_ddl

SQL = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql"
TYPES = SQL / "2.3.0-types" / "plan-hashmap-types"  # dedup rows with ARRAY, ARRAY<ARRAY>, MAP, MULTISET, nested ROWs
LISTAGG = SQL / "2.3.0-extra" / "plan-hashmap-listagg"  # LISTAGG-with-retraction accumulators: ROWs of RAW views


def _value_states(case: Path):
    sp = Savepoint.open(case / "savepoint", plan=case / "plan.json")
    for m in sp.operators:
        if m.key_type is None:
            continue
        ser = carried_serializers(sp, m)
        table = sp.keyed_table(m.identifier)
        for s in m.keyed_states:
            if s.kind == "value":
                yield m.uid, table.column(s.name).combine_chunks(), ser.states[s.name].serializers["VALUE_SERIALIZER"]


@pytest.mark.parametrize("case", [TYPES, LISTAGG], ids=["types", "listagg"])
def test_every_stored_row_encodes_byte_for_byte_as_flink_wrote_it(case):
    """Each value row re-encoded is found in the savepoint's files as Flink wrote it. Only the sub-microsecond
    nanos of TIMESTAMP(p > 6) slots are masked (statekit reads microseconds, documented)."""
    blob = b"".join(p.read_bytes() for p in (case / "savepoint").iterdir())
    nested_rows = 0
    for uid, col, t in _value_states(case):
        col = col.filter(col.is_valid())
        enc = encode_serialized(col, t)
        hb = 8 * ((len(t.logical) + 63 + 8) // 64)
        masked = {4 + hb + 8 * i + j for i, f in enumerate(t.logical) if f.root.startswith("TIMESTAMP")
                  and (f.precision or 0) > 6 for j in range(4)}
        for i in range(len(enc)):
            b = enc.data[enc.offsets[i]: enc.offsets[i + 1]].tobytes()
            pattern = b"".join(b"." if k in masked else re.escape(b[k: k + 1]) for k in range(len(b)))
            assert re.search(pattern, blob, re.DOTALL), f"{uid} row {i}: {col[i]}"
        nested_rows += len(enc) if any(f.root in NESTED for f in t.logical) else 0
    assert nested_rows >= 2


T = {name: LogicalType(name) for name in ("INTEGER", "BIGINT", "BOOLEAN", "DOUBLE", "SMALLINT")}
STRING = LogicalType("VARCHAR", length=0x7FFFFFFF)
WIDE = LogicalType("DECIMAL", precision=30, scale=2)
TS9 = LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6)
RAW = LogicalType("RAW", raw_class="org.apache.flink.table.api.dataview.ListView", raw_serializer="X")
INNER = LogicalType("ROW", children=(STRING, WIDE, TS9), field_names=("s", "d", "t"))
#: one field per nested root and shape: NULL elements, NULL map values, nested-in-nested, 1/2/4/8-byte elements,
#: elements in the variable part (long strings, wide decimals, rows), RAW inside a structured ROW
NESTED_TYPES = [
    LogicalType("ARRAY", children=(T["BOOLEAN"],)),
    LogicalType("ARRAY", children=(T["SMALLINT"],)),
    LogicalType("ARRAY", children=(WIDE,)),
    LogicalType("ARRAY", children=(INNER,)),
    LogicalType("ARRAY", children=(LogicalType("ARRAY", children=(STRING,)),)),
    LogicalType("MAP", children=(T["INTEGER"], LogicalType("ARRAY", children=(STRING,)))),
    LogicalType("MULTISET", children=(STRING,)),
    LogicalType("ROW", children=(T["BIGINT"], RAW, LogicalType("MAP", children=(STRING, T["DOUBLE"]))),
                field_names=("n", "view", "m")),
]
VALUES = [
    [True, None, False],
    [1, None, -32768],
    [decimal.Decimal("-12345678901234567890123456.78"), None, decimal.Decimal("0.01")],
    [{"s": "a string longer than seven bytes", "d": decimal.Decimal("-1.00"), "t": dt.datetime(1969, 12, 31, 23, 59, 59, 999)},
     None, {"s": None, "d": None, "t": None}],
    [["ü", None, "x" * 20], [], None],
    [(1, ["a", None]), (-7, None), (3, [])],
    [("k", 2), ("a longer multiset key", 1)],
    {"n": 9, "view": b"\x00", "m": [("x", 1.5), ("y", None)]},
]


def test_every_nested_root_is_written_as_the_reader_reads_it():
    """Writer and reader agree on every nested type (a drift guard: a nested root added to the writer needs a case
    here)."""
    assert {t.root for t in NESTED_TYPES} == set(NESTED)
    names = [f"f{i}" for i in range(len(NESTED_TYPES))]
    ddl = "struct<" + ",".join(f"{n}:{t.ddl()}" for n, t in zip(names, NESTED_TYPES)) + ">"
    rows = [dict(zip(names, VALUES)), dict.fromkeys(names)]
    arr = pa.array(rows, parse_ddl(ddl))
    enc = row_bytes(arr, NESTED_TYPES)
    got = decode_rows(enc.data, enc.offsets[:-1], enc.lengths, NESTED_TYPES, names)
    assert got.to_pylist() == arr.to_pylist()


def test_a_nested_value_of_the_wrong_type_is_a_typed_error_naming_the_field():
    t = [LogicalType("ARRAY", children=(T["INTEGER"],))]
    arr = pa.array([{"a": ["x"]}], pa.struct([("a", pa.list_(pa.string()))]))
    with pytest.raises(StateTypeError, match=r"field 0.*ARRAY<INT>"):
        row_bytes(arr, t)


def test_physical_set_of_nested_columns_of_a_deduplicated_row(tmp_path):
    plan = TYPES / "plan.json"
    sp = Savepoint.open(TYPES / "savepoint", plan=plan)
    row = sp.keyed_table("4_deduplicate").to_pylist()[2]
    new = {"arr": [7, None, 9], "arr2": [[None, "neu und länger"], []], "mp": [("ключ", None)],
           "r": {"x": None, "y": "y", "z": [None], "w": {"a": decimal.Decimal("-0.001"), "t": None}}}
    report = repair(TYPES / "savepoint", tmp_path / "out", [SetValue("4_deduplicate", row["key"]["id"],
                                                                      "deduplicate-state", new)], plan=plan)
    assert report.written, str(report)
    out = Savepoint.open(tmp_path / "out", plan=plan)
    got = {r["key"]["id"]: r["deduplicate-state"] for r in out.keyed_table("4_deduplicate").to_pylist()}
    want = {r["key"]["id"]: r["deduplicate-state"] for r in sp.keyed_table("4_deduplicate").to_pylist()}
    want[row["key"]["id"]] = {**want[row["key"]["id"]], **new}
    assert got == want
