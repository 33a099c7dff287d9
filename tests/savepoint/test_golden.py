"""The golden savepoint `tests/golden/v1/` pins format version 1.

The directory was written once by `tests/golden/make_golden.py` and committed; this test reads the
committed copy and compares it with the hard-coded content below. It is never regenerated to make
this test pass. If this test fails, the reader (or writer) changed the format: changing the format
means a new format version with its own golden savepoint and a migration from v1, never silent
drift — statekit must keep reading every v1 savepoint already written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import KeyGroupRange
from statekit.savepoint import Savepoint, check
from statekit.types import to_ddl

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "v1"

COUNTER, WINDOW, SOURCE, RULES = "counter", "session-window", "kafka-source", "broadcast-rules"
W1, W2 = {"start": 0, "end": 60_000}, {"start": 60_000, "end": 120_000}

COUNTER_ROWS = [  # in file order: ascending key group
    {"key_group": 29, "key": 42, "count": 42, "history": None, "tags": None, "total": None, "avg": None},
    {"key_group": 54, "key": 1 << 40, "count": 0, "history": None, "tags": None, "total": -5,
     "avg": {"sum": 0, "count": 0}},
    {"key_group": 86, "key": 1, "count": 10, "history": ["a", "b"], "tags": [("x", 1.5)], "total": 100,
     "avg": {"sum": 30, "count": 3}},
    {"key_group": 94, "key": -1, "count": None, "history": [], "tags": [], "total": None, "avg": None},
    {"key_group": 108, "key": -(2**63), "count": -(2**63), "history": ["😀", ""], "tags": [("é", -0.5), ("", 0.0)],
     "total": 2**63 - 1, "avg": None},
    {"key_group": 108, "key": 2**63 - 1, "count": 2**63 - 1, "history": ["z"], "tags": [("k", None)], "total": 0,
     "avg": {"sum": -7, "count": 1}},
]

WINDOW_ROWS = [
    {"key_group": 54, "key": "😀", "namespace": W1, "clicks": None, "pages": ["/😀"]},
    {"key_group": 116, "key": "alice", "namespace": W1, "clicks": {"sum": 3, "count": 2}, "pages": ["/", "/cart"]},
    {"key_group": 116, "key": "alice", "namespace": W2, "clicks": {"sum": 1, "count": 1}, "pages": []},
]

TIMERS = [
    {"key_group": 54, "key": "😀", "namespace": W1, "timestamp": 59_999, "domain": "processing"},
    {"key_group": 116, "key": "alice", "namespace": W1, "timestamp": 59_999, "domain": "event"},
    {"key_group": 116, "key": "alice", "namespace": W2, "timestamp": 119_999, "domain": "event"},
]

#: (uid, uid hash, name, parallelism, key type, namespace type, keyed states, operator states, files)
OPERATORS = [
    (COUNTER, "0da08f51eaa85fc298e176a139b3649a", "Counter", 2, "bigint", None,
     [("count", "value", "bigint"), ("history", "list", "array<string>"), ("tags", "map", "map<string,double>"),
      ("total", "reducing", "bigint"), ("avg", "aggregating", "struct<sum:bigint,count:bigint>")],
     [],
     [("keyed/part-00000-kg00029-00054.parquet", "keyed", None, 29, 54, 2),
      ("keyed/part-00001-kg00086-00094.parquet", "keyed", None, 86, 94, 2),
      ("keyed/part-00002-kg00108-00108.parquet", "keyed", None, 108, 108, 2)]),
    (WINDOW, "df059214fc00cf4fe02bd207cb58368b", "session-window", 1, "string", "struct<start:bigint,end:bigint>",
     [("clicks", "aggregating", "struct<sum:bigint,count:bigint>"), ("pages", "list", "array<string>")],
     [],
     [("keyed/part-00000-kg00054-00054.parquet", "keyed", None, 54, 54, 1),
      ("keyed/part-00001-kg00116-00116.parquet", "keyed", None, 116, 116, 2),
      ("timers/part-00000.parquet", "timers", None, 54, 116, 3)]),
    (SOURCE, "61252f73469d3ffba207c548d29a0267", "kafka-source", 2, None, None, [],
     [("offsets", "split", "bigint", None), ("partitions", "union", "string", None)],
     [("operator/offsets/part-00000.parquet", "operator", "offsets", None, None, 3),
      ("operator/partitions/part-00000.parquet", "operator", "partitions", None, None, 3)]),
    (RULES, "b5f92c79147b82045ed3f8c86abbfd2d", "broadcast-rules", 2, None, None, [],
     [("thresholds", "broadcast", "double", "string")],
     [("broadcast/thresholds/part-00000.parquet", "broadcast", "thresholds", None, None, 3)]),
]


@pytest.fixture(scope="module")
def sp() -> Savepoint:
    return Savepoint.open(GOLDEN)


def test_manifest_header():
    raw = json.loads((GOLDEN / "_metadata.json").read_text(encoding="utf-8"))
    assert {k: raw[k] for k in ("format", "format_version", "features", "checkpoint_id", "kind", "created_at",
                                "job_name")} == {
        "format": "statekit-savepoint", "format_version": 1, "features": [], "checkpoint_id": 17,
        "kind": "savepoint", "created_at": "2026-01-01T00:00:00.000Z", "job_name": "golden-v1"}
    assert list(raw) == ["format", "format_version", "features", "checkpoint_id", "kind", "created_at", "job_name",
                         "operators"]
    assert list(raw["operators"][0]) == ["uid", "uid_hash", "name", "parallelism", "max_parallelism", "key_type",
                                         "namespace_type", "keyed_format", "keyed_states", "operator_states", "files"]
    assert list(raw["operators"][0]["files"][0]) == ["path", "table", "key_group_start", "key_group_end", "rows",
                                                     "bytes", "checksum"]
    assert raw["operators"][0]["files"][0]["checksum"].startswith("crc32:")


def test_operators(sp):
    assert sp.checkpoint_id == 17 and sp.kind == "savepoint" and sp.job_name == "golden-v1"
    got = []
    for op in sp.operators:
        assert op.identifier == OperatorIdentifier.for_uid(op.uid)
        assert op.max_parallelism == 128 and not op.is_native
        prefix = f"op-{op.uid_hash}/"
        assert all(f.path.startswith(prefix) for f in op.files)
        got.append((op.uid, op.uid_hash, op.name, op.parallelism, op.key_type, op.namespace_type,
                    [(s.name, s.kind, s.type) for s in op.keyed_states],
                    [(s.name, s.redistribution, s.type, s.key_type) for s in op.operator_states],
                    [(f.path[len(prefix):], f.table, f.state, f.key_group_start, f.key_group_end, f.rows)
                     for f in op.files]))
    assert got == OPERATORS


def test_keyed_state(sp):
    assert sp.keyed_table(COUNTER, with_key_group=True).to_pylist() == COUNTER_ROWS
    assert sp.keyed_table(COUNTER).column_names == ["key", "count", "history", "tags", "total", "avg"]
    assert sp.keyed_table(COUNTER, key_groups=KeyGroupRange(86, 100)).column("key").to_pylist() == [1, -1]
    for row in COUNTER_ROWS:  # get() gives what the handles hold: map state as a dict
        expected = {k: v for k, v in row.items() if k not in ("key", "key_group")}
        assert sp.get(COUNTER, row["key"]) == {**expected, "tags": None if row["tags"] is None else dict(row["tags"])}
    assert sp.get(COUNTER, 0) is None


def test_window_state_and_timers(sp):
    assert sp.keyed_table(WINDOW, with_key_group=True).to_pylist() == WINDOW_ROWS
    assert sp.get(WINDOW, "alice", namespace=W2) == {"clicks": {"sum": 1, "count": 1}, "pages": []}
    assert sp.get(WINDOW, "😀", namespace=(0, 60_000)) == {"clicks": None, "pages": ["/😀"]}
    assert sp.timers(WINDOW).to_pylist() == TIMERS


def test_operator_state(sp):
    assert sp.list_state(SOURCE, "offsets").to_pylist() == [
        {"subtask": 0, "idx": 0, "value": 100}, {"subtask": 0, "idx": 1, "value": 101},
        {"subtask": 1, "idx": 0, "value": 205}]
    assert sp.operator_state_lists(SOURCE, "offsets")[1] == [[100, 101], [205]]
    assert sp.union_state(SOURCE, "partitions").to_pylist() == [
        {"idx": 0, "value": "p0"}, {"idx": 1, "value": "p1"}, {"idx": 2, "value": "p2"}]
    assert sp.broadcast_state(RULES, "thresholds").to_pylist() == [
        {"key": "eu", "value": 0.5}, {"key": "us", "value": 1.25}, {"key": "😀", "value": None}]


def test_files_are_plain_parquet_with_the_documented_columns():
    """What Spark, DuckDB or pandas see without statekit (DESIGN.md §3)."""
    expected = {
        "0da08f51eaa85fc298e176a139b3649a/keyed": pa.schema([
            ("key_group", pa.int32()), ("key", pa.int64()), ("count", pa.int64()), ("history", pa.list_(pa.string())),
            ("tags", pa.map_(pa.string(), pa.float64())), ("total", pa.int64()),
            ("avg", pa.struct([("sum", pa.int64()), ("count", pa.int64())]))]),
        "df059214fc00cf4fe02bd207cb58368b/keyed": pa.schema([
            ("key_group", pa.int32()), ("key", pa.string()),
            ("namespace", pa.struct([("start", pa.int64()), ("end", pa.int64())])),
            ("clicks", pa.struct([("sum", pa.int64()), ("count", pa.int64())])), ("pages", pa.list_(pa.string()))]),
        "df059214fc00cf4fe02bd207cb58368b/timers": pa.schema([
            ("key_group", pa.int32()), ("key", pa.string()),
            ("namespace", pa.struct([("start", pa.int64()), ("end", pa.int64())])),
            ("timestamp", pa.int64()), ("domain", pa.string())]),
        "61252f73469d3ffba207c548d29a0267/operator": pa.schema([
            ("subtask", pa.int32()), ("idx", pa.int64()), ("value", pa.int64())]),
        "b5f92c79147b82045ed3f8c86abbfd2d/broadcast": pa.schema([("key", pa.string()), ("value", pa.float64())]),
    }
    for where, schema in expected.items():
        op, table = where.split("/")
        files = sorted((GOLDEN / f"op-{op}" / table).rglob("*.parquet"))
        assert files, where
        got = pq.read_schema(files[0])
        assert [(f.name, to_ddl(f.type)) for f in got] == [(f.name, to_ddl(f.type)) for f in schema], where


def test_check_is_ok(unchanged):
    with unchanged(GOLDEN):
        report = check(GOLDEN)
        sp = Savepoint.open(GOLDEN)
        for op in sp.operators:
            if op.key_type:
                sp.keyed_table(op.identifier)
                sp.timers(op.identifier)
    assert report.ok, str(report)
    assert report.files_checked == 9 and report.rows_checked == 6 + 3 + 3 + 3 + 3 + 3
