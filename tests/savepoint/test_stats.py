"""`stats` figures against an independent count: every corpus case (Flink 2.3.0) and its statekit conversion decoded
whole, entries added up per key group, state and key; bytes cross-checked between key-group offsets and entry lengths."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from statekit.errors import ParallelismError
from statekit.keygroups import key_group_range
from statekit.savepoint import Savepoint
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.stats import OperatorStats, savepoint_stats
from statekit.savepoint.stats_html import render_html
from statekit_cli.app import app

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "2.3.0"
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "savepoint").is_dir())
TIMERS = "_timer_state/"


def _key(k) -> str:
    return json.dumps(k, sort_keys=True, default=repr)


def _state_entries(kind: str, value) -> int:
    """How many stored entries one key's state is: a value one, a non-empty list one, a map one per entry."""
    if value is None:
        return 0
    if kind == "map":
        return len(value)
    if kind == "list":
        return 1 if len(value) else 0
    return 1


def _independent(sp: Savepoint, op) -> tuple[np.ndarray, Counter, Counter, int]:
    """(entries per key group, entries per state, entries per key, timers) from the decoded tables."""
    m = sp.operator(op)
    per_kg = np.zeros(m.max_parallelism, np.int64)
    per_state: Counter = Counter()
    per_key: Counter = Counter()
    rows = sp.keyed_table(op, with_key_group=True).to_pylist()
    for r in rows:
        for s in m.keyed_states:
            n = _state_entries(s.kind, r[s.name])
            per_kg[r["key_group"]] += n
            per_state[s.name] += n
            per_key[_key(r["key"])] += n
    timers = sp.timers(op).to_pylist()
    for t in timers:
        per_kg[t["key_group"]] += 1
        per_key[_key(t["key"])] += 1
    return per_kg, per_state, per_key, len(timers)


def _check_operator_state(sp: Savepoint, o: OperatorStats) -> None:
    m = sp.operator(o.uid_hash)
    for info in m.operator_states:
        got = next(s for s in o.states if s.name == info.name)
        if info.redistribution == "broadcast":
            assert got.entries % max(sp.broadcast_state(m.identifier, info.name).num_rows, 1) == 0
        else:
            lists = sp.operator_state_lists(m.identifier, info.name)[1]
            assert got.entries == sum(len(x) for x in lists), info.name


@pytest.mark.parametrize("case", CASES)
def test_flink_figures_equal_an_independent_count(case):
    sp = Savepoint.open(CORPUS / case / "savepoint")
    stats = savepoint_stats(sp, top=3)
    for o in stats.operators:
        _check_operator_state(sp, o)
        m = sp.operator(o.uid_hash)
        if m.key_type is None:
            assert o.key_group_bytes is None
            continue
        per_kg, per_state, per_key, timers = _independent(sp, m.identifier)
        assert np.array_equal(o.key_group_entries, per_kg), case
        keyed = {s.name: s.entries for s in o.states if s.kind == "keyed"}
        assert keyed == {n: c for n, c in per_state.items() if c}
        assert sum(s.entries for s in o.states if s.kind == "timers") == timers
        op_entries = sum(s.entries for s in o.states if s.kind in ("split", "union", "broadcast"))
        assert sum(s.entries for s in o.subtasks) == int(o.key_group_entries.sum()) + op_entries
        assert all(h.bytes >= b for h, b in zip(o.subtasks, o.subtask_bytes()))  # a handle: proxy + key groups
        assert ((o.key_group_bytes > 0) == (per_kg > 0)).all()  # bytes exactly where entries are
        for k in o.top_keys:
            assert k.entries == per_key[_key(k.key)], (case, k)
        if "snappy" not in case and "native" not in case:
            # a key group's stored span is its state runs' ids (2 bytes each), their entries, and the end mark
            runs = np.zeros(m.max_parallelism, np.int64)
            rows = sp.keyed_table(m.identifier, with_key_group=True)
            kgs = rows.column("key_group").to_numpy()
            for s in m.keyed_states:
                col = rows.column(s.name).to_pylist()
                present = {int(g) for g, v in zip(kgs, col) if _state_entries(s.kind, v)}
                runs[list(present)] += 1
            for dom in {t["domain"] for t in sp.timers(m.identifier).to_pylist()}:
                tk = {t["key_group"] for t in sp.timers(m.identifier).to_pylist() if t["domain"] == dom}
                runs[list(tk)] += 1
            entry_bytes = sum(s.bytes for s in o.states if s.kind in ("keyed", "timers"))
            assert int(o.key_group_bytes.sum()) == entry_bytes + 2 * int(runs.sum()) + 2 * int((per_kg > 0).sum())
        if o.top_keys:  # the largest key holds at least as many bytes as any other listed
            assert [k.bytes for k in o.top_keys] == sorted((k.bytes for k in o.top_keys), reverse=True)


@pytest.mark.parametrize("case", ["long-hashmap-canonical", "string-rocksdb-native", "pojo-hashmap-canonical",
                                  "tuple2-hashmap-canonical"])
def test_statekit_figures_equal_an_independent_count(case, tmp_path):
    sp = Savepoint.open(convert_to_statekit(CORPUS / case / "savepoint", tmp_path / "sk"))
    stats = savepoint_stats(sp, top=3)
    for o in stats.operators:
        _check_operator_state(sp, o)
        m = sp.operator(o.uid_hash)
        assert o.bytes == m.total_bytes
        if m.key_type is None:
            continue
        rows = sp.keyed_table(m.identifier, with_key_group=True)
        timers = sp.timers(m.identifier)
        want = np.bincount(rows.column("key_group").to_numpy(), minlength=m.max_parallelism)
        if timers.num_rows:
            want += np.bincount(timers.column("key_group").to_numpy(), minlength=m.max_parallelism)
        assert np.array_equal(o.key_group_entries, want)
        files = m.files_of("keyed") + m.files_of("timers")
        assert int(o.key_group_bytes.sum()) == sum(f.bytes for f in files)
        for s in m.keyed_states:
            got = next(x for x in o.states if x.name == s.name)
            assert got.entries == rows.num_rows - rows.column(s.name).null_count
        assert sum(x.bytes for x in o.subtasks) == m.total_bytes - sum(
            f.bytes for f in m.files if f.table == "broadcast")
        sizes = {}
        schema = rows.schema
        for r in rows.to_pylist():  # bytes of a row as Arrow holds them, counted the slow way
            sizes[_key(r["key"])] = sum(_py_bytes(r[n], schema.field(n).type)
                                        for n in ["key", *(s.name for s in m.keyed_states)])
        assert [k.bytes for k in o.top_keys] == sorted(sizes.values(), reverse=True)[:3]


def _py_bytes(v, t: pa.DataType) -> int:
    if v is None:
        return 0
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return len(v.encode())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return len(v)
    if pa.types.is_map(t):
        return sum(_py_bytes(k, t.key_type) + _py_bytes(x, t.item_type) for k, x in v)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return sum(_py_bytes(e, t.value_type) for e in v)
    if pa.types.is_struct(t):
        return sum(_py_bytes(v[f.name], f.type) for f in t)
    return t.bit_width // 8


def test_skew_at_a_proposed_parallelism_and_the_refusal():
    stats = savepoint_stats(CORPUS / "long-hashmap-canonical" / "savepoint", top=0)
    o = stats.operator("counter")
    for p in (1, 2, 3, 7, 128):
        per = o.subtask_bytes(p)
        assert len(per) == p and sum(per) == int(o.key_group_bytes.sum())
        for i, b in enumerate(per):
            r = key_group_range(128, p, i)
            assert b == int(o.key_group_bytes[r.start : r.end + 1].sum())
    with pytest.raises(ParallelismError):
        o.subtask_bytes(129)
    assert sum(o.subtask_bytes()) == int(o.key_group_bytes.sum())


def test_cli_json_html_and_inspect_sizes(tmp_path):
    src = CORPUS / "string-hashmap-canonical" / "savepoint"
    r = CliRunner().invoke(app, ["stats", str(src), "--json", "-p", "4", "--top", "2", "--html", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    counter = next(o for o in doc["operators"] if o["uid"] == "counter")
    assert len(counter["subtask_bytes"]["4"]) == 4 and len(counter["top_keys"]) == 2
    assert len(counter["key_groups"]["bytes"]) == 128
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") >= 5 and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page
    r = CliRunner().invoke(app, ["inspect", str(src)])
    line = next(x for x in r.output.splitlines() if x.startswith("Counter"))
    assert " 0 B" not in line and "KiB" in line  # real sizes for Flink savepoints
    r = CliRunner().invoke(app, ["stats", str(src), "-p", "129"])
    assert r.exit_code == 2 and "129" in r.output
    assert render_html(savepoint_stats(src, top=0)).startswith("<!DOCTYPE html>")
