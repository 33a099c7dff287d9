"""Snapshots and restores on every backend: table layout, round trips, rescaling, isolation, pickles."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from statekit.errors import StateTypeError, UntrustedPickleError
from statekit.keygroups import key_group_range
from statekit.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statekit.types import PICKLED

from .test_handles import AVG_TYPE, Avg

COUNT = ValueStateDescriptor("count", "bigint", default=0)
SEEN = ListStateDescriptor("seen", "string")
ATTRS = MapStateDescriptor("attrs", "string", "double")
TOTAL = ReducingStateDescriptor("total", lambda a, b: a + b, "bigint")
AVG = AggregatingStateDescriptor("avg", Avg(), AVG_TYPE)
ALL = (COUNT, SEEN, ATTRS, TOTAL, AVG)


def fill(backend, at, keys):
    handles = [backend.get_state(d) for d in ALL]
    count, seen, attrs, total, avg = handles
    for i, k in enumerate(keys):
        at(backend, k)
        count.update(i + 1)
        if i % 2 == 0:
            seen.add_all([f"{k}-a", f"{k}-b"])
        if i % 3 == 0:
            attrs.put("x", float(i))
        if i % 4 != 3:
            total.add(i)
            avg.add(i)
    return handles


def canonical(table: pa.Table) -> list[dict]:
    """Rows as dicts sorted by key group then key, map cells as sorted pairs (order-free comparison)."""
    rows = table.to_pylist()
    for r in rows:
        for k, v in r.items():
            if isinstance(v, list) and v and isinstance(v[0], tuple):
                r[k] = sorted(v)
    return sorted(rows, key=lambda r: (r["key_group"], repr(r["key"]), repr(r.get("namespace"))))


KEYS = [f"user-{i}" for i in range(60)] + ["", "ü", "日本"]


def test_table_layout(backend, at):
    fill(backend, at, KEYS)
    snap = backend.snapshot(1)
    assert [i.name for i in snap.infos] == ["count", "seen", "attrs", "total", "avg"]
    t = snap.table()
    assert t.column_names == ["key_group", "key", "count", "seen", "attrs", "total", "avg"]
    assert t.schema.field("key_group").type == pa.int32()
    assert t.schema.field("seen").type == pa.list_(pa.string())
    assert t.schema.field("attrs").type == pa.map_(pa.string(), pa.float64())
    assert t.schema.field("avg").type == pa.struct([("count", pa.int64()), ("sum", pa.int64())])
    assert t.num_rows == len(KEYS)
    kg = t.column("key_group").to_pylist()
    assert kg == sorted(kg)
    row = {r["key"]: r for r in t.to_pylist()}["user-3"]
    assert row["count"] == 4 and row["seen"] is None and row["attrs"] == [("x", 3.0)]
    assert row["total"] is None and row["avg"] is None  # never set: null


def test_round_trip(make_backend, at):
    a = make_backend()
    fill(a, at, KEYS)
    table = a.snapshot(1).table()
    b = make_backend()
    b.restore([table], a.state_infos())
    count, seen, attrs, total, avg = (b.get_state(d) for d in ALL)
    at(b, "user-6")
    assert count.value() == 7 and seen.get() == ["user-6-a", "user-6-b"] and attrs.items() == [("x", 6.0)]
    assert total.get() == 6 and avg.get() == 6.0
    avg.add(8)
    assert avg.get() == 7.0
    at(b, "never-seen")
    assert count.value() == 0 and seen.get() == [] and attrs.is_empty() and total.get() is None
    c = make_backend()
    c.restore([table], a.state_infos())
    assert canonical(c.snapshot(3).table()) == canonical(table)


def test_restore_before_and_after_registration(make_backend, at):
    a = make_backend()
    fill(a, at, KEYS)
    table = a.snapshot(1).table()
    early = make_backend()
    early.get_state(COUNT)
    early.restore([table], a.state_infos())  # count registered, others pending
    assert canonical(early.snapshot(2).table()) == canonical(table)  # pending states are carried along
    with pytest.raises(StateTypeError, match="seen"):
        early.get_state(ListStateDescriptor("seen", "bigint"))
    seen = early.get_state(SEEN)
    at(early, "user-0")
    assert seen.get() == ["user-0-a", "user-0-b"]


@pytest.mark.parametrize("parallelism", [2, 3])
def test_restore_splits_key_groups(make_backend, at, parallelism):
    a = make_backend()
    fill(a, at, KEYS)
    table = a.snapshot(1).table()
    parts = []
    for i in range(parallelism):
        r = key_group_range(128, parallelism, i)
        sub = make_backend(key_group_range=r)
        sub.restore([table], a.state_infos())
        part = sub.snapshot(2).table()
        assert all(kg in r for kg in part.column("key_group").to_pylist())
        parts.append(part)
    assert sum(p.num_rows for p in parts) == table.num_rows  # every row lands in exactly one subtask
    assert canonical(pa.concat_tables(parts)) == canonical(table)


def cached(make_backend, backend_name, entries):
    """A backend whose RocksDB write-back cache holds `entries` (so snapshots overlay cached changes)."""
    return make_backend(**({"cache_entries": entries} if backend_name == "rocksdb" else {}))


@pytest.mark.parametrize("cache", [2, 100_000])
def test_snapshot_isolation(make_backend, backend_name, at, cache):
    backend = cached(make_backend, backend_name, cache)
    count, seen, attrs, total, avg = fill(backend, at, KEYS)
    snap = backend.snapshot(1)
    # mutate everything after the synchronous part, before materialising
    for k in KEYS[:30]:
        at(backend, k)
        count.update(count.value() + 100)
        seen.add("late")
        attrs.put("late", 1.0)
        attrs.remove("x")
        total.add(1000)
        avg.add(1000)
    at(backend, "brand-new")
    count.update(1)
    at(backend, KEYS[40])
    count.clear()
    seen.clear()
    table = snap.table()
    assert table.num_rows == len(KEYS)
    rows = {r["key"]: r for r in table.to_pylist()}
    assert "brand-new" not in rows and rows[KEYS[40]]["count"] == 41
    assert rows["user-0"]["seen"] == ["user-0-a", "user-0-b"] and rows["user-0"]["attrs"] == [("x", 0.0)]
    assert rows["user-0"]["count"] == 1 and rows["user-0"]["avg"] == {"count": 1, "sum": 0}
    assert snap.table() is table  # materialised once
    assert canonical(backend.snapshot(2).table()) != canonical(table)


def test_materialize_in_background(backend, at):
    count, *_ = fill(backend, at, KEYS)
    snap = backend.snapshot(1)
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("t", snap.table()))
    worker.start()
    for k in KEYS:
        at(backend, k)
        count.update(-1)
    worker.join()
    assert all(v > 0 for v in out["t"].column("count").to_pylist())


@pytest.mark.parametrize("cache", [2, 100_000])
def test_mutable_values_copy_on_write(make_backend, backend_name, at, cache):
    backend = cached(make_backend, backend_name, cache)
    h = backend.get_state(ValueStateDescriptor("s", "struct<n:bigint,tags:array<string>>"))
    at(backend, "a")
    h.update({"n": 1, "tags": ["x"]})
    snap = backend.snapshot(1)
    v = h.value()
    v["tags"].append("y")  # in-place change of a value read after the snapshot
    v["n"] = 2
    h.update(v)
    assert snap.table().column("s").to_pylist() == [{"n": 1, "tags": ["x"]}]
    assert backend.snapshot(2).table().column("s").to_pylist() == [{"n": 2, "tags": ["x", "y"]}]


def test_empty_snapshot(backend):
    backend.get_state(COUNT)
    t = backend.snapshot(1).table()
    assert t.num_rows == 0 and t.column_names == ["key_group", "key", "count"]


def test_pickled_state_needs_trust(make_backend, at):
    a = make_backend()
    h = a.get_state(ValueStateDescriptor("obj", PICKLED))
    lst = a.get_state(ListStateDescriptor("objs", PICKLED))
    at(a, "k")
    h.update({"a": {1, 2}})
    lst.add(frozenset([3]))
    table = a.snapshot(1).table()
    assert table.schema.field("obj").type == pa.binary()
    infos = a.state_infos()
    with pytest.raises(UntrustedPickleError):
        make_backend().restore([table], infos)
    b = make_backend(trust_pickled=True)
    b.restore([table], infos)
    h2 = b.get_state(ValueStateDescriptor("obj", PICKLED))
    lst2 = b.get_state(ListStateDescriptor("objs", PICKLED))
    at(b, "k")
    assert h2.value() == {"a": {1, 2}} and lst2.get() == [frozenset([3])]


def test_int64_keys_round_trip(make_backend, at):
    keys = [0, -1, 1, 2**63 - 1, -(2**63), 123456789012]
    a = make_backend(key_type=pa.int64())
    h = a.get_state(COUNT)
    for i, k in enumerate(keys):
        at(a, k)
        h.update(i)
    table = a.snapshot(1).table()
    assert table.schema.field("key").type == pa.int64()
    b = make_backend(key_type=pa.int64())
    b.restore([table], a.state_infos())
    h = b.get_state(COUNT)
    for i, k in enumerate(keys):
        at(b, k)
        assert h.value() == i


def test_struct_keys_round_trip(make_backend, at):
    kt = pa.struct([("a", pa.int32()), ("b", pa.string())])
    a = make_backend(key_type=kt)
    h = a.get_state(ATTRS)
    at(a, (1, "x"))
    h.put("p", 1.0)
    at(a, (2, "y"))
    h.put("q", 2.0)
    table = a.snapshot(1).table()
    b = make_backend(key_type=kt)
    b.restore([table], a.state_infos())
    h = b.get_state(ATTRS)
    at(b, (2, "y"))
    assert h.items() == [("q", 2.0)]
    assert sorted(b.keys("attrs")) == [(1, "x"), (2, "y")]


def test_heap_and_rocksdb_tables_agree(tmp_path, clock, at):
    from statekit.backends.create import create_keyed_backend
    from statekit.keygroups import KeyGroupRange

    tables = []
    for name in ("heap", "rocksdb"):
        b = create_keyed_backend(
            name, key_type=pa.string(), max_parallelism=128, key_group_range=KeyGroupRange(0, 127),
            clock=clock, directory=tmp_path / name,
        )
        fill(b, at, KEYS)
        tables.append(b.snapshot(1).table())
        b.close()
    assert tables[0].schema == tables[1].schema
    assert canonical(tables[0]) == canonical(tables[1])


@pytest.mark.parametrize(
    "key_type, keys",
    [(pa.string(), ["plain", "nul\x00inside", ""]), (pa.int32(), [0, -(2**31), 2**31 - 1])],
)
def test_restore_value_columns(make_backend, at, key_type, keys):
    """Plain value columns (restored column-wise by RocksDB) and NUL keys (row-wise) come back alike."""
    a = make_backend(key_type=key_type)
    descs = [ValueStateDescriptor(n, t) for n, t in (("i", "bigint"), ("f", "float"), ("s", "string"), ("b", "boolean"))]
    handles = [a.get_state(d) for d in descs]
    rows = {}
    for i, k in enumerate(keys):
        at(a, k)
        values = (i - 1, i / 2, f"ü{i}", i % 2 == 0)
        for h, v in zip(handles, values):
            if i != 1 or h is not handles[2]:  # leave one cell unset
                h.update(v)
        rows[k] = values
    table = a.snapshot(1).table()
    b = make_backend(key_type=key_type)
    b.restore([table], a.state_infos())
    handles = [b.get_state(d) for d in descs]
    for i, k in enumerate(keys):
        at(b, k)
        got = tuple(h.value() for h in handles)
        assert got == tuple(None if (i == 1 and j == 2) else v for j, v in enumerate(rows[k]))
    assert canonical(b.snapshot(2).table()) == canonical(table)
