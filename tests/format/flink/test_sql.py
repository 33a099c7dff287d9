"""Real Flink 2.3.0 SQL jobs' savepoints (tests/fixtures/flink/sql/2.3.0): every operator, key, key group and state read as Flink wrote it."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from statekit.errors import CorruptSavepointError, StatekitError, UnsupportedFormatError
from statekit.format.flink.binary import DataInput
from statekit.format.flink.javaser import read_object
from statekit.format.flink.logical import from_java
from statekit.format.flink.sql import key_groups_of_rows
from statekit.savepoint import Savepoint
from statekit.savepoint.check import check

SQL = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql" / "2.3.0"
CASES = sorted(p.name for p in SQL.iterdir() if p.is_dir())
KINDS = {  # expected.json's operator keys -> the SQL operator kind statekit recognizes
    "group_agg": "group aggregate", "window_agg": "window TVF aggregate",
    "group_window_agg": "legacy group window aggregate", "dedup_keep_last_rowtime": "deduplication keep-last",
    "dedup_keep_first_proctime": "deduplication keep-first (proctime)",
    "dedup_keep_first_rowtime": "deduplication keep-first (rowtime)", "join": "regular join",
}
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?$")


def _expected(case: str) -> dict:
    return json.loads((SQL / case / "expected.json").read_text("utf-8"))


def _keyed_ops(case: str) -> dict[str, dict]:
    return {k: v for k, v in _expected(case)["operators"].items() if v["kind"] == "keyed"}


def _from_json(v: Any) -> Any:
    """expected.json's value notation as Python values: ISO timestamps (Z = TIMESTAMP_LTZ) as datetimes."""
    if isinstance(v, str) and _ISO.match(v):
        t = dt.datetime.fromisoformat(v.rstrip("Z"))
        return t.replace(tzinfo=dt.timezone.utc) if v.endswith("Z") else t
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _from_json(x) for k, x in v.items()}
    return v


def _plain(v: Any) -> Any:
    """statekit's values in expected.json's notation: rows as field lists, RAW bytes as hex, decimals as text."""
    if isinstance(v, dict) and set(v) == {"last_access", "value"}:  # a TTL-wrapped SQL value
        assert v["last_access"] > 1_700_000_000_000  # processing time of the job's run, in millis
        return {"ttl_value": _plain(v["value"])}
    if isinstance(v, dict) and "row_kind" in v:  # expected.json's notation: +I rows as field lists
        fields = [_plain(x) for k, x in v.items() if k != "row_kind"]
        return fields if v["row_kind"] == "+I" else {"row_kind": v["row_kind"], "fields": fields}
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, bytes):
        return {"raw": v.hex()}
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc)
    return v


def _entries(m: Any) -> list:
    if isinstance(m, dict):  # `get` gives a map as a dict: row keys as tuples, their RowKind last
        m = [(k[:-1] if isinstance(k, tuple) and k[-1] == "+I" else k, v) for k, v in m.items()]
    return sorted(({"key": _plain(k), "value": _plain(v)} for k, v in (m.items() if isinstance(m, dict) else m)),
                  key=repr)


def _actual_states(sp: Savepoint, op: str, rows: list[dict], timers: list[dict]) -> dict[str, Any]:
    """One key's states in expected.json's shape (namespaced states as lists of {namespace, value})."""
    out: dict[str, Any] = {}
    namespaced = sp.operator(op).namespace_type is not None
    for s in sp.operator(op).keyed_states:
        vals = [(r.get("namespace"), r[s.name]) for r in rows if r[s.name] is not None]
        if not vals:
            continue
        if namespaced:
            out[s.name] = sorted(({"namespace": ns, "value": _plain(v)} for ns, v in vals), key=repr)
        elif s.kind == "map":
            out[s.name] = _entries(vals[0][1])
        else:
            out[s.name] = _plain(vals[0][1])
    for t in timers:
        name = f"_timer_state/{t['domain']}_{'window' if namespaced else 'user'}-timers"
        entry = {"namespace": t["namespace"], "timestamp": t["timestamp"]} if namespaced else {"timestamp": t["timestamp"]}
        out.setdefault(name, []).append(entry)
    return {k: sorted(v, key=repr) if k.startswith("_timer_state/") else v for k, v in out.items()}


def _expected_states(states: dict) -> dict:
    out = {}
    for name, v in states.items():
        v = _from_json(v)
        if isinstance(v, list) and v and isinstance(v[0], dict) and ("key" in v[0] or "namespace" in v[0]
                                                                      or "timestamp" in v[0]):
            v = sorted(v, key=repr)
        out[name] = v
    return out


@pytest.mark.parametrize("case", CASES)
def test_every_sql_operator_reads_as_flink_wrote_it(case):
    sp = Savepoint.open(SQL / case / "savepoint")
    exp = _expected(case)
    assert len(sp.operators) == len(exp["operators"])
    for label, want in _keyed_ops(case).items():
        meta = sp.operator(want["name"])
        assert (meta.uid, meta.uid_hash, meta.parallelism, meta.max_parallelism) == (
            want["uid"], want["operator_id"], want["parallelism"], want["max_parallelism"])
        if want["uid"]:
            assert sp.operator(want["uid"]) is meta
        assert sp.operator(want["operator_id"]) is meta
        assert sp.job_kind(want["name"]) == "sql" and sp.operator_kind(want["name"]) == KINDS[label]
        assert sp.unsupported(want["name"]) == []
        assert meta.key_type == "struct<" + ",".join(
            f"k{i}:{'string' if t == 'STRING' else 'bigint'}" for i, t in enumerate(want["key"]["types"])) + ">"
        table = sp.keyed_table(meta.identifier, with_key_group=True).to_pylist()
        timers = sp.timers(meta.identifier).to_pylist()
        keys = {}
        for r in table:
            keys.setdefault(tuple(r["key"].values()), []).append(r)
        assert sorted(keys, key=repr) == sorted((tuple(k["key"]) for k in want["keys"]), key=repr), label
        for k in want["keys"]:
            rows = keys[tuple(k["key"])]
            assert {r["key_group"] for r in rows} == {k["key_group"]}, (label, k["key"])
            mine = [t for t in timers if tuple(t["key"].values()) == tuple(k["key"])]
            assert _actual_states(sp, meta.identifier, rows, mine) == _expected_states(k["states"]), (label, k["key"])
        for name, st in want.get("operator_states", {}).items():
            info, per = sp.operator_state_lists(meta.identifier, name)
            assert info.redistribution == st["mode"].lower() and per == st["per_subtask"]
    # stateless operators: present, by name, without keyed state
    for label, want in exp["operators"].items():
        if want["kind"] == "stateless":
            meta = next(m for m in sp.operators if m.uid_hash == want["operator_id"])
            assert meta.key_type is None and meta.name == want["name"]


@pytest.mark.parametrize("case", CASES)
def test_one_key_reads_only_its_key_group_by_the_binary_row_hash(case):
    sp = Savepoint.open(SQL / case / "savepoint")
    for label, want in _keyed_ops(case).items():
        meta = sp.operator(want["name"])
        for k in want["keys"]:
            key = k["key"][0] if len(k["key"]) == 1 else tuple(k["key"])
            if meta.namespace_type is not None:  # one window of the key: its namespace given
                first = k["states"]["window-aggs"][0]
                ns = first["namespace"]
                got = sp.get(want["name"], key, namespace=(ns["start"], ns["end"]) if isinstance(ns, dict) else ns)
                assert got is not None and _plain(got["window-aggs"]) == first["value"], (label, key)
                continue
            got = sp.get(want["name"], key)
            assert got is not None, (label, key)
            if meta.namespace_type is None:
                assert _actual_states(sp, want["name"], [{**got, "namespace": None}], []) == {
                    n: v for n, v in _expected_states(k["states"]).items() if not n.startswith("_timer_state/")}
        missing = "nobody" if "string" in meta.key_type else 987654321
        assert sp.get(want["name"], missing if "k1" not in meta.key_type else (missing, 1)) is None


def test_key_groups_are_the_binary_row_hash_not_the_datastream_one():
    # SQL-FORMAT.md section 2: BIGINT 42 -> 69 (a DataStream Long key: 29), 1000 -> 112, 'alice' -> 45
    from statekit.format.flink.logical import LogicalType
    from statekit.format.flink.rowdata import encode_row
    from statekit.keygroups import assign_to_key_group

    big, text = LogicalType("BIGINT"), LogicalType("VARCHAR", length=0x7FFFFFFF)
    rows = [encode_row([42], [big]), encode_row([1000], [big]), encode_row(["alice"], [text]),
            encode_row(["bartholomew", 2], [text, big])]
    assert key_groups_of_rows(rows, 128) == [69, 112, 45, 48]
    assert assign_to_key_group(42, 128, "bigint") == 29


@pytest.mark.parametrize("case", CASES)
def test_check_finds_no_damage_in_real_sql_savepoints(case):
    report = check(SQL / case / "savepoint")
    assert report.ok, str(report)
    assert report.rows_checked > 0


def test_operators_by_uid_hash_or_stored_name_and_inspect_lists_them():
    sp = Savepoint.open(SQL / "default-hashmap-canonical" / "savepoint")
    assert sp.operator("GroupAggregate[51]").uid is None
    assert sp.operator("ce628a0c9ddf8d38e127d0b466258be2").name == "GroupAggregate[51]"
    with pytest.raises(StatekitError, match="GroupAggregate\\[51\\]"):
        sp.operator("GroupAggregate[52]")


# -- bad input -------------------------------------------------------------------------------------------
def _writable(tmp_path: Path, case: str) -> Path:
    dst = tmp_path / case
    shutil.copytree(SQL / case / "savepoint", dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    return dst


def _file_with(root: Path, needle: bytes) -> Path:
    return next(p for p in sorted(root.iterdir()) if needle in p.read_bytes())


def test_a_truncated_java_stream_inside_a_snapshot_is_a_typed_error_naming_the_fault():
    data = (_file_with(SQL / "default-hashmap-canonical" / "savepoint", b"RowDataSerializerSnapshot")).read_bytes()
    at = data.index(b"\xac\xed\x00\x05")
    end = data.index(b"\x00\x14\x57\xfd", at)  # the nested-serializers magic after the types
    with pytest.raises(CorruptSavepointError, match="truncated") as e:
        read_object(DataInput(data[:end - 10], "a snapshot", pos=at), "the type of field 0")
    assert "take a new savepoint" in str(e.value)
    ok = read_object(DataInput(data, "a snapshot", pos=at), "the type of field 0")
    assert str(from_java(ok, "here")) == "STRING"


def test_an_unknown_logical_type_is_unsupported_never_damage(tmp_path):
    root = _writable(tmp_path, "default-hashmap-canonical")
    # the group aggregate's key type, renamed to a class Flink does not have (same length: the stream stays valid)
    changed = 0
    for p in root.iterdir():
        b = p.read_bytes()
        if b"logical.VarCharType" in b:
            p.write_bytes(b.replace(b"logical.VarCharType", b"logical.VarXharType"))
            changed += 1
    assert changed
    sp = Savepoint.open(root)
    report = check(root)
    assert report.ok, str(report)  # nothing is called damaged...
    assert report.unsupported, "...and what is not decoded is reported as unsupported"
    agg = sp.operator("GroupAggregate[51]")
    assert agg.key_type == "binary" and sp.unsupported("GroupAggregate[51]")
    with pytest.raises(UnsupportedFormatError, match="key row has a type statekit does not decode"):
        sp.get("GroupAggregate[51]", "alice")
    assert sp.get("Deduplicate[74]", -42) == {"deduplicate-state": True}  # a BIGINT-keyed operator still reads
    data = _file_with(root, b"VarXharType").read_bytes()
    at = data.index(b"\xac\xed\x00\x05")
    with pytest.raises(UnsupportedFormatError, match="VarXharType"):
        from_java(read_object(DataInput(data, "a snapshot", pos=at), "a type"), "here")


def test_duckdb_sees_the_same_sql_tables_by_uid_or_stored_name():
    from statekit.query import sql

    plan = sql(SQL / "plan-hashmap-canonical" / "savepoint",
               'SELECT key.k0 AS user_name, "accState".f0 AS cnt, "accState".f1 AS total '
               'FROM "6_group_aggregate".keyed ORDER BY user_name NULLS LAST').to_pylist()
    want = {tuple(k["key"]): k["states"]["accState"] for k in _keyed_ops("plan-hashmap-canonical")["group_agg"]["keys"]}
    assert [(r["user_name"], r["cnt"], r["total"]) for r in plan] == sorted(
        ((k[0], v[0], v[1]) for k, v in want.items()), key=lambda t: (t[0] is None, t[0] or ""))
    joined = sql(SQL / "default-hashmap-canonical" / "savepoint",
                 "SELECT count(*) AS n FROM join_88.keyed").to_pylist()  # Join[88]: no uid
    assert joined == [{"n": len(_keyed_ops("default-hashmap-canonical")["join"]["keys"])}]


def test_convert_to_statekit_keeps_the_sql_tables(tmp_path):
    from statekit.savepoint.convert import convert_to_statekit

    src = Savepoint.open(SQL / "default-hashmap-canonical" / "savepoint")
    convert_to_statekit(SQL / "default-hashmap-canonical" / "savepoint", tmp_path / "out")
    out = Savepoint.open(tmp_path / "out")
    assert check(tmp_path / "out").ok
    for label, want in _keyed_ops("default-hashmap-canonical").items():
        # key groups are statekit's own there (its runtime hashes a struct key as a Tuple), so they are left out
        a = src.keyed_table(want["name"])
        b = out.keyed_table(want["name"])
        assert b.schema == a.schema and sorted(b.to_pylist(), key=repr) == sorted(a.to_pylist(), key=repr), label
        ta, tb = (sp.timers(want["name"]).drop_columns(["key_group"]).to_pylist() for sp in (src, out))
        assert sorted(tb, key=repr) == sorted(ta, key=repr), label


def test_sql_state_written_back_to_flink_reads_back_the_same(tmp_path):
    from statekit.savepoint.flink_out import write_flink

    out = Savepoint.open(write_flink(SQL / "default-hashmap-canonical" / "savepoint", tmp_path / "out"))
    src = Savepoint.open(SQL / "default-hashmap-canonical" / "savepoint")
    for want in _keyed_ops("default-hashmap-canonical").values():
        a, b = (sp.keyed_table(want["name"], with_key_group=True).to_pylist() for sp in (src, out))
        assert sorted(b, key=repr) == sorted(a, key=repr)


def test_real_damage_in_a_sql_savepoint_is_still_called_damage(tmp_path):
    root = _writable(tmp_path, "default-hashmap-canonical")
    agg = _file_with(root, b"distinctAcc_0_null_state")  # a keyed stream of GroupAggregate[51]
    data = agg.read_bytes()
    agg.write_bytes(data[: len(data) - 40])  # the file cut short
    report = check(root)
    assert not report.ok, "a truncated file is damage"
    assert any(agg.name in p.path + p.message and "truncated" in p.message
               for p in report.problems), str(report)
    assert not report.unsupported


def test_a_row_length_pointing_past_its_entry_is_damage_not_a_crash(tmp_path):
    root = _writable(tmp_path, "default-hashmap-canonical")
    # the keep-last row of ('bartholomew', 2): "i32 64" row length before RowKind 02 (SQL-FORMAT.md 4.1)
    row = bytes.fromhex("0000004002080000")
    dedup = _file_with(root, row)
    data = bytearray(dedup.read_bytes())
    at = data.index(row)
    data[at : at + 4] = (0x30).to_bytes(4, "big")  # shorter than the row's own fields and variable part
    dedup.write_bytes(bytes(data))
    sp = Savepoint.open(root)
    with pytest.raises(CorruptSavepointError):
        sp.keyed_table("Deduplicate[70]")
    assert not check(root).ok


def test_an_operator_whose_layout_is_unsupported_is_listed_and_hides_nothing_else(tmp_path):
    root = _writable(tmp_path, "default-hashmap-canonical")
    old = b"VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot"
    for p in root.iterdir():  # a namespace serializer statekit does not know (same length: the streams stay valid)
        b = p.read_bytes()
        if old in b and b"Join" not in b:
            p.write_bytes(b.replace(old, old[:-1] + b"X"))
    sp = Savepoint.open(root)
    report = check(root)
    assert report.ok, str(report)
    gone = [m.name for m in sp.operators if m.key_type is not None and sp.unsupported(m.identifier)]
    assert gone and all("namespace serializer" in sp.unsupported(n)[0] for n in gone)
    with pytest.raises(UnsupportedFormatError, match="namespace serializer"):
        sp.keyed_table(gone[0])
    readable = [m.name for m in sp.operators if m.key_type is not None and m.name not in gone]
    assert readable and all(sp.keyed_table(n).num_rows for n in readable)


def test_a_global_aggregates_empty_key_row_parses_and_shows_as_its_bytes():
    import struct as st

    from statekit.format.flink.serializers import NESTED_MAGIC, ROWDATA_SNAPSHOT, read_versioned
    from statekit.format.flink.sql import EMPTY_ROW

    cls = ROWDATA_SNAPSHOT.encode()
    # RowDataSerializerSnapshot v3 of an arity-0 row (EmptyRowDataKeySelector): no types, no field serializers
    raw = st.pack(">H", len(cls)) + cls + st.pack(">iiiii", 3, 0, NESTED_MAGIC, 1, 0)
    t = read_versioned(DataInput(raw, "a snapshot"), "the key serializer")
    assert t.form == "empty_row" and t.ddl() == "binary"
    assert EMPTY_ROW == bytes(8)  # header only: RowKind +I, no null bits, no fields


def test_diff_of_one_sql_job_on_two_backends_finds_them_equal_and_a_ttl_run_different():
    from statekit.savepoint.diff import diff

    same = diff(SQL / "default-hashmap-canonical" / "savepoint", SQL / "default-rocksdb-canonical" / "savepoint")
    assert same.same, same
    ttl = diff(SQL / "default-hashmap-canonical" / "savepoint", SQL / "default-hashmap-canonical-ttl" / "savepoint")
    assert not ttl.same and "accState" in ttl.operator("ce628a0c9ddf8d38e127d0b466258be2").states_changed  # TTL wraps values
