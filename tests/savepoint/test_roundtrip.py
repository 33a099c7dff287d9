"""Round trips through the savepoint format: write with `SavepointBuilder`, `Savepoint.open`, read back.

Every state kind and every listed type, with nulls, empty lists and maps, unicode (astral) keys,
negative and 64-bit keys, struct keys, window namespaces, timers and operator state; the layout
promises of DESIGN.md §3 (key groups, ascending contiguous files split by key-group range, point
lookups that read only the file holding the key); and hypothesis round trips of random tables.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit import serde
from statekit.errors import CorruptSavepointError, UntrustedPicklePayloadError
from statekit.format.values import python_converter
from statekit.identifiers import OperatorIdentifier
from statekit.keygroups import KeyGroupRange, assign_key_groups, assign_to_key_group
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    BroadcastStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
    operator_list_info,
)
from statekit.state.descriptors import OperatorStateInfo
from statekit.types import PICKLED, parse_ddl

WINDOW = "struct<start:bigint,end:bigint>"


class SumCount(AggregateFunction):
    """Average with a struct accumulator, as in Flink's docs."""

    def create_accumulator(self):
        return {"sum": 0, "count": 0}

    def add(self, value, acc):
        return {"sum": acc["sum"] + value, "count": acc["count"] + 1}

    def get_result(self, acc):
        return acc["sum"] / acc["count"]


def write_one(path: Path, table: pa.Table, *, key_type: str, states, max_parallelism: int = 128,
              parallelism: int = 2, namespace_type: str | None = None, rows_per_file: int = 1_000_000,
              uid: str = "op") -> Savepoint:
    with SavepointBuilder(path, checkpoint_id=3, job_name="rt", rows_per_file=rows_per_file) as b:
        op = b.add_operator(uid, parallelism=parallelism, max_parallelism=max_parallelism, key_type=key_type,
                            keyed_states=list(states), namespace_type=namespace_type)
        op.write_keyed(table)
    return Savepoint.open(path)


def by_key(rows: list[dict]) -> dict:
    return {_hashable(r["key"]): r for r in rows}


def _hashable(v):
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    return v


# --- every value type, with nulls and empties ---------------------------------------------------------

#: DDL type -> values to store (None = state not set for that key in that column).
TYPED_VALUES: dict[str, list] = {
    "bigint": [0, -1, 2**63 - 1, -(2**63), None, 1 << 40],
    "int": [0, -(2**31), 2**31 - 1, None, -7, 42],
    "string": ["", "héllo", "😀 astral 𝄞", None, "\x00nul", "日本語"],
    "boolean": [True, False, None, True, False, True],
    "double": [0.0, -1.5, 1e308, None, float("inf"), -0.0],
    "binary": [b"", b"\x00\xff", None, b"abc", bytes(range(256)), b"x"],
    "array<bigint>": [[], [1, 2, 3], None, [-(2**63)], [0], [5, 5]],
    "array<string>": [[], ["a", None, "😀"], None, [""], ["x"], ["y", "z"]],
    "map<string,double>": [[], [("a", 1.0), ("b", None)], None, [("😀", -2.5)], [("", 0.0)], [("k", 1.0)]],
    "map<bigint,array<string>>": [[], [(1, ["x"]), (-2, [])], None, [(2**62, None)], [(0, ["a", "b"])], []],
    "struct<count:bigint,sum:bigint>": [{"count": 1, "sum": 2}, {"count": None, "sum": 0}, None,
                                        {"count": 0, "sum": -5}, {"count": 3, "sum": 3}, {"count": 9, "sum": 9}],
    "array<struct<a:int,b:map<string,array<double>>>>": [
        [], [{"a": 1, "b": [("x", [1.0, None])]}], None, [{"a": None, "b": None}],
        [{"a": 2, "b": []}, {"a": 3, "b": [("y", [])]}], [],
    ],
}


@pytest.mark.parametrize("ddl", list(TYPED_VALUES))
def test_value_state_round_trips_every_type(tmp_path, ddl):
    values = TYPED_VALUES[ddl]
    keys = list(range(-3, len(values) - 3))
    arrow_type = parse_ddl(ddl)
    table = pa.table({"key": pa.array(keys, pa.int64()), "v": pa.array(values, arrow_type),
                      "marker": pa.array(range(len(keys)), pa.int64())})
    sp = write_one(tmp_path / "sp", table, key_type="bigint",
                   states=[ValueStateDescriptor("v", ddl), ValueStateDescriptor("marker", "bigint")])
    assert sp.operator("op").keyed_states[0].type == ddl
    back = sp.keyed_table("op")
    assert back.schema.field("v").type == arrow_type
    assert by_key(back.to_pylist()) == by_key(table.to_pylist())
    as_handle = python_converter(arrow_type) or (lambda x: x)  # get() gives maps as dicts, at any depth
    for k, v in zip(keys, values):
        assert sp.get("op", k) == {"v": as_handle(v), "marker": k + 3}
    assert check(sp.path).ok


def test_every_keyed_state_kind_round_trips(tmp_path):
    states = [
        ValueStateDescriptor("last", "string"),
        ListStateDescriptor("history", "bigint"),
        MapStateDescriptor("counts", "string", "bigint"),
        ReducingStateDescriptor("total", lambda a, b: a + b, "bigint"),
        AggregatingStateDescriptor("avg", SumCount(), "struct<sum:bigint,count:bigint>"),
    ]
    rows = [
        {"key": 1, "last": "a", "history": [1, 2], "counts": [("x", 1)], "total": 3, "avg": {"sum": 3, "count": 2}},
        {"key": -1, "last": None, "history": [], "counts": [], "total": None, "avg": None},
        {"key": 2**63 - 1, "last": "😀", "history": None, "counts": None, "total": -(2**63), "avg": {"sum": 0, "count": 0}},
        {"key": -(2**63), "last": "", "history": [0], "counts": [("", 0), ("é", -1)], "total": 0, "avg": None},
    ]
    schema = pa.schema([("key", pa.int64())] + [(s.name, s.column_type) for s in states])
    sp = write_one(tmp_path / "sp", pa.Table.from_pylist(rows, schema=schema), key_type="bigint", states=states)
    meta = sp.operator("op")
    assert [(s.name, s.kind, s.type) for s in meta.keyed_states] == [
        ("last", "value", "string"), ("history", "list", "array<bigint>"), ("counts", "map", "map<string,bigint>"),
        ("total", "reducing", "bigint"), ("avg", "aggregating", "struct<sum:bigint,count:bigint>"),
    ]
    assert by_key(sp.keyed_table("op").to_pylist()) == by_key(rows)
    for r in rows:  # get() gives what the handles hold: map state as a dict
        expected = {k: v for k, v in r.items() if k != "key"}
        assert sp.get("op", r["key"]) == {**expected, "counts": None if r["counts"] is None else dict(r["counts"])}
    assert sp.get("op", 12345) is None


def test_rows_with_every_state_null_are_not_stored(tmp_path):
    table = pa.table({"key": [1, 2, 3], "v": pa.array([None, 5, None], pa.int64()),
                      "l": pa.array([None, None, []], pa.list_(pa.int64()))})
    sp = write_one(tmp_path / "sp", table, key_type="bigint",
                   states=[ValueStateDescriptor("v", "bigint"), ListStateDescriptor("l", "bigint")])
    assert sorted(sp.keyed_table("op").column("key").to_pylist()) == [2, 3]  # an empty list is state that is set
    assert sp.get("op", 1) is None and sp.get("op", 3) == {"v": None, "l": []}


# --- keys -----------------------------------------------------------------------------------------------

KEYS: dict[str, list] = {
    "bigint": [0, 1, -1, 2**63 - 1, -(2**63), 1 << 40, -(1 << 40)],
    "int": [0, 1, -1, 2**31 - 1, -(2**31), 65536],
    "string": ["", "a", "A", "héllo", "😀", "a😀b", "𝄞", "日本語", "\x00", "x" * 1000],
    "boolean": [True, False],
    "double": [0.0, -1.5, 2.25, 1e300, -1e-300],
    "struct<user:bigint,region:string>": [{"user": 1, "region": "eu"}, {"user": 1, "region": "us"},
                                          {"user": -(2**63), "region": "😀"}, {"user": 0, "region": ""}],
}


@pytest.mark.parametrize("key_type", list(KEYS))
def test_keys_of_every_key_type(tmp_path, key_type):
    keys = KEYS[key_type]
    table = pa.table({"key": pa.array(keys, parse_ddl(key_type)), "v": list(range(len(keys)))})
    sp = write_one(tmp_path / "sp", table, key_type=key_type, states=[ValueStateDescriptor("v", "bigint")],
                   max_parallelism=32768)
    back = sp.keyed_table("op", with_key_group=True)
    assert back.column_names == ["key_group", "key", "v"]
    expected_kg = assign_key_groups(back.column("key"), 32768, key_type)
    assert back.column("key_group").to_pylist() == list(expected_kg)
    assert {_hashable(k) for k in back.column("key").to_pylist()} == {_hashable(k) for k in keys}
    for i, k in enumerate(keys):
        assert sp.get("op", k) == {"v": i}, k
        assert assign_to_key_group(k, 32768, key_type) in {
            int(g) for g in expected_kg}  # scalar and vector hashes agree
    if key_type.startswith("struct"):
        assert sp.get("op", (1, "us")) == {"v": 1}  # a tuple in field order also addresses a struct key
    assert check(sp.path).ok


def test_key_groups_match_flink_vectors(tmp_path):
    # DESIGN.md §2 parity vectors, through the writer: the key_group column is Flink's.
    table = pa.table({"key": pa.array(range(10), pa.int32()), "v": list(range(10))})
    sp = write_one(tmp_path / "sp", table, key_type="int", states=[ValueStateDescriptor("v", "bigint")])
    got = {r["key"]: r["key_group"] for r in sp.keyed_table("op", with_key_group=True).to_pylist()}
    assert [got[k] for k in range(10)] == [94, 86, 127, 113, 7, 126, 18, 113, 15, 51]


# --- windows, timers, operator state ------------------------------------------------------------------


def test_window_operator_namespace_and_timers(tmp_path):
    w1, w2 = {"start": 0, "end": 60_000}, {"start": 60_000, "end": 120_000}
    with SavepointBuilder(tmp_path / "sp", checkpoint_id=9) as b:
        op = b.add_operator("win", parallelism=1, max_parallelism=128, key_type="string", namespace_type=WINDOW,
                            keyed_states=[AggregatingStateDescriptor("acc", SumCount(), "struct<sum:bigint,count:bigint>"),
                                          ListStateDescriptor("buf", "double")])
        op.write_keyed(pa.table({
            "key": ["😀", "😀", "b"],
            "namespace": [w1, w2, w1],
            "acc": [{"sum": 1, "count": 1}, None, {"sum": 5, "count": 2}],
            "buf": [[1.0], [], None],
        }))
        op.write_timers(pa.table({"key": ["😀", "b", "😀"], "namespace": [w1, w1, w2],
                                  "timestamp": [59_999, 59_999, 119_999], "domain": ["event", "event", "processing"]}))
    sp = Savepoint.open(tmp_path / "sp")
    assert sp.operator("win").namespace_type == WINDOW
    table = sp.keyed_table("win")
    assert table.column_names == ["key", "namespace", "acc", "buf"]
    assert sorted(map(str, table.to_pylist())) == sorted(map(str, [
        {"key": "😀", "namespace": w1, "acc": {"sum": 1, "count": 1}, "buf": [1.0]},
        {"key": "😀", "namespace": w2, "acc": None, "buf": []},
        {"key": "b", "namespace": w1, "acc": {"sum": 5, "count": 2}, "buf": None},
    ]))
    assert sp.get("win", "😀", namespace=w2) == {"acc": None, "buf": []}
    assert sp.get("win", "😀", namespace=(0, 60_000)) == {"acc": {"sum": 1, "count": 1}, "buf": [1.0]}
    assert sp.get("win", "😀") is None  # every row has a namespace
    assert sp.get("win", "b", namespace=w2) is None
    timers = sp.timers("win")
    assert timers.column_names == ["key_group", "key", "namespace", "timestamp", "domain"]
    kg = timers.column("key_group").to_pylist()
    assert kg == sorted(kg)
    assert kg == list(assign_key_groups(timers.column("key"), 128, "string"))
    assert sorted((r["key"], r["timestamp"], r["domain"]) for r in timers.to_pylist()) == [
        ("b", 59_999, "event"), ("😀", 59_999, "event"), ("😀", 119_999, "processing")]
    assert check(sp.path).ok


def test_operator_list_union_and_broadcast_state(tmp_path):
    with SavepointBuilder(tmp_path / "sp", checkpoint_id=1) as b:
        src = b.add_operator("source", parallelism=3, max_parallelism=128)
        src.write_list_state(operator_list_info(ListStateDescriptor("offsets", "bigint"), "split"),
                             [[10, 11], [], [-(2**63)]])
        src.write_list_state(operator_list_info(ListStateDescriptor("seen", "string"), "union"),
                             [["😀"], ["b", "c"], []])
        src.write_list_state(OperatorStateInfo("empty", "split", "array<string>"), [[], [], []])
        rules = b.add_operator(OperatorIdentifier.for_uid_hash("0123456789abcdef0123456789abcdef"),
                               parallelism=2, max_parallelism=128)
        rules.write_broadcast_state(BroadcastStateDescriptor("limits", "string", "struct<lo:double,hi:double>").info(),
                                    {"eu": {"lo": 0.0, "hi": 1.5}, "😀": None, "": {"lo": None, "hi": 2.0}})
    sp = Savepoint.open(tmp_path / "sp")
    assert sp.list_state("source", "offsets").to_pylist() == [
        {"subtask": 0, "idx": 0, "value": 10}, {"subtask": 0, "idx": 1, "value": 11},
        {"subtask": 2, "idx": 0, "value": -(2**63)}]
    assert sp.union_state("source", "seen").to_pylist() == [
        {"idx": 0, "value": "😀"}, {"idx": 1, "value": "b"}, {"idx": 2, "value": "c"}]
    assert sp.list_state("source", "empty").num_rows == 0
    assert sp.list_state("source", "empty").schema.field("value").type == pa.list_(pa.string())
    assert sp.operator_state_lists("source", "offsets")[1] == [[10, 11], [], [-(2**63)]]
    rules_id = OperatorIdentifier.for_uid_hash("0123456789abcdef0123456789abcdef")
    assert sp.operator(rules_id).uid is None
    assert sorted(sp.broadcast_state(rules_id, "limits").to_pylist(), key=lambda r: r["key"]) == [
        {"key": "", "value": {"lo": None, "hi": 2.0}}, {"key": "eu", "value": {"lo": 0.0, "hi": 1.5}},
        {"key": "😀", "value": None}]
    assert [(s.name, s.redistribution) for s in sp.operator("source").operator_states] == [
        ("offsets", "split"), ("seen", "union"), ("empty", "split")]
    assert check(sp.path).ok


# --- pickled state (opt-in) ---------------------------------------------------------------------------


def test_pickled_state_needs_trust(tmp_path):
    states = [ValueStateDescriptor("obj", PICKLED), ListStateDescriptor("objs", PICKLED),
              MapStateDescriptor("by_name", "string", PICKLED)]
    table = pa.table({
        "key": [1, 2],
        "obj": pa.array([serde.dumps({"a": (1, 2)}), None], pa.binary()),
        "objs": pa.array([[serde.dumps(1), serde.dumps({3})], []], pa.list_(pa.binary())),
        "by_name": pa.array([[("x", serde.dumps([1]))], None], pa.map_(pa.string(), pa.binary())),
    })
    sp = write_one(tmp_path / "sp", table, key_type="bigint", states=states)
    assert "pickled" in sp.metadata["features"]
    assert all(s.pickled for s in sp.operator("op").keyed_states)
    # Raw bytes are always readable; unpickling needs trust.
    assert sp.keyed_table("op").column("obj").to_pylist()[0] == serde.dumps({"a": (1, 2)})
    with pytest.raises(UntrustedPicklePayloadError, match="trust_pickled"):
        sp.get("op", 1)
    trusted = Savepoint.open(tmp_path / "sp", trust_pickled=True)
    assert trusted.get("op", 1) == {"obj": {"a": (1, 2)}, "objs": [1, {3}], "by_name": {"x": [1]}}
    assert trusted.get("op", 2) == {"obj": None, "objs": [], "by_name": None}


# --- layout: key groups, files split by key-group range, point lookups ---------------------------------


def _layout_savepoint(path: Path, n: int = 3000, rows_per_file: int = 200) -> tuple[Savepoint, pa.Table]:
    rng = np.random.default_rng(5)
    keys = rng.permutation(n).astype(np.int64) * 2_654_435_761 - n
    table = pa.table({"key": keys, "v": np.arange(n, dtype=np.int64),
                      "s": pa.array([f"k{i}" if i % 3 else None for i in range(n)])})
    sp = write_one(path, table, key_type="bigint",
                   states=[ValueStateDescriptor("v", "bigint"), ValueStateDescriptor("s", "string")],
                   rows_per_file=rows_per_file)
    return sp, table


def test_files_are_split_by_ascending_contiguous_key_group_ranges(tmp_path):
    sp, table = _layout_savepoint(tmp_path / "sp")
    files = sp.keyed_files("op")
    assert len(files) > 5
    seen: set[int] = set()
    previous_end = -1
    for f in files:  # manifest order is file order
        assert previous_end < f.key_group_start <= f.key_group_end <= 127
        previous_end = f.key_group_end
        raw = pq.read_table(sp.path / f.path)  # what Spark or DuckDB would see
        assert raw.column_names == ["key_group", "key", "v", "s"] and raw.num_rows == f.rows
        kg = raw.column("key_group").to_numpy()
        assert np.all(np.diff(kg) >= 0), "rows grouped by ascending key group"
        assert kg.min() == f.key_group_start and kg.max() == f.key_group_end
        assert not seen & set(kg.tolist()), "a key group lies in one file only"
        seen |= set(kg.tolist())
        assert f.rows <= 200 or kg.min() == kg.max()  # a file only exceeds rows_per_file for one key group
    whole = sp.keyed_table("op", with_key_group=True)
    assert whole.num_rows == table.num_rows
    kg = whole.column("key_group").to_numpy()
    assert np.all(np.diff(kg) >= 0)
    assert np.array_equal(kg, assign_key_groups(whole.column("key"), 128, "bigint"))
    assert sorted(whole.column("key").to_pylist()) == sorted(table.column("key").to_pylist())
    sub = sp.keyed_table("op", with_key_group=True, key_groups=KeyGroupRange(10, 20))
    assert set(sub.column("key_group").to_pylist()) <= set(range(10, 21)) and sub.num_rows == int(
        np.count_nonzero((kg >= 10) & (kg <= 20)))
    assert check(sp.path).ok


def test_get_reads_only_the_file_of_the_key_group(tmp_path):
    sp, table = _layout_savepoint(tmp_path / "sp")
    files = sp.keyed_files("op")
    key = int(table.column("key")[1234].as_py())
    kg = assign_to_key_group(key, 128, "bigint")
    (mine,) = [f for f in files if f.covers(kg)]
    others = [f for f in files if f is not mine]
    assert others
    # Destroy every other file of the operator: truncate half, delete the rest.
    for i, f in enumerate(others):
        full = sp.path / f.path
        if i % 2:
            full.unlink()
        else:
            full.write_bytes(full.read_bytes()[:10])
    reopened = Savepoint.open(sp.path)
    assert reopened.get("op", key) == {"v": 1234, "s": "k1234"}
    with pytest.raises(CorruptSavepointError):
        reopened.keyed_table("op")  # a full read does meet the damage
    other_key = next(int(k) for k in table.column("key").to_pylist()
                     if not mine.covers(assign_to_key_group(int(k), 128, "bigint")))
    with pytest.raises(CorruptSavepointError):
        reopened.get("op", other_key)


def test_subtask_tables_written_out_of_order_still_ascend(tmp_path):
    keys = np.arange(2000, dtype=np.int64)
    kg = assign_key_groups(pa.array(keys), 128, "bigint")
    parts = [pa.table({"key": keys[(kg >= lo) & (kg <= hi)], "v": keys[(kg >= lo) & (kg <= hi)]})
             for lo, hi in ((86, 127), (0, 42), (43, 85))]  # subtasks 2, 0, 1 of parallelism 3
    with SavepointBuilder(tmp_path / "sp", rows_per_file=300) as b:
        op = b.add_operator("op", parallelism=3, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("v", "bigint")])
        for p in parts:
            op.write_keyed(p)
    sp = Savepoint.open(tmp_path / "sp")
    ranges = [(f.key_group_start, f.key_group_end) for f in sp.keyed_files("op")]
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), ranges
    got = sp.keyed_table("op", with_key_group=True).column("key_group").to_numpy()
    assert np.all(np.diff(got) >= 0) and len(got) == 2000
    # Interleaving inputs are merged into one ordered table.
    with SavepointBuilder(tmp_path / "sp2", rows_per_file=300) as b:
        op = b.add_operator("op", parallelism=2, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("v", "bigint")])
        op.write_keyed(pa.table({"key": keys[::2], "v": keys[::2]}))
        op.write_keyed(pa.table({"key": keys[1::2], "v": keys[1::2]}))
    sp2 = Savepoint.open(tmp_path / "sp2")
    got = sp2.keyed_table("op", with_key_group=True).column("key_group").to_numpy()
    assert np.all(np.diff(got) >= 0) and len(got) == 2000
    assert check(sp2.path).ok


def test_savepoint_is_relocatable_and_metadata_is_complete(tmp_path):
    sp, _ = _layout_savepoint(tmp_path / "sp", n=300, rows_per_file=100)
    os.rename(tmp_path / "sp", tmp_path / "moved")
    moved = Savepoint.open(tmp_path / "moved")
    assert moved.checkpoint_id == 3 and moved.kind == "savepoint" and moved.job_name == "rt"
    op = moved.operator("op")
    assert (op.uid, op.uid_hash, op.parallelism, op.max_parallelism, op.key_type) == (
        "op", OperatorIdentifier.for_uid("op").uid_hash, 2, 128, "bigint")
    assert op.total_bytes == sum((tmp_path / "moved" / f.path).stat().st_size for f in op.files)
    m = moved.metadata
    assert (m["format"], m["format_version"]) == ("statekit-savepoint", 1)
    assert moved.keyed_table("op").num_rows == 300
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging directory left behind"


# --- hypothesis ---------------------------------------------------------------------------------------

_str_keys = st.text(st.characters(codec="utf-8"), max_size=6)
_int_keys = st.integers(-(2**63), 2**63 - 1)
_values = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
_lists = st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=3))


@st.composite
def keyed_tables(draw):
    key_type = draw(st.sampled_from(["bigint", "string"]))
    keys = draw(st.lists(_int_keys if key_type == "bigint" else _str_keys, unique=True, max_size=60))
    rows = [{"key": k, "v": draw(_values), "l": draw(_lists)} for k in keys]
    return key_type, rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=keyed_tables(), max_parallelism=st.sampled_from([1, 2, 7, 128, 32768]),
       rows_per_file=st.integers(1, 25), parts=st.integers(1, 3))
def test_random_tables_round_trip(data, max_parallelism, rows_per_file, parts):
    key_type, rows = data
    schema = pa.schema([("key", parse_ddl(key_type)), ("v", pa.int64()), ("l", pa.list_(pa.string()))])
    expected = [r for r in rows if r["v"] is not None or r["l"] is not None]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "sp"
        with SavepointBuilder(path, rows_per_file=rows_per_file) as b:
            op = b.add_operator("op", parallelism=1, max_parallelism=max_parallelism, key_type=key_type,
                                keyed_states=[ValueStateDescriptor("v", "bigint"), ListStateDescriptor("l", "string")])
            for i in range(parts):  # as if written by several subtasks, in any order
                op.write_keyed(pa.Table.from_pylist(rows[i::parts], schema=schema))
        sp = Savepoint.open(path)
        back = sp.keyed_table("op", with_key_group=True)
        assert by_key(back.drop_columns(["key_group"]).to_pylist()) == by_key(expected)
        kg = back.column("key_group").to_numpy()
        assert np.all(np.diff(kg) >= 0)
        assert np.array_equal(kg, assign_key_groups(back.column("key"), max_parallelism, key_type))
        ranges = [(f.key_group_start, f.key_group_end) for f in sp.keyed_files("op")]
        assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))
        for r in expected[:5]:
            assert sp.get("op", r["key"]) == {"v": r["v"], "l": r["l"]}
        assert check(path).ok


def test_operator_state_names_that_look_alike_stay_apart(tmp_path):
    names = ["x", ".x", "..", ".", "X", "a/b", "a%2Fb", "😀", "\x1f600", "%", "state"]
    with SavepointBuilder(tmp_path / "sp") as b:
        op = b.add_operator("src", parallelism=1)
        for i, name in enumerate(names):
            op.write_list_state(OperatorStateInfo(name, "split", "bigint"), [[i]])
    sp = Savepoint.open(tmp_path / "sp")
    for i, name in enumerate(names):
        assert sp.list_state("src", name).column("value").to_pylist() == [i], name
    dirs = {Path(f.path).parent.name.casefold() for f in sp.operator("src").files}
    assert len(dirs) == len(names)
    assert all(p.resolve().is_relative_to((tmp_path / "sp").resolve()) for p in (tmp_path / "sp").rglob("*"))
    assert check(sp.path).ok


@settings(max_examples=200, deadline=None)
@given(kg=st.lists(st.integers(0, 40), max_size=200), rows_per_file=st.integers(1, 50))
def test_file_splits_cover_every_key_group_once_within_the_row_cap(kg, rows_per_file):
    from statekit.format.keyed import key_group_order, split_by_key_group

    kg = np.array(kg, dtype=np.int32)
    splits = split_by_key_group(kg, rows_per_file)
    order = key_group_order(kg)
    order = np.arange(len(kg)) if order is None else order
    counts = np.bincount(kg, minlength=41) if len(kg) else np.zeros(41, int)
    assert [s.row_start for s in splits] == ([0] + [s.row_end for s in splits[:-1]] if splits else [])
    assert (splits[-1].row_end if splits else 0) == len(kg)
    for s, nxt in zip(splits, splits[1:] + [None]):
        assert s.rows == int(counts[s.kg_start : s.kg_end + 1].sum())
        assert counts[s.kg_start] and counts[s.kg_end]
        assert s.rows <= rows_per_file or s.kg_start == s.kg_end  # only a single key group may exceed the cap
        if nxt is not None:
            assert s.kg_end < nxt.kg_start
            assert s.rows + counts[nxt.kg_start] > rows_per_file  # greedy: the next key group did not fit
        rows = order[s.row_start : s.row_end]  # what the writer gathers for this file
        assert set(kg[rows].tolist()) == set(np.flatnonzero(counts[s.kg_start : s.kg_end + 1]) + s.kg_start)
        assert np.all(np.diff(kg[rows]) >= 0)
        assert np.all(np.diff(rows[kg[rows] == kg[rows][0]]) > 0)  # stable within a key group


@settings(max_examples=100, deadline=None)
@given(
    lists=st.lists(st.one_of(st.none(), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)), max_size=40),
    offset=st.integers(0, 5),
    data=st.data(),
)
def test_take_rows_equals_arrow_take(lists, offset, data):
    from statekit.format.keyed import take_rows

    table = pa.table({
        "l": pa.array(lists, pa.list_(pa.int64())),
        "d": pa.array([None if x is None else [float(len(x))] for x in lists], pa.list_(pa.float64())),
        "n": pa.array([None if x is None else [None] for x in lists], pa.list_(pa.int64())),  # null elements
        "s": pa.array([None if x is None else [str(x)] for x in lists], pa.list_(pa.string())),
    }).slice(min(offset, len(lists)))
    rows = np.array(data.draw(st.lists(st.integers(0, max(table.num_rows - 1, 0)),
                                       max_size=60 if table.num_rows else 0)), dtype=np.int64)
    got, want = take_rows(table, rows), table.take(pa.array(rows, pa.int64()))
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
