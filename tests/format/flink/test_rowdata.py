"""BinaryRowData: the columnar decoder, the per-record decoder and the key encoder agree, type by type (a drift guard)."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pytest

from statekit.errors import InvalidArgumentError
from statekit.format.flink.logical import LogicalType
from statekit.format.flink.rowdata import RowFault, decode_row, decode_rows, encode_row

UTC = dt.timezone.utc
CASES = [  # (type, values): every type `encode_row` writes, NULLs, inline and long strings, negative numbers
    (LogicalType("BOOLEAN"), [True, False, None]),
    (LogicalType("TINYINT"), [-128, 127, None]),
    (LogicalType("SMALLINT"), [-32768, 7, None]),
    (LogicalType("INTEGER"), [-(2**31), 2**31 - 1, None]),
    (LogicalType("BIGINT"), [-(2**63), 42, None]),
    (LogicalType("FLOAT"), [1.5, -0.25, None]),
    (LogicalType("DOUBLE"), [3.25, -1e300, None]),
    (LogicalType("DATE"), [dt.date(2024, 1, 1), dt.date(1969, 12, 31), None]),
    (LogicalType("VARCHAR", length=0x7FFFFFFF), ["", "jürgen", "日本語ユーザー", None]),
    (LogicalType("CHAR", length=3), ["abc", "a", None]),
    (LogicalType("VARBINARY", length=0x7FFFFFFF), [b"", b"\x00\x01", bytes(range(20)), None]),
    (LogicalType("DECIMAL", precision=10, scale=2), [decimal.Decimal("75.03"), decimal.Decimal("-0.99"), None]),
    (LogicalType("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=3),
     [dt.datetime(2024, 1, 1, 0, 0, 47, 600000, tzinfo=UTC), dt.datetime(1960, 1, 1, tzinfo=UTC), None]),
    (LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6),
     [dt.datetime(2024, 1, 1, 0, 0, 6, 6000), dt.datetime(2024, 1, 1, 0, 0, 13, 13013), None]),
]


def _column(rows: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    buf = np.frombuffer(b"".join(rows) + bytes(16), np.uint8)
    lengths = np.array([len(r) for r in rows], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return buf, starts, lengths


@pytest.mark.parametrize("t,values", CASES, ids=[str(t) for t, _ in CASES])
def test_columnar_and_per_record_decoders_give_the_encoded_values(t, values):
    other = LogicalType("VARCHAR", length=0x7FFFFFFF)  # a second field after it: offsets must be right
    rows = [encode_row([v, "bartholomew"], [t, other]) for v in values]
    assert all(len(r) % 8 == 0 for r in rows)
    buf, starts, lengths = _column(rows)
    got = decode_rows(buf, starts, lengths, [t, other], ["a", "b"], row_kind=True).to_pylist()
    per = [decode_row(r, [t, other], ["a", "b"], row_kind=True) for r in rows]
    want = [{"a": v, "b": "bartholomew", "row_kind": "+I"} for v in values]
    if t.root == "FLOAT":
        want = [{**w, "a": None if w["a"] is None else float(np.float32(w["a"]))} for w in want]
    assert got == want and per == want


def test_a_row_whose_offset_points_past_its_end_is_a_fault_not_garbage():
    s = LogicalType("VARCHAR", length=0x7FFFFFFF)
    row = bytearray(encode_row(["bartholomew"], [s]))
    row[12] = 0x7F  # the offset word of the slot
    buf, starts, lengths = _column([bytes(row)])
    with pytest.raises(RowFault):
        decode_rows(buf, starts, lengths, [s], ["a"])
    with pytest.raises(RowFault):
        decode_row(bytes(row), [s], ["a"])


def test_a_key_value_of_the_wrong_type_names_the_type():
    with pytest.raises(InvalidArgumentError, match="BIGINT"):
        encode_row(["42"], [LogicalType("BIGINT")])
